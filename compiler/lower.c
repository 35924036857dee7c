/* lower.c — a rank class's step made into calls of the trainer's functions
 * (prefix lower_): every op of the schedule, in order, becomes one or more
 * calls (code.h) whose arguments are typed: a buffer is named by its family
 * and its layer, microbatch, chunk or index (the memory plan lays each family
 * out by arithmetic, which the generated code repeats), a part of the model
 * by its row of the part tables, an event by its stream and its record's
 * number there.  Every buffer an op reads or writes is found by its role;
 * every size the calls assume is checked against the plan's (a disagreement
 * is an internal error naming both numbers).
 *
 * Events: every OP_WAIT names the op it waits for; that op's stream records
 * an event right after it.  Each stream has a ring of event ids, record n
 * taking id base + n mod ring, the ring long enough that no id is recorded
 * again while a wait for its last record is still to come.
 */
#include "code.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_EVENTS = 4096 };     /* runtime/core/internal.h's SRT_MAX_EVENTS */

/* ---- arguments ------------------------------------------------------------------- */

/* An integer argument counting what t says (IntType). */
static Arg aint(int64_t v, int t)
{
    return (Arg){.kind = A_INT, .name = t, .v = {v}};
}

/* A fixed-text argument. */
static Arg atext(const char *t)
{
    return (Arg){.kind = A_TEXT, .text = t};
}

/* The buffer id (plus extra bytes) as an argument: a persistent buffer's
 * offset is a number; a transient's is its family's arithmetic on its layer,
 * microbatch, chunk or index; -1 for none. */
static Arg abuf(const CE *e, int id, int64_t extra)
{
    if (id < 0) return aint(-1, IT_OTHER);
    if (id >= e->s->nbufs) die("lower: buffer %d out of range", id);
    const Buffer *b = &e->s->bufs[id];
    if (b->fam < 0) return aint(b->offset + extra, IT_OTHER);
    int chunk, li;
    mem_place(e->rc, b, &chunk, &li);
    return (Arg){.kind = A_BUF, .name = e->name_of_fam[b->fam], .v = {li, b->mb < 0 ? 0 : b->mb, chunk < 0 ? 0 : chunk,
                                                                      b->idx < 0 ? 0 : b->idx, extra}};
}

/* The part table row of a layer slot (-1: the embeddings, -2: the head). */
static Arg arow(int slot)
{
    return (Arg){.kind = A_ROW, .name = slot == -1 ? 0 : slot == -2 ? 1 : 2, .v = {slot < 0 ? 0 : slot}};
}

/* The srt_stream constant of a schedule stream. */
static const char *stream_name(int st)
{
    static const char *const names[NSTREAMS] = {"SRT_COMPUTE", "SRT_TP_COMM", "SRT_DP_COMM", "SRT_PP_COMM",
                                                "SRT_COPY", "SRT_HOST"};
    if (st < 0 || st >= NSTREAMS) die("lower: no stream %d", st);
    return names[st];
}

/* Appends a call of kind k with its arguments (a list ending at an A_TEXT
 * of NULL). */
static Call *call(CE *e, int k, const char *label, int nargs, const Arg *args)
{
    if (e->ncalls == e->capcalls) {     /* the step's calls: grown in place (lower_free) */
        e->capcalls = e->capcalls ? 2 * e->capcalls : 1024;
        e->calls = realloc(e->calls, sizeof(Call) * (size_t)e->capcalls);
        if (!e->calls) die("lower: out of memory");
    }
    if (nargs > MAX_ARGS) die("lower: a call with %d arguments", nargs);
    Call *c = &e->calls[e->ncalls++];
    memset(c, 0, sizeof *c);
    c->kind = k, c->label = label, c->op = e->cur_op, c->nargs = nargs;
    c->args = nargs ? arena_alloc(&g_arena, sizeof(Arg) * (size_t)nargs) : NULL;
    if (nargs) memcpy(c->args, args, sizeof(Arg) * (size_t)nargs);
    e->uses[k] = true;
    return c;
}

#define CALL(e, k, label, ...) call((e), (k), (label), (int)(sizeof((Arg[]){__VA_ARGS__}) / sizeof(Arg)), (Arg[]){__VA_ARGS__})

/* Code of its own (run once in the step). */
static void code(CE *e, const char *label, const char *text)
{
    call(e, K_CODE, label, 0, NULL)->code = text;
}

/* ---- the class's buffers ------------------------------------------------------------ */

typedef enum BufKind {
    BK_OTHER, BK_PARAMS, BK_PSHARD, BK_PERSIST, BK_GATHERED, BK_GRADS, BK_GSHARD, BK_GWHOLE, BK_BUCKET,
    BK_MASTER, BK_MOM1, BK_MOM2, BK_STAGE32, BK_MISC, BK_SCRATCH, BK_TOKENS, BK_TARGETS, BK_X, BK_SAVED,
    BK_Y, BK_DY, BK_DX, BK_LOGITS,
} BufKind;

/* The kind of a device buffer, by the role the schedule gave it: a stage's
 * boundary is its last layer's output (sent, or the head's input), its output
 * gradient (received, or the head's) and its first layer's input gradient. */
static int buf_kind(const Buffer *b)
{
    static const signed char kind[NBUFROLES] = {
        [BR_PARAMS] = BK_PARAMS, [BR_PARAMS_SHARD] = BK_PSHARD, [BR_PARAMS_PERSIST] = BK_PERSIST,
        [BR_GATHERED] = BK_GATHERED, [BR_GRADS] = BK_GRADS, [BR_GRADS_SHARD] = BK_GSHARD, [BR_GRADS_WHOLE] = BK_GWHOLE,
        [BR_BUCKET] = BK_BUCKET, [BR_OPT_MASTER] = BK_MASTER, [BR_OPT_MOM1] = BK_MOM1, [BR_OPT_MOM2] = BK_MOM2,
        [BR_OPT_GRADS32] = BK_STAGE32, [BR_SCALARS] = BK_MISC, [BR_SCRATCH] = BK_SCRATCH, [BR_TOKENS] = BK_TOKENS,
        [BR_TARGETS] = BK_TARGETS, [BR_LOGITS] = BK_LOGITS, [BR_X] = BK_X, [BR_SAVED] = BK_SAVED,
        [BR_SEND_FWD] = BK_Y, [BR_Y] = BK_Y, [BR_RECV_BWD] = BK_DY, [BR_DY] = BK_DY, [BR_SEND_BWD] = BK_DX,
        [BR_DX] = BK_DX,
    };
    return b->space == SPACE_DEVICE ? kind[b->role] : BK_OTHER;
}

/* The buffer's arena offset. */
int64_t lower_off(const CE *e, int id)
{
    if (id < 0 || id >= e->s->nbufs) die("lower: buffer %d out of range", id);
    return e->s->bufs[id].offset;
}

/* The label of an op. */
static const char *op_label(const CE *e, const Op *o)
{
    return sched_op_label(e->s, (int)(o - e->s->ops));
}

/* The one buffer of kind k among an op's reads (rd) or writes, or -1. */
static int op_buf(const CE *e, const Op *o, bool rd, int k)
{
    const int *ids = rd ? o->rd : o->wr;
    int n = rd ? o->nrd : o->nwr, found = -1;
    for (int i = 0; i < n; i++)
        if (buf_kind(&e->s->bufs[ids[i]]) == k) {
            if (found >= 0 && found != ids[i])
                die("lower: op %s has two buffers of one kind: %s and %s", op_label(e, o), e->s->bufs[found].name,
                    e->s->bufs[ids[i]].name);
            found = ids[i];
        }
    return found;
}

/* Like op_buf, but the buffer must be there. */
static int op_need(const CE *e, const Op *o, bool rd, int k, const char *what)
{
    int id = op_buf(e, o, rd, k);
    if (id < 0) die("lower: op %s has no %s buffer", op_label(e, o), what);
    return id;
}

/* The class's persistent buffer of role r in space sp, or -1. */
static int class_buf(const CE *e, int r, int sp)
{
    for (int i = 0; i < e->s->nbufs; i++)
        if (e->s->bufs[i].persistent && e->s->bufs[i].role == r && e->s->bufs[i].space == sp) return i;
    return -1;
}

/* The first buffer of role r (r2 too, when not -1) among an op's reads (rd)
 * or writes, of layer `layer` and the op's microbatch unless layer is
 * NO_LAYER, or -1. */
static int op_role_at(const CE *e, const Op *o, bool rd, int r, int r2, int layer)
{
    const int *ids = rd ? o->rd : o->wr;
    int n = rd ? o->nrd : o->nwr;
    for (int i = 0; i < n; i++) {
        const Buffer *b = &e->s->bufs[ids[i]];
        if ((b->role == r || b->role == r2) && (layer == NO_LAYER || (b->layer == layer && b->mb == o->mb)))
            return ids[i];
    }
    return -1;
}

/* The first buffer of role r among an op's reads (rd) or writes, or -1. */
static int op_role(const CE *e, const Op *o, bool rd, int r)
{
    return op_role_at(e, o, rd, r, -1, NO_LAYER);
}

/* Like op_role, but the buffer must be there. */
static int op_role_need(const CE *e, const Op *o, bool rd, int r)
{
    int id = op_role(e, o, rd, r);
    if (id < 0) die("lower: op %s has no buffer of role %d", op_label(e, o), r);
    return id;
}

/* Sequence parallelism: the layers' activations are sequence shards (this
 * rank's N/tp tokens) between the collectives, full (B,T,C) inside them. */
bool lower_sp(const CE *e)
{
    return e->p->tp > 1 && e->p->T_sp < e->p->T;
}

bool lower_module_waits(const Plan *mp)
{
    const Partition *p = &mp->part;
    if (p->zero != 3 || p->tp != 1) return false;
    for (int c = 0; c < p->nclasses; c++)
        for (int i = 0; i < p->classes[c].nsegs; i++) {
            const Segment *sg = &p->classes[c].segs[i];
            if (!sg->persistent && sg->layer >= 0 && sg->layer < p->model->l) return true;
        }
    return false;
}

/* Dies unless buffer id holds exactly bytes (a planner/emitter disagreement). */
void lower_expect(const CE *e, int id, int64_t bytes, const char *what)
{
    if (e->s->bufs[id].bytes != bytes)
        die("lower: %s needs %lld bytes, the plan's %s has %lld", what, (long long)bytes, e->s->bufs[id].name,
            (long long)e->s->bufs[id].bytes);
}

/* ---- the buffers' names: one macro per family (per role, for indexed ones) ---------- */

/* The macro's name of a role. */
static const char *role_macro(int role)
{
    static const char *const n[NBUFROLES] = {
        [BR_SCRATCH] = "SCRATCH", [BR_OPT_GRADS32] = "GRADS32", [BR_PARAMS_D2H_STAGING] = "D2H",
        [BR_PARAMS_FETCH_STAGING] = "FETCH", [BR_GATHERED] = "UNIT", [BR_BUCKET] = "BUCKET", [BR_TOKENS] = "TOKENS",
        [BR_TARGETS] = "TARGETS", [BR_LOGITS] = "LOGITS", [BR_X] = "X", [BR_CKPT] = "CKPT", [BR_X_TRANSIENT] = "XT",
        [BR_CKPT_SLICE] = "SLICE", [BR_CKPT_HOST] = "CKPT_HOST", [BR_CKPT_GATHERED] = "CKPT_GATH", [BR_SAVED] = "SAVED",
        [BR_ATTN] = "ATTN", [BR_RECOMPUTED] = "RECOMP", [BR_RECOMPUTED_IN] = "RECOMP_IN", [BR_TP_GATHERED] = "GATH",
        [BR_NORM_SHARD] = "NORM",
        [BR_TP_PARTIAL] = "PARTIAL", [BR_RESID1] = "RESID1", [BR_DRESID1] = "DRESID1", [BR_DY_GATHERED] = "DY_GATH",
        [BR_REGATHERED] = "REGATH", [BR_DPARTIAL] = "DPARTIAL", [BR_DNORM] = "DNORM", [BR_DX] = "DX", [BR_Y] = "Y",
        [BR_Y_GATHERED] = "Y_GATH",
        [BR_DY] = "DY", [BR_DY_PARTIAL] = "DY_PARTIAL", [BR_EMBED_PARTIAL] = "EMB_PARTIAL",
        [BR_EMBED_DX_GATHERED] = "EMB_DX_GATH", [BR_SEND_FWD] = "SEND", [BR_RECV_BWD] = "RECV", [BR_SEND_BWD] = "SEND_DX",
        [BR_OPT_SLOT] = "SLOT",
    };
    if (role < 0 || role >= NBUFROLES || !n[role]) die("lower: no transient buffers of role %d", role);
    return n[role];
}

/* Is role r one family per index (a table of bases)? */
static bool indexed_role(int r)
{
    return r == BR_GATHERED || r == BR_BUCKET || r == BR_PARAMS_FETCH_STAGING || r == BR_OPT_GRADS32 ||
           r == BR_PARAMS_D2H_STAGING || r == BR_OPT_SLOT;
}

/* Interleaved stages: the names of one role and part whose families are
 * alike in every chunk (the same places and sizes, only their bases
 * differ) become one that takes the chunk, with a table of bases, so that
 * a chunk's work reads the same in each. */
static void merge_chunks(CE *e)
{
    int nc = e->rc->nchunks;
    int *into = arena_alloc(&g_arena, sizeof(int) * (size_t)(e->nnames + 1));
    for (int k = 0; k < e->nnames; k++) into[k] = k;
    for (int k = 0; k < e->nnames; k++) {
        BufName *a = &e->names[k];
        if (into[k] != k || a->indexed || a->chunk < 0 || e->cm->fams[a->fam].slot) continue;
        const BufFamily *fa = &e->cm->fams[a->fam];
        int *cf = arena_alloc(&g_arena, sizeof(int) * (size_t)nc), found = 0;
        for (int c = 0; c < nc; c++) cf[c] = -1;
        int *members = arena_alloc(&g_arena, sizeof(int) * (size_t)(e->nnames + 1)), nm = 0;
        bool alike = true;
        for (int j = k; j < e->nnames && alike; j++) {
            const BufName *b = &e->names[j];
            if (into[j] != j || b->indexed || b->chunk < 0 || b->role != a->role || b->sub != a->sub || b->space != a->space)
                continue;
            const BufFamily *fb = &e->cm->fams[b->fam];
            if (fb->slot || fb->lm != fa->lm || fb->w != fa->w || fb->size != fa->size || cf[b->chunk] >= 0) alike = false;
            else cf[b->chunk] = b->fam, members[nm++] = j, found++;
        }
        if (!alike || found < 2) continue;
        for (int t = 0; t < nm; t++) into[members[t]] = k;
        a->cfams = cf, a->uses_c = true, a->chunk = -1;
    }
    /* a name left to one chunk where another chunk has its own: the chunk in its name */
    for (int k = 0; k < e->nnames; k++) {
        BufName *a = &e->names[k];
        if (into[k] != k || a->chunk < 0) continue;
        for (int j = 0; j < e->nnames; j++) {
            const BufName *b = &e->names[j];
            if (j != k && into[j] == j && b->chunk >= 0 && b->role == a->role && b->sub == a->sub && b->space == a->space) {
                a->c = arena_printf(&g_arena, "%s%d", a->c, a->chunk);
                break;
            }
        }
    }
    /* the names left, in order; each family to its name's new place */
    int *pos = arena_alloc(&g_arena, sizeof(int) * (size_t)(e->nnames + 1)), n = 0;
    for (int k = 0; k < e->nnames; k++)
        if (into[k] == k) pos[k] = n, e->names[n++] = e->names[k];
    for (int f = 0; f < e->cm->nfams; f++)
        if (e->name_of_fam[f] >= 0) e->name_of_fam[f] = pos[into[e->name_of_fam[f]]];
    e->nnames = n;
}

/* The names of the class's families: one per family (its role, part of the
 * layer, chunk), one per role for the indexed ones; a macro name each. */
static void plan_names(CE *e)
{
    const ClassMem *cm = e->cm;
    e->names = arena_alloc(&g_arena, sizeof(BufName) * (size_t)(cm->nfams + 1));
    e->name_of_fam = arena_alloc(&g_arena, sizeof(int) * (size_t)(cm->nfams + 1));
    e->nnames = 0;
    int nidx = e->rc->nsegs > e->rc->nbuckets ? e->rc->nsegs : e->rc->nbuckets;
    if (nidx < 64) nidx = 64;
    for (int f = 0; f < cm->nfams; f++) {
        const BufFamily *fa = &cm->fams[f];
        e->name_of_fam[f] = -1;
        if (!fa->ninst) continue;
        bool ix = indexed_role(fa->role);
        int k = 0;
        while (k < e->nnames && !(e->names[k].role == fa->role && e->names[k].sub == fa->sub &&
                                  e->names[k].space == fa->space && (ix || e->names[k].chunk == fa->chunk)))
            k++;
        if (k == e->nnames) {
            BufName *nm = &e->names[e->nnames++];
            memset(nm, 0, sizeof *nm);
            nm->role = fa->role, nm->sub = fa->sub, nm->chunk = ix ? -1 : fa->chunk, nm->space = fa->space;
            nm->indexed = ix, nm->fam = f;
            if (ix) {
                nm->nidx = nidx;
                nm->fams = arena_alloc(&g_arena, sizeof(int) * (size_t)nidx);
                for (int i = 0; i < nidx; i++) nm->fams[i] = -1;
            }
            const char *c = role_macro(fa->role);
            if (fa->sub == SUB_ATTN) c = arena_printf(&g_arena, "%s_A", c);
            if (fa->sub == SUB_MLP) c = arena_printf(&g_arena, "%s_M", c);
            nm->c = c;
        }
        BufName *nm = &e->names[k];
        e->name_of_fam[f] = k;
        if (ix) {
            if (fa->idx < 0 || fa->idx >= nm->nidx) die("lower: %s index %d out of range", nm->c, fa->idx);
            if (fa->lm != 1 || fa->slot)
                die("lower: the %s buffers of index %d have %d places by layer, not one", nm->c, fa->idx, fa->lm);
            nm->fams[fa->idx] = f;
            if (fa->w > 1) nm->uses_mb = true;
            if (fa->w > 1 && fa->role == BR_BUCKET) e->grad_slots = true;
        } else {
            nm->uses_l = fa->lm > 1;
            nm->uses_mb = fa->w > 1 || fa->slot;
            nm->uses_c = fa->slot != NULL;
            if (fa->slot) nm->uses_l = true;
        }
    }
    merge_chunks(e);
}

/* ---- where parameters and gradients are ----------------------------------------------- */

/* The family of role r and index idx (an indexed role), or NULL. */
static const BufFamily *indexed_family(const CE *e, int r, int idx)
{
    for (int f = 0; f < e->cm->nfams; f++)
        if (e->cm->fams[f].role == r && e->cm->fams[f].idx == idx && e->cm->fams[f].ninst) return &e->cm->fams[f];
    return NULL;
}

/* Offsets of every segment inside grads.whole (ZeRO 2-3: tied and persistent
 * segments, in flat order) and inside params.persistent (ZeRO 3). */
static void plan_whole(CE *e)
{
    const RankClass *rc = e->rc;
    e->whole_rel = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(rc->nsegs + 1));
    e->persist_rel = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(rc->nsegs + 1));
    e->seg_bucket = arena_alloc(&g_arena, sizeof(int) * (size_t)(rc->nsegs + 1));
    int64_t w = 0, q = 0;
    for (int i = 0; i < rc->nsegs; i++) {
        const Segment *sg = &rc->segs[i];
        e->whole_rel[i] = e->persist_rel[i] = -1;
        if (sg->tied || sg->persistent) e->whole_rel[i] = w, w += sg->padded;
        if (sg->persistent) e->persist_rel[i] = q, q += sg->padded;
    }
    for (int k = 0; k < rc->nbuckets; k++)
        for (int i = rc->buckets[k].first_seg; i < rc->buckets[k].first_seg + rc->buckets[k].nseg; i++)
            e->seg_bucket[i] = k;
    if (e->b_gwhole >= 0) lower_expect(e, e->b_gwhole, w * e->gb, "the tied and persistent gradients");
    if (e->b_persist >= 0) lower_expect(e, e->b_persist, q * e->wb, "the persistent parameters");
}

/* Fills role r of group g with class tensor i: where its parameter is when
 * computing (a gathered unit's place under ZeRO-3) and where its gradient goes
 * (a bucket's place under ZeRO 2-3): both planned once for the whole step. */
static void group_role(CE *e, Group *g, int r, int i)
{
    const ClassTensor *ct = &e->rc->tensors[i];
    const Segment *sg = &e->rc->segs[ct->seg];
    int64_t rel = ct->offset - sg->offset;
    g->ct[r] = i;
    if (e->p->zero < 3) {
        g->woff[r] = lower_off(e, e->b_params) + ct->offset * e->wb;
    } else if (sg->persistent && e->p->dp == 1 && e->params_space == SPACE_DEVICE) {
        /* one rank, the shard on the device: it is the whole segment */
        g->woff[r] = lower_off(e, e->b_pshard) + (sg->shard_offset + rel) * e->wb;
    } else if (sg->persistent) {
        g->woff[r] = lower_off(e, e->b_persist) + (e->persist_rel[ct->seg] + rel) * e->wb;
    } else {
        int k = 0;
        while (k < g->nunits && g->unit_seg[k] != ct->seg) k++;
        if (k == g->nunits) {
            if (k == MAX_UNITS) die("lower: tensors of one part span more than %d fetch units", MAX_UNITS);
            g->unit_seg[g->nunits++] = ct->seg;
        }
        const BufFamily *fa = indexed_family(e, BR_GATHERED, ct->seg);
        g->woff[r] = fa ? fa->base + rel * e->wb : -1;     /* -1: a unit no op gathers */
    }
    g->gw[r] = 1, g->gsize[r] = 0;
    if (e->p->zero < 2) {
        g->goff[r] = lower_off(e, e->b_grads) + ct->offset * e->gb;
    } else if (sg->tied || sg->persistent) {
        g->goff[r] = lower_off(e, e->b_gwhole) + (e->whole_rel[ct->seg] + rel) * e->gb;
    } else {
        int bk = e->seg_bucket[ct->seg], k = 0;
        while (k < g->nslots && g->slot_bucket[k] != bk) k++;
        if (k == g->nslots) g->slot_bucket[g->nslots++] = bk;
        const Segment *first = &e->rc->segs[e->rc->buckets[bk].first_seg];
        const BufFamily *fa = indexed_family(e, BR_BUCKET, bk);     /* microbatch mb's: place mb % w */
        g->goff[r] = fa ? fa->base + (ct->offset - first->offset) * e->gb : -1;
        if (fa) g->gw[r] = fa->w, g->gsize[r] = fa->size;
    }
}

/* An empty group. */
static void group_init(Group *g)
{
    memset(g, 0, sizeof *g);
    for (int r = 0; r < R_NROLES; r++) g->ct[r] = -1;
}

/* The model layer of slot li (part_layer_slot's inverse). */
int lower_slot_layer(const CE *e, int li)
{
    for (int k = 0; k < e->rc->nchunks; k++) {
        if (li < e->rc->chunks[k].nlayers) return e->rc->chunks[k].first_layer + li;
        li -= e->rc->chunks[k].nlayers;
    }
    die("lower: layer slot out of range");
}

/* The groups: embeddings, each layer, the head (the tied embedding is its
 * weight when the model ties them; on a last stage without the embedding, its
 * copy, which the tied reduction keeps equal). */
static void plan_groups(CE *e)
{
    const Model *m = e->m;
    const RankClass *rc = e->rc;
    e->ct_of_tensor = arena_alloc(&g_arena, sizeof(int) * (size_t)(m->nt + 1));
    for (int i = 0; i < m->nt; i++) e->ct_of_tensor[i] = -1;
    for (int i = 0; i < rc->ntensors; i++)
        if (!rc->tensors[i].copy) e->ct_of_tensor[rc->tensors[i].tensor] = i;
    e->nl = 0;
    for (int k = 0; k < rc->nchunks; k++) e->nl += rc->chunks[k].nlayers;
    e->layer = arena_alloc(&g_arena, sizeof(Group) * (size_t)(e->nl + 1));
    group_init(&e->pre);
    group_init(&e->post);
    for (int li = 0; li < e->nl; li++) group_init(&e->layer[li]);
    for (int i = 0; i < m->nt; i++) {
        const Tensor *t = &m->t[i];
        int ci = e->ct_of_tensor[i];
        if (ci < 0) continue;
        if (t->layer == LAYER_PRE) group_role(e, &e->pre, t->role, ci);
        else if (t->layer == m->l) group_role(e, &e->post, t->role, ci);
        else group_role(e, &e->layer[part_layer_slot(rc, t->layer)], t->role, ci);
    }
    if (m->tied && e->pre.ct[R_TOK_EMBED] >= 0) group_role(e, &e->post, R_HEAD_W, e->pre.ct[R_TOK_EMBED]);
    for (int i = 0; i < rc->ntensors; i++)
        if (rc->tensors[i].copy) group_role(e, &e->post, R_HEAD_W, i);
}

/* ---- the ops ------------------------------------------------------------------------ */

/* Checks that op o computes with (units) the gathered units and writes
 * (grads) the gradient buckets its group's part table points at (the table
 * holds their places). */
static void check_group(const CE *e, const Group *g, const Op *o, bool units, bool grads)
{
    for (int k = 0; units && k < g->nunits; k++) {
        int seg = g->unit_seg[k];
        bool named = false;
        for (int u = 0; u < o->nunit; u++) named |= o->unit[u] == seg;
        if (!named)
            die("lower: op %s computes with segment %d but does not name it as a unit", op_label(e, o), seg);
        bool found = false;
        for (int i = 0; i < o->nrd; i++)
            found |= e->s->bufs[o->rd[i]].role == BR_GATHERED && e->s->bufs[o->rd[i]].idx == seg;
        if (!found) die("lower: op %s uses unit %d before it is gathered", op_label(e, o), seg);
    }
    for (int k = 0; grads && k < g->nslots; k++) {
        bool found = false;
        for (int i = 0; i < o->nwr; i++)
            found |= buf_kind(&e->s->bufs[o->wr[i]]) == BK_BUCKET && e->s->bufs[o->wr[i]].idx == g->slot_bucket[k];
        if (!found) die("lower: op %s writes no buffer for gradient bucket %d", op_label(e, o), g->slot_bucket[k]);
    }
}

/* ZeRO 2-3: zeroes each gradient bucket op o is the first to write (they
 * accumulate over the layers that share them). */
static void zero_buckets(CE *e, const Op *o, bool *zeroed, const char *label)
{
    for (int i = 0; i < o->nwr; i++) {
        int id = o->wr[i];
        const Buffer *b = &e->s->bufs[id];
        if (buf_kind(b) != BK_BUCKET || zeroed[id]) continue;
        zeroed[id] = true;
        int k = b->idx;
        lower_expect(e, id, e->rc->buckets[k].padded * e->gb, "a gradient bucket");
        CALL(e, K_ZERO, arena_printf(&g_arena, "zero %s for %s", b->name, label), atext("SRT_COMPUTE"), abuf(e, id, 0),
             aint(e->rc->buckets[k].padded, IT_OTHER));
    }
}

/* The microbatch whose gradient-bucket instance op o writes (ZeRO 2-3), as
 * the trainer's functions place gradients: at that instance's place, mb % w
 * of its family, where the memory plan put it; o's own microbatch where it
 * writes no bucket.  The two differ for a head that runs ahead of the
 * backward (GPipe, interleaved): it accumulates into the instance an earlier
 * microbatch's head opened, which that microbatch's reduction takes. */
static int grad_mb(const CE *e, const Op *o)
{
    int mb = INT_MIN;
    for (int i = 0; i < o->nwr; i++) {
        const Buffer *b = &e->s->bufs[o->wr[i]];
        if (buf_kind(b) != BK_BUCKET) continue;
        if (mb != INT_MIN && b->mb != mb)
            die("lower: %s writes the gradient buckets of microbatches %d and %d", op_label(e, o), mb, b->mb);
        mb = b->mb;
    }
    return mb == INT_MIN ? o->mb : mb;
}

/* The compute ops must be on the compute stream (their functions say so). */
static void need_compute(const CE *e, const Op *o)
{
    if (o->stream != ST_COMPUTE)
        die("lower: %s is on stream %s; the generated code runs it on compute", op_label(e, o),
            sched_stream_name(o->stream));
}

/* The layer slot of a layer op. */
static int op_slot(const CE *e, const Op *o)
{
    int li = part_layer_slot(e->rc, o->layer);
    if (li < 0) die("lower: op of layer %d outside the class", o->layer);
    return li;
}

/* The call of the owned-range helper for shard space [lo, hi). */
static void owned_call(CE *e, const char *label, int stream, const char *what, int64_t lo, int64_t hi, int64_t staging,
                       int64_t pstage)
{
    e->uses_owned = true;
    code(e, label, arena_printf(&g_arena, "%s_owned(c, %s, %s, %lld, %lld, %lld, %lld);", e->px, stream_name(stream), what,
                                (long long)lo, (long long)hi, (long long)staging, (long long)pstage));
}

/* Offload: the shard-part helper: n elements of this rank's reduced slice of
 * a segment (in: its device offset, shard elements a rank) from element
 * skip, into the device shard or the host's fp32 gradients at out, copied or
 * (acc) added. */
static void part_call(CE *e, const char *label, int stream, Arg in, int64_t shard, int64_t skip, int64_t n, bool host,
                      int64_t out, bool acc)
{
    CALL(e, K_PART, label, atext(stream_name(stream)), in, aint(shard, IT_OTHER), aint(skip, IT_OTHER),
         aint(n, IT_OTHER), aint(host, IT_OTHER), aint(out, IT_OTHER), aint(acc, IT_OTHER));
}

/* Elements of a segment's shard (at shard_offset so) that stay on the device:
 * the host optimizer owns shard space from S_dev on. */
static int64_t dev_part(const CE *e, int64_t so, int64_t shard)
{
    return so >= e->S_dev ? 0 : so + shard <= e->S_dev ? shard : e->S_dev - so;
}

/* One NVMe optimizer transfer of host sub-group o->chunk: read (OP_OPT_READ)
 * its master weights and moments into its staging slot, or write them back
 * (OP_OPT_WRITE, with the updated parameters when those live on NVMe).  The
 * file holds the states one after the other: [master S_host][m S_host][v S_host]. */
static void nvme_opt_op(CE *e, const Op *o, const char *label)
{
    bool rd = o->kind == OP_OPT_READ;
    int64_t sub = e->spec->zero.sub_group_size, h0 = (int64_t)o->chunk * sub;
    int64_t n = e->S_host - h0 < sub ? e->S_host - h0 : sub;
    if (o->chunk < 0 || n <= 0) die("lower: %s names no host sub-group", label);
    const char *st = stream_name(o->stream);
    int slot = op_role(e, o, !rd, BR_OPT_SLOT);
    if (e->b_nvme >= 0 && slot >= 0) {
        if (e->s->bufs[slot].bytes < n * 4 * e->nstates)
            die("lower: %s stages %lld bytes, the plan's %s has %lld", label, (long long)(n * 4 * e->nstates),
                e->s->bufs[slot].name, (long long)e->s->bufs[slot].bytes);
        for (int k = 0; k < e->nstates; k++)
            code(e, label, arena_printf(&g_arena, "srt_nvme_%s(c, %s, srt_hview(c, %lld, %lld, SRT_F32), %lld);",
                                        rd ? "read" : "write", st, (long long)(lower_off(e, slot) + k * n * 4), (long long)n,
                                        (long long)(lower_off(e, e->b_nvme) + ((int64_t)k * e->S_host + h0) * 4)));
    } else if (rd) {
        die("lower: %s reads no NVMe optimizer state", label);
    }
    if (!rd && e->b_hswap >= 0 && op_role(e, o, false, BR_PARAMS_SHARD) >= 0) {
        if (e->s->bufs[e->b_hswap].bytes < n * e->wb)
            die("lower: %s writes %lld parameter bytes through %s of %lld", label, (long long)(n * e->wb),
                e->s->bufs[e->b_hswap].name, (long long)e->s->bufs[e->b_hswap].bytes);
        code(e, label, arena_printf(&g_arena, "srt_nvme_write(c, %s, srt_hview(c, %lld, %lld, WDT), %lld);", st,
                                    (long long)lower_off(e, e->b_hswap), (long long)n,
                                    (long long)(lower_off(e, e->b_pshard) + (e->S_dev + h0) * e->wb)));
    }
}

/* The view of a parameter shard slice (elements [j, j + n) of params.shard)
 * where it is read from: the device, the host arena, or, for NVMe, the host
 * swap staging after a read into it (returned in *pre). */
static const char *shard_src(CE *e, const char *st, int64_t j, int64_t n, const char **pre)
{
    int64_t off = lower_off(e, e->b_pshard) + j * e->wb;
    *pre = NULL;
    if (e->params_space == SPACE_DEVICE) return arena_printf(&g_arena, "DV(%lld, %lld, WDT)", (long long)off, (long long)n);
    if (e->params_space == SPACE_HOST) return arena_printf(&g_arena, "HV(%lld, %lld, WDT)", (long long)off, (long long)n);
    if (e->b_hswap < 0 || e->s->bufs[e->b_hswap].bytes < n * e->wb)
        die("lower: a parameter shard slice of %lld elements does not fit the NVMe staging", (long long)n);
    const char *v = arena_printf(&g_arena, "HV(%lld, %lld, WDT)", (long long)lower_off(e, e->b_hswap), (long long)n);
    *pre = arena_printf(&g_arena, "srt_nvme_read(c, %s, %s, %lld);", st, v, (long long)off);
    return v;
}

/* One OP_GRAD_REDUCE: an all-reduce of the bucket in place (ZeRO 0); per
 * segment of the bucket, a reduce-scatter in place into this rank's slice of
 * the full gradients (ZeRO 1, the distributed optimizer: its optimizer reads
 * only that slice), or into the shard (ZeRO 2-3; from the second microbatch
 * on, in place and added to the shard, since gradients accumulate). */
static void reduce_op(CE *e, const Op *o, const char *label)
{
    const RankClass *rc = e->rc;
    if (o->aux < 0 || o->aux >= rc->nbuckets) die("lower: %s names no bucket", label);
    const Bucket *bk = &rc->buckets[o->aux];
    const Segment *first = &rc->segs[bk->first_seg];
    const char *st = stream_name(o->stream);
    if (e->p->zero == 0) {
        CALL(e, K_REDUCE, label, atext(st), aint(0, IT_OTHER), aint(lower_off(e, e->b_grads) + first->offset * e->gb, IT_OTHER),
             aint(0, IT_OTHER), aint(bk->padded, IT_OTHER), aint(0, IT_OTHER));
        return;
    }
    if (e->p->zero == 1) {
        for (int i = bk->first_seg; i < bk->first_seg + bk->nseg; i++) {
            const Segment *sg = &rc->segs[i];
            CALL(e, K_REDUCE, arena_printf(&g_arena, "%s seg%d", label, i), atext(st), aint(3, IT_OTHER),
                 aint(lower_off(e, e->b_grads) + sg->offset * e->gb, IT_OTHER), aint(-1, IT_OTHER),
                 aint(sg->padded, IT_OTHER), aint(sg->shard, IT_OTHER));
        }
        return;
    }
    bool whole = first->tied || first->persistent;
    int src = whole ? e->b_gwhole : op_need(e, o, true, BK_BUCKET, "gradient bucket");
    if (!whole) lower_expect(e, src, bk->padded * e->gb, "a gradient bucket");
    for (int i = bk->first_seg; i < bk->first_seg + bk->nseg; i++) {
        const Segment *sg = &rc->segs[i];
        Arg in = abuf(e, src, whole ? e->whole_rel[i] * e->gb : (sg->offset - first->offset) * e->gb);
        int64_t dn = dev_part(e, sg->shard_offset, sg->shard);
        const char *lab = arena_printf(&g_arena, "%s seg%d", label, i);
        if (dn < sg->shard) {
            /* offload: part of this shard is the host optimizer's: reduce in
             * place (mode 3), the device's part to the shard; a bucket's host
             * part goes to the host in its grad_d2h, a whole segment's here */
            bool acc = e->reduced[i];
            e->reduced[i] = true;
            CALL(e, K_REDUCE, lab, atext(st), aint(3, IT_OTHER), in, aint(-1, IT_OTHER), aint(sg->padded, IT_OTHER),
                 aint(sg->shard, IT_OTHER));
            if (dn > 0)
                part_call(e, lab, o->stream, in, sg->shard, 0, dn, false, lower_off(e, e->b_gshard) + sg->shard_offset * e->gb,
                          acc);
            if (whole)
                part_call(e, lab, o->stream, in, sg->shard, dn, sg->shard - dn, true,
                          lower_off(e, e->b_hgrads) + (sg->shard_offset + dn - e->S_dev) * 4, false);
            continue;
        }
        int mode = e->reduced[i] ? 2 : 1;
        e->reduced[i] = true;
        CALL(e, K_REDUCE, lab, atext(st), aint(mode, IT_OTHER), in,
             aint(lower_off(e, e->b_gshard) + sg->shard_offset * e->gb, IT_OTHER), aint(sg->padded, IT_OTHER),
             aint(sg->shard, IT_OTHER));
    }
}

/* One OP_PARAM_GATHER: ZeRO 1-2 all-gather the updated shards of the
 * segments since the previous one in place, or, gathered ahead at the start
 * of the step (the op touches part aux of the parameters), those of bucket
 * aux; ZeRO 3 gather the persistent segment into params.persistent. */
static void param_gather_op(CE *e, const Op *o, const char *label)
{
    const RankClass *rc = e->rc;
    if (e->p->zero < 3 && o->part_lo >= 0) {
        if (o->aux < 0 || o->aux >= rc->nbuckets || o->part_lo != o->aux || o->part_hi != o->aux)
            die("lower: %s names no bucket", label);
        const Bucket *bk = &rc->buckets[o->aux];
        for (int i = bk->first_seg; i < bk->first_seg + bk->nseg; i++) {
            const Segment *sg = &rc->segs[i];
            CALL(e, K_PARAM_GATHER, arena_printf(&g_arena, "%s seg%d", label, i), atext(stream_name(o->stream)),
                 aint(lower_off(e, e->b_params) + sg->offset * e->wb, IT_OTHER), aint(-1, IT_OTHER), aint(sg->padded, IT_OTHER),
                 aint(sg->shard, IT_OTHER));
        }
        return;
    }
    int last = o->aux;
    if (last < 0 || last >= rc->nsegs) die("lower: %s names no segment", label);
    const char *st = stream_name(o->stream);
    for (int i = e->prev_pgather + 1; i <= last; i++) {
        const Segment *sg = &rc->segs[i];
        const char *lab = arena_printf(&g_arena, "%s seg%d", label, i);
        if (e->p->zero == 3 && sg->persistent && e->params_space != SPACE_DEVICE) {
            /* the shard is on the host or on NVMe: gather from there */
            const char *pre, *in = shard_src(e, st, sg->shard_offset, sg->shard, &pre);
            if (pre) code(e, label, pre);
            /* one dp rank: the shard is the whole segment, a copy to the device */
            code(e, label,
                 arena_printf(&g_arena, e->p->dp == 1 ? "srt_copy(c, %s, DV(%lld, %lld, WDT), %s);"
                                                      : "srt_all_gather(c, %s, SRT_DP, DV(%lld, %lld, WDT), %s);",
                              st, (long long)(lower_off(e, e->b_persist) + e->persist_rel[i] * e->wb), (long long)sg->padded,
                              in));
        } else if (e->p->zero == 3) {
            if (!sg->persistent) continue;
            CALL(e, K_PARAM_GATHER, lab, atext(st), aint(lower_off(e, e->b_persist) + e->persist_rel[i] * e->wb, IT_OTHER),
                 aint(lower_off(e, e->b_pshard) + sg->shard_offset * e->wb, IT_OTHER), aint(sg->padded, IT_OTHER),
                 aint(sg->shard, IT_OTHER));
        } else {
            CALL(e, K_PARAM_GATHER, lab, atext(st), aint(lower_off(e, e->b_params) + sg->offset * e->wb, IT_OTHER),
                 aint(-1, IT_OTHER), aint(sg->padded, IT_OTHER), aint(sg->shard, IT_OTHER));
        }
    }
    e->prev_pgather = last;
}

/* tp > 1: the all-reduce over tp that completes the partial gradients of the
 * replicated tensors of the op's layer (norms, row-parallel biases,
 * positions) in the gradient buffers the op writes: one call per tensor,
 * exactly the elements the schedule counts.  A kv head shared by some tp
 * ranks (SPLIT_KV) is summed over just those (kind 3: SRT_TP_KV). */
static void tp_grads_op(CE *e, const Op *o, const char *label)
{
    const RankClass *rc = e->rc;
    int64_t total = 0;
    for (int w = 0; w < o->nwr; w++) {
        int id = o->wr[w];
        const Buffer *b = &e->s->bufs[id];
        int kind = buf_kind(b);
        for (int i = 0; i < rc->nsegs; i++) {
            const Segment *sg = &rc->segs[i];
            int64_t rel;
            if (kind == BK_GRADS) {
                rel = sg->offset * e->gb;
            } else if (kind == BK_GWHOLE) {
                if (e->whole_rel[i] < 0) continue;
                rel = e->whole_rel[i] * e->gb;
            } else if (kind == BK_BUCKET) {
                int k = b->idx;
                if (e->seg_bucket[i] != k || e->whole_rel[i] >= 0) continue;
                rel = (sg->offset - rc->segs[rc->buckets[k].first_seg].offset) * e->gb;
            } else {
                die("lower: %s writes %s, not a gradient buffer", label, b->name);
            }
            for (int j = sg->first; j < sg->first + sg->n; j++) {
                const ClassTensor *ct = &rc->tensors[j];
                const Tensor *t = &e->m->t[ct->tensor];
                if (t->layer != o->layer || (t->split != SPLIT_NONE && t->split != SPLIT_KV) || ct->copy) continue;
                total += ct->numel;
                Arg at = abuf(e, id, rel + (ct->offset - sg->offset) * e->gb);
                CALL(e, K_TP, arena_printf(&g_arena, "%s %s", label, t->name), atext(stream_name(o->stream)),
                     aint(t->split == SPLIT_KV ? 3 : 0, IT_OTHER), aint(1, IT_OTHER), at, at, aint(ct->numel, IT_OTHER));
            }
        }
    }
    if (total * e->gb != o->bytes)
        die("lower: %s all-reduces %lld gradient bytes, the schedule says %lld", label, (long long)(total * e->gb),
            (long long)o->bytes);
}

/* Where this rank's sequence shard of a part's input is in buffer in (sp): 0
 * in a layer input; the saved buffer's x2 for the MLP part; full
 * checkpointing's replay holds the saved tensors after the layer's input
 * shard, when the previous layer's recompute wrote the input there.  -1:
 * none of those. */
static int64_t part_input_at(const CE *e, const Buffer *in, int sub)
{
    bool rec = in->role == BR_RECOMPUTED || in->role == BR_RECOMPUTED_IN;   /* full checkpointing's replay */
    bool inside = rec && in->bytes == e->p->act.x + e->saved.total;        /* after the layer's input shard */
    if ((buf_kind(in) == BK_SAVED || rec) && sub == SUB_MLP)               /* the MLP's input shard */
        return (inside ? e->p->act.x : 0) + act_piece(rec ? &e->saved : &e->kept, AP_X2)->off;
    if (inside && sub == SUB_ATTN) return 0;                                /* the layer's input shard, first */
    return in->bytes == e->p->act.x ? 0 : -1;
}

/* Where this rank's shard of a part's norm output is in buffer in (sp): 0 in
 * the norm's own shard (full checkpointing's forward); its piece of the
 * kept tensors, or of full checkpointing's recomputed ones (after the
 * layer's input shard when the previous layer's recompute wrote it there).
 * -1: none of those. */
static int64_t norm_out_at(const CE *e, const Buffer *in, int sub)
{
    int id = sub == SUB_MLP ? AP_NORM2_OUT : AP_NORM1_OUT;
    bool rec = in->role == BR_RECOMPUTED || in->role == BR_RECOMPUTED_IN;
    if (in->role == BR_NORM_SHARD) return in->bytes == e->p->act.x ? 0 : -1;
    const Piece *pc = act_piece(rec ? &e->saved : &e->kept, id);
    if (!pc || (!rec && buf_kind(in) != BK_SAVED)) return -1;
    return (rec && in->bytes == e->p->act.x + e->saved.total ? e->p->act.x : 0) + pc->off;
}

/* A TP collective of activations: all-reduce in place (Megatron's f and g),
 * or under sequence parallelism an all-gather of a sequence shard (a part's
 * norm output, a gradient, the last layer's output) into a full
 * (B,T,C) buffer, or a reduce-scatter of full partial sums into a shard.
 * Kinds: 0 all-reduce, 1 all-gather, 2 reduce-scatter; n: the full tensor's
 * elements. */
static void tp_comm_op(CE *e, const Op *o, const char *label)
{
    if (o->sub == SUB_GRADS) {
        tp_grads_op(e, o, label);
        return;
    }
    const char *st = stream_name(o->stream);
    if (o->sub == SUB_BOUNDARY) {   /* kind 4: a received boundary's tp slices gathered in place */
        if (o->kind != OP_TP_ALLGATHER || o->nrd != 1 || o->nwr != 1 || o->rd[0] != o->wr[0] ||
            e->p->act.boundary_slices != e->p->tp)
            die("lower: %s is not the in-place gather of a boundary sent in tp slices", label);
        lower_expect(e, o->wr[0], e->p->act.boundary, "a stage boundary");
        CALL(e, K_TP, label, atext(st), aint(4, IT_OTHER), aint(0, IT_OTHER), abuf(e, o->wr[0], 0), abuf(e, o->wr[0], 0),
             aint(e->p->act.boundary / e->wb, IT_OTHER));
        return;
    }
    if (o->kind == OP_TP_ALLGATHER || o->kind == OP_TP_REDUCE_SCATTER) {
        bool ag = o->kind == OP_TP_ALLGATHER;
        if (!lower_sp(e) || o->nrd != 1 || o->nwr != 1)
            die("lower: %s: a sequence-parallel collective without sequence parallelism", label);
        const Buffer *in = &e->s->bufs[o->rd[0]], *out = &e->s->bufs[o->wr[0]];
        int64_t full = e->p->act.full, shard = full / e->p->tp;
        bool ln = out->role == BR_TP_GATHERED || out->role == BR_REGATHERED;   /* a part's norm output */
        int64_t at = !ag ? (in->bytes == full ? 0 : -1) : ln ? norm_out_at(e, in, o->sub) : part_input_at(e, in, o->sub);
        if (at < 0)
            die("lower: %s reads %lld bytes, not a %s", label, (long long)in->bytes, ag ? "sequence shard" : "full tensor");
        bool into = !ag && out->role == BR_RECOMPUTED_IN && out->bytes == shard + e->saved.total;
        if (!into && out->bytes != (ag ? full : shard))     /* into: the next layer's replayed input, first */
            die("lower: %s writes %lld bytes, not a %s", label, (long long)out->bytes, ag ? "full tensor" : "sequence shard");
        /* tp_comm_overlap full: chunk j of the partial sums, a block of full / k (each rank's
           rows j of its tokens, the forward's layout), into rows j of this rank's shard; under
           part_tp_cols the reverse, rows j of the norm's output shard into block j of the
           gathered norm output (the column GEMMs' chunks read it so) */
        int64_t k = o->rows >= 0 ? e->p->tpc : 1;
        if (o->rows >= 0 && ((ag && (!ln || !part_tp_cols(e->p))) || into || o->rows >= k || full % (k * e->wb) ||
                             shard % (k * e->wb) || o->bytes * k != full))
            die("lower: %s moves %lld bytes as chunk %d of %lld of %lld", label, (long long)o->bytes, o->rows,
                (long long)k, (long long)full);
        int64_t j = o->rows >= 0 ? o->rows : 0;
        CALL(e, K_TP, label, atext(st), aint(ag ? 1 : 2, IT_OTHER), aint(0, IT_OTHER),
             abuf(e, o->wr[0], j * (ag ? full / k : shard / k)), abuf(e, o->rd[0], at + j * (ag ? shard / k : full / k)),
             aint(full / k / e->wb, IT_OTHER));
        return;
    }
    if (o->kind != OP_TP_ALLREDUCE || o->nrd != 1 || o->nwr != 1 || o->rd[0] != o->wr[0])
        die("lower: the code generator has no code for %s", label);
    const Buffer *b = &e->s->bufs[o->wr[0]];
    if (b->bytes != e->p->act.x)
        die("lower: %s reduces %lld bytes, a [T, C] activation has %lld", label, (long long)b->bytes, (long long)e->p->act.x);
    /* tp_comm_overlap full: one token-row chunk of the part's output, in place */
    int64_t k = o->rows >= 0 ? e->p->tpc : 1, at = o->rows >= 0 ? o->rows * (b->bytes / k) : 0;
    if (o->rows >= k || b->bytes % (k * e->wb) || o->bytes * k != b->bytes)
        die("lower: %s reduces %lld bytes as chunk %d of %lld of %lld", label, (long long)o->bytes, o->rows, (long long)k,
            (long long)b->bytes);
    CALL(e, K_TP, label, atext(st), aint(0, IT_OTHER), aint(0, IT_OTHER), abuf(e, o->wr[0], at), abuf(e, o->wr[0], at),
         aint(b->bytes / k / e->wb, IT_OTHER));
}

/* A transfer between pipeline stages on the pp stream: a send of a stage
 * boundary (the last layer's output forward, the first layer's input gradient
 * backward) to the next / previous stage, or a receive from it.  Interleaved
 * virtual stages wrap around: the last stage's chunk feeds the first's next. */
static void pp_msg_op(CE *e, const Op *o, const char *label)
{
    bool send = o->kind == OP_SEND_FWD || o->kind == OP_SEND_BWD;
    bool fwd = o->kind == OP_SEND_FWD || o->kind == OP_RECV_FWD;
    if (send ? o->nrd != 1 : o->nwr != 1) die("lower: %s moves %d buffers, not one", label, send ? o->nrd : o->nwr);
    int id = send ? o->rd[0] : o->wr[0];
    int64_t slices = e->p->act.boundary_slices;
    lower_expect(e, id, e->p->act.boundary, "a stage boundary");
    if (e->p->act.boundary / slices != o->bytes)
        die("lower: %s moves %lld bytes, the boundary's %s has %lld", label, (long long)o->bytes,
            slices > 1 ? "tp slice" : "whole", (long long)(e->p->act.boundary / slices));
    int64_t pp = e->p->pp, st = e->rc->stage;
    int64_t peer = send == fwd ? (st + 1) % pp : (st + pp - 1) % pp;   /* send fwd / recv bwd: the next stage */
    /* kinds 3, 4: this tp rank's slice of the boundary (pp_scatter_gather) */
    CALL(e, K_PP, label, atext(stream_name(o->stream)), aint((send ? 0 : 1) + (slices > 1 ? 3 : 0), IT_OTHER),
         abuf(e, id, 0), aint(o->bytes / e->wb, IT_OTHER), aint(peer, IT_OTHER));
}

/* The tied embedding's gradient summed between the first stage (the embedding)
 * and the last (the head's copy) over SRT_EMBED: one call per tied tensor, in
 * the gradient buffer it accumulates in (grads, or grads.whole for ZeRO 2-3). */
static void tied_reduce_op(CE *e, const Op *o, const char *label)
{
    const RankClass *rc = e->rc;
    int64_t total = 0;
    for (int i = 0; i < rc->ntensors; i++) {
        const ClassTensor *ct = &rc->tensors[i];
        const Segment *sg = &rc->segs[ct->seg];
        if (!ct->copy && !(e->m->tied && e->m->t[ct->tensor].role == R_TOK_EMBED)) continue;
        int64_t at = e->p->zero < 2 ? lower_off(e, e->b_grads) + ct->offset * e->gb
                                    : lower_off(e, e->b_gwhole) + (e->whole_rel[ct->seg] + ct->offset - sg->offset) * e->gb;
        if (e->p->zero >= 2 && e->whole_rel[ct->seg] < 0) die("lower: %s: the tied tensor is not in grads.whole", label);
        total += ct->numel;
        CALL(e, K_PP, arena_printf(&g_arena, "%s %s", label, e->m->t[ct->tensor].name), atext(stream_name(o->stream)),
             aint(2, IT_OTHER), aint(at, IT_OTHER), aint(ct->numel, IT_OTHER), aint(-1, IT_OTHER));
    }
    if (total * e->gb != o->bytes)
        die("lower: %s all-reduces %lld gradient bytes, the schedule says %lld", label, (long long)(total * e->gb),
            (long long)o->bytes);
}

/* ---- activation checkpointing: the layer's buffers by their roles ------------------------- */

/* The buffer of role r of layer `layer` and the op's microbatch among an
 * op's reads (rd) or writes, or -1. */
static int act_of(const CE *e, const Op *o, bool rd, int layer, int r)
{
    return op_role_at(e, o, rd, r, -1, layer);
}

/* The input of layer `layer` (B,T,C) among an op's reads (rd) or writes, or -1:
 * x, or under full checkpointing the group's checkpoint (kept whole) or a
 * transient. */
static int layer_input(const CE *e, const Op *o, bool rd, int layer)
{
    static const int roles[] = {BR_X, BR_CKPT, BR_X_TRANSIENT};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
        int id = act_of(e, o, rd, layer, roles[i]);
        if (id >= 0 && e->s->bufs[id].bytes == e->p->act.x) return id;
    }
    return -1;
}

/* Partitioned activations: a group's first layer keeps only its tp rank's
 * slice of its input (the slice, which the forward writes), all-gathered
 * again before the recompute.  Called with the forward (its attention part)
 * that reads the input x. */
static void ckpt_slice(CE *e, const Op *o, int x, const char *label)
{
    int sl = act_of(e, o, false, o->layer, BR_CKPT_SLICE);
    if (sl < 0) return;
    if (e->s->bufs[sl].bytes * e->p->tp != e->p->act.x || e->s->bufs[sl].bytes % e->wb)
        die("lower: %s keeps a checkpoint slice of %lld bytes, not 1/%lld of the input's %lld", label,
            (long long)e->s->bufs[sl].bytes, (long long)e->p->tp, (long long)e->p->act.x);
    CALL(e, K_CKPT, arena_printf(&g_arena, "%s (checkpoint slice)", label), atext(stream_name(o->stream)),
         aint(3, IT_OTHER), abuf(e, sl, 0), abuf(e, x, 0), aint(e->s->bufs[sl].bytes / e->wb, IT_OTHER));
}

/* The tp collectives of activation checkpointing: the all-gather of a
 * partitioned checkpoint, and a full recompute's all-reduce in place of a
 * layer's output, which is the start of the next layer's recomputed buffer.
 * False for any other tp collective. */
static bool ckpt_tp_op(CE *e, const Op *o, const char *label)
{
    if (o->kind == OP_TP_ALLREDUCE && o->nrd == 1 && o->nwr == 1 && o->rd[0] == o->wr[0] &&
        e->s->bufs[o->wr[0]].role == BR_RECOMPUTED_IN) {
        const Buffer *b = &e->s->bufs[o->wr[0]];
        if (o->bytes != e->p->act.x || b->bytes != e->p->act.x + e->saved.total)
            die("lower: %s reduces %lld bytes of %s (%lld bytes)", label, (long long)o->bytes, b->name, (long long)b->bytes);
        CALL(e, K_TP, label, atext(stream_name(o->stream)), aint(0, IT_OTHER), aint(0, IT_OTHER), abuf(e, o->wr[0], 0),
             abuf(e, o->wr[0], 0), aint(e->p->act.x / e->wb, IT_OTHER));
        return true;
    }
    if (o->kind != OP_TP_ALLGATHER || o->nrd != 1 || o->nwr != 1 || e->s->bufs[o->wr[0]].role != BR_CKPT_GATHERED)
        return false;
    const Buffer *in = &e->s->bufs[o->rd[0]], *out = &e->s->bufs[o->wr[0]];
    if (in->role != BR_CKPT_SLICE || in->bytes * e->p->tp != out->bytes || out->bytes != e->p->act.x)
        die("lower: %s gathers %s (%lld bytes) into %lld", label, in->name, (long long)in->bytes, (long long)out->bytes);
    CALL(e, K_CKPT, label, atext(stream_name(o->stream)), aint(2, IT_OTHER), abuf(e, o->wr[0], 0), abuf(e, o->rd[0], 0),
         aint(in->bytes / e->wb, IT_OTHER));
    return true;
}

/* cpu checkpointing: a checkpoint to the pinned host arena after its
 * forward, and back before its recompute, on the stream the schedule says. */
static void ckpt_copy_op(CE *e, const Op *o, const char *label)
{
    bool d2h = o->kind == OP_CKPT_D2H;
    if (o->nrd != 1 || o->nwr != 1) die("lower: %s copies %d buffers to %d", label, o->nrd, o->nwr);
    const Buffer *src = &e->s->bufs[o->rd[0]], *dst = &e->s->bufs[o->wr[0]];
    if (src->space != (d2h ? SPACE_DEVICE : SPACE_HOST) || dst->space != (d2h ? SPACE_HOST : SPACE_DEVICE) ||
        src->bytes != dst->bytes || src->bytes % e->wb)
        die("lower: %s copies %s (%lld bytes) to %s (%lld)", label, src->name, (long long)src->bytes, dst->name,
            (long long)dst->bytes);
    CALL(e, K_CKPT, label, atext(stream_name(o->stream)), aint(d2h ? 0 : 1, IT_OTHER), abuf(e, o->wr[0], 0),
         abuf(e, o->rd[0], 0), aint(src->bytes / e->wb, IT_OTHER));
}

/* Where a layer backward's tensors are: returns the layer input's buffer (its
 * offset is the input's), the saved tensors' buffer and bytes into it in *so,
 * *soff and the selectively recomputed attention core's in *ao (-1 without).
 * Full checkpointing: the layer's recomputed buffer holds its saved tensors,
 * after its input when the previous layer's recompute wrote the input there;
 * else the input is the group's checkpoint (gathered when partitioned). */
static int bwd_state(const CE *e, const Op *o, int *so, int64_t *soff, int *ao)
{
    const char *label = op_label(e, o);
    *ao = -1, *soff = 0;
    if (e->pol != CKPT_FULL) {
        int saved = op_need(e, o, true, BK_SAVED, "saved");
        lower_expect(e, saved, e->kept.total, "a layer's saved tensors");
        *so = saved;
        if (e->pol == CKPT_SELECTIVE) {
            int at = act_of(e, o, true, o->layer, BR_ATTN);
            if (at < 0) die("lower: %s has no recomputed attention core", label);
            lower_expect(e, at, e->attn.total, "the recomputed attention core");
            *ao = at;
        }
        int x = layer_input(e, o, true, o->layer);
        if (x < 0 && !lower_sp(e)) die("lower: %s has no input buffer", label);
        return x;
    }
    int rec = op_role_at(e, o, true, BR_RECOMPUTED, BR_RECOMPUTED_IN, o->layer);
    if (rec < 0) die("lower: %s has no recomputed buffer", label);
    *so = rec;
    if (e->s->bufs[rec].bytes == e->p->act.x + e->saved.total) {
        *soff = e->p->act.x;
        return rec;
    }
    lower_expect(e, rec, e->saved.total, "a layer's recomputed tensors");
    int x = act_of(e, o, true, o->layer, BR_CKPT_GATHERED);
    if (x < 0) x = act_of(e, o, true, o->layer, BR_CKPT);
    if (x < 0) die("lower: %s has no checkpoint to read", label);
    lower_expect(e, x, e->p->act.x, "a layer's checkpointed input");
    return x;
}

/* A layer forward's call (or a full recompute's): part table row, input,
 * saved, output, scratch, and under tp the part and the attention part's output. */
static void fwd_call(CE *e, int kind, const Op *o, const char *label, Arg x, Arg saved, Arg y, int scr, int r1)
{
    if (lower_sp(e) && e->p->tpc > 1)   /* ... and GR_HEAD, GR_ROWS and the chunk (tp_comm_overlap full) */
        CALL(e, kind, label, arow(op_slot(e, o)), x, saved, y, abuf(e, scr, 0), aint(o->sub, IT_OTHER), abuf(e, r1, 0),
             aint(o->grads, IT_OTHER), aint(o->rows, IT_OTHER));
    else if (lower_sp(e))    /* grads: GR_NORM for a part's norm op */
        CALL(e, kind, label, arow(op_slot(e, o)), x, saved, y, abuf(e, scr, 0), aint(o->sub, IT_OTHER), abuf(e, r1, 0),
             aint(o->grads, IT_OTHER));
    else if (e->p->tpc > 1)     /* grads: GR_HEAD, GR_ROWS (tp_comm_overlap full) and the chunk */
        CALL(e, kind, label, arow(op_slot(e, o)), x, saved, y, abuf(e, scr, 0), aint(o->sub, IT_OTHER), abuf(e, r1, 0),
             aint(o->grads, IT_OTHER), aint(o->rows, IT_OTHER));
    else if (e->p->tp > 1)
        CALL(e, kind, label, arow(op_slot(e, o)), x, saved, y, abuf(e, scr, 0), aint(o->sub, IT_OTHER), abuf(e, r1, 0));
    else if (e->modwaits)   /* the events of its modules' gathers (AWAIT) */
        CALL(e, kind, label, arow(op_slot(e, o)), x, saved, y, abuf(e, scr, 0), atext("n->ev"));
    else
        CALL(e, kind, label, arow(op_slot(e, o)), x, saved, y, abuf(e, scr, 0));
}

/* Sequence parallelism: the shard of a forward (or full recompute) part's
 * input, in *buf at *at: the attention part's, the layer's input (a
 * recompute's: its checkpoint, or the start of its recomputed buffer when
 * the previous layer's recompute wrote it there); the MLP part's, the
 * reduce-scattered attention residual x2. */
static void sp_part_in(const CE *e, const Op *o, const char *label, int *buf, int64_t *at)
{
    *at = 0;
    if (o->sub == SUB_MLP) {
        *buf = op_role_need(e, o, true, BR_RESID1);
    } else if (o->kind == OP_LAYER_FWD) {
        *buf = layer_input(e, o, true, o->layer);
    } else {
        *buf = op_role_at(e, o, true, BR_RECOMPUTED_IN, -1, o->layer);
        if (*buf < 0 || e->s->bufs[*buf].bytes != e->p->act.x + e->saved.total) {
            *buf = act_of(e, o, true, o->layer, BR_CKPT);
            if (*buf < 0) *buf = act_of(e, o, true, o->layer, BR_X_TRANSIENT);
        }
    }
    if (*buf < 0) die("lower: %s has no sequence shard of its part's input", label);
    if (e->s->bufs[*buf].role != BR_RECOMPUTED_IN) lower_expect(e, *buf, e->p->act.x, "a part's input shard");
}

/* OP_LAYER_FWD or OP_RECOMPUTE, GR_NORM (sp): a part's norm on this rank's
 * tokens; in the call: x the part's input shard, y the norm's output shard
 * (its own buffer, or its piece of the kept or recomputed tensors), the
 * statistics in the scratch. */
static void fwd_norm_op(CE *e, const Op *o, const char *label)
{
    need_compute(e, o);
    int x, out = -1;
    int64_t at, oat = -1;
    sp_part_in(e, o, label, &x, &at);
    for (int i = 0; i < o->nwr && oat < 0; i++) {
        const Buffer *b = &e->s->bufs[o->wr[i]];
        if (buf_kind(b) == BK_SCRATCH) continue;
        out = o->wr[i];
        oat = norm_out_at(e, b, o->sub);
    }
    if (oat < 0) die("lower: %s writes no shard of its norm's output", label);
    int scr = op_need(e, o, false, BK_SCRATCH, "scratch");
    lower_expect(e, scr, e->p->act.norm_scratch, "a norm op's scratch");
    check_group(e, &e->layer[op_slot(e, o)], o, true, false);
    fwd_call(e, o->kind == OP_RECOMPUTE ? K_RECOMPUTE : K_FWD, o, label, abuf(e, x, at), aint(-1, IT_OTHER),
             abuf(e, out, oat), scr, -1);
}

/* OP_RECOMPUTE.  Full: the layer's forward again into its recomputed buffer
 * (after its input when the previous layer's recompute wrote the input
 * there), its output into the next layer's, none for a group's last layer.
 * Selective: the attention core again. */
static void recompute_op(CE *e, const Op *o, const char *label)
{
    need_compute(e, o);
    const ActBytes *a = &e->p->act;
    if (e->pol == CKPT_SELECTIVE) {
        int saved = op_need(e, o, true, BK_SAVED, "saved"), at = act_of(e, o, false, o->layer, BR_ATTN);
        if (at < 0) die("lower: %s writes no attention core", label);
        lower_expect(e, saved, e->kept.total, "a layer's kept tensors");
        lower_expect(e, at, e->attn.total, "the recomputed attention core");
        CALL(e, K_ATTN, label, abuf(e, saved, 0), abuf(e, at, 0));
        return;
    }
    if (e->pol != CKPT_FULL) die("lower: %s: a recompute without checkpointing", label);
    if (o->grads == GR_NORM) {
        fwd_norm_op(e, o, label);
        return;
    }
    int rec = op_role_at(e, o, false, BR_RECOMPUTED, BR_RECOMPUTED_IN, o->layer);
    if (rec < 0) die("lower: %s writes no recomputed buffer", label);
    bool inside = e->s->bufs[rec].bytes == a->x + e->saved.total;
    if (!inside) lower_expect(e, rec, e->saved.total, "a layer's recomputed tensors");
    Arg so = abuf(e, rec, inside ? a->x : 0), xo, yo;
    int r1 = -1;
    int in = act_of(e, o, true, o->layer, BR_CKPT_GATHERED);
    if (in < 0) in = act_of(e, o, true, o->layer, BR_CKPT);
    if (in >= 0) lower_expect(e, in, a->x, "a layer's checkpointed input");
    xo = inside ? abuf(e, rec, 0) : abuf(e, in, 0);
    int next = op_role_at(e, o, false, BR_RECOMPUTED, BR_RECOMPUTED_IN, o->layer + 1);
    yo = abuf(e, next, 0);
    int ybuf = next;            /* the buffer y is, -1: none (the group's last layer) */
    if (lower_sp(e)) {     /* SP: its input shard and gathered norm output in, its full partial sums out (none: group's last) */
        int xs;
        int64_t xat;
        sp_part_in(e, o, label, &xs, &xat);
        xo = abuf(e, xs, xat);
        r1 = op_role_need(e, o, true, BR_TP_GATHERED);
        lower_expect(e, r1, a->full, "a recompute's gathered norm output");
        int part = op_role(e, o, false, BR_TP_PARTIAL);
        yo = abuf(e, part, 0);
        ybuf = part;
        if (part >= 0) lower_expect(e, part, a->full, "a recompute's partial sums");
    } else if (o->sub == SUB_MLP) {
        r1 = op_role_need(e, o, true, BR_RESID1);
        xo = abuf(e, r1, 0);
    } else if (o->sub == SUB_ATTN) {
        r1 = op_role_need(e, o, false, BR_RESID1);
        yo = abuf(e, r1, 0);
        ybuf = r1;
    }
    /* the trainer stops before the down projection where y is none: the op
       the cost model prices without it (GR_NO_OUTPUT) is that one */
    if ((ybuf < 0) != (o->grads == GR_NO_OUTPUT))
        die("lower: %s %s", label, ybuf < 0 ? "writes no output but is priced with its down projection"
                                            : "writes an output but is priced without its down projection");
    if (!inside && in < 0 && r1 < 0) die("lower: %s has no input", label);
    int scr = op_need(e, o, false, BK_SCRATCH, "scratch");
    if (e->s->bufs[scr].bytes < e->rscr.total)
        die("lower: a layer's recompute needs %lld bytes of scratch, the plan gives it %lld", (long long)e->rscr.total,
            (long long)e->s->bufs[scr].bytes);
    check_group(e, &e->layer[op_slot(e, o)], o, true, false);
    fwd_call(e, K_RECOMPUTE, o, label, xo, so, yo, scr, r1);
}

/* OP_LAYER_FWD: the layer's forward (tp > 1: one part of it; tp_comm_overlap
 * full: the part up to its row-parallel GEMM, GR_HEAD, which writes no
 * output, or one token-row chunk of that GEMM, GR_ROWS, which reads the
 * tensors the head kept). */
static void layer_fwd_op(CE *e, const Op *o, const char *label)
{
    if (o->grads == GR_NORM) {
        fwd_norm_op(e, o, label);
        return;
    }
    need_compute(e, o);
    bool head = o->grads == GR_HEAD, rows = o->grads == GR_ROWS, cols = o->grads == GR_COLS;
    if ((head || rows || cols) &&
        (e->p->tpc < 2 || ((rows || cols) && (o->rows < 0 || o->rows >= e->p->tpc)) || (cols && !part_tp_cols(e->p))))
        die("lower: %s: a token-row chunk of a part without tp_comm_overlap = full (chunk %d of %lld)", label, o->rows,
            (long long)e->p->tpc);
    /* full checkpointing keeps nothing: no saved buffer (-1) */
    int saved = e->kept.total ? op_need(e, o, rows, BK_SAVED, "saved") : -1, x, y = -1, r1 = -1;
    int64_t xat = 0;
    if (lower_sp(e)) {             /* SP: the input shard and the gathered norm output in, the partial sums (full) out */
        sp_part_in(e, o, label, &x, &xat);
        /* a row chunk reads the head's kept tensors, the head the column chunks' (part_tp_cols) */
        r1 = rows || (head && part_tp_cols(e->p)) ? -1 : op_role_need(e, o, true, BR_TP_GATHERED);
        y = head || cols ? -1 : op_role_need(e, o, false, BR_TP_PARTIAL);   /* the row chunks write the partial sums */
    } else if (o->sub == SUB_MLP) {    /* the attention part's reduced output in, the layer's output out */
        r1 = op_role_need(e, o, true, BR_RESID1);
        x = r1;
    } else {
        x = layer_input(e, o, true, o->layer);
        if (x < 0) die("lower: op %s has no input buffer", label);
    }
    if (head) {                 /* the chunks write the output */
    } else if (!lower_sp(e) && o->sub == SUB_ATTN) {   /* out: the partial sums of the attention part */
        r1 = op_role_need(e, o, false, BR_RESID1);
        y = r1;
    } else if (!lower_sp(e)) {
        y = layer_input(e, o, false, o->layer + 1);
        if (y < 0) y = op_need(e, o, false, BK_Y, "output");
    }
    int scr = op_need(e, o, false, BK_SCRATCH, "scratch");
    if (saved >= 0) lower_expect(e, saved, e->kept.total, "a layer's saved tensors");
    if (y >= 0 || !(head || cols)) lower_expect(e, y, lower_sp(e) ? e->p->act.full : e->p->act.x, "a layer's output");
    if (lower_sp(e) && r1 >= 0) lower_expect(e, r1, e->p->act.full, "a part's gathered norm output");
    if (e->s->bufs[scr].bytes < e->fscr.total)
        die("lower: a layer's forward needs %lld bytes of scratch, the plan gives it %lld", (long long)e->fscr.total,
            (long long)e->s->bufs[scr].bytes);
    check_group(e, &e->layer[op_slot(e, o)], o, true, false);
    fwd_call(e, K_FWD, o, label, abuf(e, x, xat), abuf(e, saved, 0), abuf(e, y, 0), scr, r1);
    if (o->sub != SUB_MLP && !rows && !cols) ckpt_slice(e, o, x, label);
}

/* OP_HEAD: the final norm, the logits, the loss and the head's backward. */
static void head_op(CE *e, const Op *o, const char *label, bool *zeroed)
{
    need_compute(e, o);
    int tgt = op_need(e, o, true, BK_TARGETS, "targets");
    int lg = op_need(e, o, false, BK_LOGITS, "logits"), scr = op_need(e, o, false, BK_SCRATCH, "scratch");
    /* SP: the gathered last output in, the full partial gradient out (reduce-scattered next) */
    int y = lower_sp(e) ? op_role_need(e, o, true, BR_Y_GATHERED) : op_need(e, o, true, BK_Y, "input");
    int dy = lower_sp(e) ? op_role_need(e, o, false, BR_DY_PARTIAL) : op_need(e, o, false, BK_DY, "output gradient");
    lower_expect(e, lg, e->p->T * (e->m->Vpad / e->p->tp) * e->wb, "the logits");
    lower_expect(e, y, lower_sp(e) ? e->p->act.full : e->p->act.x, "the last layer's output");
    lower_expect(e, dy, lower_sp(e) ? e->p->act.full : e->p->act.x, "the last layer's output gradient");
    if (e->s->bufs[scr].bytes < e->hscr.total)
        die("lower: the head needs %lld bytes of scratch, the plan gives it %lld", (long long)e->hscr.total,
            (long long)e->s->bufs[scr].bytes);
    zero_buckets(e, o, zeroed, label);
    check_group(e, &e->post, o, true, true);
    if (e->head_call < 0) e->head_call = e->ncalls;
    CALL(e, K_HEAD, label, arow(-2), aint(grad_mb(e, o), IT_MB), abuf(e, y, 0), abuf(e, tgt, 0), abuf(e, lg, 0), abuf(e, scr, 0),
         abuf(e, dy, 0));
}

/* OP_LAYER_BWD, GR_NORM (sp): a part's norm backward on this rank's tokens;
 * in the call: dy the part's output gradient (its residual), x its input, d1
 * the reduce-scattered gradient of the norm's output, dx out (all shards). */
static void layer_norm_op(CE *e, const Op *o, const char *label, bool *zeroed)
{
    need_compute(e, o);
    bool mlp = o->sub == SUB_MLP;
    int dn = op_role_need(e, o, true, BR_DNORM), res, out;
    if (mlp) {
        res = op_buf(e, o, true, BK_DY);
        if (res < 0) res = op_need(e, o, true, BK_DX, "output gradient");
        out = op_role_need(e, o, false, BR_DRESID1);
    } else {
        res = op_role_need(e, o, true, BR_DRESID1);
        out = op_need(e, o, false, BK_DX, "input gradient");
    }
    int x = mlp ? op_buf(e, o, true, BK_SAVED) : layer_input(e, o, true, o->layer);
    if (x < 0) x = op_role_at(e, o, true, BR_RECOMPUTED, BR_RECOMPUTED_IN, o->layer);
    int64_t at = x < 0 ? -1 : part_input_at(e, &e->s->bufs[x], o->sub);
    if (at < 0) die("lower: %s has no sequence shard of its part's input", label);
    int scr = op_need(e, o, false, BK_SCRATCH, "scratch");
    int64_t shard = e->p->act.full / e->p->tp;
    lower_expect(e, dn, shard, "a norm output's reduced gradient");
    lower_expect(e, res, shard, "a part's output gradient");
    lower_expect(e, out, shard, "a part's input gradient");
    lower_expect(e, scr, e->p->act.norm_scratch, "a norm op's scratch");
    zero_buckets(e, o, zeroed, label);
    check_group(e, &e->layer[op_slot(e, o)], o, true, true);
    Arg args[MAX_ARGS];
    int n = 0;
    args[n++] = arow(op_slot(e, o)), args[n++] = aint(grad_mb(e, o), IT_MB);
    args[n++] = abuf(e, res, 0), args[n++] = abuf(e, x, at), args[n++] = aint(-1, IT_OTHER);
    args[n++] = abuf(e, out, 0);
    args[n++] = abuf(e, scr, 0);
    args[n++] = aint(o->sub, IT_OTHER), args[n++] = abuf(e, dn, 0);
    args[n++] = aint(o->grads, IT_OTHER);
    if (e->pol == CKPT_SELECTIVE) args[n++] = aint(-1, IT_OTHER);
    call(e, K_BWD, label, n, args);
}

/* OP_LAYER_BWD: the layer's backward (tp > 1: one part of it; with
 * tp_comm_overlap its data or its weight op, whose input gradient is -1: the
 * collective is reducing it while the weight op runs). */
static void layer_bwd_op(CE *e, const Op *o, const char *label, bool *zeroed)
{
    if (o->grads == GR_NORM) {
        layer_norm_op(e, o, label, zeroed);
        return;
    }
    need_compute(e, o);
    bool wop = o->grads == GR_WEIGHT;
    int dy, dx = -1, d1 = -1, x = -1;
    if (lower_sp(e)) {             /* SP: gathered gradient (and input) in, the full partial sums out */
        dy = d1 = op_role_need(e, o, true, BR_DY_GATHERED);
        x = op_role(e, o, true, BR_REGATHERED);     /* not the split data op's: it runs during the regather */
        if (x < 0 && o->grads != GR_DATA) die("lower: %s has no regathered input", label);
        if (!wop) dx = op_role_need(e, o, false, BR_DPARTIAL);
        if (o->sub == SUB_MLP) d1 = dx;
    } else if (o->sub == SUB_ATTN) {   /* the MLP part's reduced input gradient in */
        d1 = dy = op_role_need(e, o, true, BR_DRESID1);
    } else {
        dy = op_buf(e, o, true, BK_DY);
        if (dy < 0) dy = op_need(e, o, true, BK_DX, "output gradient");
    }
    /* out: the input gradient; the weight op has none (it reads dy or d1) */
    if (!wop && !lower_sp(e) && o->sub == SUB_MLP) {    /* the partial sums of its input gradient */
        d1 = dx = op_role_need(e, o, false, BR_DRESID1);
    } else if (!wop && !lower_sp(e)) {
        dx = op_need(e, o, false, BK_DX, "input gradient");
    }
    int so, ao;                 /* the saved (or recomputed) tensors; selective: the attention core */
    int64_t soff;
    int xs = bwd_state(e, o, &so, &soff, &ao);
    if (!lower_sp(e)) x = xs;
    int scr = op_need(e, o, wop, BK_SCRATCH, "scratch");   /* the weight op reads its data op's */
    if (!wop) lower_expect(e, dx, lower_sp(e) ? e->p->act.full : e->p->act.x, "a layer's input gradient");
    if (lower_sp(e) && x >= 0) lower_expect(e, x, e->p->act.full, "a layer's gathered input");
    if (e->s->bufs[scr].bytes < e->bscr.total)
        die("lower: a layer's backward needs %lld bytes of scratch, the plan gives it %lld", (long long)e->bscr.total,
            (long long)e->s->bufs[scr].bytes);
    zero_buckets(e, o, zeroed, label);
    check_group(e, &e->layer[op_slot(e, o)], o, true, o->grads != GR_DATA || part_data_grads(e->p, o->sub));
    Arg args[MAX_ARGS];
    int n = 0;
    args[n++] = arow(op_slot(e, o)), args[n++] = aint(grad_mb(e, o), IT_MB);
    args[n++] = abuf(e, dy, 0), args[n++] = abuf(e, x, 0), args[n++] = abuf(e, so, soff), args[n++] = abuf(e, dx, 0);
    args[n++] = abuf(e, scr, 0);
    if (e->p->tp > 1) args[n++] = aint(o->sub, IT_OTHER), args[n++] = abuf(e, d1, 0);
    if (e->p->wsplit || lower_sp(e)) args[n++] = aint(o->grads, IT_OTHER);
    if (e->pol == CKPT_SELECTIVE) args[n++] = abuf(e, ao, 0);
    if (e->modwaits) args[n++] = atext("n->ev");    /* the events of its modules' gathers (AWAIT) */
    call(e, K_BWD, label, n, args);
}

/* OP_GATHER (ZeRO 3): a fetch unit all-gathered from every dp rank's shard. */
static void gather_op(CE *e, const Op *o, const char *label)
{
    const Segment *sg = &e->rc->segs[o->aux];
    int out = op_need(e, o, false, BK_GATHERED, "gathered");
    lower_expect(e, out, sg->padded * e->wb, "a gathered fetch unit");
    int fs = op_role(e, o, true, BR_PARAMS_FETCH_STAGING);   /* offloaded parameters: fetched first */
    if (e->params_space != SPACE_DEVICE && fs < 0) die("lower: %s gathers an offloaded shard unfetched", label);
    CALL(e, K_GATHER, label, atext(stream_name(o->stream)), abuf(e, out, 0),
         fs >= 0 ? abuf(e, fs, 0) : aint(lower_off(e, e->b_pshard) + sg->shard_offset * e->wb, IT_OTHER),
         aint(sg->padded, IT_OTHER), aint(sg->shard, IT_OTHER));
}

/* The calls of one op. */
static void op_calls(CE *e, int i, bool *zeroed)
{
    const Op *o = &e->s->ops[i];
    const char *label = sched_op_label(e->s, i);
    switch (o->kind) {
    case OP_LOAD_BATCH: {
        int tok = op_buf(e, o, false, BK_TOKENS), tgt = op_buf(e, o, false, BK_TARGETS);
        if (tok >= 0) lower_expect(e, tok, e->p->T * 4, "a microbatch's tokens");
        if (tgt >= 0) lower_expect(e, tgt, e->p->T * 4, "a microbatch's targets");
        CALL(e, K_LOAD, label, atext(stream_name(o->stream)), aint(o->mb, IT_MB), abuf(e, tok, 0), abuf(e, tgt, 0));
        break;
    }
    case OP_EMBED_FWD: {
        need_compute(e, o);
        int tok = op_need(e, o, true, BK_TOKENS, "tokens");
        /* SP: the full partial sums, reduce-scattered into the first layer's shard */
        int x = lower_sp(e) ? op_role_need(e, o, false, BR_EMBED_PARTIAL) : layer_input(e, o, false, 0);
        if (x < 0) die("lower: op %s has no output buffer", label);
        lower_expect(e, x, lower_sp(e) ? e->p->act.full : e->p->act.x, "the embedding's output");
        check_group(e, &e->pre, o, true, false);
        CALL(e, K_EMBED_FWD, label, arow(-1), abuf(e, x, 0), abuf(e, tok, 0));
        break;
    }
    case OP_LAYER_FWD: layer_fwd_op(e, o, label); break;
    case OP_HEAD: head_op(e, o, label, zeroed); break;
    case OP_LAYER_BWD: layer_bwd_op(e, o, label, zeroed); break;
    case OP_EMBED_BWD: {
        need_compute(e, o);
        int tok = op_need(e, o, true, BK_TOKENS, "tokens");
        int dx = lower_sp(e) ? op_role_need(e, o, true, BR_EMBED_DX_GATHERED) : op_need(e, o, true, BK_DX, "gradient");
        lower_expect(e, dx, lower_sp(e) ? e->p->act.full : e->p->act.x, "the embedding's gradient");
        zero_buckets(e, o, zeroed, label);
        check_group(e, &e->pre, o, false, true);
        CALL(e, K_EMBED_BWD, label, arow(-1), aint(grad_mb(e, o), IT_MB), abuf(e, dx, 0), abuf(e, tok, 0));
        break;
    }
    case OP_GATHER: gather_op(e, o, label); break;
    case OP_GRAD_REDUCE: reduce_op(e, o, label); break;
    case OP_RECV_FWD:
    case OP_SEND_FWD:
    case OP_RECV_BWD:
    case OP_SEND_BWD: pp_msg_op(e, o, label); break;
    case OP_TIED_REDUCE: tied_reduce_op(e, o, label); break;
    case OP_TP_ALLREDUCE:
    case OP_TP_ALLGATHER:
    case OP_TP_REDUCE_SCATTER:
        if (!ckpt_tp_op(e, o, label)) tp_comm_op(e, o, label);   /* a partitioned checkpoint's gather, or */
        break;
    case OP_RECOMPUTE: recompute_op(e, o, label); break;
    case OP_CKPT_D2H:
    case OP_CKPT_H2D: ckpt_copy_op(e, o, label); break;
    case OP_PARAM_GATHER: param_gather_op(e, o, label); break;
    case OP_GRAD_SUMSQ:
        owned_call(e, label, o->stream, "OWN_SUMSQ", 0, e->S_dev + e->S_host, -1, -1);
        if (!e->has_norm_op)    /* one rank: no all-reduce, but the norm and the clipping scale */
            code(e, "grad_norm (this rank alone)",
                 arena_printf(&g_arena, "srt_grad_norm_finish(c, %s, SRT_WORLD);", stream_name(o->stream)));
        break;
    case OP_GRAD_NORM:
        if (o->aux == 1) {  /* fp16's overflow flag: it travels in the sum of squares below */
            code(e, label, "/* fp16 overflow check: a non-finite gradient makes the norm non-finite (skip) */");
            break;
        }
        if (!e->has_sumsq_op) owned_call(e, label, o->stream, "OWN_SUMSQ", 0, e->S_dev + e->S_host, -1, -1);
        code(e, label, arena_printf(&g_arena, "srt_grad_norm_finish(c, %s, SRT_WORLD);", stream_name(o->stream)));
        break;
    case OP_OPT_STEP: {
        int64_t sub = e->spec->zero.sub_group_size;
        if (o->stream == ST_HOST) {     /* offload: a host sub-group, its states in the host arena or a slot */
            int64_t lo = e->S_dev + (int64_t)o->aux * sub, S = e->S_dev + e->S_host;
            int64_t hi = lo + sub < S ? lo + sub : S;
            int slot = e->b_nvme >= 0 ? op_role(e, o, false, BR_OPT_SLOT) : -1;
            if (e->b_nvme >= 0 && slot < 0) die("lower: %s has no NVMe staging slot", label);
            owned_call(e, label, o->stream, "OWN_OPT", lo, hi, slot >= 0 ? lower_off(e, slot) : -1, -1);
            break;
        }
        need_compute(e, o);
        int64_t lo = (int64_t)o->aux * sub;
        int64_t hi = lo + sub < e->S_dev ? lo + sub : e->S_dev;
        int stage = op_buf(e, o, false, BK_STAGE32);
        if (stage >= 0) lower_expect(e, stage, (hi - lo) * 4, "the fp32 gradients of an optimizer sub-group");
        /* offloaded parameters: the updated ones go out through a device staging */
        int pst = e->params_space != SPACE_DEVICE ? op_role(e, o, false, BR_PARAMS_D2H_STAGING) : -1;
        if (pst >= 0) lower_expect(e, pst, (hi - lo) * e->wb, "the updated parameters of a sub-group");
        e->dev_lo = lo, e->dev_hi = hi;
        owned_call(e, label, o->stream, "OWN_OPT", lo, hi, stage >= 0 ? lower_off(e, stage) : -1, pst >= 0 ? lower_off(e, pst) : -1);
        break;
    }
    case OP_GRAD_D2H:
        if (e->S_host == 0) die("lower: %s but no host optimizer", label);
        if (e->p->zero < 2) {   /* the reduced gradients' host part, piece by piece */
            owned_call(e, label, o->stream, "OWN_D2H", e->S_dev, e->S_dev + e->S_host, -1, -1);
        } else {                /* each segment's host part of this rank's reduced slice of the bucket */
            const Bucket *bk = &e->rc->buckets[o->aux];
            const Segment *first = &e->rc->segs[bk->first_seg];
            int src = op_need(e, o, true, BK_BUCKET, "gradient bucket");
            for (int j = bk->first_seg; j < bk->first_seg + bk->nseg; j++) {
                const Segment *sg = &e->rc->segs[j];
                int64_t dn = dev_part(e, sg->shard_offset, sg->shard);
                if (dn == sg->shard) continue;
                bool acc = e->hreduced[j];
                e->hreduced[j] = true;
                part_call(e, label, o->stream, abuf(e, src, (sg->offset - first->offset) * e->gb), sg->shard, dn,
                          sg->shard - dn, true, lower_off(e, e->b_hgrads) + (sg->shard_offset + dn - e->S_dev) * 4, acc);
            }
        }
        break;
    case OP_OPT_READ:
    case OP_OPT_WRITE: nvme_opt_op(e, o, label); break;
    case OP_PARAM_H2D: {    /* a host sub-group's updated parameters to the device */
        int64_t sub = e->spec->zero.sub_group_size, lo = e->S_dev + (int64_t)o->chunk * sub, S = e->S_dev + e->S_host;
        if (e->b_hstage < 0) die("lower: %s has no host staging", label);
        owned_call(e, label, o->stream, "OWN_H2D", lo, lo + sub < S ? lo + sub : S, -1, -1);
        break;
    }
    case OP_PARAM_D2H: {    /* a device sub-group's updated parameters to the host or NVMe shard */
        int src = op_role(e, o, true, BR_PARAMS_D2H_STAGING);
        int64_t n = e->dev_hi - e->dev_lo, off = lower_off(e, e->b_pshard) + e->dev_lo * e->wb;
        if (src < 0 || n <= 0) die("lower: %s follows no device optimizer step", label);
        const char *st = stream_name(o->stream);
        code(e, label,
             e->params_space == SPACE_HOST
                 ? arena_printf(&g_arena, "srt_copy(c, %s, HV(%lld, %lld, WDT), DV(%lld, %lld, WDT));", st, (long long)off,
                                (long long)n, (long long)lower_off(e, src), (long long)n)
                 : arena_printf(&g_arena, "srt_nvme_write(c, %s, DV(%lld, %lld, WDT), %lld);", st, (long long)lower_off(e, src),
                                (long long)n, (long long)off));
        break;
    }
    case OP_PARAM_FETCH: {  /* an offloaded shard slice of a fetch unit to the device */
        const Segment *sg = &e->rc->segs[o->aux];
        int dst = op_role(e, o, false, BR_PARAMS_FETCH_STAGING);
        if (dst < 0) die("lower: %s has no fetch staging", label);
        lower_expect(e, dst, sg->shard * e->wb, "a fetched parameter shard");
        if (e->params_space == SPACE_NVME && (e->b_hswap < 0 || e->s->bufs[e->b_hswap].bytes < sg->shard * e->wb))
            die("lower: a parameter shard slice of %lld elements does not fit the NVMe staging", (long long)sg->shard);
        CALL(e, K_FETCH, label, atext(stream_name(o->stream)), abuf(e, dst, 0),
             aint(lower_off(e, e->b_pshard) + sg->shard_offset * e->wb, IT_OTHER), aint(sg->shard, IT_OTHER),
             aint(e->b_hswap >= 0 ? lower_off(e, e->b_hswap) : -1, IT_OTHER));
        break;
    }
    default:
        die("lower: the code generator has no code for op %s (kind %s)", label, sched_op_kind_name(o->kind));
    }
}

/* The number of records on each stream so far, and each op's record. */
typedef struct Events { int n[NSTREAMS]; int *rec; } Events;

/* Every op of the class in schedule order, with the events of its waits. */
static void build_calls(CE *e)
{
    const Sched *s = e->s;
    int *nwaits = arena_alloc(&g_arena, sizeof(int) * (size_t)(s->nops + 1));
    int *lastwait = arena_alloc(&g_arena, sizeof(int) * (size_t)(s->nops + 1));
    bool *zeroed = arena_alloc(&g_arena, sizeof(bool) * (size_t)(s->nbufs + 1));
    e->reduced = arena_alloc(&g_arena, sizeof(bool) * (size_t)(e->rc->nsegs + 1));
    e->hreduced = arena_alloc(&g_arena, sizeof(bool) * (size_t)(e->rc->nsegs + 1));
    e->prev_pgather = -1;
    e->head_call = -1;
    e->cur_op = -1;
    for (int i = 0; i < s->nops; i++) {
        const Op *o = &s->ops[i];
        if (o->kind == OP_GRAD_SUMSQ) e->has_sumsq_op = true;
        if (o->kind == OP_GRAD_NORM && o->aux == 0) e->has_norm_op = true;
        if (o->kind != OP_WAIT) continue;
        if (o->aux < 0 || o->aux >= i) die("lower: wait %d names op %d, not an earlier op", i, o->aux);
        nwaits[o->aux]++;
        int at = i;     /* an inner wait happens inside the op it belongs to: its record must last until then */
        if (o->inner && sched_wait_unit(s, i, &at) < 0) die("lower: inner wait %d names no unit of the op after it", i);
        lastwait[o->aux] = at;
    }
    /* the event rings: record n of a stream is outstanding until its last
     * wait; a ring must hold every record issued meanwhile on its stream
     * (records[st][i]: the records on stream st among ops [0, i)) */
    Events ev = {{0}, arena_alloc(&g_arena, sizeof(int) * (size_t)(s->nops + 1))};
    int ring[NSTREAMS] = {0}, *records[NSTREAMS];
    for (int st = 0; st < NSTREAMS; st++) {
        records[st] = arena_alloc(&g_arena, sizeof(int) * (size_t)(s->nops + 2));
        for (int i = 0; i < s->nops; i++) records[st][i + 1] = records[st][i] + (nwaits[i] > 0 && s->ops[i].stream == st);
    }
    for (int i = 0; i < s->nops; i++) {
        if (!nwaits[i]) continue;
        int st = s->ops[i].stream, later = records[st][lastwait[i]] - records[st][i + 1];
        if (later + 1 > ring[st]) ring[st] = later + 1;
    }
    int base = 0;
    for (int st = 0; st < NSTREAMS; st++) e->ev_base[st] = base, e->ev_ring[st] = ring[st], base += ring[st];
    if (base > MAX_EVENTS) die("lower: stage %d needs %d events outstanding, the runtime has %d", e->ci, base, MAX_EVENTS);
    /* gradients accumulate over microbatches: the step starts from zero */
    if (e->b_grads >= 0)
        code(e, "zero the gradients",
             arena_printf(&g_arena, "srt_zero(c, SRT_COMPUTE, DV(%lld, %lld, GDT));", (long long)lower_off(e, e->b_grads),
                          (long long)(s->bufs[e->b_grads].bytes / e->gb)));
    if (e->b_gwhole >= 0)
        code(e, "zero the tied and persistent gradients",
             arena_printf(&g_arena, "srt_zero(c, SRT_COMPUTE, DV(%lld, %lld, GDT));", (long long)lower_off(e, e->b_gwhole),
                          (long long)(s->bufs[e->b_gwhole].bytes / e->gb)));
    for (int i = 0; i < s->nops; i++) {
        const Op *o = &s->ops[i];
        e->cur_op = i;
        if (o->kind == OP_WAIT && o->inner) {  /* handed to the layer call after it: its module's role */
            int t = o->aux, tst = s->ops[t].stream, at;
            int k = sched_wait_unit(s, i, &at);
            if (!e->modwaits || !sched_waits_per_module(e->p, &s->ops[at]))
                die("lower: %s is an inner wait of an op that waits up front", sched_op_label(s, i));
            CALL(e, K_WAIT, sched_op_label(s, i), atext(stream_name(o->stream)),
                 ((Arg){.kind = A_EVENT, .name = tst, .v = {ev.rec[t]}}),
                 atext(emit_role_name(part_unit_role(e->p, e->rc, s->ops[at].unit[k]))));
            continue;
        }
        if (o->kind == OP_WAIT) {
            int t = o->aux, tst = s->ops[t].stream;
            CALL(e, K_WAIT, sched_op_label(s, i), atext(stream_name(o->stream)),
                 ((Arg){.kind = A_EVENT, .name = tst, .v = {ev.rec[t]}}));
            continue;
        }
        op_calls(e, i, zeroed);
        if (nwaits[i] == 0) continue;
        ev.rec[i] = ev.n[o->stream]++;
        CALL(e, K_RECORD, arena_printf(&g_arena, "record %s", sched_op_label(s, i)), atext(stream_name(o->stream)),
             ((Arg){.kind = A_EVENT, .name = o->stream, .v = {ev.rec[i]}}));
    }
    e->cur_op = -1;
}

/* Numbers the records of calls[0, n) from 0 on each stream, and each wait by
 * how many records back on its stream it is (the generated code counts the
 * records: a wait names the one it needs relative to the count). */
void lower_events(const CE *e, Call *calls, int n)
{
    int count[NSTREAMS] = {0}, *local[NSTREAMS];
    int most = 1;
    for (int i = 0; i < n; i++)
        if (calls[i].kind == K_RECORD && calls[i].args[1].v[0] + 1 > most) most = (int)calls[i].args[1].v[0] + 1;
    for (int st = 0; st < NSTREAMS; st++) {
        local[st] = arena_alloc(&g_arena, sizeof(int) * (size_t)most);
        for (int r = 0; r < most; r++) local[st][r] = -1;
    }
    for (int i = 0; i < n; i++) {
        if (calls[i].kind != K_RECORD && calls[i].kind != K_WAIT) continue;     /* (no args to index) */
        Arg *a = &calls[i].args[1];
        if (calls[i].kind == K_RECORD) {
            local[a->name][a->v[0]] = count[a->name]++;
            a->v[1] = -1;
        } else if (calls[i].kind == K_WAIT) {
            int at = a->v[0] < most ? local[a->name][a->v[0]] : -1;
            if (at < 0) die("lower: stage %d waits for a record it does not make (%s)", e->ci, calls[i].label);
            a->v[1] = count[a->name] - at;
            if (a->v[1] > e->ev_ring[a->name]) die("lower: stage %d's %s is past its event ring", e->ci, calls[i].label);
        }
    }
}

/* ---- evaluation ------------------------------------------------------------------------ */

/* Appends a copy of step call c to evaluation's (its own arguments: its
 * events are numbered anew; a head without backward). */
static void eval_copy(CE *e, const Call *c)
{
    Call *d = &e->eval[e->neval++];
    *d = *c;
    if (c->nargs) {
        d->args = arena_alloc(&g_arena, sizeof(Arg) * (size_t)c->nargs);
        memcpy(d->args, c->args, sizeof(Arg) * (size_t)c->nargs);
    }
    if (c->kind == K_HEAD) d->kind = K_HEAD_EVAL, e->uses[K_HEAD_EVAL] = true;
}

/* The op kinds that belong to a microbatch's backward: the forward of
 * microbatch 0 is its ops before the first of these. */
static bool pe_backward(int kind)
{
    return kind == OP_LAYER_BWD || kind == OP_EMBED_BWD || kind == OP_RECV_BWD || kind == OP_SEND_BWD ||
           kind == OP_RECOMPUTE || kind == OP_CKPT_H2D;
}

/* Evaluation under pipeline parallelism: the step's calls of microbatch 0's
 * forward on this stage (its load, receives, embedding, layers, tp
 * collectives, sends; the last stage's head without backward), the ZeRO 3
 * gathers (and offload fetches) of the units they compute with, and the
 * waits and records between the ops kept.  Every stage keeps exactly
 * microbatch 0's forward messages, so sends and receives pair up; the
 * buffers are the step's (eval runs between steps). */
static void pe_calls(CE *e)
{
    const Sched *s = e->s;
    bool *keep = arena_alloc(&g_arena, sizeof(bool) * (size_t)(s->nops + 1));
    int cut = s->nops, last = -1;
    for (int i = 0; i < s->nops; i++)
        if (s->ops[i].mb == 0 && pe_backward(s->ops[i].kind)) {
            cut = i;
            break;
        }
    for (int i = 0; i < cut; i++) {
        const Op *o = &s->ops[i];
        if (o->mb != 0 || o->kind == OP_WAIT || o->kind == OP_CKPT_D2H || o->kind == OP_GATHER ||
            o->kind == OP_PARAM_FETCH)
            continue;
        keep[i] = true;
        last = i;
        /* the latest gather (and fetch) of each unit it computes with */
        for (int u = 0; u < o->nunit; u++) {
            static const int kinds[2] = {OP_GATHER, OP_PARAM_FETCH};
            for (int k = 0; k < 2; k++)
                for (int j = i - 1; j >= 0; j--)
                    if (s->ops[j].kind == kinds[k] && s->ops[j].aux == o->unit[u]) {
                        keep[j] = true;
                        break;
                    }
        }
    }
    if (last < 0) die("lower: stage %d has no forward of microbatch 0 to evaluate", e->ci);
    /* a wait stays when it waits for a kept op and a kept op follows on its stream */
    for (int i = 0; i < s->nops; i++) {
        const Op *o = &s->ops[i];
        if (o->kind != OP_WAIT || !keep[o->aux]) continue;
        for (int j = i + 1; j < s->nops && !keep[i]; j++)
            if (keep[j] && s->ops[j].kind != OP_WAIT && s->ops[j].stream == o->stream) keep[i] = true;
    }
    int n = 0;
    for (int i = 0; i < e->ncalls; i++) n += e->calls[i].op >= 0 && keep[e->calls[i].op];
    e->eval = arena_alloc(&g_arena, sizeof(Call) * (size_t)(n + 1));
    e->neval = 0;
    for (int i = 0; i < e->ncalls; i++) {
        const Call *c = &e->calls[i];
        if (c->op < 0 || !keep[c->op] || c->kind == K_CODE || c->kind == K_ZERO) continue;
        eval_copy(e, c);
    }
}

/* Evaluation without pipeline parallelism: the step's calls up to its first
 * head (the head without backward). */
static void eval_calls(CE *e)
{
    e->eval = arena_alloc(&g_arena, sizeof(Call) * (size_t)(e->head_call + 2));
    e->neval = 0;
    for (int i = 0; i <= e->head_call; i++) {
        const Call *c = &e->calls[i];
        if (c->kind == K_CODE || c->kind == K_ZERO) continue;
        eval_copy(e, c);
    }
}

/* ---- one class ------------------------------------------------------------------------- */

/* Offload: the host and NVMe buffers and the host's share of the shard space
 * (the host optimizer owns its last S_host elements: sched.c's opt_split). */
static void offload_buffers(CE *e)
{
    e->b_hgrads = class_buf(e, BR_GRADS_HOST, SPACE_HOST);
    e->b_hmaster = class_buf(e, BR_OPT_MASTER, SPACE_HOST);
    e->b_hmom1 = class_buf(e, BR_OPT_MOM1, SPACE_HOST);
    e->b_hmom2 = class_buf(e, BR_OPT_MOM2, SPACE_HOST);
    e->b_nvme = class_buf(e, BR_OPT_NVME, SPACE_NVME);
    e->b_hstage = class_buf(e, BR_PARAMS_H2D_STAGING, SPACE_HOST);
    e->b_hswap = class_buf(e, BR_PARAMS_NVME_STAGING, SPACE_HOST);
    e->params_space = SPACE_DEVICE;
    for (int sp = SPACE_HOST; e->p->zero == 3 && sp <= SPACE_NVME && e->b_pshard < 0; sp++)
        if ((e->b_pshard = class_buf(e, BR_PARAMS_SHARD, sp)) >= 0) e->params_space = sp;
    e->S_host = e->b_hgrads >= 0 ? e->s->bufs[e->b_hgrads].bytes / 4 : 0;
    e->S_dev -= e->S_host;
    bool adam = e->spec->train.optimizer != OPT_SGD;
    e->nstates = 1 + (adam || e->spec->train.momentum > 0) + adam;
    if (e->S_host == 0) return;
    if (e->b_nvme >= 0) {
        lower_expect(e, e->b_nvme, e->S_host * 4 * e->nstates, "the NVMe optimizer states");
    } else {
        if (e->b_hmaster < 0) die("lower: the host optimizer has no master weights");
        lower_expect(e, e->b_hmaster, e->S_host * 4, "the host master weights");
        if (e->b_hmom1 >= 0) lower_expect(e, e->b_hmom1, e->S_host * 4, "the host first moments");
        if (e->b_hmom2 >= 0) lower_expect(e, e->b_hmom2, e->S_host * 4, "the host second moments");
    }
}

/* Finds the class's persistent buffers and checks their sizes. */
static void class_buffers(CE *e)
{
    e->b_params = class_buf(e, BR_PARAMS, SPACE_DEVICE);
    e->b_pshard = class_buf(e, BR_PARAMS_SHARD, SPACE_DEVICE);
    e->b_persist = class_buf(e, BR_PARAMS_PERSIST, SPACE_DEVICE);
    e->b_grads = class_buf(e, BR_GRADS, SPACE_DEVICE);
    e->b_gshard = class_buf(e, BR_GRADS_SHARD, SPACE_DEVICE);
    e->b_gwhole = class_buf(e, BR_GRADS_WHOLE, SPACE_DEVICE);
    e->b_master = class_buf(e, BR_OPT_MASTER, SPACE_DEVICE);
    e->b_mom1 = class_buf(e, BR_OPT_MOM1, SPACE_DEVICE);
    e->b_mom2 = class_buf(e, BR_OPT_MOM2, SPACE_DEVICE);
    const RankClass *rc = e->rc;
    e->S_dev = e->p->zero >= 1 ? rc->shard : rc->padded;
    offload_buffers(e);
    if (e->p->zero < 3) {
        if (e->b_params < 0) die("lower: no params buffer");
        lower_expect(e, e->b_params, rc->padded * e->wb, "the parameters");
    } else {
        if (e->b_pshard < 0) die("lower: no params.shard buffer");
        lower_expect(e, e->b_pshard, rc->shard * e->wb, "the parameter shard");
    }
    if (e->p->zero < 2) {
        if (e->b_grads < 0) die("lower: no grads buffer");
        lower_expect(e, e->b_grads, rc->padded * e->gb, "the gradients");
    } else {
        if (e->b_gshard < 0 && e->S_dev > 0) die("lower: no grads.shard buffer");
        if (e->b_gshard >= 0) lower_expect(e, e->b_gshard, e->S_dev * e->gb, "the gradient shard");
    }
}

/* Frees what lower_class made outside the arena (the step's calls). */
void lower_free(CE *e)
{
    free(e->calls);
    e->calls = NULL, e->ncalls = e->capcalls = 0;
}

/* Makes class ci of a plan into calls. */
void lower_class(const Plan *mp, const CatalogExtern *x, int ci, CE *e)
{
    memset(e, 0, sizeof *e);
    e->spec = mp->spec, e->ext = x, e->mp = mp, e->m = &mp->model, e->p = &mp->part, e->ci = ci;
    e->cm = &mp->mem.classes[ci];
    e->s = e->cm->sched;
    e->rc = e->cm->cls;
    e->wb = e->p->wbytes, e->gb = e->p->gbytes;
    e->modwaits = lower_module_waits(mp);
    for (int i = 0; i < e->rc->nsegs && e->modwaits; i++) {
        const Segment *sg = &e->rc->segs[i];
        if (sg->persistent || sg->layer < 0 || sg->layer >= e->m->l) continue;
        e->unit_role[part_unit_role(e->p, e->rc, i)] = true;
    }
    snprintf(e->px, sizeof e->px, "s%d", ci);
    snprintf(e->PX, sizeof e->PX, "S%d", ci);
    const ActLayout *al = &e->p->layout;     /* the layer's tensors, where the plan put them */
    e->pol = e->spec->checkpointing.activations;
    e->saved = al->saved, e->kept = al->kept, e->attn = al->attn;
    e->fscr = al->fscr, e->rscr = al->rscr, e->bscr = al->bscr, e->hscr = al->hscr;
    class_buffers(e);
    plan_names(e);
    plan_whole(e);
    plan_groups(e);
    build_calls(e);
    /* pp 1: the stage with the embedding and the head; pp > 1: every stage */
    e->has_eval = e->p->pp > 1 || (e->head_call >= 0 && e->rc->chunks[0].embed);
    if (e->has_eval && e->p->pp > 1) pe_calls(e);
    else if (e->has_eval) eval_calls(e);
    lower_events(e, e->calls, e->ncalls);
    if (e->has_eval) lower_events(e, e->eval, e->neval);
}
