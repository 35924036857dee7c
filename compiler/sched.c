/* sched.c — the ordered ops of one training step of one rank class on its
 * streams (compute, tp-comm, dp-comm, pp-comm, copy, host), with every buffer
 * each op reads and writes and an explicit event for every dependency between
 * streams.  The memory plan takes its buffers' lifetimes from this list
 * (mem.c), the simulation its timeline (sim.c), and the verifier checks it
 * (verify.c); sim.h states the conventions all of them rely on.
 *
 *  - the pipeline order of forward and backward units (gpipe, 1f1b,
 *    interleaved with Megatron's warm-up / steady / cool-down); every stage
 *    issues its sends and receives in one global order — by when the
 *    receiving unit starts in a timeline of all stages' orders (units timed
 *    by their FLOPs) — so blocking transfers cannot deadlock, and the compute
 *    stream waits for a send (freeing its buffer) once the receiver is done;
 *  - per layer: forward, recompute (full: replay the layer from its
 *    checkpointed input; selective: replay the attention core), backward;
 *    with tp > 1 each is split around its TP collectives (Megatron's f and g,
 *    or sequence parallelism's all-gathers and reduce-scatters);
 *  - the head runs its backward right after the loss (the fused cross-entropy
 *    overwrites the logits with their gradient), so logits never outlive the
 *    microbatch that made them;
 *  - ZeRO: bucket reductions as buckets complete, ZeRO-3 gathers with
 *    prefetch / reuse / release (a second pass), the global gradient norm, the
 *    optimizer per sub-group with offload copies and NVMe reads and writes
 *    pipelined around it, parameter all-gathers.
 *
 * Events: the builder places the waits that shape the overlap (the compute
 * stream waits for a collective before the part that needs it, or one op
 * later for an overlapped gradient reduction, or for ZeRO 0-1's reductions at
 * the end of step; such a wait keeps the awaited
 * op's buffers alive until it).  A last pass then walks the list with a vector
 * clock per stream and adds an OP_WAIT, just before the op that needs it, for
 * every remaining cross-stream dependency: a read or write of a buffer after
 * a write (or a write after a read) on another stream, and the first use of a
 * transient buffer after uses on other streams of buffers that died before it
 * was born (the arena packs by list order, so any of their bytes may be its).
 */
#include "plan.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { GPU_CUBLASLT_WORKSPACE = 32 << 20 };     /* bytes, Hopper and Ampere */
enum { GPU_CUDNN_ENGINE_WORKSPACE = 16 << 20 }; /* the fused attention engine's own (at most) */
enum { GPU_ATTN_ALIGN = 256 };                  /* runtime/cuda/attention.c's piece alignment */
enum { MISC_BYTES = 256 };                      /* loss, grad norm, loss scale, flags */
enum { MAX_PENDING = 256 };
enum { MAX_SLOTS = 64 };                        /* NVMe staging slots of the optimizer */

typedef struct Pending { int op, left; } Pending;
/* A point-to-point transfer of this stage: a forward activation or a backward
 * gradient, sent or received; t and done: when the unit consuming it starts
 * and ends in the step's unit timeline (both ends order their transfers by
 * the same key). */
typedef struct Msg { double t, done; int bwd, sender_mc, mb; bool send; int chunk; } Msg;
/* A send the compute stream waits for once the timeline passes `t`. */
typedef struct SendWait { int op; double t; } SendWait;

/* The builder's room for one op's lists, the most each may hold.  Rooms sit
 * in blocks that never move while the op list grows, is copied (an op copy
 * shares its original's room) and is rebuilt (zero3_gathers); sched_events
 * packs each op's used entries into the arena.  Handed from class to class
 * with the op list. */
typedef struct OpRoom { int unit[OP_MAX_UNITS], rd[OP_MAX_RD], wr[OP_MAX_WR]; } OpRoom;
enum { ROOM_BLOCK = 4096 };
typedef struct OpRooms { OpRoom **blocks; int nblocks, capblocks, used; } OpRooms;

/* The builder's state for one rank class. */
typedef struct Bld {
    Sched *s;
    OpRooms *rooms;             /* the ops' lists while they are built */
    const Partition *p;
    const RankClass *c;
    const Spec *spec;
    const Model *m;
    int pol, every, nl;         /* checkpoint policy, group size, layers on this rank */
    bool overlap;
    bool gather_ahead;          /* ZeRO 1-2 overlap_param_gather: the step starts with the gathers */
    bool tpx, sp;               /* tp > 1 (layers split around collectives); sequence parallel */
    double mlp_share;           /* the MLP's share of a layer's FLOPs */
    bool wsplit;                /* tp_comm_overlap: each part's backward split into data and weight ops */
    int tpc;                    /* tp_comm_overlap full: a forward part's row-parallel GEMM in tpc chunks */
    bool unnamed;               /* Schedule.unnamed: activations not named */
    double wshare[2];           /* the weight GEMMs' share of a layer backward's FLOPs: attention, MLP */
    /* persistent buffers (-1: none) */
    int params, params_shard, persist, grads, grads_shard, grads_full;
    int opt[3], hopt[3], hgrads, hparams_stage, nvme_opt, nvme_params, hswap_params;
    int hslot[MAX_SLOTS], nslots;       /* NVMe staging of the optimizer, one per sub-group in flight */
    int misc, cublas, cudnn;
    int64_t S, S_host, S_dev;   /* optimizer elements: this rank's, offloaded, on device */
    int64_t state_bytes;        /* optimizer state bytes per element */
    /* per class-local layer × microbatch */
    int *X, *XIN, *SAVED;       /* kept input (checkpoint), forward input, saved tensors */
    int *tok, *tgt, *HD, *HX;   /* per microbatch */
    int *chunk_li;              /* class-local index of each chunk's first layer */
    int *fwd_done, *bwd_done;   /* per chunk */
    int *seg_bucket, *bucket_inst, *bucket_layer;
    int *late, nlate;           /* ZeRO 0-1 bucket reductions the optimizer waits for */
    int *key_first, *key_segs;  /* CSR: segments holding grads of grad-layer key */
    int64_t *repl_bucketed, *repl_whole;   /* per key: replicated elements in bucketed / whole segments */
    int64_t *head_repl;         /* per bucket: the head's replicated elements in it (bucketed segments) */
    bool *head_tp_due;          /* per bucket: the head wrote them, not yet all-reduced over tp */
    int *head_done, nhead_done; /* ZeRO 2-3: buckets the head completed, reduced with the next backward */
    int tok_seg;                /* the segment of the token embedding, or -1 */
    Pending pend[MAX_PENDING];
    int npend;
    /* point-to-point transfers (pp > 1), in their global order */
    Msg *msgs;
    int nmsgs, msg_i;
    const struct Timeline *tl;  /* every stage's units in time (pp > 1): unit_timeline */
    double *unit_start, *unit_end;      /* per unit of this stage's order, in the timeline */
    SendWait *swait;            /* sends the compute stream has yet to wait for */
    int nswait;
    int *fsend_buf, *bsend_buf; /* per chunk × microbatch: what the send carries */
    int *frecv_op, *brecv_op, *brecv_buf;   /* per chunk × microbatch: the receive */
} Bld;

/* ---- ops and buffers ---------------------------------------------------------- */

/* Grows a list the builder owns (malloc'd while the step is built, moved
 * into the arena at the end: a 16 384-GPU plan builds half a million ops,
 * and doubling arrays in the arena would leave every old copy behind). */
static void *grow(void *p, int *cap, int need, size_t elem, int first)
{
    if (need <= *cap) return p;
    int nc = *cap ? 2 * *cap : first;
    if (nc < need) nc = need;
    p = realloc(p, elem * (size_t)nc);
    if (!p) die("sched: out of memory (%d items)", nc);
    *cap = nc;
    return p;
}

/* The next free room (used counts the rooms handed out this class). */
static OpRoom *room_new(OpRooms *r)
{
    int blk = r->used / ROOM_BLOCK;
    if (blk == r->nblocks) {
        r->blocks = grow(r->blocks, &r->capblocks, r->nblocks + 1, sizeof(OpRoom *), 16);
        r->blocks[r->nblocks] = malloc(sizeof(OpRoom) * ROOM_BLOCK);
        if (!r->blocks[r->nblocks]) die("sched: out of memory (op lists)");
        r->nblocks++;
    }
    return &r->blocks[blk][r->used++ % ROOM_BLOCK];
}

/* What a buffer is (Buffer's typed fields). */
typedef struct BufKey { int role, layer, mb, chunk, idx, sub; } BufKey;

/* A buffer of role r serving no layer, microbatch or index. */
static BufKey key(int r) { return (BufKey){r, NO_LAYER, -1, -1, -1, SUB_WHOLE}; }

/* A buffer of role r of layer L (NO_LAYER: none), microbatch mb, chunk. */
static BufKey key_at(int r, int L, int mb, int chunk) { return (BufKey){r, L, mb, chunk, -1, SUB_WHOLE}; }

/* The same with an index (a segment, a bucket, a slot). */
static BufKey key_idx(int r, int idx, int mb) { return (BufKey){r, NO_LAYER, mb, -1, idx, SUB_WHOLE}; }

/* A new buffer; -1 (none) when it would hold no bytes.  name: for people. */
static int buf_new(Bld *b, BufKey k, const char *name, int cat, int space, int64_t bytes, bool persistent)
{
    if (bytes <= 0) return -1;
    Sched *s = b->s;
    s->bufs = grow(s->bufs, &s->capbufs, s->nbufs + 1, sizeof(Buffer), 256);
    s->bufs[s->nbufs] = (Buffer){.name = name, .role = k.role, .layer = k.layer, .mb = k.mb, .chunk = k.chunk,
                                 .idx = k.idx, .sub = k.sub, .cat = cat, .space = space, .bytes = bytes,
                                 .persistent = persistent, .first = -1, .last = -1};
    return s->nbufs++;
}

/* Room for one more op. */
static void ops_grow(Sched *s)
{
    s->ops = grow(s->ops, &s->capops, s->nops + 1, sizeof(Op), 1024);
}

/* Moves the buffers into the arena (the ops move there in sched_events). */
static void bufs_to_arena(Sched *s)
{
    Buffer *nb = arena_alloc(&g_arena, sizeof(Buffer) * (size_t)(s->nbufs + 1));
    if (s->nbufs) memcpy(nb, s->bufs, sizeof(Buffer) * (size_t)s->nbufs);
    free(s->bufs);
    s->bufs = nb, s->capbufs = s->nbufs;
}

/* Appends an op; returns its index. */
static int op_new(Bld *b, int kind, int stream, int layer, int mb, int chunk)
{
    Sched *s = b->s;
    ops_grow(s);
    Op *o = &s->ops[s->nops];
    memset(o, 0, sizeof *o);
    o->kind = kind, o->stream = stream, o->layer = layer, o->mb = mb, o->chunk = chunk;
    o->aux = -1;
    OpRoom *r = room_new(b->rooms);
    o->unit = r->unit, o->rd = r->rd, o->wr = r->wr;
    o->sub = SUB_WHOLE;
    o->rows = -1;
    o->part_lo = o->part_hi = -1;
    return s->nops++;
}

/* Records that op reads buffer id (ignored for -1 and repeats). */
static void op_rd(Bld *b, int op, int id)
{
    Op *o = &b->s->ops[op];
    if (id < 0) return;
    for (int i = 0; i < o->nrd; i++)
        if (o->rd[i] == id) return;
    if (o->nrd == OP_MAX_RD) die("sched: op %d reads too many buffers", op);
    o->rd[o->nrd++] = id;
}

/* Records that op writes buffer id. */
static void op_wr(Bld *b, int op, int id)
{
    Op *o = &b->s->ops[op];
    if (id < 0) return;
    for (int i = 0; i < o->nwr; i++)
        if (o->wr[i] == id) return;
    if (o->nwr == OP_MAX_WR) die("sched: op %d writes too many buffers", op);
    o->wr[o->nwr++] = id;
}

/* Widens the parts of the parted buffers op touches (ZeRO 0-1's gradients,
 * the parameters gathered ahead) to include bucket k. */
static void op_part(Bld *b, int op, int k)
{
    Op *o = &b->s->ops[op];
    bool parted = (b->grads >= 0 && b->s->bufs[b->grads].nparts > 0) || (b->params >= 0 && b->s->bufs[b->params].nparts > 0);
    if (!parted || k < 0) return;
    if (o->part_lo < 0 || k < o->part_lo) o->part_lo = k;
    if (k > o->part_hi) o->part_hi = k;
}

/* A transient workspace living only for op (and the ops that read it after);
 * returns it. */
static int op_scratch(Bld *b, int op, int64_t bytes)
{
    const Op *o = &b->s->ops[op];
    BufKey k = key_at(BR_SCRATCH, o->layer < 0 && o->kind != OP_EMBED_FWD && o->kind != OP_EMBED_BWD ? NO_LAYER : o->layer,
                      o->mb, o->chunk);
    k.sub = o->sub;
    int id = buf_new(b, k, "scratch", CAT_WORKSPACE, SPACE_DEVICE, bytes, false);
    op_wr(b, op, id);
    return id;
}

/* Stream `stream` waits for op target; returns the wait. */
static int wait_on(Bld *b, int stream, int target)
{
    int w = op_new(b, OP_WAIT, stream, -1, -1, -1);
    const Op *t = &b->s->ops[target];
    Op *o = &b->s->ops[w];
    o->aux = target;
    o->layer = t->layer, o->mb = t->mb, o->chunk = t->chunk, o->sub = t->sub;
    return w;
}

/* The compute stream waits for async op target; the wait keeps the target's
 * buffers alive up to here. */
static void emit_wait(Bld *b, int target)
{
    int w = wait_on(b, ST_COMPUTE, target);
    Op copy = b->s->ops[target];
    for (int i = 0; i < copy.nrd; i++) op_rd(b, w, copy.rd[i]);
    for (int i = 0; i < copy.nwr; i++) op_rd(b, w, copy.wr[i]);
}

/* Waits for op after `after` more compute ops (0: now). */
static void defer_wait(Bld *b, int op, int after)
{
    if (after <= 0 || b->npend == MAX_PENDING) {
        emit_wait(b, op);
        return;
    }
    b->pend[b->npend++] = (Pending){op, after};
}

/* Called after each compute op: emits the waits that are due. */
static void compute_done(Bld *b)
{
    int k = 0;
    for (int i = 0; i < b->npend; i++) {
        if (--b->pend[i].left <= 0) emit_wait(b, b->pend[i].op);
        else b->pend[k++] = b->pend[i];
    }
    b->npend = k;
}

/* Emits every outstanding wait. */
static void flush_waits(Bld *b)
{
    for (int i = 0; i < b->npend; i++) emit_wait(b, b->pend[i].op);
    b->npend = 0;
}

/* A compute op on the compute stream with its FLOPs (for one sequence, scaled
 * to this rank's microbatch and tp share). */
static int compute_op(Bld *b, int kind, int layer, int mb, int chunk, double fl_per_seq)
{
    int o = op_new(b, kind, ST_COMPUTE, layer, mb, chunk);
    b->s->ops[o].flops = fl_per_seq * (double)b->p->b / (double)b->p->tp;
    b->s->flops += b->s->ops[o].flops;
    return o;
}

/* ---- pipeline order --------------------------------------------------------- */

/* GPipe: every forward, then every backward (in microbatch order). */
static int order_gpipe(int64_t m, PipeUnit *out)
{
    int n = 0;
    for (int i = 0; i < m; i++) out[n++] = (PipeUnit){false, i, 0};
    for (int i = 0; i < m; i++) out[n++] = (PipeUnit){true, i, 0};
    return n;
}

/* 1F1B: p - st - 1 warm-up forwards, then one forward one backward, then
 * the remaining backwards. */
static int order_1f1b(int64_t m, int64_t p, int st, PipeUnit *out)
{
    int64_t w = p - st - 1 < m ? p - st - 1 : m;
    int n = 0;
    for (int i = 0; i < w; i++) out[n++] = (PipeUnit){false, i, 0};
    for (int i = 0; i < m - w; i++) {
        out[n++] = (PipeUnit){false, (int)(w + i), 0};
        out[n++] = (PipeUnit){true, i, 0};
    }
    for (int64_t i = m - w; i < m; i++) out[n++] = (PipeUnit){true, (int)i, 0};
    return n;
}

/* Megatron's interleaved unit k: the microbatch and chunk it runs. */
static PipeUnit interleaved_unit(int64_t k, int64_t p, int64_t v, bool bwd)
{
    int64_t g = k % (p * v);
    int chunk = (int)(g / p);
    if (bwd) chunk = (int)(v - 1 - chunk);
    return (PipeUnit){bwd, (int)((k / (p * v)) * p + k % p), chunk};
}

/* Interleaved 1F1B (Megatron): warm-up (p - st - 1)·2 + (v - 1)·p units. */
static int order_interleaved(int64_t m, int64_t p, int64_t v, int st, PipeUnit *out)
{
    int64_t total = m * v;
    int64_t w = m == p ? total : (p - st - 1) * 2 + (v - 1) * p;
    if (w > total) w = total;
    int n = 0;
    for (int64_t k = 0; k < w; k++) out[n++] = interleaved_unit(k, p, v, false);
    for (int64_t k = 0; k < total - w; k++) {
        out[n++] = interleaved_unit(w + k, p, v, false);
        out[n++] = interleaved_unit(k, p, v, true);
    }
    for (int64_t k = total - w; k < total; k++) out[n++] = interleaved_unit(k, p, v, true);
    return n;
}

/* The pipeline order of stage st. */
int sched_pipeline_order(const Partition *p, int st, PipeUnit *out)
{
    switch (p->spec->parallel.schedule) {
    case SCHED_GPIPE: return order_gpipe(p->m, out);
    case SCHED_INTERLEAVED: return order_interleaved(p->m, p->pp, p->v, st, out);
    default: return order_1f1b(p->m, p->pp, st, out);
    }
}

/* The most microbatch-chunks whose forward is done and backward is not. */
int sched_max_in_flight(const Partition *p, int st)
{
    PipeUnit *u = arena_alloc(&g_arena, sizeof(PipeUnit) * (size_t)(2 * p->m * p->v));
    int n = sched_pipeline_order(p, st, u), live = 0, peak = 0;
    for (int i = 0; i < n; i++) {
        live += u[i].bwd ? -1 : 1;
        if (live > peak) peak = live;
    }
    return peak;
}

/* ---- class tables --------------------------------------------------------------- */

/* The key of a grad layer (LAYER_PRE .. l) in the CSR tables. */
static int key_of(int layer) { return layer + 1; }

/* Segments holding gradients of each grad layer (CSR), buckets' lowest
 * layers, and the replicated (not tp-split) elements of each grad layer. */
static void build_keys(Bld *b)
{
    const RankClass *c = b->c;
    int nk = (int)b->m->l + 2;
    b->key_first = arena_alloc(&g_arena, sizeof(int) * (size_t)(nk + 1));
    b->key_segs = arena_alloc(&g_arena, sizeof(int) * (size_t)(c->ntensors + 1));
    b->repl_bucketed = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)nk);
    b->repl_whole = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)nk);
    int *cnt = arena_alloc(&g_arena, sizeof(int) * (size_t)(nk + 1));
    int *last = arena_alloc(&g_arena, sizeof(int) * (size_t)nk);
    b->tok_seg = -1;
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < nk; k++) last[k] = -1, cnt[k] = 0;
        for (int i = 0; i < c->ntensors; i++) {
            const ClassTensor *ct = &c->tensors[i];
            const Tensor *t = &b->m->t[ct->tensor];
            int L = ct->copy ? (int)b->m->l : t->layer, k = key_of(L);
            if (t->role == R_TOK_EMBED && !ct->copy) b->tok_seg = ct->seg;
            if (pass == 0 && (t->split == SPLIT_NONE || t->split == SPLIT_KV)) {  /* KV: over SRT_TP_KV */
                const Segment *sg = &c->segs[ct->seg];
                if (sg->tied || sg->persistent) b->repl_whole[k] += ct->numel;
                else b->repl_bucketed[k] += ct->numel;
            }
            if (last[k] == ct->seg) continue;
            last[k] = ct->seg;
            if (pass) b->key_segs[b->key_first[k] + cnt[k]] = ct->seg;
            cnt[k]++;
        }
        if (!pass)
            for (int k = 0, f = 0; k <= nk; k++) b->key_first[k] = f, f += k < nk ? cnt[k] : 0;
    }
    b->seg_bucket = arena_alloc(&g_arena, sizeof(int) * (size_t)c->nsegs);
    b->bucket_inst = arena_alloc(&g_arena, sizeof(int) * (size_t)(c->nbuckets + 1));
    b->bucket_layer = arena_alloc(&g_arena, sizeof(int) * (size_t)(c->nbuckets + 1));
    b->late = arena_alloc(&g_arena, sizeof(int) * (size_t)(c->nbuckets + 1));
    b->nlate = 0;
    for (int k = 0; k < c->nbuckets; k++) {
        const Bucket *bk = &c->buckets[k];
        b->bucket_inst[k] = -1;
        b->bucket_layer[k] = 1 << 30;
        for (int i = bk->first_seg; i < bk->first_seg + bk->nseg; i++) {
            b->seg_bucket[i] = k;
            if (c->segs[i].layer < b->bucket_layer[k]) b->bucket_layer[k] = c->segs[i].layer;
        }
    }
    b->head_repl = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(c->nbuckets + 1));
    b->head_tp_due = arena_alloc(&g_arena, sizeof(bool) * (size_t)(c->nbuckets + 1));
    b->head_done = arena_alloc(&g_arena, sizeof(int) * (size_t)(c->nbuckets + 1));
    b->nhead_done = 0;
    for (int i = 0; i < c->ntensors; i++) {
        const ClassTensor *ct = &c->tensors[i];
        const Tensor *t = &b->m->t[ct->tensor];
        const Segment *sg = &c->segs[ct->seg];
        if (!ct->copy && t->layer == b->m->l && (t->split == SPLIT_NONE || t->split == SPLIT_KV) && !sg->tied &&
            !sg->persistent)
            b->head_repl[b->seg_bucket[ct->seg]] += ct->numel;
    }
}

/* Class-local layer indices of each chunk's first layer. */
static void build_layers(Bld *b)
{
    const RankClass *c = b->c;
    b->chunk_li = arena_alloc(&g_arena, sizeof(int) * (size_t)(c->nchunks + 1));
    b->nl = 0;
    for (int k = 0; k < c->nchunks; k++) {
        b->chunk_li[k] = b->nl;
        b->nl += c->chunks[k].nlayers;
    }
    size_t n = (size_t)b->nl * (size_t)b->p->m;
    b->X = arena_alloc(&g_arena, sizeof(int) * (n + 1));
    b->XIN = arena_alloc(&g_arena, sizeof(int) * (n + 1));
    b->SAVED = arena_alloc(&g_arena, sizeof(int) * (n + 1));
    size_t mm = (size_t)b->p->m;
    b->tok = arena_alloc(&g_arena, sizeof(int) * mm);
    b->tgt = arena_alloc(&g_arena, sizeof(int) * mm);
    b->HD = arena_alloc(&g_arena, sizeof(int) * mm);
    b->HX = arena_alloc(&g_arena, sizeof(int) * mm);
    for (size_t i = 0; i < n; i++) b->X[i] = b->XIN[i] = b->SAVED[i] = -1;
    for (size_t i = 0; i < mm; i++) b->tok[i] = b->tgt[i] = b->HD[i] = b->HX[i] = -1;
    b->fwd_done = arena_alloc(&g_arena, sizeof(int) * (size_t)c->nchunks);
    b->bwd_done = arena_alloc(&g_arena, sizeof(int) * (size_t)c->nchunks);
}

/* Index into the per layer × microbatch tables. */
static int lm(const Bld *b, int chunk, int i, int mb)
{
    return (b->chunk_li[chunk] + i) * (int)b->p->m + mb;
}

/* The unit of every stage that produces the input of unit u (model chunk
 * mc): the previous chunk's forward, the next chunk's backward, or for the
 * last chunk's backward its own forward; false for the first forward. */
static bool unit_dep(const Partition *p, int64_t mc, const PipeUnit *u, int *st, int *chunk, bool *bwd)
{
    int64_t last = p->pp * p->v - 1, d = u->bwd ? (mc == last ? mc : mc + 1) : mc - 1;
    if (d < 0) return false;
    *st = (int)(d % p->pp), *chunk = (int)(d / p->pp), *bwd = u->bwd && mc != last;
    return true;
}

/* Orders transfers by when their consumer starts, then direction, sender
 * and microbatch: the same key on both ends. */
static int by_msg(const void *pa, const void *pb)
{
    const Msg *x = pa, *y = pb;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if (x->bwd != y->bwd) return x->bwd - y->bwd;
    if (x->sender_mc != y->sender_mc) return x->sender_mc - y->sender_mc;
    return x->mb - y->mb;
}

/* How long a unit of model chunk mc runs in the timeline: its FLOPs per
 * sequence (the head's with the last chunk's forward, the recompute with
 * the backward), so the timeline runs as the step will. */
static double unit_cost(const Partition *p, int64_t mc, bool bwd)
{
    const Model *m = p->model;
    const Spec *s = p->spec;
    double layers = (double)p->chunk_layers[mc];
    double c = bwd ? layers * m->fl_layer_bwd + model_recompute_flops(m, s->checkpointing.activations, p->chunk_layers[mc],
                                                                      s->checkpointing.every)
                   : layers * m->fl_layer_fwd + (mc == p->pp * p->v - 1 ? m->fl_head_fwd + m->fl_head_bwd : 0);
    return c > 0 ? c : 1;
}

/* Every stage's units in order, each as soon as its stage is free and its
 * input exists: when each unit starts and ends (start[st][i], ends[st][i]),
 * and where each unit sits (pos[st][(bwd·v + chunk)·m + mb]).  The same for
 * every stage's class: built once per schedule (sched_build). */
typedef struct Timeline { double **start, **ends; int **pos; } Timeline;

static void unit_timeline(const Partition *p, Timeline *tl)
{
    int pp = (int)p->pp, v = (int)p->v, m = (int)p->m, nu = 2 * v * m;
    double **start = tl->start = arena_alloc(&g_arena, sizeof(double *) * (size_t)pp);
    double **ends = tl->ends = arena_alloc(&g_arena, sizeof(double *) * (size_t)pp);
    int **pos = tl->pos = arena_alloc(&g_arena, sizeof(int *) * (size_t)pp);
    PipeUnit **ord = arena_alloc(&g_arena, sizeof(PipeUnit *) * (size_t)pp);
    int *next = arena_alloc(&g_arena, sizeof(int) * (size_t)pp);
    double *clock = arena_alloc(&g_arena, sizeof(double) * (size_t)pp);
    for (int st = 0; st < pp; st++) {
        ord[st] = arena_alloc(&g_arena, sizeof(PipeUnit) * (size_t)nu);
        sched_pipeline_order(p, st, ord[st]);
        start[st] = arena_alloc(&g_arena, sizeof(double) * (size_t)nu);
        ends[st] = arena_alloc(&g_arena, sizeof(double) * (size_t)nu);
        pos[st] = arena_alloc(&g_arena, sizeof(int) * (size_t)nu);
        for (int i = 0; i < nu; i++) pos[st][((ord[st][i].bwd ? v : 0) + ord[st][i].chunk) * m + ord[st][i].mb] = i;
        next[st] = 0, clock[st] = 0;
    }
    for (int done = 0; done < pp * nu;) {
        int before = done;
        for (int st = 0; st < pp; st++)
            for (; next[st] < nu; next[st]++, done++) {
                const PipeUnit *u = &ord[st][next[st]];
                int64_t mc = (int64_t)u->chunk * pp + st;
                int ds, dc;
                double t0 = clock[st];
                bool dbwd;
                if (unit_dep(p, mc, u, &ds, &dc, &dbwd)) {
                    int at = pos[ds][((dbwd ? v : 0) + dc) * m + u->mb];
                    if (at >= next[ds]) break;          /* its input is not made yet */
                    if (ends[ds][at] > t0) t0 = ends[ds][at];
                }
                start[st][next[st]] = t0;
                ends[st][next[st]] = clock[st] = t0 + unit_cost(p, mc, u->bwd);
            }
        if (done == before) die("sched: the pipeline order of stage 0..%d cannot run", pp - 1);
    }
}

/* The transfers of this stage (pp > 1) in their global order: each end of a
 * transfer issues it at the same point of that order (a receive just before
 * its consumer, a send once its stage has reached the time its consumer
 * starts), so blocking sends and receives meet without a cycle. */
static void build_p2p(Bld *b, const PipeUnit *order, int n)
{
    const Partition *p = b->p;
    int pp = (int)p->pp, v = (int)p->v, m = (int)p->m, st = b->c->stage, last = pp * v - 1;
    size_t cm = (size_t)v * (size_t)m;
    b->nmsgs = b->msg_i = 0;
    b->unit_start = arena_alloc(&g_arena, sizeof(double) * (size_t)(n + 1));
    b->unit_end = arena_alloc(&g_arena, sizeof(double) * (size_t)(n + 1));
    b->swait = arena_alloc(&g_arena, sizeof(SendWait) * (size_t)(n + 1));
    b->nswait = 0;
    int *tabs[5];
    for (int k = 0; k < 5; k++) {
        tabs[k] = arena_alloc(&g_arena, sizeof(int) * (cm + 1));
        for (size_t i = 0; i < cm; i++) tabs[k][i] = -1;
    }
    b->fsend_buf = tabs[0], b->bsend_buf = tabs[1], b->frecv_op = tabs[2], b->brecv_op = tabs[3];
    b->brecv_buf = tabs[4];
    b->msgs = arena_alloc(&g_arena, sizeof(Msg) * (size_t)(2 * n + 1));
    for (int i = 0; i < n; i++) b->unit_start[i] = i, b->unit_end[i] = i + 1;
    if (pp == 1) return;
    double **start = b->tl->start, **ends = b->tl->ends;
    int **pos = b->tl->pos;
    for (int i = 0; i < n; i++) {
        const PipeUnit *u = &order[i];
        int mc = u->chunk * pp + st;
        b->unit_start[i] = start[st][i], b->unit_end[i] = ends[st][i];
        int from = u->bwd ? mc + 1 : mc - 1, to = u->bwd ? mc - 1 : mc + 1;
        if (from >= 0 && from <= last)      /* its input arrives from another stage */
            b->msgs[b->nmsgs++] = (Msg){start[st][i], ends[st][i], u->bwd, from, u->mb, false, u->chunk};
        if (to >= 0 && to <= last) {
            int ts = to % pp, at = pos[ts][((u->bwd ? v : 0) + to / pp) * m + u->mb];
            b->msgs[b->nmsgs++] = (Msg){start[ts][at], ends[ts][at], u->bwd, mc, u->mb, true, u->chunk};
        }
    }
    qsort(b->msgs, (size_t)b->nmsgs, sizeof(Msg), by_msg);
}

/* ---- persistent buffers: model states and workspaces ------------------------------ */

/* Elements of the optimizer on this rank, split between host and device. */
static void opt_split(Bld *b)
{
    const Spec *s = b->spec;
    b->S = b->p->zero >= 1 ? b->c->shard : b->c->padded;
    b->S_host = 0;
    if (s->offload.optimizer != OFF_NONE) {
        double r = s->offload.optimizer_ratio > 0 ? s->offload.optimizer_ratio : 1.0;
        b->S_host = r >= 1.0 ? b->S : (int64_t)((double)b->S * r + 0.5);
    }
    b->S_dev = b->S - b->S_host;
}

/* Optimizer state bytes per element: master copy, then the moments. */
static void opt_bytes(const Spec *s, int64_t *master, int64_t *mom1, int64_t *mom2)
{
    *master = s->precision.dtype == DT_FP32 ? 0 : model_dtype_bytes(s->precision.master_weights);
    bool adam = s->train.optimizer != OPT_SGD;
    *mom1 = adam || s->train.momentum > 0 ? 4 : 0;
    *mom2 = adam ? 4 : 0;
}

/* Parameters: the full working copy (ZeRO 0-2), or the shard plus the
 * persistent small parameters (ZeRO 3), on the device or offloaded. */
static void persistent_params(Bld *b)
{
    const Partition *p = b->p;
    const Spec *s = b->spec;
    b->params = b->params_shard = b->persist = b->nvme_params = b->hswap_params = -1;
    if (p->zero < 3) {
        b->params = buf_new(b, key(BR_PARAMS), "params", CAT_PARAMS, SPACE_DEVICE, b->c->padded * p->wbytes, true);
        /* gathered bucket by bucket at the start of the step: a layer's
         * forward waits only for the gathers of its own buckets */
        if (b->gather_ahead && b->params >= 0) b->s->bufs[b->params].nparts = b->c->nbuckets;
        return;
    }
    int64_t shard = b->c->shard * p->wbytes;
    int off = s->offload.params;
    int space = off == OFF_CPU ? SPACE_HOST : off == OFF_NVME ? SPACE_NVME : SPACE_DEVICE;
    b->params_shard = buf_new(b, key(BR_PARAMS_SHARD), "params.shard", CAT_PARAMS, space, shard, true);
    if (off == OFF_NVME)
        b->hswap_params = buf_new(b, key(BR_PARAMS_NVME_STAGING), "params.nvme_staging", CAT_PARAMS, SPACE_HOST,
                                  s->offload.params_buffer_count * s->offload.params_buffer_size * p->wbytes, true);
    b->persist = buf_new(b, key(BR_PARAMS_PERSIST), "params.persistent", CAT_PARAMS, SPACE_DEVICE, b->c->persistent_numel * p->wbytes, true);
}

/* Gradients: full (ZeRO 0-1) or the shard plus the whole tied/persistent
 * segments (ZeRO 2-3); fp32 gradients on the host when the optimizer is. */
static void persistent_grads(Bld *b)
{
    const Partition *p = b->p;
    b->grads = b->grads_shard = b->grads_full = b->hgrads = -1;
    if (p->zero < 2) {
        /* accessed bucket by bucket: a bucket's all-reduce overlaps the
         * backward writing the next ones */
        b->grads = buf_new(b, key(BR_GRADS), "grads", CAT_GRADS, SPACE_DEVICE, b->c->padded * p->gbytes, true);
        if (b->grads >= 0) b->s->bufs[b->grads].nparts = b->c->nbuckets;
    } else {
        int64_t whole = b->c->persistent_numel + b->c->tied_padded;
        b->grads_shard = buf_new(b, key(BR_GRADS_SHARD), "grads.shard", CAT_GRADS, SPACE_DEVICE, b->S_dev * p->gbytes, true);
        b->grads_full = buf_new(b, key(BR_GRADS_WHOLE), "grads.whole", CAT_GRADS, SPACE_DEVICE, whole * p->gbytes, true);
    }
    b->hgrads = buf_new(b, key(BR_GRADS_HOST), "grads.fp32", CAT_GRADS, SPACE_HOST, b->S_host * 4, true);
}

/* Optimizer states on the device, on the host, or on NVMe with host staging. */
static void persistent_opt(Bld *b)
{
    const Spec *s = b->spec;
    int64_t per[3];
    opt_bytes(s, &per[0], &per[1], &per[2]);
    const char *names[3] = {"optimizer.master", "optimizer.exp_avg", "optimizer.exp_avg_sq"};
    static const int roles[3] = {BR_OPT_MASTER, BR_OPT_MOM1, BR_OPT_MOM2};
    if (s->train.optimizer == OPT_SGD) names[1] = "optimizer.momentum";
    bool nvme = s->offload.optimizer == OFF_NVME;
    b->nvme_opt = -1;
    b->nslots = 0;
    /* the host optimizer keeps fp32 master weights even in fp32 training: the
     * working copy it updates lives on the device (or in a staging buffer) */
    int64_t hper[3] = {per[0] ? per[0] : 4, per[1], per[2]};
    /* likewise the device's with offloaded parameters: they are not on the device */
    bool params_away = b->p->zero == 3 && s->offload.params != OFF_NONE;
    int64_t dper[3] = {per[0] || !params_away ? per[0] : 4, per[1], per[2]};
    for (int i = 0; i < 3; i++) {
        b->opt[i] = buf_new(b, key(roles[i]), names[i], CAT_OPTIMIZER, SPACE_DEVICE, b->S_dev * dper[i], true);
        b->hopt[i] = nvme ? -1 : buf_new(b, key(roles[i]), names[i], CAT_OPTIMIZER, SPACE_HOST, b->S_host * hper[i], true);
    }
    int64_t state = hper[0] + hper[1] + hper[2];
    b->state_bytes = state;
    if (nvme && b->S_host > 0) {
        /* one staging slot per sub-group in flight: reading the next sub-group
         * and writing the last overlap the host step of the current one */
        int64_t sub = s->zero.sub_group_size < b->S_host ? s->zero.sub_group_size : b->S_host;
        int64_t groups = (b->S_host + s->zero.sub_group_size - 1) / s->zero.sub_group_size;
        int64_t n = s->offload.optimizer_buffer_count < groups ? s->offload.optimizer_buffer_count : groups;
        b->nslots = (int)(n < 1 ? 1 : n > MAX_SLOTS ? MAX_SLOTS : n);
        b->nvme_opt = buf_new(b, key(BR_OPT_NVME), "optimizer.nvme", CAT_OPTIMIZER, SPACE_NVME, b->S_host * state, true);
        for (int k = 0; k < b->nslots; k++)
            b->hslot[k] = buf_new(b, key_idx(BR_OPT_SLOT, k, -1), arena_printf(&g_arena, "optimizer.nvme_staging%d", k), CAT_OPTIMIZER,
                                  SPACE_HOST, sub * state, true);
    }
    int64_t sub = s->zero.sub_group_size < b->S_host ? s->zero.sub_group_size : b->S_host;
    b->hparams_stage = s->offload.params == OFF_NONE || b->p->zero < 3
                           ? buf_new(b, key(BR_PARAMS_H2D_STAGING), "params.h2d_staging", CAT_PARAMS, SPACE_HOST, sub * b->p->wbytes, true)
                           : -1;
}

/* Workspaces that live for the whole run. */
static void persistent_workspace(Bld *b)
{
    bool gpu = b->spec->cluster.gpu != GPU_CPU;
    const Partition *p = b->p;
    b->cublas = gpu ? buf_new(b, key(BR_CUBLAS_WS), "cublaslt.workspace", CAT_WORKSPACE, SPACE_DEVICE, GPU_CUBLASLT_WORKSPACE, true) : -1;
    /* cuDNN's fused attention backward (runtime/cuda/attention.c), per
     * microbatch on this rank's heads: Σ = rowsum(dO·O) in fp32 (T, a/t), dQ
     * accumulated in fp32 (T, a/t, d), a scratch for dq, dk, dv in the working
     * dtype (cuDNN overwrites, the op accumulates), then the engine's own
     * workspace; each piece aligned as the runtime places them */
    int64_t al = GPU_ATTN_ALIGN, nh = b->m->a / p->tp, kvr = model_kv_rank(b->m);
#define ATTN_UP(x) (((x) + al - 1) / al * al)
    int64_t attn = ATTN_UP(p->T * nh * 4) + ATTN_UP(p->T * nh * b->m->hd * 4) +
                   ATTN_UP(p->T * (nh + 2 * kvr) * b->m->hd * p->wbytes) + GPU_CUDNN_ENGINE_WORKSPACE;
#undef ATTN_UP
    b->cudnn = gpu ? buf_new(b, key(BR_CUDNN_WS), "attention.workspace", CAT_WORKSPACE, SPACE_DEVICE, attn, true) : -1;
    b->misc = buf_new(b, key(BR_SCALARS), "step.scalars", CAT_WORKSPACE, SPACE_DEVICE, MISC_BYTES, true);
}

/* ---- gradients -------------------------------------------------------------------- */

/* The buffer receiving segment sg's gradients for the current microbatch. */
static int grad_dest(Bld *b, int sg, int mb)
{
    const Segment *seg = &b->c->segs[sg];
    if (b->p->zero < 2) return b->grads;
    if (seg->tied || seg->persistent) return b->grads_full;
    int k = b->seg_bucket[sg];
    if (b->bucket_inst[k] < 0)
        b->bucket_inst[k] = buf_new(b, key_idx(BR_BUCKET, k, mb), arena_printf(&g_arena, "grads.bucket%d", k), CAT_COMM, SPACE_DEVICE,
                                    b->c->buckets[k].padded * b->p->gbytes, false);
    return b->bucket_inst[k];
}

/* Segment sg's gradients are reduced after microbatch mb's backward: ZeRO 2-3
 * reduce bucketed segments every microbatch, the rest after the last. */
static bool reduced_now(const Bld *b, int sg, bool final)
{
    const Segment *seg = &b->c->segs[sg];
    return final || (b->p->zero >= 2 && !seg->tied && !seg->persistent);
}

/* Op o writes (accumulates) the gradients of grad layer L. */
static void grads_write(Bld *b, int o, int L)
{
    int k = key_of(L);
    for (int i = b->key_first[k]; i < b->key_first[k + 1]; i++) {
        int sg = b->key_segs[i];
        op_wr(b, o, grad_dest(b, sg, b->s->ops[o].mb));
        op_part(b, o, b->seg_bucket[sg]);
    }
}

/* Whether grad layer L is the head under ZeRO 2-3, whose bucketed gradients
 * wait for the next backward (their tp all-reduce and the buckets the head
 * completes): heads that run ahead of it (GPipe, interleaved) accumulate into
 * the instances the first of them opened. */
static bool head_waits(const Bld *b, int L) { return L == (int)b->m->l && b->p->zero >= 2; }

/* tp > 1: the gradients of the replicated tensors (norms, row-parallel
 * biases, positions; kv heads shared by several tp ranks, summed over just
 * those ranks in the same op) are partial sums over the tp ranks — each rank
 * contributes its tokens under sequence parallelism, its share of a norm's
 * input gradient, or (tp rank 0 alone) a gradient all ranks see whole — so one
 * all-reduce over tp completes those about to be reduced over dp. */
static void tp_grads(Bld *b, int L, int mb, int chunk, bool final)
{
    if (!b->tpx) return;
    int k = key_of(L);
    /* the head's bucketed part waits for its bucket's reduction
     * (tp_grads_head): an all-reduce after each head would sum the earlier
     * heads' partial sums in the instance over tp again */
    bool head = head_waits(b, L);
    int64_t n = b->p->zero < 2 ? (final ? b->repl_bucketed[k] + b->repl_whole[k] : 0)
                               : (head ? 0 : b->repl_bucketed[k]) + (final ? b->repl_whole[k] : 0);
    for (int i = b->key_first[k]; head && i < b->key_first[k + 1]; i++) {
        int bk = b->seg_bucket[b->key_segs[i]];
        if (b->head_repl[bk] > 0) b->head_tp_due[bk] = true;
    }
    if (n == 0) return;
    int o = op_new(b, OP_TP_ALLREDUCE, ST_TP_COMM, L, mb, chunk);
    b->s->ops[o].sub = SUB_GRADS;
    b->s->ops[o].bytes = n * b->p->gbytes;
    for (int i = b->key_first[k]; i < b->key_first[k + 1]; i++) {
        int sg = b->key_segs[i];
        const Segment *seg = &b->c->segs[sg];
        if (!reduced_now(b, sg, final) || (head && !seg->tied && !seg->persistent)) continue;
        int d = grad_dest(b, sg, mb);
        op_rd(b, o, d);
        op_wr(b, o, d);
        op_part(b, o, b->seg_bucket[sg]);
    }
}

/* ZeRO 2-3, tp > 1: the all-reduce over tp of the head's replicated
 * gradients in bucket k (the final norm's), once, just before the bucket's
 * reduction over dp, whatever number of microbatches' heads wrote them. */
static void tp_grads_head(Bld *b, int k, int mb)
{
    if (!b->head_tp_due[k]) return;
    b->head_tp_due[k] = false;
    int o = op_new(b, OP_TP_ALLREDUCE, ST_TP_COMM, (int)b->m->l, mb, b->c->buckets[k].chunk);
    b->s->ops[o].sub = SUB_GRADS;
    b->s->ops[o].bytes = b->head_repl[k] * b->p->gbytes;
    op_rd(b, o, b->bucket_inst[k]);
    op_wr(b, o, b->bucket_inst[k]);
    op_part(b, o, k);
}

/* Reduces bucket k over dp (its buffer or, ZeRO 0-1, its part of the full
 * grads) once its gradients are complete; with the optimizer on the host
 * (ZeRO 2-3) the reduced shard then goes to the host. */
static void reduce_bucket(Bld *b, int k, int mb)
{
    const Partition *p = b->p;
    if (p->zero >= 2) tp_grads_head(b, k, mb);
    int src = p->zero < 2 ? b->grads : b->bucket_inst[k];
    int o = op_new(b, OP_GRAD_REDUCE, ST_DP_COMM, -1, mb, b->c->buckets[k].chunk);
    b->s->ops[o].aux = k;
    b->s->ops[o].bytes = b->c->buckets[k].padded * p->gbytes;
    op_part(b, o, k);
    op_rd(b, o, src);
    op_wr(b, o, p->zero < 2 ? src : b->grads_shard);
    if (p->zero >= 2 && b->S_host > 0) op_wr(b, o, src);     /* the owned shard, reduced in place */
    /* ZeRO 0-1 reduce in place in the persistent grads, once, after the last
     * microbatch: nothing but the end of step touches the bucket again, so the
     * compute stream waits only there (waiting here would hold the stage's last
     * backward, and under pp every earlier stage's, for the reduction); one
     * stage without overlap_comm keeps the synchronous reduction */
    bool late = p->zero < 2 && (b->overlap || p->pp > 1);
    if (late && b->nlate < b->c->nbuckets) b->late[b->nlate++] = o;
    else defer_wait(b, o, b->overlap ? 1 : 0);
    if (p->zero >= 2 && b->S_host > 0) {
        int d = op_new(b, OP_GRAD_D2H, ST_COPY, -1, mb, b->c->buckets[k].chunk);
        b->s->ops[d].aux = k;
        b->s->ops[d].bytes = b->c->buckets[k].padded / (p->zero >= 1 ? p->dp : 1) * 4;
        op_rd(b, d, src);
        op_wr(b, d, b->hgrads);
        defer_wait(b, d, b->overlap ? 1 : 0);
    }
    if (p->zero >= 2) b->bucket_inst[k] = -1;
}

/* The gradients of grad layer L for microbatch mb are written: complete the
 * replicated ones over tp, then reduce the buckets L completes (ZeRO 2-3
 * every microbatch, ZeRO 0-1 after the last). */
static void grads_done(Bld *b, int L, int mb, int chunk, bool final)
{
    int k = key_of(L), touched[64], nt = 0;
    bool head = head_waits(b, L);
    /* the buckets the head completed are reduced with the next backward, as
     * a bucket it shares with a layer is: one head never writes instances of
     * two microbatches, whose places the trainer could not tell apart */
    for (int i = 0; !head && i < b->nhead_done; i++) reduce_bucket(b, b->head_done[i], mb);
    if (!head) b->nhead_done = 0;
    tp_grads(b, L, mb, chunk, final);
    for (int i = b->key_first[k]; i < b->key_first[k + 1]; i++) {
        int sg = b->key_segs[i];
        const Segment *seg = &b->c->segs[sg];
        bool whole = seg->tied || seg->persistent;
        int bk = b->seg_bucket[sg];
        bool dup = false;
        for (int j = 0; j < nt; j++) dup |= touched[j] == bk;
        if (!dup && !(whole && b->p->zero >= 2) && b->bucket_layer[bk] == L && nt < 64) touched[nt++] = bk;
    }
    for (int i = 0; i < nt; i++) {
        bool due = false;
        for (int j = 0; j < b->nhead_done; j++) due |= b->head_done[j] == touched[i];
        if (head && !due) b->head_done[b->nhead_done++] = touched[i];
        else if (!head && (b->p->zero >= 2 || final)) reduce_bucket(b, touched[i], mb);
    }
}

/* ---- ZeRO-3 units --------------------------------------------------------------------- */

/* Adds fetch unit sg to the units op o computes with (once). */
static void add_unit(Op *op, int sg)
{
    for (int k = 0; k < op->nunit; k++)
        if (op->unit[k] == sg) return;
    if (op->nunit == OP_MAX_UNITS) die("sched: an op computes with more than %d ZeRO-3 fetch units", OP_MAX_UNITS);
    op->unit[op->nunit++] = sg;
}

/* Marks op o as computing with the fetch units of grad layer L (ZeRO 3): one
 * per submodule of the layer that is not persistent, in the order the op
 * runs them (a backward in reverse), which is the order they are gathered. */
static void units_of(Bld *b, int o, int L)
{
    if (b->p->zero < 3) return;
    int k = key_of(L), n = b->key_first[k + 1] - b->key_first[k];
    bool rev = b->s->ops[o].kind == OP_LAYER_BWD;
    for (int j = 0; j < n; j++) {
        int sg = b->key_segs[b->key_first[k] + (rev ? n - 1 - j : j)];
        if (!b->c->segs[sg].persistent) add_unit(&b->s->ops[o], sg);
    }
}

/* The parameters an op computes with: the whole copy (gathered ahead: the
 * buckets of the op's layer), or (ZeRO 3) the persistent ones (the gathered
 * units are added by the gather pass). */
static void reads_params(Bld *b, int o)
{
    op_rd(b, o, b->params);
    op_rd(b, o, b->persist);
    if (!b->gather_ahead) return;
    int k = key_of(b->s->ops[o].layer);
    for (int i = b->key_first[k]; i < b->key_first[k + 1]; i++) op_part(b, o, b->seg_bucket[b->key_segs[i]]);
}

/* ---- tensor parallelism ------------------------------------------------------------------ */

/* A TP collective on the tp stream from src to dst (in place when equal);
 * bytes: the full buffer's. */
static int tp_comm(Bld *b, int kind, int sub, int L, int mb, int chunk, int src, int dst, int64_t bytes)
{
    int o = op_new(b, kind, ST_TP_COMM, L, mb, chunk);
    b->s->ops[o].sub = sub;
    b->s->ops[o].bytes = bytes;
    op_rd(b, o, src);
    op_wr(b, o, dst);
    return o;
}

/* One compute part of a layer split around its TP collectives. */
static int part_op(Bld *b, int kind, int sub, int L, int mb, int chunk, double fl)
{
    int o = compute_op(b, kind, L, mb, chunk, fl);
    b->s->ops[o].sub = sub;
    reads_params(b, o);
    units_of(b, o, L);
    return o;
}

/* Writes v in decimal at p; returns the end. */
static char *put_int(char *p, int v)
{
    char d[12];
    int n = 0;
    unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;
    do d[n++] = (char)('0' + u % 10), u /= 10; while (u);
    if (v < 0) *p++ = '-';
    while (n) *p++ = d[--n];
    return p;
}

/* "act.L<L>.mb<mb>.<what>", as arena_printf would write it: formatted by
 * hand, for the named plan formats some 200 000 of these (vsnprintf took a
 * twentieth of the 1008B row's instructions). */
static const char *act_name(int L, int mb, const char *what)
{
    char name[64], *p = name;
    size_t nw = strlen(what);
    if (nw > sizeof name - 32) return arena_printf(&g_arena, "act.L%d.mb%d.%s", L, mb, what);
    memcpy(p, "act.L", 5), p += 5;
    p = put_int(p, L);
    memcpy(p, ".mb", 3), p += 3;
    p = put_int(p, mb);
    *p++ = '.';
    memcpy(p, what, nw), p += nw;
    return arena_strndup(&g_arena, name, (size_t)(p - name));
}

/* A [T, h] activation transient of layer L (the full sequence, or one rank's
 * shard: bytes say which). */
static int act_buf(Bld *b, int role, int sub, int L, int mb, const char *what, int64_t bytes)
{
    BufKey k = key_at(role, L, mb, -1);
    k.sub = sub;
    const char *name = b->unnamed ? "act (unnamed)" : act_name(L, mb, what);
    return buf_new(b, k, name, CAT_ACTIVATIONS, SPACE_DEVICE, bytes, false);
}

/* What a layer's forward (or its full recompute) reads and keeps. */
typedef struct FwdIO {
    int kind;                   /* OP_LAYER_FWD or OP_RECOMPUTE                    */
    int in;                     /* the input (its sequence shard under SP)         */
    int keep[2];                /* written for backward (saved tensors, a checkpoint slice) */
    int out;                    /* the output, or -1 when nothing needs it         */
    double fl;                  /* FLOPs per sequence of the whole layer           */
    int64_t scratch;            /* transient bytes of one op                       */
} FwdIO;

/* The writes every part of a layer forward makes. */
static void fwd_keep(Bld *b, int o, const FwdIO *io)
{
    op_wr(b, o, io->keep[0]);
    op_wr(b, o, io->keep[1]);
}

/* Sequence parallelism: a part's norm (GR_NORM) on this rank's tokens of its
 * input `in`, before the part's all-gather (Megatron's layout: the column-
 * parallel linear gathers the norm's output).  Its output shard goes where
 * the backward regathers it, the layer's kept (or recomputed) tensors, or
 * when the layer keeps none (full checkpointing's forward) a shard of its
 * own; its statistics into its small scratch.  Returns the output's buffer. */
static int sp_norm_fwd(Bld *b, int sub, int L, int mb, int chunk, const FwdIO *io, int in)
{
    const ActBytes *a = &b->p->act;
    int n = part_op(b, io->kind, sub, L, mb, chunk, 0);
    b->s->ops[n].grads = GR_NORM;
    op_rd(b, n, in);
    bool own = io->kind == OP_LAYER_FWD && b->pol == CKPT_FULL;
    int out = own ? act_buf(b, BR_NORM_SHARD, sub, L, mb, "norm", a->x) : io->keep[0];
    op_wr(b, n, out);
    op_scratch(b, n, a->norm_scratch);
    compute_done(b);
    return out;
}

/* FLOPs per sequence of the row-parallel GEMM ending part sub (the attention
 * output projection, the MLP down projection): 2 per weight per token, as
 * model.c counts a layer's. */
static double rows_gemm_fl(const Bld *b, int sub)
{
    const Model *m = b->m;
    int role = sub == SUB_MLP ? R_FC2_W : R_ATTN_OUT_W;
    for (int i = m->layer_first[1]; i < m->layer_first[2]; i++)
        if (m->t[i].role == role) return 2.0 * (double)m->s * (double)m->t[i].numel;
    die("sched: the layer has no row-parallel linear %s", model_role_name(role));
}

/* FLOPs per sequence of the column-parallel GEMMs opening part sub (qkv or
 * Llama's q, k, v; the MLP's input linears: fc1, or gate and up). */
static double cols_gemm_fl(const Bld *b, int sub)
{
    const Model *m = b->m;
    double fl = 0;
    for (int i = m->layer_first[1]; i < m->layer_first[2]; i++) {
        int r = m->t[i].role;
        bool in = sub == SUB_MLP ? r == R_FC1_W || r == R_GATE_W || r == R_UP_W
                                 : r == R_QKV_W || r == R_Q_W || r == R_K_W || r == R_V_W;
        if (in) fl += 2.0 * (double)m->s * (double)m->t[i].numel;
    }
    if (fl <= 0) die("sched: the layer has no column-parallel linear in its %s part", sub == SUB_MLP ? "MLP" : "attention");
    return fl;
}

/* tp_comm_overlap full under sequence parallelism (part_tp_cols): the start
 * of a forward part, the all-gather of its norm's output shard `ln` into g
 * and the column-parallel GEMMs reading it, in tpc token-row chunks: chunk
 * j's all-gather (on the tp stream, all of them issued first) moves every
 * rank's local rows j into block j of g, and chunk j's GEMMs (GR_COLS) run
 * on it as soon as it is there, while the next chunk's all-gather runs
 * (Transformer Engine's all-gather overlap of a column-parallel GEMM).  The
 * chunks write the GEMMs' outputs (their token rows of the layer's kept
 * tensors, or of the scratch) and the head, made after them, runs the rest;
 * g and the kept tensors are accessed by chunk (Buffer.rows: the norm's
 * shard that chunk j's all-gather reads and the outputs chunk j's GEMMs
 * write are each that chunk's rows), so that chunk j's GEMMs follow chunk
 * j's all-gather only.  Returns the scratch the chunks write, the head's. */
static int cols_fwd(Bld *b, int sub, int L, int mb, int chunk, const FwdIO *io, int ln, int g)
{
    const ActBytes *a = &b->p->act;
    int k = b->tpc, scr = -1;
    double fl = cols_gemm_fl(b, sub) / k;
    b->s->bufs[g].rows = k;
    if (io->keep[0] >= 0) b->s->bufs[io->keep[0]].rows = k;
    for (int j = 0; j < k; j++) {
        int ag = tp_comm(b, OP_TP_ALLGATHER, sub, L, mb, chunk, ln, g, a->full / k);
        b->s->ops[ag].rows = (int16_t)j;
    }
    for (int j = 0; j < k; j++) {
        int c = part_op(b, io->kind, sub, L, mb, chunk, fl);
        b->s->ops[c].grads = GR_COLS, b->s->ops[c].rows = (int16_t)j;
        op_rd(b, c, g);
        op_rd(b, c, io->in);
        op_wr(b, c, io->keep[0]);
        if (scr < 0) scr = op_scratch(b, c, io->scratch);
        else op_wr(b, c, scr);
        compute_done(b);
    }
    return scr;
}

/* The head of a forward part whose column GEMMs ran in chunks (cols_fwd):
 * their FLOPs are the chunks'. */
static void cols_head(Bld *b, int head)
{
    double moved = cols_gemm_fl(b, b->s->ops[head].sub) * (double)b->p->b / (double)b->p->tp;
    b->s->ops[head].flops -= moved, b->s->flops -= moved;
}

/* tp_comm_overlap full: the end of a forward part, its row-parallel GEMM and
 * the residual folded into its partial sums, in tpc token-row chunks
 * (GR_ROWS), each all-reduced on the tp stream as soon as it is written while
 * the next chunk computes (Megatron-Core's --tp-comm-overlap, Transformer
 * Engine's pipelined GEMM and collective).  head: the part's op, made the
 * part up to the GEMM (GR_HEAD: the GEMM's FLOPs move to the chunks), whose
 * kept tensors and scratch the chunks read (its scratch they write: the
 * GEMM's output rows); out: the part's partial sums, all-reduced in place
 * (dst == out), or under sequence parallelism reduce-scattered into dst, this
 * rank's tokens; both accessed by chunk (Buffer.rows) so that a chunk's
 * collective and the next chunk's GEMM run at once; res: the residual.  Under
 * sequence parallelism chunk j is local rows [j·n/k, (j+1)·n/k) of every
 * rank's n tokens, whose partial sums the chunk writes as one block (the
 * generated code's layout), so that its reduce-scatter leaves each rank its
 * own rows.  Token rows are independent in the GEMM and in the sum over tp,
 * so the chunks compute and reduce exactly what the whole would.  Returns the
 * last chunk's collective: the tp stream runs them in order, so waiting for
 * it waits for all. */
static int rows_fwd(Bld *b, int head, int scr, int out, int dst, int res)
{
    double fl = rows_gemm_fl(b, b->s->ops[head].sub), moved = fl * (double)b->p->b / (double)b->p->tp;
    b->s->ops[head].grads = GR_HEAD;
    b->s->ops[head].flops -= moved, b->s->flops -= moved;     /* the chunks' FLOPs now */
    const Op h = b->s->ops[head];      /* a copy: the list grows below */
    int k = b->tpc, red = -1;
    fl /= k;
    b->s->bufs[out].rows = b->s->bufs[dst].rows = k;
    for (int j = 0; j < k; j++) {
        int o = part_op(b, h.kind, h.sub, h.layer, h.mb, h.chunk, fl);
        b->s->ops[o].grads = GR_ROWS, b->s->ops[o].rows = (int16_t)j;
        for (int i = 0; i < h.nwr; i++) op_rd(b, o, h.wr[i]);
        op_rd(b, o, res);
        op_wr(b, o, scr);
        op_wr(b, o, out);
        compute_done(b);
        red = out == dst ? tp_comm(b, OP_TP_ALLREDUCE, h.sub, h.layer, h.mb, h.chunk, out, out, b->p->act.x / k)
                         : tp_comm(b, OP_TP_REDUCE_SCATTER, h.sub, h.layer, h.mb, h.chunk, out, dst, b->p->act.full / k);
        b->s->ops[red].rows = (int16_t)j;
    }
    return red;
}

/* A layer's forward as one op (tp = 1), or split around its TP collectives:
 * [SP: the norm on the shard, all-gather its output] attention part, all-
 * reduce (SP: reduce-scatter) of its partial sums, [SP: norm, all-gather]
 * MLP part, all-reduce (reduce-scatter) into the output.  Each residual is
 * folded into the partial sums before the reduction (tp rank 0 adds it;
 * under SP each rank adds its shard to its own slice), so the reduction
 * yields the residual stream.  The compute stream waits for each collective
 * before going on: they are on the critical path, as in Megatron. */
static void layer_forward_ops(Bld *b, int L, int mb, int chunk, const FwdIO *io)
{
    const ActBytes *a = &b->p->act;
    /* a recompute group's last layer stops before the MLP's down projection */
    bool cut = io->out < 0;
    if (cut && io->kind != OP_RECOMPUTE) die("sched: the forward of layer %d mb %d has no output", L, mb);
    double down = cut ? b->m->fl_mlp_down : 0;
    if (!b->tpx) {
        int o = compute_op(b, io->kind, L, mb, chunk, io->fl - down);
        if (cut) b->s->ops[o].grads = GR_NO_OUTPUT;
        op_rd(b, o, io->in);
        reads_params(b, o);
        units_of(b, o, L);
        fwd_keep(b, o, io);
        op_wr(b, o, io->out);
        op_scratch(b, o, io->scratch);
        compute_done(b);
        return;
    }
    double fm = io->fl * b->mlp_share, fa = io->fl - fm;
    int in = io->in;
    bool rows = b->tpc > 1 && io->kind == OP_LAYER_FWD;     /* tp_comm_overlap full */
    bool cols = rows && part_tp_cols(b->p);     /* ... and the all-gather and column GEMMs too */
    int cscr = -1;              /* the scratch the column GEMMs' chunks wrote */
    if (b->sp) {
        int ln = sp_norm_fwd(b, SUB_ATTN, L, mb, chunk, io, io->in);
        int g = act_buf(b, BR_TP_GATHERED, SUB_ATTN, L, mb, "gathered", a->full);
        if (cols) cscr = cols_fwd(b, SUB_ATTN, L, mb, chunk, io, ln, g);
        else emit_wait(b, tp_comm(b, OP_TP_ALLGATHER, SUB_ATTN, L, mb, chunk, ln, g, a->full));
        in = g;
    }
    int A = part_op(b, io->kind, SUB_ATTN, L, mb, chunk, fa);
    if (cols) cols_head(b, A);  /* the chunks read the gathered input */
    else op_rd(b, A, in);
    op_rd(b, A, io->in);
    fwd_keep(b, A, io);
    if (cscr >= 0) op_wr(b, A, cscr);
    int r1 = act_buf(b, BR_RESID1, SUB_ATTN, L, mb, "resid1", a->x), red;
    if (b->sp) {
        int part = act_buf(b, BR_TP_PARTIAL, SUB_ATTN, L, mb, "partial", a->full);
        if (rows) {             /* tp_comm_overlap full: the output projection by token rows */
            int scr = cscr >= 0 ? cscr : op_scratch(b, A, io->scratch);
            compute_done(b);
            emit_wait(b, rows_fwd(b, A, scr, part, r1, io->in));
        } else {
            op_wr(b, A, part);
            op_scratch(b, A, io->scratch);
            compute_done(b);
            emit_wait(b, tp_comm(b, OP_TP_REDUCE_SCATTER, SUB_ATTN, L, mb, chunk, part, r1, a->full));
        }
        int ln = sp_norm_fwd(b, SUB_MLP, L, mb, chunk, io, r1);
        int g2 = act_buf(b, BR_TP_GATHERED, SUB_MLP, L, mb, "gathered", a->full);
        if (cols) {
            FwdIO mio = *io;
            mio.in = r1;
            cscr = cols_fwd(b, SUB_MLP, L, mb, chunk, &mio, ln, g2);
            red = -1;
        } else {
            red = tp_comm(b, OP_TP_ALLGATHER, SUB_MLP, L, mb, chunk, ln, g2, a->full);
        }
        in = g2;
    } else if (rows) {          /* tp_comm_overlap full: the output projection by token rows */
        int scr = op_scratch(b, A, io->scratch);
        compute_done(b);
        red = rows_fwd(b, A, scr, r1, r1, io->in);
        in = r1;
    } else {
        op_wr(b, A, r1);
        op_scratch(b, A, io->scratch);
        compute_done(b);
        red = tp_comm(b, OP_TP_ALLREDUCE, SUB_ATTN, L, mb, chunk, r1, r1, a->x);
        in = r1;
    }
    if (red >= 0) emit_wait(b, red);
    int M = part_op(b, io->kind, SUB_MLP, L, mb, chunk, fm - down);
    if (cut) b->s->ops[M].grads = GR_NO_OUTPUT;
    if (cols) cols_head(b, M);  /* the chunks read the gathered input */
    else op_rd(b, M, in);
    op_rd(b, M, r1);
    fwd_keep(b, M, io);
    int mscr = cols ? cscr : op_scratch(b, M, io->scratch);
    if (cols) op_wr(b, M, mscr);
    if (io->out < 0) {          /* the last layer of a recompute group: its output is not needed */
        compute_done(b);
        return;
    }
    if (b->sp) {
        int part = act_buf(b, BR_TP_PARTIAL, SUB_MLP, L, mb, "partial", a->full);
        if (!rows) op_wr(b, M, part);
        compute_done(b);
        red = rows ? rows_fwd(b, M, mscr, part, io->out, r1)     /* the residual x2: this rank's tokens, r1 */
                   : tp_comm(b, OP_TP_REDUCE_SCATTER, SUB_MLP, L, mb, chunk, part, io->out, a->full);
    } else if (rows) {          /* the MLP down projection by token rows; x2 (kept, or in the scratch) the residual */
        compute_done(b);
        red = rows_fwd(b, M, mscr, io->out, io->out, r1);
    } else {
        op_wr(b, M, io->out);
        compute_done(b);
        red = tp_comm(b, OP_TP_ALLREDUCE, SUB_MLP, L, mb, chunk, io->out, io->out, a->x);
    }
    emit_wait(b, red);
}

/* ---- forward ----------------------------------------------------------------------------- */

/* A microbatch's tokens (and targets) to the device. */
static void load_batch(Bld *b, int mb, bool tokens, bool targets)
{
    const Partition *p = b->p;
    int o = op_new(b, OP_LOAD_BATCH, ST_COPY, -1, mb, -1);
    if (tokens) b->tok[mb] = buf_new(b, key_at(BR_TOKENS, NO_LAYER, mb, -1), arena_printf(&g_arena, "batch.tokens.mb%d", mb), CAT_ACTIVATIONS,
                                     SPACE_DEVICE, p->T * 4, false);
    if (targets) b->tgt[mb] = buf_new(b, key_at(BR_TARGETS, NO_LAYER, mb, -1), arena_printf(&g_arena, "batch.targets.mb%d", mb), CAT_ACTIVATIONS,
                                      SPACE_DEVICE, p->T * 4, false);
    op_wr(b, o, tokens ? b->tok[mb] : -1);
    op_wr(b, o, targets ? b->tgt[mb] : -1);
    b->s->ops[o].bytes = p->T * 4 * ((int)tokens + (int)targets);
    defer_wait(b, o, 0);
}

/* The buffer receiving layer i's input (chunk, microbatch), which the layer
 * keeps for backward — or under full recompute the checkpoint (group starts)
 * or a transient.  With partitioned activations the input is a transient and
 * the layer keeps only its tp rank's slice of it (X, written by the layer). */
static int new_input(Bld *b, int chunk, int i, int mb)
{
    const ActBytes *a = &b->p->act;
    int L = b->c->chunks[chunk].first_layer + i;
    bool ckpt = b->pol == CKPT_FULL && i % b->every == 0, slice = ckpt && a->ckpt < a->x;
    const char *what = b->pol != CKPT_FULL ? "x" : ckpt && !slice ? "ckpt" : "x.transient";
    int role = b->pol != CKPT_FULL ? BR_X : ckpt && !slice ? BR_CKPT : BR_X_TRANSIENT;
    int id = act_buf(b, role, SUB_WHOLE, L, mb, what, a->x);
    b->XIN[lm(b, chunk, i, mb)] = id;
    b->X[lm(b, chunk, i, mb)] = slice ? act_buf(b, BR_CKPT_SLICE, SUB_WHOLE, L, mb, "ckpt", a->ckpt) : id;
    return id;
}

/* The embedding: tokens to the first layer's input; vocab-parallel under tp,
 * its partial sums reduced over tp (reduce-scattered under SP). */
static void embed_fwd(Bld *b, int chunk, int mb)
{
    const Partition *p = b->p;
    int in0 = new_input(b, chunk, 0, mb);
    int o = compute_op(b, OP_EMBED_FWD, LAYER_PRE, mb, chunk, 0);
    op_rd(b, o, b->tok[mb]);
    reads_params(b, o);
    units_of(b, o, LAYER_PRE);
    if (!b->tpx) {
        op_wr(b, o, in0);
        compute_done(b);
        return;
    }
    int red;
    if (b->sp) {
        int part = buf_new(b, key_at(BR_EMBED_PARTIAL, LAYER_PRE, mb, chunk), arena_printf(&g_arena, "act.embed.mb%d.partial", mb), CAT_ACTIVATIONS, SPACE_DEVICE,
                           p->act.full, false);
        op_wr(b, o, part);
        compute_done(b);
        red = tp_comm(b, OP_TP_REDUCE_SCATTER, SUB_WHOLE, LAYER_PRE, mb, chunk, part, in0, p->act.full);
    } else {
        op_wr(b, o, in0);
        compute_done(b);
        red = tp_comm(b, OP_TP_ALLREDUCE, SUB_WHOLE, LAYER_PRE, mb, chunk, in0, in0, p->act.x);
    }
    emit_wait(b, red);
}

/* cpu checkpointing: the checkpoint goes to the host after its last forward use. */
static void ckpt_to_host(Bld *b, int chunk, int i, int mb)
{
    int dev = b->X[lm(b, chunk, i, mb)];
    int L = b->c->chunks[chunk].first_layer + i;
    int host = buf_new(b, key_at(BR_CKPT_HOST, L, mb, chunk), arena_printf(&g_arena, "act.L%d.mb%d.ckpt.host", L, mb), CAT_ACTIVATIONS, SPACE_HOST,
                       b->p->act.ckpt, false);
    int o = op_new(b, OP_CKPT_D2H, ST_COPY, L, mb, chunk);
    b->s->ops[o].bytes = b->p->act.ckpt;
    op_rd(b, o, dev);
    op_wr(b, o, host);
    defer_wait(b, o, 1);
    b->X[lm(b, chunk, i, mb)] = -2 - host;      /* on the host until the recompute */
}

/* Where layer i's output goes: the next layer's input, the head's input, or
 * the send buffer to the next stage. */
static int layer_output(Bld *b, int chunk, int i, int mb)
{
    const Chunk *ch = &b->c->chunks[chunk];
    if (i + 1 < ch->nlayers) return new_input(b, chunk, i + 1, mb);
    const char *name = ch->head ? "act.y.mb%d" : "pp.send_fwd.mb%d";
    int id = buf_new(b, key_at(ch->head ? BR_Y : BR_SEND_FWD, NO_LAYER, mb, chunk), arena_printf(&g_arena, name, mb),
                     ch->head ? CAT_ACTIVATIONS : CAT_COMM, SPACE_DEVICE,
                     b->p->act.boundary, false);
    b->HX[mb] = id;
    return id;
}

/* One layer's forward: reads its input, keeps what backward needs. */
static void layer_fwd(Bld *b, int chunk, int i, int mb)
{
    const ActBytes *a = &b->p->act;
    int L = b->c->chunks[chunk].first_layer + i, k = lm(b, chunk, i, mb);
    int saved = act_buf(b, BR_SAVED, SUB_WHOLE, L, mb, "saved", a->saved[b->pol]);
    b->SAVED[k] = saved;
    FwdIO io = {OP_LAYER_FWD, b->XIN[k], {saved, b->X[k] != b->XIN[k] ? b->X[k] : -1}, -1, b->m->fl_layer_fwd,
                a->fwd_scratch[b->pol]};
    io.out = layer_output(b, chunk, i, mb);
    layer_forward_ops(b, L, mb, chunk, &io);
    if (b->pol == CKPT_FULL && b->spec->checkpointing.cpu && i % b->every == 0) ckpt_to_host(b, chunk, i, mb);
}

/* The head: final norm, logits, fused cross-entropy, and at once its
 * backward, leaving the gradient of the last layer's output.  Under tp the
 * logits are vocab-parallel (the cross-entropy's per-token max and sum are
 * reduced inside the op), the input is gathered first under SP, and the input
 * gradient's partial sums are reduced over tp (reduce-scattered under SP). */
static void head(Bld *b, int chunk, int mb, bool final)
{
    const Partition *p = b->p;
    const ActBytes *a = &p->act;
    int l = (int)b->m->l, in = b->HX[mb];
    if (b->sp) {
        int g = buf_new(b, key_at(BR_Y_GATHERED, NO_LAYER, mb, chunk), arena_printf(&g_arena, "act.y.mb%d.gathered", mb), CAT_ACTIVATIONS, SPACE_DEVICE,
                        a->full, false);
        emit_wait(b, tp_comm(b, OP_TP_ALLGATHER, SUB_WHOLE, l, mb, chunk, b->HX[mb], g, a->full));
        in = g;
    }
    int o = compute_op(b, OP_HEAD, l, mb, chunk, b->m->fl_head_fwd + b->m->fl_head_bwd);
    op_rd(b, o, in);
    op_rd(b, o, b->HX[mb]);
    op_rd(b, o, b->tgt[mb]);
    reads_params(b, o);
    units_of(b, o, l);
    if (b->m->tied && p->pp == 1 && p->zero == 3 && b->tok_seg >= 0 && !b->c->segs[b->tok_seg].persistent) {
        add_unit(&b->s->ops[o], b->tok_seg);
    }
    int64_t logits = p->T * (b->m->Vpad / p->tp) * p->wbytes;     /* (T, Vpad/t) */
    op_wr(b, o, buf_new(b, key_at(BR_LOGITS, NO_LAYER, mb, chunk), arena_printf(&g_arena, "logits.mb%d", mb), CAT_LOGITS, SPACE_DEVICE, logits, false));
    /* the final norm, its output and gradient on all tokens (gathered under SP) */
    int64_t stats = p->T * (b->m->layernorm ? 2 : 1) * 4, ce = 4 * p->T * 4;
    op_scratch(b, o, stats + 2 * a->full + ce + a->full);
    b->HD[mb] = buf_new(b, key_at(BR_DY, NO_LAYER, mb, chunk), arena_printf(&g_arena, "act.dy.mb%d", mb), CAT_ACTIVATIONS, SPACE_DEVICE, a->x, false);
    int part = b->sp ? buf_new(b, key_at(BR_DY_PARTIAL, NO_LAYER, mb, chunk), arena_printf(&g_arena, "act.dy.mb%d.partial", mb), CAT_ACTIVATIONS, SPACE_DEVICE,
                               a->full, false)
                     : b->HD[mb];
    op_wr(b, o, part);
    op_wr(b, o, b->misc);
    grads_write(b, o, l);
    if (b->m->tied && p->pp == 1 && b->tok_seg >= 0) {
        op_wr(b, o, grad_dest(b, b->tok_seg, mb));
        op_part(b, o, b->seg_bucket[b->tok_seg]);
    }
    compute_done(b);
    if (b->tpx) {
        int red = b->sp ? tp_comm(b, OP_TP_REDUCE_SCATTER, SUB_WHOLE, l, mb, chunk, part, b->HD[mb], a->full)
                        : tp_comm(b, OP_TP_ALLREDUCE, SUB_WHOLE, l, mb, chunk, part, part, a->x);
        emit_wait(b, red);
    }
    grads_done(b, l, mb, chunk, final);
}

/* Issues one transfer of this stage: a send of what its unit produced, or a
 * receive into a new buffer, which the consuming unit waits for. */
static void emit_msg(Bld *b, const Msg *g)
{
    int k = g->chunk * (int)b->p->m + g->mb, o;
    int64_t bytes = b->p->act.boundary, moved = bytes / b->p->act.boundary_slices;
    if (g->send) {
        o = op_new(b, g->bwd ? OP_SEND_BWD : OP_SEND_FWD, ST_PP_COMM, -1, g->mb, g->chunk);
        op_rd(b, o, g->bwd ? b->bsend_buf[k] : b->fsend_buf[k]);
        b->s->ops[o].bytes = moved;
        /* the compute stream waits for it (keeping the sent buffer) once its
         * consumer is done: a blocking send ends when its receiver is ready */
        b->swait[b->nswait++] = (SendWait){o, g->done};
    } else if (!g->bwd) {
        o = op_new(b, OP_RECV_FWD, ST_PP_COMM, -1, g->mb, g->chunk);
        op_wr(b, o, new_input(b, g->chunk, 0, g->mb));
        b->s->ops[o].bytes = moved;
        b->frecv_op[k] = o;
    } else {
        int id = buf_new(b, key_at(BR_RECV_BWD, NO_LAYER, g->mb, g->chunk), arena_printf(&g_arena, "pp.recv_bwd.mb%d", g->mb), CAT_COMM, SPACE_DEVICE, bytes, false);
        o = op_new(b, OP_RECV_BWD, ST_PP_COMM, -1, g->mb, g->chunk);
        op_wr(b, o, id);
        b->s->ops[o].bytes = moved;
        b->brecv_op[k] = o, b->brecv_buf[k] = id;
    }
}

/* The compute stream waits for received boundary r before using it; with
 * the boundary sent in tp slices, for the all-gather over tp that completes
 * it (on tp-comm, after the receive: the event pass orders the two). */
static void recv_done(Bld *b, int r, int chunk, int mb)
{
    if (b->p->act.boundary_slices == 1) {
        emit_wait(b, r);
        return;
    }
    int buf = b->s->ops[r].wr[0];
    emit_wait(b, tp_comm(b, OP_TP_ALLGATHER, SUB_BOUNDARY, -1, mb, chunk, buf, buf, b->p->act.boundary));
}

/* The compute stream waits for the sends whose consumers end by time t. */
static void wait_sends(Bld *b, double t)
{
    int k = 0;
    for (int i = 0; i < b->nswait; i++) {
        if (b->swait[i].t <= t) emit_wait(b, b->swait[i].op);
        else b->swait[k++] = b->swait[i];
    }
    b->nswait = k;
}

/* Issues the transfers ordered before time t. */
static void emit_msgs(Bld *b, double t)
{
    for (; b->msg_i < b->nmsgs && b->msgs[b->msg_i].t < t; b->msg_i++) emit_msg(b, &b->msgs[b->msg_i]);
}

/* The forward of one model chunk for one microbatch. */
static void forward_unit(Bld *b, int chunk, int mb)
{
    const Chunk *ch = &b->c->chunks[chunk];
    bool final = b->fwd_done[chunk] == b->p->m - 1;
    bool head_here = b->c->chunks[b->c->nchunks - 1].head;
    if (ch->embed) load_batch(b, mb, true, head_here);
    else if (ch->head && !b->c->chunks[0].embed) load_batch(b, mb, false, true);
    if (ch->embed) embed_fwd(b, chunk, mb);
    else recv_done(b, b->frecv_op[chunk * b->p->m + mb], chunk, mb);
    for (int i = 0; i < ch->nlayers; i++) layer_fwd(b, chunk, i, mb);
    if (ch->head) head(b, chunk, mb, final);
    else b->fsend_buf[chunk * b->p->m + mb] = b->HX[mb];
    b->fwd_done[chunk]++;
}

/* ---- backward ------------------------------------------------------------------------------- */

/* cpu checkpointing: the checkpoint back to the device before its recompute. */
static int ckpt_from_host(Bld *b, int chunk, int i, int mb)
{
    int host = -2 - b->X[lm(b, chunk, i, mb)];
    int L = b->c->chunks[chunk].first_layer + i;
    /* its trip to the host is over first: the wait for that copy, deferred
     * past the forward's next compute op, is due now when the backward comes
     * that soon (one microbatch in flight), else the device checkpoint of (L,
     * mb) would still be live when its copy back is written */
    for (int j = 0; j < b->npend; j++) {
        const Op *d = &b->s->ops[b->pend[j].op];
        if (d->kind != OP_CKPT_D2H || d->layer != L || d->mb != mb || d->chunk != chunk) continue;
        emit_wait(b, b->pend[j].op);
        for (b->npend--; j < b->npend; j++) b->pend[j] = b->pend[j + 1];
        break;
    }
    int dev = act_buf(b, b->p->act.ckpt < b->p->act.x ? BR_CKPT_SLICE : BR_CKPT, SUB_WHOLE, L, mb, "ckpt", b->p->act.ckpt);
    int o = op_new(b, OP_CKPT_H2D, ST_COPY, L, mb, chunk);
    b->s->ops[o].bytes = b->p->act.ckpt;
    op_rd(b, o, host);
    op_wr(b, o, dev);
    defer_wait(b, o, 0);
    b->X[lm(b, chunk, i, mb)] = dev;
    return dev;
}

/* Full recompute of the group ending at layer i: replays its forwards from
 * the checkpoint (gathered over tp first when partitioned), leaving each
 * layer's saved tensors (and inputs) in rc and each layer's input in bx. */
static void recompute_group(Bld *b, int chunk, int i, int mb, int *rc, int *bx)
{
    const ActBytes *a = &b->p->act;
    int g = i / b->every * b->every, L0 = b->c->chunks[chunk].first_layer;
    if (b->X[lm(b, chunk, g, mb)] <= -2) ckpt_from_host(b, chunk, g, mb);
    int x = b->X[lm(b, chunk, g, mb)];
    if (a->ckpt < a->x) {       /* partitioned: all-gather the tp slices */
        int full = act_buf(b, BR_CKPT_GATHERED, SUB_WHOLE, L0 + g, mb, "ckpt.gathered", a->x);
        emit_wait(b, tp_comm(b, OP_TP_ALLGATHER, SUB_WHOLE, L0 + g, mb, chunk, x, full, a->x));
        x = full;
    }
    bx[g] = x;
    for (int j = g; j <= i; j++) {
        if (j == g) rc[j] = act_buf(b, BR_RECOMPUTED, SUB_WHOLE, L0 + j, mb, "recomputed", a->saved[CKPT_NONE]);
        else bx[j] = rc[j];
        int out = -1;
        if (j < i) out = rc[j + 1] = act_buf(b, BR_RECOMPUTED_IN, SUB_WHOLE, L0 + j + 1, mb, "recomputed", a->x + a->saved[CKPT_NONE]);
        FwdIO io = {OP_RECOMPUTE, j == g ? x : rc[j], {rc[j], -1}, out, b->m->fl_recompute_full,
                    a->fwd_scratch[CKPT_NONE]};
        layer_forward_ops(b, L0 + j, mb, chunk, &io);
    }
}

/* Selective recompute: the attention core again, from the kept qkv. */
static int recompute_attention(Bld *b, int chunk, int i, int mb)
{
    int L = b->c->chunks[chunk].first_layer + i;
    int o = compute_op(b, OP_RECOMPUTE, L, mb, chunk, b->m->fl_recompute_sel);
    b->s->ops[o].sub = b->tpx ? SUB_ATTN : SUB_WHOLE;
    op_rd(b, o, b->SAVED[lm(b, chunk, i, mb)]);
    int id = act_buf(b, BR_ATTN, SUB_WHOLE, L, mb, "attn", b->p->act.attn);
    op_wr(b, o, id);
    compute_done(b);
    return id;
}

/* Where layer i's input gradient goes: the previous layer, the embedding,
 * or the send buffer to the previous stage. */
static int input_grad(Bld *b, int chunk, int i, int mb)
{
    const Chunk *ch = &b->c->chunks[chunk];
    int L = ch->first_layer + i;
    bool local = i > 0 || ch->embed;
    const char *name = local ? "act.L%d.mb%d.dx" : "pp.send_bwd.L%d.mb%d";
    return buf_new(b, key_at(local ? BR_DX : BR_SEND_BWD, L, mb, chunk), arena_printf(&g_arena, name, L, mb),
                   local ? CAT_ACTIVATIONS : CAT_COMM,
                   SPACE_DEVICE, b->p->act.x, false);
}

/* What a layer's backward reads. */
typedef struct BwdIO {
    int dy;                     /* the output gradient (its shard under SP)       */
    int state;                  /* saved (or recomputed) tensors                  */
    int x;                      /* the layer input, when held apart from state    */
    int attn;                   /* the selectively recomputed attention core      */
    int dx;                     /* the input gradient                              */
} BwdIO;

/* FLOPs per sequence of the weight GEMMs of a layer backward's part. */
static double fl_weight(const Bld *b, int sub) { return b->wshare[sub == SUB_MLP] * b->m->fl_layer_bwd; }

/* A backward compute part (or the whole backward); split (tp_comm_overlap):
 * its data op, the input gradient only, leaving in its scratch what the
 * weight op reads (*scr).  Under SP the part's norm op writes the norm's
 * weight gradients (sp_part_bwd) and the split data op only what
 * part_data_grads says (GELU's fused c_fc bias gradient). */
static int bwd_part(Bld *b, int sub, int L, int mb, int chunk, double fl, const BwdIO *io, int *scr)
{
    int o = part_op(b, OP_LAYER_BWD, sub, L, mb, chunk, b->wsplit ? fl - fl_weight(b, sub) : fl);
    if (b->wsplit) b->s->ops[o].grads = GR_DATA;
    op_rd(b, o, io->state);
    op_rd(b, o, io->x);
    op_rd(b, o, io->attn);
    *scr = op_scratch(b, o, b->p->act.bwd_scratch);
    if (!b->wsplit || part_data_grads(b->p, sub)) grads_write(b, o, L);
    return o;
}

/* The weight op of a split backward part (tp_comm_overlap), issued after the
 * part's tp collective so that it runs while the collective does: the
 * linears' dW += dY^T·X (and their bias sums) from the part's inputs, dY of
 * each linear, and what the data op left in its scratch (scr); rd: the part's
 * output gradient and inputs besides state (-1: none). */
static void bwd_weight(Bld *b, int data, int scr, const BwdIO *io, const int *rd, int nrd)
{
    const Op d = b->s->ops[data];
    int o = part_op(b, OP_LAYER_BWD, d.sub, d.layer, d.mb, d.chunk, fl_weight(b, d.sub));
    b->s->ops[o].grads = GR_WEIGHT;
    op_rd(b, o, io->state);
    op_rd(b, o, io->x);
    op_rd(b, o, io->attn);
    op_rd(b, o, scr);
    for (int i = 0; i < nrd; i++) op_rd(b, o, rd[i]);
    grads_write(b, o, d.layer);
    compute_done(b);
}

/* One part's backward under sequence parallelism.  Its output gradient dy
 * (this rank's tokens) is all-gathered over tp, then the norm output the
 * forward kept (its shard, in the saved or recomputed tensors) gathered
 * again; the data op turns the gathered gradient into the partial gradient
 * of the part's norm output (full sequence), which is reduce-scattered to
 * this rank's tokens; then the norm op (GR_NORM) there, on the part's input
 * shard x: out = dy + the norm's backward, and the norm weights' partial
 * gradients (tp_grads completes them).  Split (tp_comm_overlap), the data
 * op waits only for dy while the regather runs (Megatron's asynchronous
 * all-gather of the input), and the weight op, whose GEMMs read the
 * regathered norm output, waits for it while the reduce-scatter runs;
 * unsplit, the one op waits for both. */
static void sp_part_bwd(Bld *b, int sub, int L, int mb, int chunk, double fl, const BwdIO *io, int dy, int x, int out)
{
    int ln = io->state;     /* the saved (or recomputed) shard of the part's norm output */
    const ActBytes *a = &b->p->act;
    int scr;
    int gd = act_buf(b, BR_DY_GATHERED, sub, L, mb, "dy.gathered", a->full);
    int gx = act_buf(b, BR_REGATHERED, sub, L, mb, "regathered", a->full);
    int agd = tp_comm(b, OP_TP_ALLGATHER, sub, L, mb, chunk, dy, gd, a->full);
    int agx = tp_comm(b, OP_TP_ALLGATHER, sub, L, mb, chunk, ln, gx, a->full);
    emit_wait(b, b->wsplit ? agd : agx);
    int d = bwd_part(b, sub, L, mb, chunk, fl, io, &scr);
    int part = act_buf(b, BR_DPARTIAL, sub, L, mb, "dpartial", a->full);
    op_rd(b, d, gd);
    if (!b->wsplit) op_rd(b, d, gx);
    op_wr(b, d, part);
    compute_done(b);
    int dn = act_buf(b, BR_DNORM, sub, L, mb, "dnorm", a->x);
    int red = tp_comm(b, OP_TP_REDUCE_SCATTER, sub, L, mb, chunk, part, dn, a->full);
    if (b->wsplit) {
        emit_wait(b, agx);
        bwd_weight(b, d, scr, io, (int[]){gd, gx}, 2);
    }
    emit_wait(b, red);
    int n = part_op(b, OP_LAYER_BWD, sub, L, mb, chunk, 0);
    b->s->ops[n].grads = GR_NORM;
    op_rd(b, n, dn);
    op_rd(b, n, dy);
    op_rd(b, n, x);
    op_scratch(b, n, a->norm_scratch);
    op_wr(b, n, out);
    grads_write(b, n, L);
    compute_done(b);
}

/* A layer's backward, one op (tp = 1) or split like its forward: the MLP
 * part, an all-reduce over tp of its partial input gradient (f's backward),
 * then the attention part and another all-reduce into dx.  Under SP each
 * part gathers and reduce-scatters around its data op (sp_part_bwd).  As in
 * the forward, without SP the residual and the norms' input gradients are
 * folded into the partial sums (the norms' weight gradients then are partial
 * sums too: tp_grads completes them).  With tp_comm_overlap each part is a
 * data op, its collective, then the part's weight op, which runs while the
 * collective does; the compute stream waits for the collective only before
 * the next part, which reads its result. */
static void layer_backward_ops(Bld *b, int L, int mb, int chunk, const BwdIO *io)
{
    const ActBytes *a = &b->p->act;
    double fl = b->m->fl_layer_bwd, fm = fl * b->mlp_share;
    int scr;
    if (!b->tpx) {
        int o = bwd_part(b, SUB_WHOLE, L, mb, chunk, fl, io, &scr);
        op_rd(b, o, io->dy);
        op_wr(b, o, io->dx);
        compute_done(b);
        return;
    }
    int d1 = act_buf(b, BR_DRESID1, SUB_MLP, L, mb, "dresid1", a->x), red;
    if (b->sp) {
        sp_part_bwd(b, SUB_MLP, L, mb, chunk, fm, io, io->dy, io->state, d1);
        sp_part_bwd(b, SUB_ATTN, L, mb, chunk, fl - fm, io, d1, io->x >= 0 ? io->x : io->state, io->dx);
        return;
    }
    int M = bwd_part(b, SUB_MLP, L, mb, chunk, fm, io, &scr);
    op_rd(b, M, io->dy);
    op_wr(b, M, d1);
    compute_done(b);
    red = tp_comm(b, OP_TP_ALLREDUCE, SUB_MLP, L, mb, chunk, d1, d1, a->x);
    if (b->wsplit) bwd_weight(b, M, scr, io, &io->dy, 1);
    emit_wait(b, red);
    int A = bwd_part(b, SUB_ATTN, L, mb, chunk, fl - fm, io, &scr);
    op_rd(b, A, d1);
    op_wr(b, A, io->dx);
    compute_done(b);
    red = tp_comm(b, OP_TP_ALLREDUCE, SUB_ATTN, L, mb, chunk, io->dx, io->dx, a->x);
    if (b->wsplit) bwd_weight(b, A, scr, io, &d1, 1);
    emit_wait(b, red);
}

/* One layer's backward: gradient in, gradient out, weight gradients. */
static int layer_bwd(Bld *b, int chunk, int i, int mb, int dy, int rc, int bx, int attn, bool final)
{
    int L = b->c->chunks[chunk].first_layer + i, k = lm(b, chunk, i, mb);
    BwdIO io = {dy, b->SAVED[k], -1, attn, input_grad(b, chunk, i, mb)};
    if (b->pol == CKPT_FULL) {
        io.state = rc;
        io.x = bx != rc ? bx : -1;
    } else {
        io.x = b->X[k];
    }
    layer_backward_ops(b, L, mb, chunk, &io);
    grads_done(b, L, mb, chunk, final);
    return io.dx;
}

/* The embedding's backward: scatter-add into its gradient (the gradient
 * all-gathered over tp first under SP: each rank holds a vocabulary slice). */
static void embed_bwd(Bld *b, int chunk, int mb, int dx, bool final)
{
    const Partition *p = b->p;
    int in = dx;
    if (b->sp) {
        in = buf_new(b, key_at(BR_EMBED_DX_GATHERED, LAYER_PRE, mb, chunk), arena_printf(&g_arena, "act.embed.mb%d.dx.gathered", mb), CAT_ACTIVATIONS, SPACE_DEVICE,
                     p->act.full, false);
        emit_wait(b, tp_comm(b, OP_TP_ALLGATHER, SUB_WHOLE, LAYER_PRE, mb, chunk, dx, in, p->act.full));
    }
    int o = compute_op(b, OP_EMBED_BWD, LAYER_PRE, mb, chunk, 0);
    op_rd(b, o, in);
    op_rd(b, o, dx);
    op_rd(b, o, b->tok[mb]);
    grads_write(b, o, LAYER_PRE);
    compute_done(b);
    grads_done(b, LAYER_PRE, mb, chunk, final);
}

/* The gradient of the chunk's output: from the head, or received. */
static int output_grad(Bld *b, int chunk, int mb)
{
    if (b->c->chunks[chunk].head) return b->HD[mb];
    int k = chunk * (int)b->p->m + mb;
    recv_done(b, b->brecv_op[k], chunk, mb);
    return b->brecv_buf[k];
}

/* The backward of one model chunk for one microbatch. */
static void backward_unit(Bld *b, int chunk, int mb)
{
    const Chunk *ch = &b->c->chunks[chunk];
    bool final = b->bwd_done[chunk] == b->p->m - 1;
    int dy = output_grad(b, chunk, mb);
    int *rc = arena_alloc(&g_arena, sizeof(int) * (size_t)(ch->nlayers + 1));
    int *bx = arena_alloc(&g_arena, sizeof(int) * (size_t)(ch->nlayers + 1));
    for (int i = 0; i <= ch->nlayers; i++) rc[i] = bx[i] = -1;
    for (int i = ch->nlayers - 1; i >= 0; i--) {
        int attn = -1;
        bool group_end = i == ch->nlayers - 1 || (i + 1) % b->every == 0;
        if (b->pol == CKPT_FULL && group_end) recompute_group(b, chunk, i, mb, rc, bx);
        if (b->pol == CKPT_SELECTIVE) attn = recompute_attention(b, chunk, i, mb);
        dy = layer_bwd(b, chunk, i, mb, dy, rc[i], bx[i], attn, final);
    }
    if (ch->embed) embed_bwd(b, chunk, mb, dy, final);
    else b->bsend_buf[chunk * b->p->m + mb] = dy;
    b->bwd_done[chunk]++;
}

/* ---- end of step: whole-gradient reductions, optimizer, parameter gathers ----------------- */

/* Tied and persistent gradients: all-reduce the tied copy between the first
 * and last stage, then reduce every whole segment over dp. */
static void reduce_whole(Bld *b)
{
    const Partition *p = b->p;
    int whole = p->zero < 2 ? b->grads : b->grads_full;
    if (p->pp > 1 && b->c->tied_numel > 0) {
        int o = op_new(b, OP_TIED_REDUCE, ST_PP_COMM, -1, -1, -1);
        b->s->ops[o].bytes = b->c->tied_numel * p->gbytes;
        for (int i = 0; i < b->c->nsegs; i++)
            if (b->c->segs[i].tied) op_part(b, o, b->seg_bucket[i]);
        op_rd(b, o, whole);
        op_wr(b, o, whole);
        defer_wait(b, o, 0);
    }
    if (p->zero < 2) return;
    for (int k = 0; k < b->c->nbuckets; k++) {
        const Segment *sg = &b->c->segs[b->c->buckets[k].first_seg];
        if (!sg->tied && !sg->persistent) continue;
        int o = op_new(b, OP_GRAD_REDUCE, ST_DP_COMM, -1, -1, sg->chunk);
        b->s->ops[o].aux = k;
        b->s->ops[o].bytes = sg->padded * p->gbytes;
        op_rd(b, o, b->grads_full);
        op_wr(b, o, b->grads_shard);
        op_wr(b, o, b->hgrads);
        defer_wait(b, o, 0);
    }
}

/* ZeRO 0-1 with offload: the shard of the reduced gradients to the host. */
static void grads_to_host(Bld *b)
{
    if (b->p->zero >= 2 || b->S_host == 0) return;
    int o = op_new(b, OP_GRAD_D2H, ST_COPY, -1, -1, -1);
    b->s->ops[o].bytes = b->S_host * 4;
    op_rd(b, o, b->grads);
    op_wr(b, o, b->hgrads);
    defer_wait(b, o, 0);
}

/* The global gradient norm (clipping; fp16's overflow check): each rank's
 * share of the sum of squares (the elements it owns; tp-replicated tensors
 * counted on tp rank 0, the tied copy on one stage), then an all-reduce over
 * the whole world — under fp16 first of the overflow flag (max), then of the
 * sum, as Megatron does; an overflow also shows as a non-finite sum. */
static void grad_norm(Bld *b)
{
    const Spec *s = b->spec;
    bool fp16 = s->precision.dtype == DT_FP16, clip = s->train.grad_clip > 0;
    if (!clip && !fp16) return;
    bool dev = b->S_dev > 0;
    int o = op_new(b, OP_GRAD_SUMSQ, dev ? ST_COMPUTE : ST_HOST, -1, -1, -1);
    op_rd(b, o, b->grads);
    op_rd(b, o, b->grads_shard);
    op_rd(b, o, b->grads_full);
    op_rd(b, o, b->hgrads);
    op_wr(b, o, b->misc);
    if (dev) compute_done(b);
    if (b->p->world == 1) return;
    for (int k = fp16 ? 1 : 0; k >= 0; k--) {
        if (k == 0 && !clip) continue;
        int r = op_new(b, OP_GRAD_NORM, ST_DP_COMM, -1, -1, -1);
        b->s->ops[r].aux = k;
        b->s->ops[r].bytes = 4;
        op_rd(b, r, b->misc);
        op_wr(b, r, b->misc);
        if (dev) defer_wait(b, r, 0);
    }
}

/* The device's optimizer sub-groups: master, moments, then the 16-bit
 * parameters (through a fp32 copy of the gradients when they are 16-bit). */
static void opt_device(Bld *b)
{
    const Partition *p = b->p;
    int64_t sub = b->spec->zero.sub_group_size;
    int dst = p->zero < 3 ? b->params : b->params_shard;
    bool params_away = p->zero == 3 && b->spec->offload.params != OFF_NONE;
    bool stage32 = p->gbytes < 4 && b->spec->precision.dtype != DT_FP32;
    for (int64_t off = 0, g = 0; off < b->S_dev; off += sub, g++) {
        int64_t n = b->S_dev - off < sub ? b->S_dev - off : sub;
        int o = op_new(b, OP_OPT_STEP, ST_COMPUTE, -1, -1, -1);
        b->s->ops[o].aux = (int)g;
        b->s->ops[o].flops = 16.0 * (double)n;
        op_rd(b, o, b->grads);
        op_rd(b, o, b->grads_shard);
        op_rd(b, o, b->grads_full);
        op_rd(b, o, b->misc);
        for (int i = 0; i < 3; i++) op_rd(b, o, b->opt[i]), op_wr(b, o, b->opt[i]);
        if (stage32) op_wr(b, o, buf_new(b, key_idx(BR_OPT_GRADS32, (int)g, -1), "optimizer.grads_fp32", CAT_OPTIMIZER, SPACE_DEVICE, n * 4, false));
        int out = params_away ? buf_new(b, key_idx(BR_PARAMS_D2H_STAGING, (int)g, -1), "params.d2h_staging", CAT_COMM, SPACE_DEVICE, n * p->wbytes, false) : dst;
        op_wr(b, o, out);
        compute_done(b);
        if (params_away) {
            int d = op_new(b, OP_PARAM_D2H, ST_COPY, -1, -1, -1);
            b->s->ops[d].bytes = n * p->wbytes;
            op_rd(b, d, out);
            op_wr(b, d, b->params_shard);
            defer_wait(b, d, 0);
        }
    }
}

/* Reads optimizer sub-group g (n elements) from NVMe into its staging slot. */
static void opt_read(Bld *b, int g, int64_t n)
{
    int r = op_new(b, OP_OPT_READ, ST_COPY, -1, -1, g);
    b->s->ops[r].bytes = n * b->state_bytes;
    op_rd(b, r, b->nvme_opt);
    op_wr(b, r, b->hslot[g % b->nslots]);
}

/* The host's optimizer sub-groups, then the updated 16-bit parameters back to
 * the device.  With the states on NVMe the reads and writes are pipelined
 * around the host steps: the next sub-group is read into its own staging slot
 * while the current one steps, and each is written back after its step. */
static void opt_host(Bld *b)
{
    const Partition *p = b->p;
    int64_t sub = b->spec->zero.sub_group_size;
    bool params_host = p->zero == 3 && b->spec->offload.params != OFF_NONE;
    int dev = p->zero < 3 ? b->params : b->params_shard;
    int ngroups = (int)((b->S_host + sub - 1) / sub), ahead = b->nslots >= 2 ? 1 : 0;
    bool nvme = b->nvme_opt >= 0;
    for (int g = 0; nvme && g < ahead && g < ngroups; g++)
        opt_read(b, g, b->S_host - g * sub < sub ? b->S_host - g * sub : sub);
    for (int g = 0; g < ngroups; g++) {
        int64_t off = (int64_t)g * sub, n = b->S_host - off < sub ? b->S_host - off : sub;
        int slot = nvme ? b->hslot[g % b->nslots] : -1;
        if (nvme && g + ahead < ngroups) {
            int64_t off2 = (int64_t)(g + ahead) * sub;
            opt_read(b, g + ahead, b->S_host - off2 < sub ? b->S_host - off2 : sub);
        }
        int o = op_new(b, OP_OPT_STEP, ST_HOST, -1, -1, -1);
        b->s->ops[o].aux = g;
        b->s->ops[o].flops = 16.0 * (double)n;
        op_rd(b, o, b->hgrads);
        op_rd(b, o, b->misc);
        for (int i = 0; i < 3; i++) op_rd(b, o, b->hopt[i]), op_wr(b, o, b->hopt[i]);
        op_rd(b, o, slot);
        op_wr(b, o, slot);
        op_wr(b, o, params_host ? (b->hswap_params >= 0 ? b->hswap_params : b->params_shard) : b->hparams_stage);
        if (nvme || b->hswap_params >= 0) {
            int w = op_new(b, OP_OPT_WRITE, ST_COPY, -1, -1, g);
            b->s->ops[w].bytes = (nvme ? n * b->state_bytes : 0) + (b->hswap_params >= 0 ? n * p->wbytes : 0);
            op_rd(b, w, slot);
            op_rd(b, w, b->hswap_params);
            op_wr(b, w, b->nvme_opt);
            op_wr(b, w, b->hswap_params >= 0 ? b->params_shard : -1);
        }
        if (params_host) continue;
        int h = op_new(b, OP_PARAM_H2D, ST_COPY, -1, -1, g);
        b->s->ops[h].bytes = n * p->wbytes;
        op_rd(b, h, b->hparams_stage);
        op_wr(b, h, dev);
        defer_wait(b, h, 0);
    }
}

/* ZeRO 1-2: all-gather the updated shards in place, allgather_bucket at a
 * time; ZeRO 3: gather the persistent small parameters (with one dp rank
 * only when the shard is offloaded: the layers read them on the device).
 * Gathered ahead (overlap_param_gather), the next step starts with them. */
static void param_gathers(Bld *b)
{
    const Partition *p = b->p;
    bool away = p->zero == 3 && b->spec->offload.params != OFF_NONE;
    if (p->zero == 0 || (p->dp == 1 && !away) || b->gather_ahead) return;
    int64_t acc = 0;
    for (int i = 0; i < b->c->nsegs; i++) {
        const Segment *sg = &b->c->segs[i];
        if (p->zero == 3 && !sg->persistent) continue;
        acc += sg->padded;
        bool last = i == b->c->nsegs - 1 || p->zero == 3;
        if (acc < b->spec->zero.allgather_bucket && !last) continue;
        int o = op_new(b, OP_PARAM_GATHER, ST_DP_COMM, -1, -1, -1);
        b->s->ops[o].aux = i;
        b->s->ops[o].bytes = acc * p->wbytes;
        op_rd(b, o, p->zero == 3 ? b->params_shard : b->params);
        op_wr(b, o, p->zero == 3 ? b->persist : b->params);
        defer_wait(b, o, 0);
        acc = 0;
    }
}

/* overlap_param_gather (ZeRO 1-2, Megatron-Core's): the step begins with
 * one in-place all-gather per bucket of the shards the previous step's
 * optimizer updated, in the order the forward first uses them (the buckets
 * are numbered backward), on dp-comm; each op computing with the parameters
 * waits only for the gathers of its own buckets (the parts of params: the
 * event pass adds the waits).  The first step gathers the shards that
 * initialisation or the checkpoint wrote, which every rank already holds
 * whole, so it changes nothing; the step never ends with stale parameters
 * that something else reads, since a checkpoint holds only the shards. */
static void param_gathers_ahead(Bld *b)
{
    if (!b->gather_ahead) return;
    for (int k = b->c->nbuckets - 1; k >= 0; k--) {
        int o = op_new(b, OP_PARAM_GATHER, ST_DP_COMM, -1, -1, b->c->buckets[k].chunk);
        b->s->ops[o].aux = k;
        b->s->ops[o].bytes = b->c->buckets[k].padded * b->p->wbytes;
        op_part(b, o, k);
        op_rd(b, o, b->params);
        op_wr(b, o, b->params);
    }
}

/* ---- ZeRO-3 gathers: a second pass over the op list -------------------------------------- */

typedef struct Gat {
    Bld *b;
    Op *old;
    int nold;
    int *next;                  /* [nold·OP_MAX_UNITS]: next op using the same unit, or nold */
    int64_t *pre;               /* prefix sums of unit elements used */
    int *gbuf, *gwait;          /* per segment: gathered buffer, gather awaiting its wait */
    int64_t live;               /* elements gathered (or being gathered) now */
} Gat;

/* Elements of a unit when gathered. */
static int64_t unit_elems(const Gat *g, int u) { return g->b->c->segs[u].padded; }

/* Next uses of every unit, and the running count of elements used. */
static void gat_index(Gat *g)
{
    int n = g->nold, ns = g->b->c->nsegs;
    g->next = arena_alloc(&g_arena, sizeof(int) * (size_t)(OP_MAX_UNITS * n + OP_MAX_UNITS));
    g->pre = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(n + 1));
    int *seen = arena_alloc(&g_arena, sizeof(int) * (size_t)ns);
    for (int u = 0; u < ns; u++) seen[u] = n;
    for (int i = 0; i < n; i++) {
        g->pre[i + 1] = g->pre[i];
        for (int k = 0; k < g->old[i].nunit; k++) g->pre[i + 1] += unit_elems(g, g->old[i].unit[k]);
    }
    for (int i = n - 1; i >= 0; i--)
        for (int k = 0; k < g->old[i].nunit; k++) {
            int u = g->old[i].unit[k];
            g->next[OP_MAX_UNITS * i + k] = seen[u];
            seen[u] = i;
        }
}

/* Issues the all-gather of unit u (after fetching an offloaded shard). */
static void gat_issue(Gat *g, int u)
{
    Bld *b = g->b;
    const Partition *p = b->p;
    const Segment *sg = &b->c->segs[u];
    int src = b->params_shard;
    if (b->spec->offload.params != OFF_NONE) {
        int f = op_new(b, OP_PARAM_FETCH, ST_COPY, sg->layer, -1, sg->chunk);
        b->s->ops[f].aux = u;
        b->s->ops[f].bytes = sg->shard * p->wbytes;
        op_rd(b, f, b->params_shard);
        op_rd(b, f, b->hswap_params);
        src = buf_new(b, key_idx(BR_PARAMS_FETCH_STAGING, u, -1), "params.fetch_staging", CAT_COMM, SPACE_DEVICE, sg->shard * p->wbytes, false);
        op_wr(b, f, src);
    }
    int o = op_new(b, OP_GATHER, ST_DP_COMM, sg->layer, -1, sg->chunk);
    b->s->ops[o].aux = u;
    b->s->ops[o].bytes = sg->padded * p->wbytes;
    op_rd(b, o, src);
    const char *what = sg->layer == LAYER_PRE ? "embed" : sg->layer == b->m->l ? "head"
                     : arena_printf(&g_arena, "L%d", sg->layer);
    g->gbuf[u] = buf_new(b, key_idx(BR_GATHERED, u, -1), arena_printf(&g_arena, "params.gathered.%s", what), CAT_PARAMS, SPACE_DEVICE,
                         sg->padded * p->wbytes, false);
    op_wr(b, o, g->gbuf[u]);
    g->gwait[u] = o;
    g->live += unit_elems(g, u);
}

/* Prefetches the units of the ops after i, as DeepSpeed's fetch of each
 * module does (partitioned_param_coordinator.py, fetch_sub_module): in use
 * order, units not yet gathered, until this call has issued
 * min(prefetch_bucket, max_live_parameters - the gathered total) elements. */
static void gat_prefetch(Gat *g, int i)
{
    const Spec *s = g->b->spec;
    int64_t budget = s->zero.max_live_parameters - g->live, issued = 0;
    if (budget > s->zero.prefetch_bucket) budget = s->zero.prefetch_bucket;
    for (int j = i + 1; j < g->nold && j <= i + 64; j++)
        for (int k = 0; k < g->old[j].nunit; k++) {
            int u = g->old[j].unit[k];
            if (g->gbuf[u] >= 0) continue;
            if (issued >= budget) return;
            gat_issue(g, u);
            issued += unit_elems(g, u);
        }
}

/* Releases unit u after op i unless it is used again soon. */
static void gat_release(Gat *g, int i, int k)
{
    const Spec *s = g->b->spec;
    int u = g->old[i].unit[k], nx = g->next[OP_MAX_UNITS * i + k];
    if (nx < g->nold) {
        if (s->zero.gather_across_microbatches && g->b->p->pp > 1) return;
        if (g->pre[nx] - g->pre[i + 1] <= s->zero.max_reuse_distance) return;
    }
    g->gbuf[u] = -1;
    g->live -= unit_elems(g, u);
}

/* Re-emits op i of the old list with its units gathered around it. */
static void gat_op(Gat *g, int i, int *map)
{
    Bld *b = g->b;
    const Op *src = &g->old[i];
    int nu = src->nunit;
    bool inner = nu && sched_waits_per_module(b->p, src);
    for (int k = 0; k < nu; k++) {
        int u = src->unit[k];
        if (g->gbuf[u] < 0) gat_issue(g, u);
    }
    /* per module, as DeepSpeed's pre-forward hook: wait for it, then prefetch;
     * a layer's call makes its waits itself, each before its module (inner) */
    for (int k = 0; k < nu; k++) {
        int u = src->unit[k];
        if (g->gwait[u] >= 0) {
            emit_wait(b, g->gwait[u]);
            b->s->ops[b->s->nops - 1].inner = inner;
        }
        g->gwait[u] = -1;
        gat_prefetch(g, i);
    }
    ops_grow(b->s);
    int o = b->s->nops++;
    b->s->ops[o] = *src;        /* in its room: the reads below join its own */
    if (src->kind == OP_WAIT) b->s->ops[o].aux = map[src->aux];
    map[i] = o;
    for (int k = 0; k < nu; k++) op_rd(b, o, g->gbuf[src->unit[k]]);
    for (int k = 0; k < nu; k++) gat_release(g, i, k);
}

/* Inserts ZeRO-3's gathers (prefetched, reused, released) into the op list. */
static void zero3_gathers(Bld *b)
{
    Sched *s = b->s;
    int ns = b->c->nsegs;
    Op *old = s->ops;
    Gat g = {.b = b, .old = old, .nold = s->nops};
    g.gbuf = arena_alloc(&g_arena, sizeof(int) * (size_t)ns);
    g.gwait = arena_alloc(&g_arena, sizeof(int) * (size_t)ns);
    for (int u = 0; u < ns; u++) g.gbuf[u] = g.gwait[u] = -1;
    gat_index(&g);
    int *map = arena_alloc(&g_arena, sizeof(int) * (size_t)(g.nold + 1));
    s->ops = NULL, s->nops = s->capops = 0;
    for (int i = 0; i < g.nold; i++) gat_op(&g, i, map);
    free(old);
}

/* ---- events: every remaining cross-stream dependency as an OP_WAIT ----------------------- */

/* The last write and read of a buffer (or of one part of it) on each stream:
 * op indices in the new list, -1 for none. */
typedef struct Acc { int w[NSTREAMS], r[NSTREAMS]; } Acc;

/* A wait to insert: its position in the new list, its stream, the op it
 * waits for (new index) and that op's old index. */
typedef struct Ins { int at, stream, target, old; } Ins;

typedef struct Ev {
    Sched *s;
    const Op *old;
    int nold, nnew;
    int *map, *rmap;            /* old index -> new, new index of a real op -> old */
    Ins *ins;                   /* the waits to insert, in order */
    int nins, capins;
    int *first, *last;          /* per buffer: its first and last op in the old list (its lifetime) */
    int *ret_first, *ret;       /* CSR: the buffers whose lifetime ends at each old op */
    int (*clk)[NSTREAMS];       /* per new op: the clock of its stream after it */
    int capclk;
    int cur[NSTREAMS][NSTREAMS];        /* each stream's clock: the last op of every stream it has waited for */
    Acc *acc;                   /* per buffer at acc_at[b]: all accesses, whole ones, then one per part */
    int *acc_at;
    int (*lastuse)[NSTREAMS];   /* per buffer: its last use on each stream */
    int (*birth)[NSTREAMS];     /* per buffer: the uses of dead buffers its bytes may have held */
    unsigned char *seen;        /* per buffer: the streams that used it, as bits */
    int dead[NSPACES][NSTREAMS];
    int inner[NSTREAMS][OP_MAX_UNITS], ninner[NSTREAMS];  /* inner waits (new index) for the next op */
} Ev;

/* Sets n ints to -1. */
static void ev_clear(int *a, size_t n)
{
    for (size_t i = 0; i < n; i++) a[i] = -1;
}

/* Scratch that lives only while the pass runs (malloc: freed at once, so the
 * next class reuses the pages). */
static void *ev_alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) die("sched: out of memory (%zu bytes)", bytes);
    return p;
}

/* Lifetimes as mem.c computes them (every op touching a buffer, waits
 * included), and the per-buffer state. */
static void ev_init(Ev *e, Sched *s)
{
    int nb = s->nbufs, n = e->nold;
    e->first = ev_alloc(sizeof(int) * (size_t)(nb + 1));
    e->last = ev_alloc(sizeof(int) * (size_t)(nb + 1));
    ev_clear(e->first, (size_t)nb);
    ev_clear(e->last, (size_t)nb);
    for (int i = 0; i < n; i++) {
        const Op *o = &e->old[i];
        for (int j = 0; j < o->nrd + o->nwr; j++) {
            int k = j < o->nrd ? o->rd[j] : o->wr[j - o->nrd];
            if (e->first[k] < 0) e->first[k] = i;
            e->last[k] = i;
        }
    }
    e->ret_first = ev_alloc(sizeof(int) * (size_t)(n + 2));
    e->ret = ev_alloc(sizeof(int) * (size_t)(nb + 1));
    memset(e->ret_first, 0, sizeof(int) * (size_t)(n + 2));
    for (int k = 0; k < nb; k++)
        if (e->last[k] >= 0) e->ret_first[e->last[k] + 1]++;
    for (int i = 0; i < n; i++) e->ret_first[i + 1] += e->ret_first[i];
    int *fill = ev_alloc(sizeof(int) * (size_t)(n + 1));
    memcpy(fill, e->ret_first, sizeof(int) * (size_t)(n + 1));
    for (int k = 0; k < nb; k++)
        if (e->last[k] >= 0) e->ret[fill[e->last[k]]++] = k;
    free(fill);
    e->acc_at = ev_alloc(sizeof(int) * (size_t)(nb + 1));
    int na = 0;
    for (int k = 0; k < nb; k++) e->acc_at[k] = na, na += buf_parts(&s->bufs[k]) > 0 ? 2 + buf_parts(&s->bufs[k]) : 1;
    e->acc = ev_alloc(sizeof(Acc) * (size_t)(na + 1));
    ev_clear((int *)e->acc, (size_t)na * 2 * NSTREAMS);
    e->lastuse = ev_alloc(sizeof(int) * NSTREAMS * (size_t)(nb + 1));
    e->birth = ev_alloc(sizeof(int) * NSTREAMS * (size_t)(nb + 1));
    ev_clear((int *)e->lastuse, (size_t)nb * NSTREAMS);
    ev_clear((int *)e->birth, (size_t)nb * NSTREAMS);
    e->seen = ev_alloc((size_t)(nb + 1));
    memset(e->seen, 0, (size_t)(nb + 1));
    ev_clear(&e->cur[0][0], NSTREAMS * NSTREAMS);
    ev_clear(&e->dead[0][0], NSPACES * NSTREAMS);
}

/* Frees the pass's scratch. */
static void ev_free(Ev *e)
{
    free(e->first), free(e->last), free(e->ret_first), free(e->ret), free(e->acc_at), free(e->acc);
    free(e->lastuse), free(e->birth), free(e->seen), free(e->clk), free(e->rmap), free(e->map), free(e->ins);
}

/* Is buffer k one whose bytes the arena reuses (a transient in the device or host arena)? */
static bool ev_reused(const Sched *s, int k)
{
    return !s->bufs[k].persistent && s->bufs[k].space != SPACE_NVME;
}

/* The Acc entries an access of buffer k by op o conflicts with or updates:
 * [*lo, *hi) of e->acc.  Entry 0 holds every access; a buffer with parts also
 * has entry 1 (its whole-buffer accesses) and 2 + p (part p's). */
static void ev_range(const Ev *e, int k, const Op *o, int *lo, int *hi, bool *parted)
{
    int at = e->acc_at[k], a, z;
    *parted = buf_op_parts(&e->s->bufs[k], o, &a, &z);
    if (!*parted) {
        *lo = at, *hi = at + 1;
        return;
    }
    *lo = at + 2 + a, *hi = at + 3 + z;
}

/* Raises need[] to the accesses on other streams an access must follow:
 * earlier writes, and for a write earlier reads too. */
static void ev_conflicts(const Ev *e, int k, const Op *o, bool write, int *need)
{
    int lo, hi;
    bool parted;
    ev_range(e, k, o, &lo, &hi, &parted);
    for (int t = 0; t < NSTREAMS; t++) {
        int w = -1, r = -1;
        if (parted) {       /* a part conflicts with whole accesses and with itself */
            w = e->acc[e->acc_at[k] + 1].w[t], r = e->acc[e->acc_at[k] + 1].r[t];
            for (int a = lo; a < hi; a++) {
                if (e->acc[a].w[t] > w) w = e->acc[a].w[t];
                if (e->acc[a].r[t] > r) r = e->acc[a].r[t];
            }
        } else {
            w = e->acc[lo].w[t], r = e->acc[lo].r[t];
        }
        if (w > need[t]) need[t] = w;
        if (write && r > need[t]) need[t] = r;
    }
}

/* Records an access of buffer k by new op n on stream st. */
static void ev_record(Ev *e, int k, const Op *o, bool write, int st, int n)
{
    int lo, hi;
    bool parted;
    ev_range(e, k, o, &lo, &hi, &parted);
    int at = e->acc_at[k];
    if (parted) {
        for (int a = lo; a < hi; a++) *(write ? &e->acc[a].w[st] : &e->acc[a].r[st]) = n;
        *(write ? &e->acc[at].w[st] : &e->acc[at].r[st]) = n;
    } else {
        *(write ? &e->acc[at].w[st] : &e->acc[at].r[st]) = n;
        if (buf_parts(&e->s->bufs[k]) > 0) *(write ? &e->acc[at + 1].w[st] : &e->acc[at + 1].r[st]) = n;
    }
    e->lastuse[k][st] = n;
    e->seen[k] |= (unsigned char)(1u << st);
}

/* A first use of buffer k on stream st must follow every use on another
 * stream of a buffer that died before k was born (the arena may give k its
 * bytes). */
static void ev_fence(Ev *e, int k, int st, int *need)
{
    const Sched *s = e->s;
    if (!ev_reused(s, k)) return;
    if (!e->seen[k]) memcpy(e->birth[k], e->dead[s->bufs[k].space], sizeof(int) * NSTREAMS);
    if (e->seen[k] & (1u << st)) return;
    for (int t = 0; t < NSTREAMS; t++)
        if (e->birth[k][t] > need[t]) need[t] = e->birth[k][t];
}

/* Numbers the next op of the new list (on stream st): its clock is st's now. */
static int ev_append(Ev *e, int stream)
{
    int n = e->nnew++, *c = e->cur[stream];
    if (n >= e->capclk) {
        e->capclk = 2 * e->capclk + 64;
        e->clk = realloc(e->clk, sizeof(int) * NSTREAMS * (size_t)e->capclk);
        e->rmap = realloc(e->rmap, sizeof(int) * (size_t)e->capclk);
        if (!e->clk || !e->rmap) die("sched: out of memory");
    }
    c[stream] = n;
    memcpy(e->clk[n], c, sizeof(int) * NSTREAMS);
    return n;
}

/* Stream st waits for new op target (old op `old`): its clock takes in the
 * target's; the wait is recorded to be inserted. */
static void ev_wait(Ev *e, int st, int target, int old)
{
    int *c = e->cur[st];
    for (int u = 0; u < NSTREAMS; u++)
        if (e->clk[target][u] > c[u]) c[u] = e->clk[target][u];
    if (e->nins == e->capins) {
        e->capins = 2 * e->capins + 64;
        e->ins = realloc(e->ins, sizeof(Ins) * (size_t)e->capins);
        if (!e->ins) die("sched: out of memory");
    }
    e->ins[e->nins++] = (Ins){ev_append(e, st), st, target, old};
}

/* The uses on each stream of the buffers whose lifetime ended at old op i. */
static void ev_retire(Ev *e, int i)
{
    for (int j = e->ret_first[i]; j < e->ret_first[i + 1]; j++) {
        int k = e->ret[j];
        if (!ev_reused(e->s, k)) continue;
        int *d = e->dead[e->s->bufs[k].space];
        for (int t = 0; t < NSTREAMS; t++)
            if (e->lastuse[k][t] > d[t]) d[t] = e->lastuse[k][t];
    }
}

/* Numbers old op j in the new list after the waits it needs. */
static void ev_op(Ev *e, int j)
{
    const Op *o = &e->old[j];
    int st = o->stream;
    if (o->kind == OP_WAIT && o->inner) {  /* the next op's: it orders that op's reads of its unit only */
        if (o->aux < 0 || e->ninner[st] == OP_MAX_UNITS) die("sched: an inner wait without its gather");
        e->inner[st][e->ninner[st]++] = e->map[o->aux];
        e->map[j] = ev_append(e, st);
        return;
    }
    if (o->kind == OP_WAIT) {
        int target = o->aux >= 0 ? e->map[o->aux] : -1, *c = e->cur[st];
        for (int u = 0; target >= 0 && u < NSTREAMS; u++)
            if (e->clk[target][u] > c[u]) c[u] = e->clk[target][u];
        e->map[j] = ev_append(e, st);
        return;
    }
    int need[NSTREAMS];
    ev_clear(need, NSTREAMS);
    for (int k = 0; k < o->nrd; k++) {
        /* a unit an inner wait gathers: read from its module on, after that wait */
        bool covered = false;
        for (int q = 0; q < e->ninner[st]; q++)
            covered |= sched_gather_of(&e->old[e->rmap[e->inner[st][q]]], &e->s->bufs[o->rd[k]]);
        if (!covered) ev_conflicts(e, o->rd[k], o, false, need), ev_fence(e, o->rd[k], st, need);
    }
    for (int k = 0; k < o->nwr; k++) ev_conflicts(e, o->wr[k], o, true, need), ev_fence(e, o->wr[k], st, need);
    need[st] = -1;
    for (;;) {      /* the wait that settles the most needs first: one often implies the others */
        int best = -1, most = 0;
        for (int t = 0; t < NSTREAMS; t++) {
            if (need[t] <= e->cur[st][t]) continue;
            int covers = 0;
            for (int u = 0; u < NSTREAMS; u++) covers += need[u] > e->cur[st][u] && e->clk[need[t]][u] >= need[u];
            if (covers > most) best = t, most = covers;
        }
        if (best < 0) break;
        ev_wait(e, st, need[best], e->rmap[need[best]]);
    }
    for (int q = 0; q < e->ninner[st]; q++)    /* when the op ends, its inner waits are behind it */
        for (int u = 0; u < NSTREAMS; u++)
            if (e->clk[e->inner[st][q]][u] > e->cur[st][u]) e->cur[st][u] = e->clk[e->inner[st][q]][u];
    e->ninner[st] = 0;
    int n = ev_append(e, st);
    e->map[j] = n;
    e->rmap[n] = j;
    for (int k = 0; k < o->nrd; k++) ev_record(e, o->rd[k], o, false, st, n);
    for (int k = 0; k < o->nwr; k++) ev_record(e, o->wr[k], o, true, st, n);
}

/* Copies n ids to *ids and moves it past them; returns where they went. */
static int *ids_take(int **ids, const int *src, int n)
{
    int *at = *ids;
    if (n) memcpy(at, src, sizeof(int) * (size_t)n);
    *ids += n;
    return at;
}

/* Writes the final list into the arena: the old ops at their new positions,
 * each with its lists packed out of its room, and the waits between them. */
static void ev_expand(Ev *e)
{
    Sched *s = e->s;
    Op *ops = arena_alloc_raw(&g_arena, sizeof(Op) * (size_t)(e->nnew + 1));     /* each op written below */
    memset(&ops[e->nnew], 0, sizeof *ops);
    size_t nids = 0;            /* the lists, packed: each op's units, reads and writes in turn */
    for (int j = 0; j < e->nold; j++) nids += (size_t)(e->old[j].nunit + e->old[j].nrd + e->old[j].nwr);
    int *ids = arena_alloc_raw(&g_arena, sizeof(int) * (nids + 1));
    for (int j = 0, k = 0; j < e->nold; j++) {
        int to = e->map[j];
        for (; k < e->nins && e->ins[k].at < to; k++) {
            const Ins *w = &e->ins[k];
            const Op *t = &e->old[w->old];
            ops[w->at] = (Op){.kind = OP_WAIT, .stream = w->stream, .layer = t->layer, .mb = t->mb, .chunk = t->chunk,
                              .aux = w->target, .sub = t->sub, .rows = -1, .part_lo = -1, .part_hi = -1,
                              .unit = ids, .rd = ids, .wr = ids};
        }
        const Op *src = &e->old[j];
        ops[to] = *src;
        ops[to].unit = ids_take(&ids, src->unit, src->nunit);
        ops[to].rd = ids_take(&ids, src->rd, src->nrd);
        ops[to].wr = ids_take(&ids, src->wr, src->nwr);
        if (ops[to].kind == OP_WAIT && ops[to].aux >= 0) ops[to].aux = e->map[ops[to].aux];
    }
    s->ops = ops, s->nops = s->capops = e->nnew;     /* the builder's list: sched_class's to reuse */
    /* each buffer's lifetime in the final list (a wait touches no buffer):
     * mem.c's, found here once rather than by another scan of the ops */
    for (int k = 0; k < s->nbufs; k++) {
        Buffer *b = &s->bufs[k];
        b->first = e->first[k] >= 0 ? e->map[e->first[k]] : -1;
        b->last = e->last[k] >= 0 ? e->map[e->last[k]] : -1;
    }
}

/* Adds the OP_WAITs every cross-stream dependency of the list still lacks,
 * each just before the op that needs it. */
static void sched_events(Sched *s)
{
    Ev e = {.s = s, .old = s->ops, .nold = s->nops};
    ev_init(&e, s);
    e.capclk = e.nold + e.nold / 2 + 64;
    e.clk = ev_alloc(sizeof(int) * NSTREAMS * (size_t)e.capclk);
    e.rmap = ev_alloc(sizeof(int) * (size_t)e.capclk);
    e.map = ev_alloc(sizeof(int) * (size_t)(e.nold + 1));
    for (int j = 0; j < e.nold; j++) {
        if (j > 0) ev_retire(&e, j - 1);
        ev_op(&e, j);
    }
    ev_expand(&e);
    ev_free(&e);
}

/* ---- the step ------------------------------------------------------------------------------ */

/* The MLP's share of a layer's FLOPs (its two or three linears; the rest is
 * attention: qkv, the core, the output projection). */
static double mlp_share(const Model *m)
{
    double mlp = m->fl_mlp_down * (m->gated ? 3 : 2);   /* the down projection and the one or two in */
    double share = m->fl_layer_fwd > 0 ? mlp / m->fl_layer_fwd : 0.5;
    return share < 1 ? share : 1;
}

/* The weight GEMMs' share of a layer backward's FLOPs, attention ([0]: qkv
 * and the output projection) and MLP ([1], whose forward share is mlp):
 * dW = dY^T·X is one linear's forward FLOPs, the backward twice the forward
 * (model.c). */
static void weight_shares(const Model *m, double mlp, double w[2])
{
    double lin = m->fl_layer_fwd > 0 ? 2.0 * (double)m->s * (double)m->linear_layer / m->fl_layer_fwd : 0;
    double fwd = m->fl_layer_bwd > 0 ? m->fl_layer_fwd / m->fl_layer_bwd : 0;   /* one half */
    w[0] = (lin - mlp) * fwd;
    w[1] = mlp * fwd;
}

/* The builder's op list, malloc'd, and its ops' rooms, handed from class to
 * class: the next class builds into the room the last one grew (a 64-stage
 * plan's classes each grew theirs from 1024 ops, copying it at each doubling). */
typedef struct OpList { Op *ops; int cap; OpRooms rooms; } OpList;

/* Builds the ops and buffers of one training step of rank class c. */
static void sched_class(const Partition *p, const RankClass *c, const Timeline *tl, bool unnamed, OpList *list,
                        Sched *s)
{
    memset(s, 0, sizeof *s);
    s->part = p, s->cls = c;
    s->ops = list->ops, s->capops = list->cap;
    list->rooms.used = 0;
    Bld b = {.s = s, .rooms = &list->rooms, .p = p, .c = c, .spec = p->spec, .m = p->model, .tl = tl};
    b.pol = p->spec->checkpointing.activations;
    b.every = p->spec->checkpointing.every > 0 ? (int)p->spec->checkpointing.every : 1;
    b.overlap = p->spec->zero.overlap_comm;
    b.gather_ahead = p->spec->zero.overlap_param_gather && (p->zero == 1 || p->zero == 2) && p->dp > 1;
    b.tpx = p->tp > 1;
    b.sp = b.tpx && p->T_sp < p->T;
    b.mlp_share = mlp_share(p->model);
    b.wsplit = p->wsplit;
    b.tpc = (int)p->tpc;
    b.unnamed = unnamed;
    weight_shares(p->model, b.mlp_share, b.wshare);
    build_keys(&b);
    build_layers(&b);
    opt_split(&b);
    persistent_params(&b);
    persistent_grads(&b);
    persistent_opt(&b);
    persistent_workspace(&b);
    PipeUnit *order = arena_alloc(&g_arena, sizeof(PipeUnit) * (size_t)(2 * p->m * p->v));
    int n = sched_pipeline_order(p, c->stage, order);
    build_p2p(&b, order, n);
    param_gathers_ahead(&b);
    for (int i = 0; i < n; i++) {
        wait_sends(&b, b.unit_start[i]);
        emit_msgs(&b, b.unit_end[i]);
        if (order[i].bwd) backward_unit(&b, order[i].chunk, order[i].mb);
        else forward_unit(&b, order[i].chunk, order[i].mb);
    }
    emit_msgs(&b, 1e300);
    wait_sends(&b, 1e300);
    flush_waits(&b);
    for (int i = 0; i < b.nlate; i++) emit_wait(&b, b.late[i]);
    reduce_whole(&b);
    grads_to_host(&b);
    grad_norm(&b);
    opt_device(&b);
    opt_host(&b);
    param_gathers(&b);
    flush_waits(&b);
    if (p->zero == 3) zero3_gathers(&b);
    list->ops = s->ops, list->cap = s->capops;
    sched_events(s);
    bufs_to_arena(s);
}

/* Builds the ops and buffers of one training step of every rank class. */
void sched_build(const Partition *p, Schedule *out)
{
    out->nclasses = p->nclasses;
    out->classes = arena_alloc(&g_arena, sizeof(Sched) * (size_t)(p->nclasses + 1));
    Timeline tl = {0};
    if (p->pp > 1) unit_timeline(p, &tl);
    OpList list = {0};
    for (int i = 0; i < p->nclasses; i++) sched_class(p, &p->classes[i], &tl, out->unnamed, &list, &out->classes[i]);
    free(list.ops);
    for (int k = 0; k < list.rooms.nblocks; k++) free(list.rooms.blocks[k]);
    free(list.rooms.blocks);
}

/* ---- names ------------------------------------------------------------------------------- */

static const char *const kind_names[NOPKINDS] = {
    [OP_LOAD_BATCH] = "load_batch", [OP_RECV_FWD] = "recv_fwd", [OP_SEND_FWD] = "send_fwd",
    [OP_RECV_BWD] = "recv_bwd", [OP_SEND_BWD] = "send_bwd", [OP_EMBED_FWD] = "embed_fwd",
    [OP_LAYER_FWD] = "fwd", [OP_HEAD] = "head", [OP_RECOMPUTE] = "recompute", [OP_LAYER_BWD] = "bwd",
    [OP_EMBED_BWD] = "embed_bwd", [OP_CKPT_D2H] = "ckpt_d2h", [OP_CKPT_H2D] = "ckpt_h2d",
    [OP_PARAM_FETCH] = "param_fetch", [OP_GATHER] = "gather", [OP_GRAD_REDUCE] = "grad_reduce",
    [OP_GRAD_D2H] = "grad_d2h", [OP_TIED_REDUCE] = "tied_reduce", [OP_GRAD_NORM] = "grad_norm",
    [OP_OPT_READ] = "opt_read", [OP_OPT_STEP] = "opt_step", [OP_OPT_WRITE] = "opt_write",
    [OP_PARAM_H2D] = "param_h2d", [OP_PARAM_D2H] = "param_d2h", [OP_PARAM_GATHER] = "param_gather",
    [OP_WAIT] = "wait", [OP_TP_ALLREDUCE] = "tp_allreduce", [OP_TP_ALLGATHER] = "tp_allgather",
    [OP_TP_REDUCE_SCATTER] = "tp_reduce_scatter", [OP_GRAD_SUMSQ] = "grad_sumsq",
};

/* The op kind's name ("fwd", "grad_reduce"). */
const char *sched_op_kind_name(int kind)
{
    return kind >= 0 && kind < NOPKINDS && kind_names[kind] ? kind_names[kind] : "?";
}

/* The stream's name. */
const char *sched_stream_name(int stream)
{
    static const char *const names[NSTREAMS] = {"compute", "tp-comm", "dp-comm", "pp-comm", "copy", "host"};
    return stream >= 0 && stream < NSTREAMS ? names[stream] : "?";
}

/* Kinds whose layer -1 means the embedding (for the others it means none). */
static bool embed_op(int kind)
{
    return kind == OP_GATHER || kind == OP_PARAM_FETCH || kind == OP_TP_ALLREDUCE || kind == OP_TP_ALLGATHER ||
           kind == OP_TP_REDUCE_SCATTER;
}

bool sched_waits_per_module(const Partition *p, const Op *o)
{
    return p->zero == 3 && p->tp == 1 && o->stream == ST_COMPUTE && o->sub == SUB_WHOLE && o->grads == GR_ALL &&
           (o->kind == OP_LAYER_FWD || o->kind == OP_LAYER_BWD || o->kind == OP_RECOMPUTE);
}

int sched_wait_unit(const Sched *s, int w, int *op)
{
    const Op *o = &s->ops[w];
    *op = -1;
    if (o->kind != OP_WAIT || !o->inner || o->aux < 0 || o->aux >= w || s->ops[o->aux].kind != OP_GATHER) return -1;
    int j = w + 1;
    while (j < s->nops && (s->ops[j].stream != o->stream || s->ops[j].kind == OP_WAIT)) j++;
    if (j == s->nops) return -1;
    *op = j;
    for (int k = 0; k < s->ops[j].nunit; k++)
        if (s->ops[j].unit[k] == s->ops[o->aux].aux) return k;
    return -1;
}

/* A short label of an op: "bwd L12 mb3", "tp_allreduce L3 mb0 attn", "wait(grad_reduce bucket2)". */
const char *sched_op_label(const Sched *s, int i)
{
    const Op *o = &s->ops[i];
    if (o->kind == OP_WAIT && o->aux >= 0 && o->aux < i) {
        const char *inner = sched_op_label(s, o->aux);
        return arena_printf(&g_arena, "wait(%s)", inner);
    }
    static const char *const subs[] = {"", " attn", " mlp", " grads", " boundary"};
    char layer[32] = "", mb[32] = "", aux[32] = "";
    int l = (int)s->part->model->l;
    bool named = o->kind == OP_HEAD || o->kind == OP_EMBED_FWD || o->kind == OP_EMBED_BWD;
    if (named) layer[0] = 0;
    else if (o->layer == LAYER_PRE && embed_op(o->kind) && o->sub != SUB_BOUNDARY) snprintf(layer, sizeof layer, " embed");
    else if (o->layer == l) snprintf(layer, sizeof layer, " head");
    else if (o->layer >= 0) snprintf(layer, sizeof layer, " L%d", o->layer);
    if (o->mb >= 0) snprintf(mb, sizeof mb, " mb%d", o->mb);
    if ((o->kind == OP_GRAD_REDUCE && o->aux >= 0) || (o->kind == OP_PARAM_GATHER && o->part_lo >= 0))
        snprintf(aux, sizeof aux, " bucket%d", o->aux);
    if (o->kind == OP_OPT_STEP && o->aux >= 0) snprintf(aux, sizeof aux, " group%d", o->aux);
    if (o->kind == OP_GRAD_NORM && o->aux == 1) snprintf(aux, sizeof aux, " overflow");
    if ((o->kind == OP_RECV_FWD || o->kind == OP_SEND_FWD || o->kind == OP_RECV_BWD || o->kind == OP_SEND_BWD) &&
        s->part->v > 1 && o->chunk >= 0)
        snprintf(aux, sizeof aux, " chunk%d", o->chunk);
    const char *sub = o->sub > 0 && o->sub < 5 ? subs[o->sub] : "";
    static const char *const grads_names[] = {[GR_ALL] = "", [GR_DATA] = " data", [GR_WEIGHT] = " wgrad",
                                              [GR_NORM] = " norm", [GR_HEAD] = " head", [GR_ROWS] = " rows",
                                              [GR_COLS] = " cols", [GR_NO_OUTPUT] = " noout"};
    const char *grads = o->grads >= 0 && o->grads <= GR_NO_OUTPUT ? grads_names[o->grads] : "";
    if (o->rows >= 0 && o->kind != OP_WAIT)    /* tp_comm_overlap full: a token-row chunk (of the column GEMMs: cols) */
        snprintf(aux + strlen(aux), sizeof aux - strlen(aux), " %s%d", o->grads == GR_COLS ? "cols" : "rows", o->rows);
    return arena_printf(&g_arena, "%s%s%s%s%s%s", sched_op_kind_name(o->kind), layer, mb, aux, sub,
                        o->rows >= 0 ? "" : grads);
}
