/* sched.c — the ordered ops of one training step of one rank class, with
 * every buffer each op reads and writes.  The memory plan takes its buffers'
 * lifetimes from this list (mem.c), so what is live when is decided here:
 *
 *  - the pipeline order of forward and backward units (gpipe, 1f1b,
 *    interleaved with Megatron's warm-up / steady / cool-down);
 *  - per layer: forward, recompute (full: replay the layer from its
 *    checkpointed input; selective: replay the attention core), backward;
 *  - the head runs its backward right after the loss (the fused cross-entropy
 *    overwrites the logits with their gradient), so logits never outlive the
 *    microbatch that made them;
 *  - ZeRO: bucket reductions as buckets complete, ZeRO-3 gathers with
 *    prefetch / reuse / release (a second pass), the optimizer per sub-group,
 *    offload copies, parameter all-gathers.
 *
 * One ordered list for now: every op names its stream, and an async op's
 * completion is an explicit OP_WAIT on the compute stream, so issue 4's
 * scheduler can split the list into streams with events.
 */
#include "plan.h"

#include <string.h>

enum { GPU_CUBLASLT_WORKSPACE = 32 << 20 };     /* bytes, Hopper and Ampere */
enum { MISC_BYTES = 256 };                      /* loss, grad norm, loss scale, flags */
enum { MAX_PENDING = 256 };

typedef struct Pending { int op, left; } Pending;

/* The builder's state for one rank class. */
typedef struct Bld {
    Sched *s;
    const Partition *p;
    const RankClass *c;
    const Spec *spec;
    const Model *m;
    int pol, every, nl;         /* checkpoint policy, group size, layers on this rank */
    bool overlap;
    /* persistent buffers (-1: none) */
    int params, params_shard, persist, grads, grads_shard, grads_full;
    int opt[3], hopt[3], hgrads, hparams_stage, nvme_opt, hswap_opt, nvme_params, hswap_params;
    int misc, cublas, cudnn;
    int64_t S, S_host, S_dev;   /* optimizer elements: this rank's, offloaded, on device */
    /* per class-local layer × microbatch */
    int *X, *SAVED;
    int *tok, *tgt, *HD, *HX;   /* per microbatch */
    int *chunk_li;              /* class-local index of each chunk's first layer */
    int *fwd_done, *bwd_done;   /* per chunk */
    int *seg_bucket, *bucket_inst, *bucket_layer;
    int *key_first, *key_segs;  /* CSR: segments holding grads of grad-layer key */
    int tok_seg;                /* the segment of the token embedding, or -1 */
    Pending pend[MAX_PENDING];
    int npend;
} Bld;

/* ---- ops and buffers ---------------------------------------------------------- */

/* A new buffer; -1 (none) when it would hold no bytes. */
static int buf_new(Bld *b, const char *name, int cat, int space, int64_t bytes, bool persistent)
{
    if (bytes <= 0) return -1;
    Sched *s = b->s;
    if (s->nbufs == s->capbufs) {
        int cap = s->capbufs ? 2 * s->capbufs : 256;
        Buffer *nb = arena_alloc(&g_arena, sizeof(Buffer) * (size_t)cap);
        if (s->nbufs) memcpy(nb, s->bufs, sizeof(Buffer) * (size_t)s->nbufs);
        s->bufs = nb, s->capbufs = cap;
    }
    s->bufs[s->nbufs] = (Buffer){name, cat, space, bytes, persistent, -1, -1, 0};
    return s->nbufs++;
}

/* Room for one more op. */
static void ops_grow(Sched *s)
{
    if (s->nops < s->capops) return;
    int cap = s->capops ? 2 * s->capops : 1024;
    Op *no = arena_alloc(&g_arena, sizeof(Op) * (size_t)cap);
    if (s->nops) memcpy(no, s->ops, sizeof(Op) * (size_t)s->nops);
    s->ops = no, s->capops = cap;
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
    o->unit[0] = o->unit[1] = -1;
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

/* A transient workspace living only for op. */
static void op_scratch(Bld *b, int op, int64_t bytes)
{
    op_wr(b, op, buf_new(b, "scratch", CAT_WORKSPACE, SPACE_DEVICE, bytes, false));
}

/* The compute stream waits for async op target; the wait keeps the target's
 * buffers alive up to here. */
static void emit_wait(Bld *b, int target)
{
    int w = op_new(b, OP_WAIT, ST_COMPUTE, -1, -1, -1);
    Op *t = &b->s->ops[target];
    b->s->ops[w].aux = target;
    b->s->ops[w].layer = t->layer, b->s->ops[w].mb = t->mb, b->s->ops[w].chunk = t->chunk;
    Op copy = *t;
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

/* Segments holding gradients of each grad layer (CSR), and buckets' lowest layers. */
static void build_keys(Bld *b)
{
    const RankClass *c = b->c;
    int nk = (int)b->m->l + 2;
    b->key_first = arena_alloc(&g_arena, sizeof(int) * (size_t)(nk + 1));
    b->key_segs = arena_alloc(&g_arena, sizeof(int) * (size_t)(c->ntensors + 1));
    int *cnt = arena_alloc(&g_arena, sizeof(int) * (size_t)(nk + 1));
    int *last = arena_alloc(&g_arena, sizeof(int) * (size_t)nk);
    b->tok_seg = -1;
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < nk; k++) last[k] = -1, cnt[k] = 0;
        for (int i = 0; i < c->ntensors; i++) {
            const ClassTensor *ct = &c->tensors[i];
            int L = ct->copy ? (int)b->m->l : b->m->t[ct->tensor].layer, k = key_of(L);
            if (b->m->t[ct->tensor].role == R_TOK_EMBED && !ct->copy) b->tok_seg = ct->seg;
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
    for (int k = 0; k < c->nbuckets; k++) {
        const Bucket *bk = &c->buckets[k];
        b->bucket_inst[k] = -1;
        b->bucket_layer[k] = 1 << 30;
        for (int i = bk->first_seg; i < bk->first_seg + bk->nseg; i++) {
            b->seg_bucket[i] = k;
            if (c->segs[i].layer < b->bucket_layer[k]) b->bucket_layer[k] = c->segs[i].layer;
        }
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
    b->X = arena_alloc(&g_arena, sizeof(int) * n);
    b->SAVED = arena_alloc(&g_arena, sizeof(int) * n);
    size_t mm = (size_t)b->p->m;
    b->tok = arena_alloc(&g_arena, sizeof(int) * mm);
    b->tgt = arena_alloc(&g_arena, sizeof(int) * mm);
    b->HD = arena_alloc(&g_arena, sizeof(int) * mm);
    b->HX = arena_alloc(&g_arena, sizeof(int) * mm);
    for (size_t i = 0; i < n; i++) b->X[i] = b->SAVED[i] = -1;
    for (size_t i = 0; i < mm; i++) b->tok[i] = b->tgt[i] = b->HD[i] = b->HX[i] = -1;
    b->fwd_done = arena_alloc(&g_arena, sizeof(int) * (size_t)c->nchunks);
    b->bwd_done = arena_alloc(&g_arena, sizeof(int) * (size_t)c->nchunks);
}

/* Index into the per layer × microbatch tables. */
static int lm(const Bld *b, int chunk, int i, int mb)
{
    return (b->chunk_li[chunk] + i) * (int)b->p->m + mb;
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
        b->params = buf_new(b, "params", CAT_PARAMS, SPACE_DEVICE, b->c->padded * p->wbytes, true);
        return;
    }
    int64_t shard = b->c->shard * p->wbytes;
    int off = s->offload.params;
    int space = off == OFF_CPU ? SPACE_HOST : off == OFF_NVME ? SPACE_NVME : SPACE_DEVICE;
    b->params_shard = buf_new(b, "params.shard", CAT_PARAMS, space, shard, true);
    if (off == OFF_NVME)
        b->hswap_params = buf_new(b, "params.nvme_staging", CAT_PARAMS, SPACE_HOST,
                                  s->offload.params_buffer_count * s->offload.params_buffer_size * p->wbytes, true);
    b->persist = buf_new(b, "params.persistent", CAT_PARAMS, SPACE_DEVICE, b->c->persistent_numel * p->wbytes, true);
}

/* Gradients: full (ZeRO 0-1) or the shard plus the whole tied/persistent
 * segments (ZeRO 2-3); fp32 gradients on the host when the optimizer is. */
static void persistent_grads(Bld *b)
{
    const Partition *p = b->p;
    b->grads = b->grads_shard = b->grads_full = b->hgrads = -1;
    if (p->zero < 2) {
        b->grads = buf_new(b, "grads", CAT_GRADS, SPACE_DEVICE, b->c->padded * p->gbytes, true);
    } else {
        int64_t whole = b->c->persistent_numel + b->c->tied_padded;
        b->grads_shard = buf_new(b, "grads.shard", CAT_GRADS, SPACE_DEVICE, b->S_dev * p->gbytes, true);
        b->grads_full = buf_new(b, "grads.whole", CAT_GRADS, SPACE_DEVICE, whole * p->gbytes, true);
    }
    b->hgrads = buf_new(b, "grads.fp32", CAT_GRADS, SPACE_HOST, b->S_host * 4, true);
}

/* Optimizer states on the device, on the host, or on NVMe with host staging. */
static void persistent_opt(Bld *b)
{
    const Spec *s = b->spec;
    int64_t per[3];
    opt_bytes(s, &per[0], &per[1], &per[2]);
    const char *names[3] = {"optimizer.master", "optimizer.exp_avg", "optimizer.exp_avg_sq"};
    if (s->train.optimizer == OPT_SGD) names[1] = "optimizer.momentum";
    bool nvme = s->offload.optimizer == OFF_NVME;
    b->nvme_opt = b->hswap_opt = -1;
    for (int i = 0; i < 3; i++) {
        b->opt[i] = buf_new(b, names[i], CAT_OPTIMIZER, SPACE_DEVICE, b->S_dev * per[i], true);
        b->hopt[i] = nvme ? -1 : buf_new(b, names[i], CAT_OPTIMIZER, SPACE_HOST, b->S_host * per[i], true);
    }
    int64_t state = per[0] + per[1] + per[2];
    if (nvme) {
        int64_t sub = s->zero.sub_group_size < b->S_host ? s->zero.sub_group_size : b->S_host;
        b->nvme_opt = buf_new(b, "optimizer.nvme", CAT_OPTIMIZER, SPACE_NVME, b->S_host * state, true);
        b->hswap_opt = buf_new(b, "optimizer.nvme_staging", CAT_OPTIMIZER, SPACE_HOST,
                               s->offload.optimizer_buffer_count * sub * state, true);
    }
    int64_t sub = s->zero.sub_group_size < b->S_host ? s->zero.sub_group_size : b->S_host;
    b->hparams_stage = s->offload.params == OFF_NONE || b->p->zero < 3
                           ? buf_new(b, "params.h2d_staging", CAT_PARAMS, SPACE_HOST, sub * b->p->wbytes, true)
                           : -1;
}

/* Workspaces that live for the whole run. */
static void persistent_workspace(Bld *b)
{
    bool gpu = b->spec->cluster.gpu != GPU_CPU;
    const Partition *p = b->p;
    b->cublas = gpu ? buf_new(b, "cublaslt.workspace", CAT_WORKSPACE, SPACE_DEVICE, GPU_CUBLASLT_WORKSPACE, true) : -1;
    /* fused attention backward accumulates dQ in fp32: (b, a/t, s, d) */
    b->cudnn = gpu ? buf_new(b, "attention.workspace", CAT_WORKSPACE, SPACE_DEVICE,
                             p->T * (b->m->h / p->tp) * 4, true) : -1;
    b->misc = buf_new(b, "step.scalars", CAT_WORKSPACE, SPACE_DEVICE, MISC_BYTES, true);
}

/* ---- gradients -------------------------------------------------------------------- */

/* The buffer receiving segment sg's gradients for the current microbatch. */
static int grad_dest(Bld *b, int sg)
{
    const Segment *seg = &b->c->segs[sg];
    if (b->p->zero < 2) return b->grads;
    if (seg->tied || seg->persistent) return b->grads_full;
    int k = b->seg_bucket[sg];
    if (b->bucket_inst[k] < 0)
        b->bucket_inst[k] = buf_new(b, arena_printf(&g_arena, "grads.bucket%d", k), CAT_COMM, SPACE_DEVICE,
                                    b->c->buckets[k].padded * b->p->gbytes, false);
    return b->bucket_inst[k];
}

/* Reduces bucket k (its buffer or, ZeRO 0-1, its part of the full grads). */
static void reduce_bucket(Bld *b, int k, int mb)
{
    const Partition *p = b->p;
    int src = p->zero < 2 ? b->grads : b->bucket_inst[k];
    int o = op_new(b, OP_GRAD_REDUCE, ST_DP_COMM, -1, mb, b->c->buckets[k].chunk);
    b->s->ops[o].aux = k;
    b->s->ops[o].bytes = b->c->buckets[k].padded * p->gbytes;
    op_rd(b, o, src);
    op_wr(b, o, p->zero < 2 ? src : b->grads_shard);
    defer_wait(b, o, b->overlap ? 1 : 0);
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

/* Op `o` produced the gradients of grad layer L for microbatch mb: write
 * them into their buffers, and reduce the buckets it completes (ZeRO 2-3
 * every microbatch, ZeRO 0-1 after the last). */
static void grads_of(Bld *b, int o, int L, int mb, bool final)
{
    int k = key_of(L), touched[64], nt = 0;
    for (int i = b->key_first[k]; i < b->key_first[k + 1]; i++) {
        int sg = b->key_segs[i];
        op_wr(b, o, grad_dest(b, sg));
        const Segment *seg = &b->c->segs[sg];
        bool whole = seg->tied || seg->persistent;
        int bk = b->seg_bucket[sg];
        if (!(whole && b->p->zero >= 2) && b->bucket_layer[bk] == L && nt < 64) touched[nt++] = bk;
    }
    for (int i = 0; i < nt; i++)
        if (b->p->zero >= 2 || final) reduce_bucket(b, touched[i], mb);
}

/* ---- ZeRO-3 units --------------------------------------------------------------------- */

/* Marks op o as computing with the fetch units of grad layer L (ZeRO 3). */
static void units_of(Bld *b, int o, int L)
{
    if (b->p->zero < 3) return;
    Op *op = &b->s->ops[o];
    int k = key_of(L);
    for (int i = b->key_first[k]; i < b->key_first[k + 1]; i++) {
        int sg = b->key_segs[i];
        if (b->c->segs[sg].persistent) continue;
        if (op->unit[0] < 0) op->unit[0] = sg;
        else if (op->unit[1] < 0 && op->unit[0] != sg) op->unit[1] = sg;
    }
}

/* The parameters an op computes with: the whole copy, or (ZeRO 3) the
 * persistent ones (the gathered units are added by the gather pass). */
static void reads_params(Bld *b, int o)
{
    op_rd(b, o, b->params);
    op_rd(b, o, b->persist);
}

/* ---- forward ----------------------------------------------------------------------------- */

/* A microbatch's tokens (and targets) to the device. */
static void load_batch(Bld *b, int mb, bool tokens, bool targets)
{
    const Partition *p = b->p;
    int o = op_new(b, OP_LOAD_BATCH, ST_COPY, -1, mb, -1);
    if (tokens) b->tok[mb] = buf_new(b, arena_printf(&g_arena, "batch.tokens.mb%d", mb), CAT_ACTIVATIONS,
                                     SPACE_DEVICE, p->T * 4, false);
    if (targets) b->tgt[mb] = buf_new(b, arena_printf(&g_arena, "batch.targets.mb%d", mb), CAT_ACTIVATIONS,
                                      SPACE_DEVICE, p->T * 4, false);
    op_wr(b, o, tokens ? b->tok[mb] : -1);
    op_wr(b, o, targets ? b->tgt[mb] : -1);
    b->s->ops[o].bytes = p->T * 4 * ((int)tokens + (int)targets);
    defer_wait(b, o, 0);
}

/* The buffer holding layer i's input (chunk, microbatch): kept for backward,
 * or under full recompute the checkpoint (group starts) or a transient. */
static int new_input(Bld *b, int chunk, int i, int mb)
{
    const ActBytes *a = &b->p->act;
    int L = b->c->chunks[chunk].first_layer + i;
    bool ckpt = b->pol == CKPT_FULL && i % b->every == 0;
    const char *what = b->pol != CKPT_FULL ? "x" : ckpt ? "ckpt" : "x.transient";
    int id = buf_new(b, arena_printf(&g_arena, "act.L%d.mb%d.%s", L, mb, what), CAT_ACTIVATIONS, SPACE_DEVICE,
                     ckpt ? a->ckpt : a->x, false);
    b->X[lm(b, chunk, i, mb)] = id;
    return id;
}

/* The embedding: tokens to the first layer's input. */
static void embed_fwd(Bld *b, int chunk, int mb)
{
    const Partition *p = b->p;
    int o = compute_op(b, OP_EMBED_FWD, LAYER_PRE, mb, chunk, 0);
    op_rd(b, o, b->tok[mb]);
    reads_params(b, o);
    units_of(b, o, LAYER_PRE);
    op_wr(b, o, new_input(b, chunk, 0, mb));
    op_scratch(b, o, p->tp > 1 ? p->act.full : 0);     /* vocab-parallel partial sums */
    compute_done(b);
}

/* Receives the chunk's input from the previous stage into the first layer's input. */
static void recv_fwd(Bld *b, int chunk, int mb)
{
    int o = op_new(b, OP_RECV_FWD, ST_PP_COMM, -1, mb, chunk);
    b->s->ops[o].bytes = b->p->act.boundary;
    op_wr(b, o, new_input(b, chunk, 0, mb));
    defer_wait(b, o, 0);
}

/* cpu checkpointing: the checkpoint goes to the host after its last forward use. */
static void ckpt_to_host(Bld *b, int chunk, int i, int mb)
{
    int dev = b->X[lm(b, chunk, i, mb)];
    int L = b->c->chunks[chunk].first_layer + i;
    int host = buf_new(b, arena_printf(&g_arena, "act.L%d.mb%d.ckpt.host", L, mb), CAT_ACTIVATIONS, SPACE_HOST,
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
    int id = buf_new(b, arena_printf(&g_arena, name, mb), ch->head ? CAT_ACTIVATIONS : CAT_COMM, SPACE_DEVICE,
                     b->p->act.boundary, false);
    b->HX[mb] = id;
    return id;
}

/* One layer's forward: reads its input, keeps what backward needs. */
static void layer_fwd(Bld *b, int chunk, int i, int mb)
{
    const ActBytes *a = &b->p->act;
    int L = b->c->chunks[chunk].first_layer + i;
    int o = compute_op(b, OP_LAYER_FWD, L, mb, chunk, b->m->fl_layer_fwd);
    op_rd(b, o, b->X[lm(b, chunk, i, mb)]);
    reads_params(b, o);
    units_of(b, o, L);
    int saved = buf_new(b, arena_printf(&g_arena, "act.L%d.mb%d.saved", L, mb), CAT_ACTIVATIONS, SPACE_DEVICE,
                        a->saved[b->pol], false);
    b->SAVED[lm(b, chunk, i, mb)] = saved;
    op_wr(b, o, saved);
    op_wr(b, o, layer_output(b, chunk, i, mb));
    bool gather_ckpt = b->pol == CKPT_FULL && a->ckpt < a->x && i % b->every == 0;
    op_scratch(b, o, a->fwd_scratch[b->pol] + (gather_ckpt ? a->x : 0));
    compute_done(b);
    if (b->pol == CKPT_FULL && b->spec->checkpointing.cpu && i % b->every == 0) ckpt_to_host(b, chunk, i, mb);
}

/* The head: final norm, logits, fused cross-entropy, and at once its
 * backward, leaving the gradient of the last layer's output. */
static void head(Bld *b, int chunk, int mb, bool final)
{
    const Partition *p = b->p;
    const ActBytes *a = &p->act;
    int o = compute_op(b, OP_HEAD, (int)b->m->l, mb, chunk, b->m->fl_head_fwd + b->m->fl_head_bwd);
    op_rd(b, o, b->HX[mb]);
    op_rd(b, o, b->tgt[mb]);
    reads_params(b, o);
    units_of(b, o, (int)b->m->l);
    if (b->m->tied && p->pp == 1 && p->zero == 3 && b->tok_seg >= 0 && !b->c->segs[b->tok_seg].persistent) {
        Op *op = &b->s->ops[o];
        op->unit[op->unit[0] < 0 ? 0 : 1] = b->tok_seg;
    }
    int64_t logits = p->T * (b->m->Vpad / p->tp) * p->wbytes;     /* (T, Vpad/t) */
    op_wr(b, o, buf_new(b, arena_printf(&g_arena, "logits.mb%d", mb), CAT_LOGITS, SPACE_DEVICE, logits, false));
    int64_t stats = p->T_sp * (b->m->layernorm ? 2 : 1) * 4, ce = 4 * p->T * 4;
    bool sp = p->T_sp < p->T;
    op_scratch(b, o, stats + 2 * a->x + (sp ? a->full : 0) + ce + a->full);
    b->HD[mb] = buf_new(b, arena_printf(&g_arena, "act.dy.mb%d", mb), CAT_ACTIVATIONS, SPACE_DEVICE, a->x, false);
    op_wr(b, o, b->HD[mb]);
    op_wr(b, o, b->misc);
    grads_of(b, o, (int)b->m->l, mb, final);
    if (b->m->tied && p->pp == 1 && b->tok_seg >= 0) op_wr(b, o, grad_dest(b, b->tok_seg));
    compute_done(b);
}

/* Sends the chunk's output to the next stage. */
static void send_fwd(Bld *b, int chunk, int mb)
{
    int o = op_new(b, OP_SEND_FWD, ST_PP_COMM, -1, mb, chunk);
    b->s->ops[o].bytes = b->p->act.boundary;
    op_rd(b, o, b->HX[mb]);
    defer_wait(b, o, 1);
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
    else recv_fwd(b, chunk, mb);
    for (int i = 0; i < ch->nlayers; i++) layer_fwd(b, chunk, i, mb);
    if (ch->head) head(b, chunk, mb, final);
    else send_fwd(b, chunk, mb);
    b->fwd_done[chunk]++;
}

/* ---- backward ------------------------------------------------------------------------------- */

/* cpu checkpointing: the checkpoint back to the device before its recompute. */
static int ckpt_from_host(Bld *b, int chunk, int i, int mb)
{
    int host = -2 - b->X[lm(b, chunk, i, mb)];
    int L = b->c->chunks[chunk].first_layer + i;
    int dev = buf_new(b, arena_printf(&g_arena, "act.L%d.mb%d.ckpt", L, mb), CAT_ACTIVATIONS, SPACE_DEVICE,
                      b->p->act.ckpt, false);
    int o = op_new(b, OP_CKPT_H2D, ST_COPY, L, mb, chunk);
    b->s->ops[o].bytes = b->p->act.ckpt;
    op_rd(b, o, host);
    op_wr(b, o, dev);
    defer_wait(b, o, 0);
    b->X[lm(b, chunk, i, mb)] = dev;
    return dev;
}

/* Full recompute of the group ending at layer i: replays its forwards from
 * the checkpoint, leaving each layer's saved tensors (and inputs) in RC. */
static void recompute_group(Bld *b, int chunk, int i, int mb, int *rc)
{
    const ActBytes *a = &b->p->act;
    int g = i / b->every * b->every, L0 = b->c->chunks[chunk].first_layer;
    if (b->X[lm(b, chunk, g, mb)] <= -2) ckpt_from_host(b, chunk, g, mb);
    for (int j = g; j <= i; j++) {
        int o = compute_op(b, OP_RECOMPUTE, L0 + j, mb, chunk, b->m->fl_recompute_full);
        op_rd(b, o, j == g ? b->X[lm(b, chunk, g, mb)] : rc[j]);
        reads_params(b, o);
        units_of(b, o, L0 + j);
        if (j == g)
            rc[j] = buf_new(b, arena_printf(&g_arena, "act.L%d.mb%d.recomputed", L0 + j, mb), CAT_ACTIVATIONS,
                            SPACE_DEVICE, a->saved[CKPT_NONE], false);
        op_wr(b, o, rc[j]);
        if (j < i) {
            rc[j + 1] = buf_new(b, arena_printf(&g_arena, "act.L%d.mb%d.recomputed", L0 + j + 1, mb),
                                CAT_ACTIVATIONS, SPACE_DEVICE, a->x + a->saved[CKPT_NONE], false);
            op_wr(b, o, rc[j + 1]);
        }
        op_scratch(b, o, a->fwd_scratch[CKPT_NONE] + (j == g && a->ckpt < a->x ? a->x : 0));
        compute_done(b);
    }
}

/* Selective recompute: the attention core again, from the kept qkv. */
static int recompute_attention(Bld *b, int chunk, int i, int mb)
{
    int L = b->c->chunks[chunk].first_layer + i;
    int o = compute_op(b, OP_RECOMPUTE, L, mb, chunk, b->m->fl_recompute_sel);
    op_rd(b, o, b->SAVED[lm(b, chunk, i, mb)]);
    int id = buf_new(b, arena_printf(&g_arena, "act.L%d.mb%d.attn", L, mb), CAT_ACTIVATIONS, SPACE_DEVICE,
                     b->p->act.attn, false);
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
    const char *name = i > 0 || ch->embed ? "act.L%d.mb%d.dx" : "pp.send_bwd.L%d.mb%d";
    return buf_new(b, arena_printf(&g_arena, name, L, mb), i > 0 || ch->embed ? CAT_ACTIVATIONS : CAT_COMM,
                   SPACE_DEVICE, b->p->act.x, false);
}

/* One layer's backward: gradient in, gradient out, weight gradients. */
static int layer_bwd(Bld *b, int chunk, int i, int mb, int dy, int rc, int attn, bool final)
{
    const ActBytes *a = &b->p->act;
    int L = b->c->chunks[chunk].first_layer + i;
    int o = compute_op(b, OP_LAYER_BWD, L, mb, chunk, b->m->fl_layer_bwd);
    op_rd(b, o, dy);
    if (b->pol != CKPT_FULL || i % b->every == 0) op_rd(b, o, b->X[lm(b, chunk, i, mb)]);
    op_rd(b, o, b->SAVED[lm(b, chunk, i, mb)]);
    op_rd(b, o, rc);
    op_rd(b, o, attn);
    reads_params(b, o);
    units_of(b, o, L);
    int dx = input_grad(b, chunk, i, mb);
    op_wr(b, o, dx);
    op_scratch(b, o, a->bwd_scratch);
    grads_of(b, o, L, mb, final);
    compute_done(b);
    return dx;
}

/* The embedding's backward: scatter-add into its gradient. */
static void embed_bwd(Bld *b, int chunk, int mb, int dx, bool final)
{
    const Partition *p = b->p;
    int o = compute_op(b, OP_EMBED_BWD, LAYER_PRE, mb, chunk, 0);
    op_rd(b, o, dx);
    op_rd(b, o, b->tok[mb]);
    op_scratch(b, o, p->T_sp < p->T ? p->act.full : 0);    /* the gathered gradient under SP */
    grads_of(b, o, LAYER_PRE, mb, final);
    compute_done(b);
}

/* The gradient of the chunk's output: from the head, or received. */
static int output_grad(Bld *b, int chunk, int mb)
{
    if (b->c->chunks[chunk].head) return b->HD[mb];
    int id = buf_new(b, arena_printf(&g_arena, "pp.recv_bwd.mb%d", mb), CAT_COMM, SPACE_DEVICE,
                     b->p->act.boundary, false);
    int o = op_new(b, OP_RECV_BWD, ST_PP_COMM, -1, mb, chunk);
    b->s->ops[o].bytes = b->p->act.boundary;
    op_wr(b, o, id);
    defer_wait(b, o, 0);
    return id;
}

/* The backward of one model chunk for one microbatch. */
static void backward_unit(Bld *b, int chunk, int mb)
{
    const Chunk *ch = &b->c->chunks[chunk];
    bool final = b->bwd_done[chunk] == b->p->m - 1;
    int dy = output_grad(b, chunk, mb);
    int *rc = arena_alloc(&g_arena, sizeof(int) * (size_t)(ch->nlayers + 1));
    for (int i = ch->nlayers - 1; i >= 0; i--) {
        int attn = -1;
        rc[i] = -1;
        bool group_end = i == ch->nlayers - 1 || (i + 1) % b->every == 0;
        if (b->pol == CKPT_FULL && group_end) recompute_group(b, chunk, i, mb, rc);
        if (b->pol == CKPT_SELECTIVE) attn = recompute_attention(b, chunk, i, mb);
        dy = layer_bwd(b, chunk, i, mb, dy, rc[i], attn, final);
    }
    if (ch->embed) {
        embed_bwd(b, chunk, mb, dy, final);
    } else {
        int o = op_new(b, OP_SEND_BWD, ST_PP_COMM, -1, mb, chunk);
        b->s->ops[o].bytes = b->p->act.boundary;
        op_rd(b, o, dy);
        defer_wait(b, o, 1);
    }
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

/* The global gradient norm (clipping; fp16 overflow check). */
static void grad_norm(Bld *b)
{
    const Spec *s = b->spec;
    if (s->train.grad_clip <= 0 && s->precision.dtype != DT_FP16) return;
    int o = op_new(b, OP_GRAD_NORM, b->S_dev > 0 ? ST_COMPUTE : ST_HOST, -1, -1, -1);
    op_rd(b, o, b->grads);
    op_rd(b, o, b->grads_shard);
    op_rd(b, o, b->grads_full);
    op_rd(b, o, b->hgrads);
    op_wr(b, o, b->misc);
    if (b->S_dev > 0) compute_done(b);
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
        for (int i = 0; i < 3; i++) op_rd(b, o, b->opt[i]), op_wr(b, o, b->opt[i]);
        if (stage32) op_wr(b, o, buf_new(b, "optimizer.grads_fp32", CAT_OPTIMIZER, SPACE_DEVICE, n * 4, false));
        int out = params_away ? buf_new(b, "params.d2h_staging", CAT_COMM, SPACE_DEVICE, n * p->wbytes, false) : dst;
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

/* The host's optimizer sub-groups (NVMe reads and writes around them), then
 * the updated 16-bit parameters back to the device. */
static void opt_host(Bld *b)
{
    const Partition *p = b->p;
    int64_t sub = b->spec->zero.sub_group_size;
    bool params_host = p->zero == 3 && b->spec->offload.params != OFF_NONE;
    int dev = p->zero < 3 ? b->params : b->params_shard;
    for (int64_t off = 0, g = 0; off < b->S_host; off += sub, g++) {
        int64_t n = b->S_host - off < sub ? b->S_host - off : sub;
        if (b->nvme_opt >= 0) {
            int r = op_new(b, OP_OPT_READ, ST_COPY, -1, -1, (int)g);
            op_rd(b, r, b->nvme_opt);
            op_wr(b, r, b->hswap_opt);
        }
        int o = op_new(b, OP_OPT_STEP, ST_HOST, -1, -1, -1);
        b->s->ops[o].aux = (int)g;
        b->s->ops[o].flops = 16.0 * (double)n;
        op_rd(b, o, b->hgrads);
        for (int i = 0; i < 3; i++) op_rd(b, o, b->hopt[i]), op_wr(b, o, b->hopt[i]);
        op_rd(b, o, b->hswap_opt);
        op_wr(b, o, b->hswap_opt);
        op_wr(b, o, params_host ? (b->hswap_params >= 0 ? b->hswap_params : b->params_shard) : b->hparams_stage);
        if (b->nvme_opt >= 0 || b->hswap_params >= 0) {
            int w = op_new(b, OP_OPT_WRITE, ST_COPY, -1, -1, (int)g);
            op_rd(b, w, b->hswap_opt);
            op_rd(b, w, b->hswap_params);
            op_wr(b, w, b->nvme_opt);
            op_wr(b, w, b->hswap_params >= 0 ? b->params_shard : -1);
        }
        if (params_host) continue;
        int h = op_new(b, OP_PARAM_H2D, ST_COPY, -1, -1, (int)g);
        b->s->ops[h].bytes = n * p->wbytes;
        op_rd(b, h, b->hparams_stage);
        op_wr(b, h, dev);
        defer_wait(b, h, 0);
    }
}

/* ZeRO 1-2: all-gather the updated shards in place, allgather_bucket at a
 * time; ZeRO 3: gather the persistent small parameters. */
static void param_gathers(Bld *b)
{
    const Partition *p = b->p;
    if (p->zero == 0 || p->dp == 1) return;
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

/* ---- ZeRO-3 gathers: a second pass over the op list -------------------------------------- */

typedef struct Gat {
    Bld *b;
    Op *old;
    int nold;
    int *next;                  /* [nold·2]: next op using the same unit, or nold */
    int64_t *pre;               /* prefix sums of unit elements used */
    int *gbuf, *gwait;          /* per segment: gathered buffer, gather awaiting its wait */
    bool *prefetched;
    int64_t live, inflight;
} Gat;

/* Elements of a unit when gathered. */
static int64_t unit_elems(const Gat *g, int u) { return g->b->c->segs[u].padded; }

/* Next uses of every unit, and the running count of elements used. */
static void gat_index(Gat *g)
{
    int n = g->nold, ns = g->b->c->nsegs;
    g->next = arena_alloc(&g_arena, sizeof(int) * (size_t)(2 * n + 2));
    g->pre = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(n + 1));
    int *seen = arena_alloc(&g_arena, sizeof(int) * (size_t)ns);
    for (int u = 0; u < ns; u++) seen[u] = n;
    for (int i = 0; i < n; i++) {
        g->pre[i + 1] = g->pre[i];
        for (int k = 0; k < 2; k++)
            if (g->old[i].unit[k] >= 0) g->pre[i + 1] += unit_elems(g, g->old[i].unit[k]);
    }
    for (int i = n - 1; i >= 0; i--)
        for (int k = 0; k < 2; k++) {
            int u = g->old[i].unit[k];
            g->next[2 * i + k] = u >= 0 ? seen[u] : n;
            if (u >= 0) seen[u] = i;
        }
}

/* Issues the all-gather of unit u (after fetching an offloaded shard). */
static void gat_issue(Gat *g, int u, bool prefetch)
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
        src = buf_new(b, "params.fetch_staging", CAT_COMM, SPACE_DEVICE, sg->shard * p->wbytes, false);
        op_wr(b, f, src);
    }
    int o = op_new(b, OP_GATHER, ST_DP_COMM, sg->layer, -1, sg->chunk);
    b->s->ops[o].aux = u;
    b->s->ops[o].bytes = sg->padded * p->wbytes;
    op_rd(b, o, src);
    const char *what = sg->layer == LAYER_PRE ? "embed" : sg->layer == b->m->l ? "head"
                     : arena_printf(&g_arena, "L%d", sg->layer);
    g->gbuf[u] = buf_new(b, arena_printf(&g_arena, "params.gathered.%s", what), CAT_PARAMS, SPACE_DEVICE,
                         sg->padded * p->wbytes, false);
    op_wr(b, o, g->gbuf[u]);
    g->gwait[u] = o;
    g->prefetched[u] = prefetch;
    g->live += unit_elems(g, u);
    if (prefetch) g->inflight += unit_elems(g, u);
}

/* Prefetches the units of the ops after i, prefetch_bucket elements ahead and
 * never past max_live_parameters (DeepSpeed's rule). */
static void gat_prefetch(Gat *g, int i)
{
    const Spec *s = g->b->spec;
    for (int j = i + 1; j < g->nold && j <= i + 64; j++)
        for (int k = 0; k < 2; k++) {
            int u = g->old[j].unit[k];
            if (u < 0 || g->gbuf[u] >= 0) continue;
            if (g->inflight >= s->zero.prefetch_bucket) return;
            if (g->live + unit_elems(g, u) > s->zero.max_live_parameters) return;
            gat_issue(g, u, true);
        }
}

/* Releases unit u after op i unless it is used again soon. */
static void gat_release(Gat *g, int i, int k)
{
    const Spec *s = g->b->spec;
    int u = g->old[i].unit[k], nx = g->next[2 * i + k];
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
    bool uses = src->unit[0] >= 0;
    for (int k = 0; uses && k < 2; k++) {
        int u = src->unit[k];
        if (u < 0) continue;
        if (g->gbuf[u] < 0) gat_issue(g, u, false);
    }
    for (int k = 0; uses && k < 2; k++) {
        int u = src->unit[k];
        if (u < 0 || g->gwait[u] < 0) continue;
        emit_wait(b, g->gwait[u]);
        if (g->prefetched[u]) g->inflight -= unit_elems(g, u);
        g->prefetched[u] = false;
        g->gwait[u] = -1;
    }
    if (uses) gat_prefetch(g, i);
    ops_grow(b->s);
    int o = b->s->nops++;
    b->s->ops[o] = *src;
    if (src->kind == OP_WAIT) b->s->ops[o].aux = map[src->aux];
    map[i] = o;
    for (int k = 0; uses && k < 2; k++)
        if (src->unit[k] >= 0) op_rd(b, o, g->gbuf[src->unit[k]]);
    for (int k = 0; uses && k < 2; k++)
        if (src->unit[k] >= 0) gat_release(g, i, k);
}

/* Inserts ZeRO-3's gathers (prefetched, reused, released) into the op list. */
static void zero3_gathers(Bld *b)
{
    Sched *s = b->s;
    int ns = b->c->nsegs;
    Gat g = {.b = b, .old = s->ops, .nold = s->nops};
    g.gbuf = arena_alloc(&g_arena, sizeof(int) * (size_t)ns);
    g.gwait = arena_alloc(&g_arena, sizeof(int) * (size_t)ns);
    g.prefetched = arena_alloc(&g_arena, sizeof(bool) * (size_t)ns);
    for (int u = 0; u < ns; u++) g.gbuf[u] = g.gwait[u] = -1;
    gat_index(&g);
    int *map = arena_alloc(&g_arena, sizeof(int) * (size_t)(g.nold + 1));
    s->ops = NULL, s->nops = s->capops = 0;
    for (int i = 0; i < g.nold; i++) gat_op(&g, i, map);
}

/* ---- the step ------------------------------------------------------------------------------ */

/* Builds the ops and buffers of one training step of rank class c. */
void sched_build(const Partition *p, const RankClass *c, Sched *s)
{
    memset(s, 0, sizeof *s);
    s->part = p, s->cls = c;
    Bld b = {.s = s, .p = p, .c = c, .spec = p->spec, .m = p->model};
    b.pol = p->spec->checkpointing.activations;
    b.every = p->spec->checkpointing.every > 0 ? (int)p->spec->checkpointing.every : 1;
    b.overlap = p->spec->zero.overlap_comm;
    build_keys(&b);
    build_layers(&b);
    opt_split(&b);
    persistent_params(&b);
    persistent_grads(&b);
    persistent_opt(&b);
    persistent_workspace(&b);
    PipeUnit *order = arena_alloc(&g_arena, sizeof(PipeUnit) * (size_t)(2 * p->m * p->v));
    int n = sched_pipeline_order(p, c->stage, order);
    for (int i = 0; i < n; i++) {
        if (order[i].bwd) backward_unit(&b, order[i].chunk, order[i].mb);
        else forward_unit(&b, order[i].chunk, order[i].mb);
    }
    flush_waits(&b);
    reduce_whole(&b);
    grads_to_host(&b);
    grad_norm(&b);
    opt_device(&b);
    opt_host(&b);
    param_gathers(&b);
    flush_waits(&b);
    if (p->zero == 3) zero3_gathers(&b);
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
    [OP_WAIT] = "wait",
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

/* A short label of an op: "bwd L12 mb3", "wait(grad_reduce b2)". */
const char *sched_op_label(const Sched *s, int i)
{
    const Op *o = &s->ops[i];
    if (o->kind == OP_WAIT && o->aux >= 0) {
        const char *inner = sched_op_label(s, o->aux);
        return arena_printf(&g_arena, "wait(%s)", inner);
    }
    char layer[32] = "", mb[32] = "", aux[32] = "";
    int l = (int)s->part->model->l;
    bool named = o->kind == OP_HEAD || o->kind == OP_EMBED_FWD || o->kind == OP_EMBED_BWD;
    if (named) layer[0] = 0;
    else if (o->layer == LAYER_PRE) snprintf(layer, sizeof layer, " embed");
    else if (o->layer == l) snprintf(layer, sizeof layer, " head");
    else if (o->layer >= 0) snprintf(layer, sizeof layer, " L%d", o->layer);
    if (o->mb >= 0) snprintf(mb, sizeof mb, " mb%d", o->mb);
    if (o->kind == OP_GRAD_REDUCE && o->aux >= 0) snprintf(aux, sizeof aux, " bucket%d", o->aux);
    if (o->kind == OP_OPT_STEP && o->aux >= 0) snprintf(aux, sizeof aux, " group%d", o->aux);
    return arena_printf(&g_arena, "%s%s%s%s", sched_op_kind_name(o->kind), layer, mb, aux);
}
