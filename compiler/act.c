/* act.c — a layer's activations (prefix act_): which tensors the forward
 * keeps for the backward under each checkpoint policy and which live only
 * inside one op and until when, the bytes each buffer needs (ActBytes: the
 * schedule's buffers and the memory plan take these), and where each tensor
 * lies inside them (ActLayout: the code generator prints these offsets).
 * One definition for both, from the layer's graph (model_layer_graph):
 *
 *  - saved: everything the forward keeps without checkpointing, statistics
 *    (fp32) first so that they stay 4-byte aligned; kept: what it keeps under
 *    the spec's policy (selective: all but the attention core, which attn
 *    holds; full: nothing, the recompute keeps saved);
 *  - the forward's transients (fscr; under full, rscr for the recompute) each
 *    from its step to its last reader's, packed by lifetime; the row-parallel
 *    partial sums are the generated forward's projection outputs; under
 *    sequence parallelism the forward writes the partial sums into its
 *    output instead, and each norm runs in an op of its own on this rank's
 *    tokens (norm_scratch: its statistics), its output gathered for the part;
 *  - the backward's gradients (bscr) with their lifetimes over the steps of
 *    the generated backward, and the head's scratch (hscr).
 */
#include "plan.h"

#include <string.h>

/* ---- the graph's facts ---------------------------------------------------- */

/* Does the forward keep graph tensor t for the backward under policy pol
 * (besides the input)?  Full keeps nothing (a recompute replays the layer),
 * selective all but the attention core. */
bool act_kept(const ActTensor *t, int pol)
{
    if (pol == CKPT_FULL) return false;
    return t->kind == AK_SAVED || (t->kind == AK_SAVED_ATTN && pol == CKPT_NONE);
}

/* The step producing tensor i, or -1 for the layer input. */
int act_producer(const LayerGraph *g, int i)
{
    for (int k = 0; k < g->nst; k++)
        for (int j = 0; j < g->st[k].nout; j++)
            if (g->st[k].out[j] == i) return k;
    return -1;
}

/* The last step reading tensor i (its producer prod if none reads it). */
int act_last_use(const LayerGraph *g, int i, int prod)
{
    int last = prod;
    for (int k = 0; k < g->nst; k++)
        for (int j = 0; j < g->st[k].nin; j++)
            if (g->st[k].in[j] == i && k > last) last = k;
    return last;
}

/* Bytes of a graph tensor for one microbatch on one rank. */
static int64_t tensor_bytes(const Partition *p, const ActTensor *t)
{
    int64_t rows = t->shard == AS_SEQ ? p->T_sp : p->T;
    int64_t w = t->shard == AS_TP ? t->width / p->tp : t->width;
    return rows * w * (t->fp32 ? 4 : p->wbytes);
}

/* ---- carving a buffer into pieces ------------------------------------------- */

/* Appends a piece after the others. */
static void carve_add(Carve *cv, int id, int64_t bytes)
{
    if (cv->n == ACT_MAX_PIECES) die("act: too many pieces in one buffer");
    cv->p[cv->n++] = (Piece){id, cv->total, bytes, 0, 0};
    cv->total += bytes;
}

/* Declares a piece live over [born, dies] (steps), placed by carve_pack. */
static void carve_live(Carve *cv, int id, int64_t bytes, int born, int dies)
{
    if (cv->n == ACT_MAX_PIECES) die("act: too many pieces in one buffer");
    cv->p[cv->n++] = (Piece){id, -1, bytes, born, dies};
}

/* The most bytes of the pieces live at one step: what no packing can beat. */
static int64_t carve_peak(const Carve *cv)
{
    int64_t peak = 0;
    for (int i = 0; i < cv->n; i++) {
        int64_t live = 0;
        for (int j = 0; j < cv->n; j++)
            if (cv->p[j].born <= cv->p[i].born && cv->p[i].born <= cv->p[j].dies) live += cv->p[j].bytes;
        if (live > peak) peak = live;
    }
    return peak;
}

/* First fit of the pieces in the order given; returns the top. */
static int64_t pack_in_order(Carve *cv, const int *order)
{
    int64_t top = 0;
    for (int k = 0; k < cv->n; k++) {
        Piece *a = &cv->p[order[k]];
        int64_t at = 0;
        for (bool moved = true; moved;) {   /* bump past every placed piece it meets */
            moved = false;
            for (int j = 0; j < k; j++) {
                const Piece *b = &cv->p[order[j]];
                bool together = a->born <= b->dies && b->born <= a->dies;
                if (together && at < b->off + b->bytes && b->off < at + a->bytes) at = b->off + b->bytes, moved = true;
            }
        }
        a->off = at;
        if (at + a->bytes > top) top = at + a->bytes;
    }
    return top;
}

/* Bytes of the pieces live at piece i's birth. */
static int64_t live_at_birth(const Carve *cv, int i)
{
    int64_t live = 0;
    for (int j = 0; j < cv->n; j++)
        if (cv->p[j].born <= cv->p[i].born && cv->p[i].born <= cv->p[j].dies) live += cv->p[j].bytes;
    return live;
}

/* Is piece a placed before piece b in packing order k?  0: larger first,
 * then born first; 1: born first; 2: the pieces live at the busiest step
 * first (larger first), then the rest larger first. */
static bool before(const Carve *cv, int k, int a, int b, int64_t peak)
{
    const Piece *x = &cv->p[a], *y = &cv->p[b];
    if (k == 1) return x->born < y->born;
    if (k == 2) {
        bool px = live_at_birth(cv, a) == peak, py = live_at_birth(cv, b) == peak;
        if (px != py) return px;
    }
    return x->bytes > y->bytes || (x->bytes == y->bytes && x->born < y->born);
}

/* Places pieces with lifetimes so that live ones never overlap: first fit in
 * the tightest of a few orders (the peak of the live pieces is the bound none
 * can beat; a packing that misses it only costs bytes).  Returns the top. */
static int64_t carve_pack(Carve *cv)
{
    int64_t peak = carve_peak(cv), best_top = -1;
    int64_t best_off[ACT_MAX_PIECES];
    for (int k = 0; k < 3 && best_top != peak; k++) {
        int order[ACT_MAX_PIECES] = {0};
        for (int i = 0; i < cv->n; i++) order[i] = i;
        for (int i = 1; i < cv->n; i++)     /* insertion sort: stable */
            for (int j = i; j > 0 && before(cv, k, order[j], order[j - 1], peak); j--) {
                int t = order[j];
                order[j] = order[j - 1], order[j - 1] = t;
            }
        int64_t top = pack_in_order(cv, order);
        if (best_top < 0 || top < best_top) {
            best_top = top;
            for (int i = 0; i < cv->n; i++) best_off[i] = cv->p[i].off;
        }
    }
    for (int i = 0; i < cv->n; i++) cv->p[i].off = best_off[i];
    cv->total = best_top > 0 ? best_top : 0;
    return cv->total;
}

/* The piece called id of a carved buffer, or NULL. */
const Piece *act_piece(const Carve *cv, int id)
{
    for (int i = 0; i < cv->n; i++)
        if (cv->p[i].id == id) return &cv->p[i];
    return NULL;
}

/* ---- the layouts ----------------------------------------------------------------- */

/* The graph's kept tensors under pol (CKPT_NONE: all of them), statistics
 * first; attn (may be NULL) takes the attention core selective recomputes. */
static void carve_kept(const Partition *p, const LayerGraph *g, int pol, Carve *kept, Carve *attn)
{
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < g->nt; i++) {
            const ActTensor *t = &g->t[i];
            if (t->fp32 != (pass == 0)) continue;
            if (act_kept(t, pol)) carve_add(kept, t->id, tensor_bytes(p, t));
            if (attn && pol == CKPT_SELECTIVE && t->kind == AK_SAVED_ATTN) carve_add(attn, t->id, tensor_bytes(p, t));
        }
}

/* The forward's transients under pol: each graph tensor it does not keep
 * (not the input or output), live from its step to its last reader's.  Under
 * sequence parallelism the row-parallel outputs go into the forward's output
 * (no piece), and the norms are not the part's: each runs in an op of its
 * own on this rank's tokens (its output kept, or under full checkpointing
 * the norm's shard buffer; its statistics in the norm op's scratch), and the
 * part reads its gathered output. */
static void carve_fwd(const Partition *p, const LayerGraph *g, int pol, bool sp, Carve *cv)
{
    for (int i = 0; i < g->nt; i++) {
        const ActTensor *t = &g->t[i];
        if (t->kind == AK_INPUT || t->kind == AK_OUTPUT || (sp && (t->shard == AS_FULL || t->role == AR_NORM))) continue;
        if (act_kept(t, pol)) continue;
        int prod = act_producer(g, i);
        carve_live(cv, t->id, tensor_bytes(p, t), prod, act_last_use(g, i, prod));
    }
}

/* Peak bytes of the forward's transients with the graph under sp (the
 * gathered norms and partial sums too): a bound the scratch also honours. */
static int64_t graph_fwd_peak(const Partition *p, const LayerGraph *g, int pol)
{
    int64_t peak = 0;
    for (int k = 0; k < g->nst; k++) {
        int64_t live = 0;
        for (int i = 0; i < g->nt; i++) {
            const ActTensor *t = &g->t[i];
            if (t->kind == AK_INPUT || t->kind == AK_OUTPUT || act_kept(t, pol)) continue;
            int prod = act_producer(g, i);
            if (prod <= k && k <= act_last_use(g, i, prod)) live += tensor_bytes(p, t);
        }
        if (live > peak) peak = live;
    }
    return peak;
}

/* The backward's internal gradients, each live over the steps of the
 * generated backward that use it (0: dx2 = dy; 1: the down projection; 2: the
 * activation; 3: the MLP's input projections; 4: norm2; 5: dx = dx2; 6: the
 * attention's output projection; 7: attention; 8: the qkv projections; 9:
 * norm1).  GELU's backward fuses the down projection's data gradient with
 * gelu' (no dact); tp > 1 keeps dx2 in its own buffer (the row's d1); under
 * sequence parallelism the norms' output gradients are the parts' partial
 * outputs (not scratch), the weight GEMMs read the regathered norm outputs
 * (not scratch) and each norm's backward runs in an op of its own on this
 * rank's tokens (norm_scratch); with tp_comm_overlap each part's weight
 * GEMMs run at its last step (4, 9) in an op of their own. */
static void carve_bwd(const Partition *p, bool sp, Carve *cv)
{
    const Model *m = p->model;
    int64_t tp = p->tp, T = p->T, h = m->h, ff = m->ffn / tp, w = p->wbytes;
    int64_t qkv = m->h / tp + 2 * model_kv_rank(m) * m->hd;
    bool dgelu = m->dgelu;
    /* tp_comm_overlap: each part's weight GEMMs run in a second op after its
     * last step (4, 9), reading dY of the MLP's input linears and of qkv */
    int wlast = p->wsplit ? 1 : 0;
    if (tp == 1) carve_live(cv, AP_DX2, T * h * w, 0, 6);
    if (!dgelu) carve_live(cv, AP_DACT, T * ff * w, 1, 2);
    if (m->gated) {
        carve_live(cv, AP_DGATE, T * ff * w, 2, 3 + wlast);
        carve_live(cv, AP_DUP, T * ff * w, 2, 3 + wlast);
    } else {
        carve_live(cv, AP_DFC1, T * ff * w, 2, 3 + wlast);
    }
    if (!sp) carve_live(cv, AP_DLN2, T * h * w, 3, 4);
    carve_live(cv, AP_DATT, T * (h / tp) * w, 6, 7);
    carve_live(cv, AP_DQKV, T * qkv * w, 7, 8 + wlast);
    if (!sp) carve_live(cv, AP_DLN1, T * h * w, 8, 9);
}

/* The head's scratch: the final norm's statistics, the per-token losses, the
 * normalised input and its gradient, one after the other. */
static void carve_head(const Partition *p, Carve *cv)
{
    int64_t T = p->T, x = T * p->model->h * p->wbytes;
    carve_add(cv, AP_LNF_STATS, T * 4 * (p->model->layernorm ? 2 : 1));
    carve_add(cv, AP_LOSSES, T * 4);
    carve_add(cv, AP_LNF, x);
    carve_add(cv, AP_DLNF, x);
}

/* Sizes and lays out one layer's activations (p->act, p->layout) and the
 * head's scratch, for the partition's tp, sequence parallelism, micro-batch
 * and the spec's checkpoint policy. */
void act_plan(const Spec *s, Partition *p)
{
    bool sp = s->parallel.sequence_parallel && p->tp > 1;
    int pol = s->checkpointing.activations;
    LayerGraph g, g0;
    model_layer_graph(p->model, sp, &g);
    model_layer_graph(p->model, false, &g0);
    ActBytes *a = &p->act;
    ActLayout *l = &p->layout;
    memset(a, 0, sizeof *a);
    memset(l, 0, sizeof *l);
    for (int i = 0; i < g.nt; i++) {
        const ActTensor *t = &g.t[i];
        int64_t b = tensor_bytes(p, t);
        if (t->kind == AK_INPUT) a->x = b;
        for (int k = 0; k < 3; k++)
            if (act_kept(t, k)) a->saved[k] += b;
        if (t->kind == AK_SAVED_ATTN) a->attn += b;
    }
    bool split = s->checkpointing.partition_activations && !sp && p->tp > 1;
    a->ckpt = split ? (a->x + p->tp - 1) / p->tp : a->x;
    a->boundary = a->x;
    /* Megatron's scatter/gather (Narayanan SC21 §4.1): without sequence
     * parallelism every tp rank holds the whole boundary, so each sends its
     * 1/tp and the receiving tp group all-gathers it over NVLink */
    bool scatter = s->parallel.pp_scatter_gather && !sp && p->tp > 1 && p->pp > 1 && (a->x / p->wbytes) % p->tp == 0;
    a->boundary_slices = scatter ? p->tp : 1;
    a->full = p->T * p->model->h * p->wbytes;
    /* the layouts are laid over the graph without sp: the generated code keeps
     * the norms' shards and gathers where the graph under sp would */
    int64_t T_sp = p->T_sp;
    p->T_sp = sp ? T_sp : p->T;
    carve_kept(p, &g0, CKPT_NONE, &l->saved, NULL);
    if (pol == CKPT_NONE) l->kept = l->saved;
    else carve_kept(p, &g0, pol, &l->kept, &l->attn);
    for (int k = 0; k < 3; k++) {   /* each policy's forward scratch: its transients laid out, */
        Carve cv = {0};             /* at least the graph's peak under sp */
        carve_fwd(p, &g0, k, sp, &cv);
        a->fwd_scratch[k] = carve_pack(&cv);
        if (sp && graph_fwd_peak(p, &g, k) > a->fwd_scratch[k]) a->fwd_scratch[k] = graph_fwd_peak(p, &g, k);
        if (k == pol) l->fscr = cv;
        if (k == CKPT_NONE && pol == CKPT_FULL) l->rscr = cv;
    }
    p->T_sp = p->T;
    carve_bwd(p, sp, &l->bscr);
    a->bwd_scratch = carve_pack(&l->bscr);
    carve_head(p, &l->hscr);
    p->T_sp = T_sp;
    a->norm_scratch = sp ? T_sp * 4 * (p->model->layernorm ? 2 : 1) : 0;
    /* the head op's scratch: the final norm's statistics, its output and
     * gradient on all tokens (gathered under sp), the cross-entropy's */
    int64_t stats = p->T * (p->model->layernorm ? 2 : 1) * 4, ce = 4 * p->T * 4;
    a->head_scratch = stats + 2 * a->full + ce + a->full;
    if (l->hscr.total > a->head_scratch) die("act: the head needs %lld bytes of scratch, its buffer has %lld",
                                             (long long)l->hscr.total, (long long)a->head_scratch);
    for (int k = 0; k < 2; k++) {   /* fp32 statistics among working-dtype tensors */
        const Carve *cv = k ? &l->rscr : &l->fscr;
        for (int i = 0; i < cv->n; i++)
            if (cv->p[i].off % 4)
                die("act: piece %d at byte %lld of a layer's forward scratch is not 4-byte aligned", cv->p[i].id,
                    (long long)cv->p[i].off);
    }
}
