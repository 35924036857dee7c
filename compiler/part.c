/* part.c — the partition plan: how ranks are numbered, which layers each
 * pipeline stage holds, how tensor parallelism slices every tensor, how ZeRO
 * cuts each stage's parameters into flat segments padded to a multiple of dp
 * (buckets, fetch units) and which range each dp rank owns, and how many
 * bytes one layer's activations take on one rank.
 *
 * Everything is computed per rank class (one per pipeline stage): ranks that
 * differ only in their tp or dp index hold the same shapes at the same
 * offsets, so the cost grows with layers and stages, never with the number of
 * GPUs.
 */
#include "plan.h"

#include <string.h>

/* ---- checks --------------------------------------------------------------- */

/* Reports one planning error (when asked) and returns false. */
static bool fail(bool report, const Spec *s, const char *key, const char *hint, const char *msg)
{
    if (!report) return false;
    diag_error(sema_key_loc(s, key), "%s", msg);
    if (hint) diag_hint("%s", hint);
    return false;
}

/* Virtual stages per pipeline rank (1 unless interleaved). */
static int64_t spec_v(const Spec *s)
{
    return s->parallel.schedule == SCHED_INTERLEAVED && s->parallel.virtual_stages > 0
               ? s->parallel.virtual_stages : 1;
}

/* Tensor-parallel divisibility: heads, kv heads, MLP width, sequence. */
static bool check_tp(const Spec *s, bool report)
{
    bool ok = true;
    int64_t tp = s->parallel.tp, kv = s->model.kv_heads > 0 ? s->model.kv_heads : s->model.heads;
    int64_t ffn = s->model.ffn_hidden > 0 ? s->model.ffn_hidden : 4 * s->model.hidden;
    if (s->model.hidden % s->model.heads)
        ok = fail(report, s, "model.hidden", "choose hidden = heads · head_dim",
                  arena_printf(&g_arena, "hidden %lld is not divisible by heads %lld",
                               (long long)s->model.hidden, (long long)s->model.heads));
    if (s->model.heads % tp || (kv >= tp ? kv % tp : tp % kv))
        ok = fail(report, s, "parallel.tp", "tp must divide the number of heads, and tp and kv_heads one another "
                  "(kv_heads / tp whole kv heads a rank, or each kv head replicated on tp / kv_heads ranks)",
                  arena_printf(&g_arena, "tp %lld does not divide heads %lld / kv heads %lld",
                               (long long)tp, (long long)s->model.heads, (long long)kv));
    if (ffn % tp)
        ok = fail(report, s, "parallel.tp", "tp must divide model.ffn_hidden",
                  arena_printf(&g_arena, "tp %lld does not divide ffn_hidden %lld",
                               (long long)tp, (long long)ffn));
    if (s->parallel.sequence_parallel && tp > 1 && s->model.seq_len % tp)
        ok = fail(report, s, "parallel.sequence_parallel", "sequence parallelism splits seq_len over tp",
                  arena_printf(&g_arena, "seq_len %lld is not divisible by tp %lld",
                               (long long)s->model.seq_len, (long long)tp));
    return ok;
}

/* The stage list, or enough layers for pp·v chunks. */
static bool check_stages(const Spec *s, bool report)
{
    int64_t pp = s->parallel.pp, v = spec_v(s), l = s->model.layers;
    const IntList *sl = &s->parallel.stage_layers;
    if (sl->n > 0) {
        int64_t sum = 0;
        if (sl->n != pp)
            return fail(report, s, "parallel.stage_layers", "give one entry per pipeline stage",
                        arena_printf(&g_arena, "stage_layers has %d entries for pp %lld", sl->n, (long long)pp));
        for (int i = 0; i < sl->n; i++) {
            if (sl->v[i] < v || sl->v[i] % v)
                return fail(report, s, "parallel.stage_layers", "each stage needs a multiple of virtual_stages layers",
                            arena_printf(&g_arena, "stage %d has %lld layers for %lld virtual stages",
                                         i, (long long)sl->v[i], (long long)v));
            sum += sl->v[i];
        }
        if (sum != l)
            return fail(report, s, "parallel.stage_layers", "the entries must add up to model.layers",
                        arena_printf(&g_arena, "stage_layers add up to %lld, the model has %lld layers",
                                     (long long)sum, (long long)l));
        return true;
    }
    if (l < pp * v)
        return fail(report, s, "parallel.pp", "use fewer stages (or virtual stages) than layers",
                    arena_printf(&g_arena, "%lld layers cannot fill %lld pipeline chunks",
                                 (long long)l, (long long)(pp * v)));
    if (v > 1 && l % (pp * v))
        return fail(report, s, "parallel.virtual_stages", "interleaving needs layers divisible by pp·virtual_stages",
                    arena_printf(&g_arena, "%lld layers do not split into %lld equal chunks",
                                 (long long)l, (long long)(pp * v)));
    return true;
}

/* Batch arithmetic and the interleaved schedule's microbatch rule. */
static bool check_batch(const Spec *s, bool report)
{
    int64_t b = s->train.micro_batch, m = s->parallel.microbatches, dp = s->parallel.dp;
    if (b < 1 || m < 1)
        return fail(report, s, "train.micro_batch", NULL, "micro_batch and microbatches must be at least 1");
    if (s->train.global_batch != b * m * dp)
        return fail(report, s, "train.global_batch", "global_batch = micro_batch · grad_accum · dp",
                    arena_printf(&g_arena, "global_batch %lld is not micro_batch %lld · microbatches %lld · dp %lld",
                                 (long long)s->train.global_batch, (long long)b, (long long)m, (long long)dp));
    if (spec_v(s) > 1 && m % s->parallel.pp)
        return fail(report, s, "parallel.microbatches", "Megatron's interleaved schedule needs microbatches % pp == 0",
                    arena_printf(&g_arena, "%lld microbatches are not a multiple of pp %lld",
                                 (long long)m, (long long)s->parallel.pp));
    return true;
}

/* Checks what the planner needs of a spec. */
bool part_check(const Spec *s, bool report)
{
    if (s->parallel.tp < 1 || s->parallel.pp < 1 || s->parallel.dp < 1 || s->model.heads < 1 ||
        s->model.layers < 1 || s->model.hidden < 1 || s->model.seq_len < 1 || s->model.vocab < 1)
        return fail(report, s, "parallel.tp", NULL, "the model and layout sizes must be positive");
    bool ok = check_tp(s, report);
    ok = check_stages(s, report) && ok;
    ok = check_batch(s, report) && ok;
    return ok;
}

/* The NVMe parameter staging must hold one segment's shard (a fetch unit,
 * or the persistent small parameters, read NVMe -> staging -> device) and, with the optimizer offloaded, one host
 * sub-group's parameters (written back NVMe-ward through it): the DeepSpeed
 * rule that buffer_size be at least the largest parameter, on our units. */
bool part_check_staging(const Spec *s, const Partition *p, bool report)
{
    if (p->zero < 3 || s->offload.params != OFF_NVME) return true;
    int64_t have = s->offload.params_buffer_count * s->offload.params_buffer_size, need = 0;
    const char *what = "";
    for (int i = 0; i < p->nclasses; i++) {
        const RankClass *c = &p->classes[i];
        for (int k = 0; k < c->nsegs; k++)
            if (c->segs[k].shard > need) {
                need = c->segs[k].shard;
                what = c->segs[k].persistent ? "the persistent small parameters' shard on one rank"
                                             : "the largest ZeRO-3 fetch unit's shard on one rank";
            }
        if (s->offload.optimizer != OFF_NONE) {
            double r = s->offload.optimizer_ratio > 0 ? s->offload.optimizer_ratio : 1.0;
            int64_t host = r >= 1.0 ? c->shard : (int64_t)((double)c->shard * r + 0.5);
            int64_t sub = s->zero.sub_group_size < host ? s->zero.sub_group_size : host;
            if (sub > need) {
                need = sub;
                what = "one host optimizer sub-group (zero.sub_group_size, at most the rank's host shard)";
            }
        }
    }
    if (have >= need) return true;
    return fail(report, s, "offload.params.buffer_size",
                arena_printf(&g_arena, "make offload.params buffer_count x buffer_size at least %lld elements "
                             "(or lower zero.sub_group_size)", (long long)need),
                arena_printf(&g_arena, "the NVMe parameter staging holds %lld elements (buffer_count %lld x "
                             "buffer_size %lld), but %s is %lld elements", (long long)have,
                             (long long)s->offload.params_buffer_count, (long long)s->offload.params_buffer_size,
                             what, (long long)need));
}

/* ---- ranks ----------------------------------------------------------------- */

/* The global rank of (tp index, dp index, stage). */
int64_t part_rank(const Partition *p, int64_t t, int64_t d, int64_t st)
{
    if (p->order == ORDER_TP_PP_DP) return t + p->tp * (st + p->pp * d);
    return t + p->tp * (d + p->dp * st);
}

/* The (tp index, dp index, stage) of a rank. */
void part_coords(const Partition *p, int64_t rank, int64_t *t, int64_t *d, int64_t *st)
{
    *t = rank % p->tp;
    int64_t r = rank / p->tp;
    if (p->order == ORDER_TP_PP_DP) {
        *st = r % p->pp;
        *d = r / p->pp;
    } else {
        *d = r % p->dp;
        *st = r / p->dp;
    }
}

/* The class (pipeline stage) of a rank. */
int part_class_of(const Partition *p, int64_t rank)
{
    int64_t t, d, st;
    part_coords(p, rank, &t, &d, &st);
    return (int)st;
}

/* The slice of a tensor tp rank t holds (Megatron: column-parallel linears
 * and the vocabulary split dim 0, row-parallel linears dim 1).  SPLIT_QKV
 * (GPT's fused c_attn [q; k; v]): the range is the rank's fraction of the
 * whole, and the rank holds that same fraction of each of the q, k and v
 * blocks (its heads' rows), stacked q, k, v in its shard. */
void part_tp_slice(const Partition *p, const Tensor *t, int64_t tp_rank, int *dim,
                   int64_t *begin, int64_t *end)
{
    int64_t n = t->rows_mem;
    *dim = 0;
    if (t->split == SPLIT_COLS) {
        *dim = 1;
        n = t->cols;
    }
    if (t->split == SPLIT_NONE) {
        *begin = 0;
        *end = n;
        return;
    }
    if (t->split == SPLIT_KV) {     /* kv head tp_rank / (tp / kv), one part of kv */
        int64_t kv = p->model->kv;
        *begin = tp_rank / (p->tp / kv) * (n / kv);
        *end = *begin + n / kv;
        return;
    }
    *begin = tp_rank * (n / p->tp);
    *end = *begin + n / p->tp;
}

/* ---- pipeline stages --------------------------------------------------------- */

/* Layers each stage can take under a cost cap (extra: embedding or head). */
static int64_t stage_capacity(double cap, double c, double extra)
{
    if (cap < c + extra) return 0;
    return (int64_t)((cap - extra) / c + 1e-9);
}

/* Total layers all stages can take under cap. */
static int64_t total_capacity(double cap, int64_t pp, double c, double first, double last)
{
    int64_t sum = 0;
    for (int64_t i = 0; i < pp; i++) {
        double extra = (i == 0 ? first : 0) + (i == pp - 1 ? last : 0);
        int64_t k = stage_capacity(cap, c, extra);
        if (k == 0) return -1;
        sum += k;
    }
    return sum;
}

/* Splits l layers over pp stages minimising the largest stage cost, with the
 * embedding's cost on the first and the head's on the last; ties go to the
 * most even split. */
static void balance_stages(int64_t l, int64_t pp, double c, double first, double last, int64_t *out)
{
    double lo = c, hi = c * (double)l + first + last;
    for (int it = 0; it < 100 && hi - lo > c * 1e-9; it++) {    /* bisection on the cap */
        double mid = (lo + hi) / 2;
        if (total_capacity(mid, pp, c, first, last) >= l) hi = mid;
        else lo = mid;
    }
    int64_t sum = 0;
    for (int64_t i = 0; i < pp; i++) {
        double extra = (i == 0 ? first : 0) + (i == pp - 1 ? last : 0);
        out[i] = stage_capacity(hi, c, extra);
        sum += out[i];
    }
    while (sum > l) {           /* trim the most loaded stage, the later on ties */
        int64_t best = -1;
        double bc = -1;
        for (int64_t i = 0; i < pp; i++) {
            double extra = (i == 0 ? first : 0) + (i == pp - 1 ? last : 0);
            double ci = (double)out[i] * c + extra;
            if (out[i] > 1 && ci >= bc) bc = ci, best = i;
        }
        out[best]--, sum--;
    }
}

/* FLOPs of one microbatch's layer: forward, backward and the recompute (a
 * group's, shared by its layers). */
static double layer_cost(const Spec *s, const Model *m)
{
    int64_t every = s->checkpointing.every > 0 ? s->checkpointing.every : 1;
    return m->fl_layer_fwd + m->fl_layer_bwd + model_recompute_flops(m, s->checkpointing.activations, every, every) / (double)every;
}

/* Layers of every model chunk (pp·v of them, in model order). */
static void plan_chunks(const Spec *s, const Model *m, Partition *p)
{
    int64_t n = p->pp * p->v;
    p->chunk_layers = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)n);
    p->chunk_first = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)n);
    const IntList *sl = &s->parallel.stage_layers;
    if (sl->n > 0) {
        for (int64_t j = 0; j < n; j++) p->chunk_layers[j] = sl->v[j % p->pp] / p->v;
    } else if (p->v > 1) {
        for (int64_t j = 0; j < n; j++) p->chunk_layers[j] = m->l / n;
    } else {
        double c = layer_cost(s, m);
        balance_stages(m->l, p->pp, c, 0.0, m->fl_head_fwd + m->fl_head_bwd, p->chunk_layers);
    }
    for (int64_t j = 0, f = 0; j < n; j++) {
        p->chunk_first[j] = f;
        f += p->chunk_layers[j];
    }
}

/* ---- one rank class: tensors, segments, buckets ------------------------------ */

/* The shard shape of a tensor on one tp rank. */
static ClassTensor class_tensor(const Partition *p, int idx, int chunk, bool copy)
{
    const Tensor *t = &p->model->t[idx];
    ClassTensor ct = {.tensor = idx, .rows = t->rows_mem, .cols = t->cols, .chunk = chunk, .copy = copy};
    if (t->split == SPLIT_ROWS || t->split == SPLIT_QKV) ct.rows /= p->tp;
    if (t->split == SPLIT_KV) ct.rows /= p->model->kv;
    if (t->split == SPLIT_COLS) ct.cols /= p->tp;
    ct.numel = ct.rows * (ct.cols ? ct.cols : 1);
    return ct;
}

/* The model tensors of a chunk, in forward order, with the tied head's copy
 * of the embedding on the last stage when the two are on different ranks. */
static int chunk_tensors(const Partition *p, const Chunk *ch, int chunk, ClassTensor *out)
{
    const Model *m = p->model;
    int n = 0, lo = ch->embed ? 0 : m->layer_first[ch->first_layer + 1];
    int hi = ch->head ? m->nt : m->layer_first[ch->first_layer + ch->nlayers + 1];
    for (int i = lo; i < hi; i++) out[n++] = class_tensor(p, i, chunk, false);
    if (ch->head && m->tied && p->pp > 1) out[n++] = class_tensor(p, 0, chunk, true);
    return n;
}

/* The layer whose backward completes a tensor's gradient. */
static int grad_layer(const Partition *p, const ClassTensor *ct)
{
    return ct->copy ? (int)p->model->l : p->model->t[ct->tensor].layer;
}

/* Is a tensor one of ZeRO-3's persistent small parameters? */
static bool is_persistent(const Partition *p, const ClassTensor *ct)
{
    return p->zero == 3 && ct->numel < p->spec->zero.param_persistence_threshold;
}

/* Is a tensor the tied embedding (or its head copy)?  Its gradient comes from
 * two places (the head and the embedding), so ZeRO keeps it whole and reduces
 * it once per step. */
static bool is_tied(const Partition *p, const ClassTensor *ct)
{
    return p->model->tied && (ct->copy || p->model->t[ct->tensor].role == R_TOK_EMBED);
}

/* Starts a new segment at tensor index first. */
static Segment *new_seg(RankClass *c, int first, int chunk)
{
    Segment *sg = &c->segs[c->nsegs++];
    memset(sg, 0, sizeof *sg);
    sg->first = first;
    sg->chunk = chunk;
    sg->layer = 1 << 30;
    return sg;
}

/* Adds tensor i (already placed at c->tensors[i]) to segment sg. */
static void seg_add(const Partition *p, RankClass *c, Segment *sg, int i)
{
    ClassTensor *ct = &c->tensors[i];
    sg->n++;
    sg->numel += ct->numel;
    if (is_tied(p, ct)) c->tied_numel += ct->numel;
    int L = grad_layer(p, ct);
    if (L < sg->layer) sg->layer = L;
    if (is_tied(p, ct)) sg->tied = true;
}

/* Does tensor b start a new segment after tensor a?  Always at chunk
 * boundaries, around the tied embedding and between the layers and the head;
 * ZeRO 3: one fetch unit per submodule, as DeepSpeed gathers (a linear with
 * its bias, a norm, an embedding, the head: Tensor.module); ZeRO 0-2:
 * buckets of reduce_bucket elements, closed in backward order. */
static bool seg_break(const Partition *p, const ClassTensor *a, const ClassTensor *b, int64_t acc)
{
    if (a->chunk != b->chunk || is_tied(p, a) || is_tied(p, b)) return true;
    int la = grad_layer(p, a), lb = grad_layer(p, b), l = (int)p->model->l;
    if ((la == l) != (lb == l)) return true;    /* the head's grads come during forward */
    if (p->zero == 3) return la != lb || p->model->t[a->tensor].module != p->model->t[b->tensor].module;
    return acc >= p->spec->zero.reduce_bucket;
}

/* Orders the class's tensors into segments: ZeRO-3 units in forward order
 * with persistent tensors last; ZeRO 0-2 buckets filled from the end. */
static void plan_segments(const Partition *p, RankClass *c, ClassTensor *fwd, int n)
{
    c->tensors = arena_alloc(&g_arena, sizeof(ClassTensor) * (size_t)n);
    c->segs = arena_alloc(&g_arena, sizeof(Segment) * (size_t)(n + 1));
    int k = 0;
    for (int i = 0; i < n; i++)             /* persistent ones go to the end */
        if (!is_persistent(p, &fwd[i])) c->tensors[k++] = fwd[i];
    int nreg = k;
    for (int i = 0; i < n; i++)
        if (is_persistent(p, &fwd[i])) c->tensors[k++] = fwd[i];
    c->ntensors = n;
    /* cut points, walking backward so buckets fill in gradient order */
    bool *starts = arena_alloc(&g_arena, sizeof(bool) * (size_t)(n + 1));
    int64_t acc = 0;
    for (int i = nreg - 1; i >= 0; i--) {
        acc += c->tensors[i].numel;
        if (i == 0 || seg_break(p, &c->tensors[i - 1], &c->tensors[i], acc)) starts[i] = true, acc = 0;
    }
    Segment *sg = NULL;
    for (int i = 0; i < nreg; i++) {
        if (starts[i]) sg = new_seg(c, i, c->tensors[i].chunk);
        seg_add(p, c, sg, i);
    }
    if (nreg < n) {
        sg = new_seg(c, nreg, -1);
        sg->persistent = true;
        for (int i = nreg; i < n; i++) seg_add(p, c, sg, i);
    }
}

/* Pads segments, assigns flat offsets, shard sizes and the tensors' offsets. */
static void place_segments(const Partition *p, RankClass *c)
{
    int64_t off = 0, soff = 0;
    for (int i = 0; i < c->nsegs; i++) {
        Segment *sg = &c->segs[i];
        sg->padded = (sg->numel + p->pad_unit - 1) / p->pad_unit * p->pad_unit;
        sg->shard = p->zero >= 1 ? sg->padded / p->dp : sg->padded;
        sg->offset = off;
        sg->shard_offset = soff;
        int64_t toff = off;
        for (int k = sg->first; k < sg->first + sg->n; k++) {
            c->tensors[k].offset = toff;
            c->tensors[k].seg = i;
            toff += c->tensors[k].numel;
        }
        off += sg->padded;
        soff += sg->shard;
        c->numel += sg->numel;
        if (sg->persistent) c->persistent_numel += sg->padded;
        else if (sg->tied) c->tied_padded += sg->padded;
    }
    c->padded = off;
    c->shard = soff;
}

/* Gradient reductions in backward order.  ZeRO 0-2: one per segment (each
 * segment is a bucket); ZeRO 3: consecutive units up to reduce_bucket.  The
 * persistent and tied segments are reduced once per step, not per bucket. */
static void plan_buckets(const Partition *p, RankClass *c)
{
    c->buckets = arena_alloc(&g_arena, sizeof(Bucket) * (size_t)(c->nsegs + 1));
    Bucket *cur = NULL;
    for (int i = c->nsegs - 1; i >= 0; i--) {
        const Segment *sg = &c->segs[i];
        bool alone = sg->persistent || sg->tied || p->zero < 3;
        bool fresh = !cur || alone || cur->chunk != sg->chunk || cur->padded >= p->spec->zero.reduce_bucket ||
                     c->segs[cur->first_seg].persistent || c->segs[cur->first_seg].tied;
        if (fresh) {
            cur = &c->buckets[c->nbuckets++];
            *cur = (Bucket){.first_seg = i, .nseg = 0, .padded = 0, .chunk = sg->chunk};
        }
        cur->first_seg = i;     /* segments of a bucket are consecutive; first is the lowest */
        cur->nseg++;
        cur->padded += sg->padded;
    }
}

/* The chunks of stage st: chunk c holds model chunk c·pp + st. */
static void plan_class_chunks(const Partition *p, RankClass *c)
{
    c->nchunks = (int)p->v;
    c->chunks = arena_alloc(&g_arena, sizeof(Chunk) * (size_t)p->v);
    for (int k = 0; k < c->nchunks; k++) {
        int j = (int)(k * p->pp + c->stage);
        c->chunks[k] = (Chunk){.model_chunk = j, .first_layer = (int)p->chunk_first[j],
                               .nlayers = (int)p->chunk_layers[j], .embed = j == 0,
                               .head = j == p->pp * p->v - 1};
    }
}

/* Builds one rank class (pipeline stage st). */
static void plan_class(const Spec *s, Partition *p, RankClass *c, int st)
{
    const Model *m = p->model;
    c->stage = st;
    c->count = p->tp * p->dp;
    plan_class_chunks(p, c);
    ClassTensor *fwd = arena_alloc(&g_arena, sizeof(ClassTensor) * (size_t)(m->nt + 1));
    int n = 0;
    double lc = layer_cost(s, m);
    for (int k = 0; k < c->nchunks; k++) {
        n += chunk_tensors(p, &c->chunks[k], k, fwd + n);
        c->cost += lc * c->chunks[k].nlayers + (c->chunks[k].head ? m->fl_head_fwd + m->fl_head_bwd : 0);
    }
    c->cost *= (double)p->b / (double)p->tp;
    plan_segments(p, c, fwd, n);
    place_segments(p, c);
    plan_buckets(p, c);
}

/* ---- the plan ------------------------------------------------------------------ */

void part_hw_flops(Partition *p)
{
    const Spec *s = p->spec;
    const Model *m = p->model;
    p->flops_hw_step = m->flops_model_step;
    for (int64_t c = 0; c < p->pp * p->v; c++)
        p->flops_hw_step += (double)s->train.global_batch *
                            model_recompute_flops(m, s->checkpointing.activations, p->chunk_layers[c], s->checkpointing.every);
}

/* Builds the partition plan of a checked spec. */
void part_build(const Spec *s, const Model *m, Partition *p)
{
    memset(p, 0, sizeof *p);
    p->spec = s;
    p->model = m;
    p->tp = s->parallel.tp;
    p->pp = s->parallel.pp;
    p->dp = s->parallel.dp;
    p->v = spec_v(s);
    p->world = p->tp * p->pp * p->dp;
    p->m = s->parallel.microbatches;
    p->b = s->train.micro_batch;
    p->order = s->parallel.rank_order;
    p->zero = (int)s->zero.stage;
    p->wbytes = model_dtype_bytes(s->precision.dtype);
    p->gbytes = model_dtype_bytes(s->precision.grad_reduce);
    p->pad_unit = p->zero >= 1 ? p->dp * 128 : 128;
    p->T = p->b * m->s;
    p->T_sp = s->parallel.sequence_parallel && p->tp > 1 ? p->T / p->tp : p->T;
    p->wsplit = p->tp > 1 && s->parallel.tp_comm_overlap != TPO_NONE;
    p->tpc = p->tp > 1 && s->parallel.tp_comm_overlap == TPO_FULL ? s->parallel.tp_overlap_chunks : 1;
    plan_chunks(s, m, p);
    part_hw_flops(p);
    p->nclasses = (int)p->pp;
    p->classes = arena_alloc(&g_arena, sizeof(RankClass) * (size_t)p->pp);
    for (int st = 0; st < p->pp; st++) plan_class(s, p, &p->classes[st], st);
    act_plan(s, p);
}

/* Whether the data op of a split backward part writes weight gradients.
 * Without sequence parallelism it runs the part's norm backward, so the
 * norm's weights' gradients; under it the norm has an op of its own
 * (GR_NORM) and the data op's one gradient is the MLP part's c_fc bias,
 * which GELU's fused backward (matmul_bwd_dgelu) adds with dfc1.  The
 * schedule declares the write (the bucket is zeroed before its first writer
 * and its reduction ordered after its last); the lowering checks it. */
bool part_data_grads(const Partition *p, int sub)
{
    if (p->T_sp == p->T) return true;
    return sub == SUB_MLP && p->model->dgelu && p->model->bias;
}

/* ---- ownership ------------------------------------------------------------------ */

/* The segment holding a flat element (binary search), or -1. */
static int seg_of(const RankClass *c, int64_t flat)
{
    int lo = 0, hi = c->nsegs - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const Segment *sg = &c->segs[mid];
        if (flat < sg->offset) hi = mid - 1;
        else if (flat >= sg->offset + sg->padded) lo = mid + 1;
        else return mid;
    }
    return -1;
}

/* The dp rank owning a flat element: each segment is split into dp equal
 * contiguous shards.  ZeRO 0 shards nothing: every rank holds all (0). */
int64_t part_owner(const Partition *p, const RankClass *c, int64_t flat)
{
    int i = seg_of(c, flat);
    if (i < 0) return -1;
    const Segment *sg = &c->segs[i];
    return p->zero >= 1 ? (flat - sg->offset) / sg->shard : 0;
}

/* The flat ranges dp rank d owns, one per segment. */
int part_shard_ranges(const Partition *p, const RankClass *c, int64_t d, int64_t (*ranges)[2], int cap)
{
    int n = 0;
    for (int i = 0; i < c->nsegs && n < cap; i++) {
        const Segment *sg = &c->segs[i];
        int64_t k = p->zero >= 1 ? d : 0;
        ranges[n][0] = sg->offset + k * sg->shard;
        ranges[n][1] = ranges[n][0] + sg->shard;
        n++;
    }
    return n;
}

/* Model layer L's index among class c's layers, or -1. */
int part_layer_slot(const RankClass *c, int L)
{
    int base = 0;
    for (int k = 0; k < c->nchunks; k++) {
        const Chunk *ch = &c->chunks[k];
        if (L >= ch->first_layer && L < ch->first_layer + ch->nlayers) return base + L - ch->first_layer;
        base += ch->nlayers;
    }
    return -1;
}

int part_unit_role(const Partition *p, const RankClass *c, int seg)
{
    const Model *m = p->model;
    return m->t[m->t[c->tensors[c->segs[seg].first].tensor].module].role;
}
