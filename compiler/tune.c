/* tune.c — shardc tune (prefix tune_): the fastest layout that fits.
 *
 * A spec whose layout keys are left open (sema's OpenKey: `tp = auto`,
 * `zero.stage = (1, 3)`) is a search space.  The search, in order:
 *   1. enumerate: every combination of the open keys' values (`auto`: the
 *      values that make sense for the model and the cluster, key by key), each
 *      resolved by sema_bind; a choice sema rejects is counted by its error, two
 *      choices that resolve to the same layout once;
 *   2. bound (cheap, no plan): device memory from the ZeRO formulas over the
 *      average stage, step time from the compute of the busiest stage at the
 *      best efficiency of the step's GEMM shapes; a memory bound above the device
 *      rejects the candidate;
 *   3. branch and bound, in order of the time bound: the partition's exact
 *      per-stage parameters and layers tighten both bounds (the pipeline's fill
 *      and drain), then the exact memory plan (the verdict `plan` gives) and,
 *      if it fits, the simulated step: period_plan's, from a few microbatches
 *      when the steady state is periodic, else plan_build's and sim_run's.  Once the next
 *      candidate's bound is no less than the N-th best step time found, no
 *      candidate left can enter the top N, and the search stops;
 *   4. the top N are planned again and their schedules verified (verify_plan).
 * Every bound is a lower bound of what the exact pass computes; --exhaustive
 * evaluates every candidate exactly and counts the bounds that were not.
 */
#define _GNU_SOURCE     /* qsort_r */
#include "tune.h"
#include "sim.h"

#include <cjson/cJSON.h>
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The tunable keys, in sema_tunable_keys' order. */
typedef enum Axis {
    AX_TP, AX_PP, AX_SCHED, AX_VSTAGES, AX_SP, AX_ZERO, AX_MICRO, AX_CKPT, AX_EVERY, AX_OPT_OFF, AX_PARAM_OFF,
    AX_TPO, NAXES
} Axis;

/* What became of a candidate. */
typedef enum Fate {
    F_BOUND_MEM,        /* its memory lower bound exceeds the device              */
    F_NO_PLAN,          /* the planner refused it (plan_build)                    */
    F_NO_FIT,           /* the exact memory plan does not fit                     */
    F_FITS,             /* planned, fits, simulated                               */
    F_PRUNED,           /* its time bound cannot beat the N-th best               */
    NFATES
} Fate;

/* One layout of the space: its choice, its resolved keys, its bounds and
 * what the exact passes found. */
typedef struct Cand {
    int64_t pick[NAXES];        /* the value chosen per axis (SEMA_UNBOUND: not open) */
    int64_t key[NAXES + 2];     /* the resolved layout: the axes, dp, microbatches */
    double mem_lb, time_lb;     /* step 2's bounds (bytes, seconds)               */
    double mem_lb2, time_lb2;   /* step 3's, from the partition                   */
    int fate;                   /* Fate, or -1: not looked at yet                 */
    double step, tokens_s, mfu, bubble, exposed;
    int64_t device, gpu_memory; /* the worst class's device total; the device     */
} Cand;

/* A reason sema gave for rejecting choices: its message with the numbers
 * written N, how many, and the first message in full. */
typedef struct Reason { const char *what, *example; int64_t count; } Reason;

typedef struct Tune {
    const Spec *open;
    const TuneOpts *o;
    int axis_of[SPEC_MAX_KEYS]; /* the axis of each open key                      */
    const OpenKey *ok[NAXES];   /* the open key of each axis, or NULL             */
    Cand *c;
    int64_t nc, capc;
    int64_t choices, duplicates;
    Reason *why;
    int nwhy, capwhy;
    int64_t *hash;              /* candidate indices by layout (open addressing)   */
    int64_t nhash;
    Model *models[64];          /* by tp (a power of two or not: looked up)        */
    int64_t model_tp[64];
    int nmodels;
    int64_t bound_violations;   /* --exhaustive: a bound above the exact value     */
    int64_t fates[NFATES];
    int64_t *top;               /* the best fitting candidates, fastest first      */
    int ntop;
    bool tty;
    double t0;
} Tune;

/* ---- small helpers ------------------------------------------------------------ */

/* Seconds since the start. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The schema key of an axis. */
static const SchemaKey *axis_key(int a) { return schema_find(sema_tunable_keys[a]); }

/* The divisors of n, ascending, at most cap of them no larger than limit. */
static int divisors(int64_t n, int64_t limit, int64_t *out, int cap)
{
    int k = 0;
    for (int64_t d = 1; d <= n && d <= limit && k < cap; d++)
        if (n % d == 0) out[k++] = d;
    return k;
}

/* ---- 1. the space ---------------------------------------------------------------- */

enum { MAX_VALUES = 64, MAX_MICRO = 16, MAX_VSTAGES = 8, MAX_EVERY = 4 };

/* The value axis a has in the candidate being built: the one picked, else the
 * open spec's (the user's, or the default; derived keys read 0). */
static int64_t value_of(const Tune *t, const int64_t *pick, int a)
{
    return pick[a] != SEMA_UNBOUND ? pick[a] : sema_value(t->open, axis_key(a));
}

/* `auto`'s values for axis a, given the axes before it: the ones that make
 * sense for the model and the cluster (docs/tune.md lists them). */
static int auto_values(const Tune *t, const int64_t *pick, int a, int64_t *v)
{
    const Spec *s = t->open;
    int64_t gpn = s->cluster.gpus_per_node, world = s->cluster.nodes * gpn, L = s->model.layers;
    int64_t tp = value_of(t, pick, AX_TP), pp = value_of(t, pick, AX_PP);
    int64_t dp = s->set[schema_index(schema_find("parallel.dp"))] ? s->parallel.dp : world / (tp * pp);
    if (dp < 1) dp = 1;
    switch (a) {
    case AX_TP: return divisors(gpn, gpn, v, MAX_VALUES);
    case AX_PP: return world % tp ? 0 : divisors(world / tp, L, v, MAX_VALUES);
    case AX_SCHED:
        if (pp == 1) return v[0] = SCHED_1F1B, 1;
        v[0] = SCHED_GPIPE, v[1] = SCHED_1F1B, v[2] = SCHED_INTERLEAVED;
        return 3;
    case AX_VSTAGES: {
        if (value_of(t, pick, AX_SCHED) != SCHED_INTERLEAVED) return v[0] = SEMA_UNBOUND, 1;
        int n = 0;
        for (int64_t d = 2; d <= MAX_VSTAGES; d++)
            if (L % (pp * d) == 0) v[n++] = d;
        return n ? n : (v[0] = 2, 1);
    }
    case AX_SP:
        if (tp == 1) return v[0] = SEMA_UNBOUND, 1;
        return v[0] = 0, v[1] = 1, 2;
    case AX_ZERO:
        if (dp == 1) return v[0] = 0, 1;
        for (int z = 0; z < 4; z++) v[z] = z;
        return 4;
    case AX_MICRO: {
        bool batch_set = s->set[schema_index(schema_find("train.global_batch"))];
        if (!batch_set) return divisors(MAX_MICRO, MAX_MICRO, v, MAX_VALUES);
        int64_t per = s->train.global_batch % dp ? 1 : s->train.global_batch / dp;
        return divisors(per, MAX_MICRO, v, MAX_VALUES);
    }
    case AX_CKPT: return v[0] = CKPT_NONE, v[1] = CKPT_SELECTIVE, v[2] = CKPT_FULL, 3;
    case AX_EVERY: {
        if (value_of(t, pick, AX_CKPT) != CKPT_FULL) return v[0] = SEMA_UNBOUND, 1;
        int64_t per = L / pp > 0 ? L / pp : 1;
        return divisors(per, MAX_EVERY, v, MAX_VALUES);
    }
    case AX_OPT_OFF:
        if (value_of(t, pick, AX_ZERO) == 0) return v[0] = OFF_NONE, 1;
        return v[0] = OFF_NONE, v[1] = OFF_CPU, 2;
    case AX_PARAM_OFF:
        if (value_of(t, pick, AX_ZERO) != 3) return v[0] = OFF_NONE, 1;
        return v[0] = OFF_NONE, v[1] = OFF_CPU, 2;
    case AX_TPO:   /* none never hides more than wgrad: not a candidate of auto */
        if (tp == 1) return v[0] = SEMA_UNBOUND, 1;
        return v[0] = TPO_WGRAD, v[1] = TPO_FULL, 2;
    }
    die("no axis %d", a);
}

/* The message sema wrote for a rejected choice, reduced to its first error
 * with every number written N: the reason it is counted under. */
static void count_reason(Tune *t, const char *msg)
{
    const char *e = strstr(msg, "error: ");
    e = e ? e + 7 : msg;
    size_t n = strcspn(e, "\n");
    char *full = arena_strndup(&g_arena, e, n), *what = arena_alloc(&g_arena, n + 1), *w = what;
    for (size_t i = 0; i < n; i++) {
        bool digit = e[i] >= '0' && e[i] <= '9';
        if (!digit) *w++ = e[i];
        else if (i == 0 || !(e[i - 1] >= '0' && e[i - 1] <= '9')) *w++ = 'N';
    }
    *w = 0;
    for (int i = 0; i < t->nwhy; i++)
        if (strcmp(t->why[i].what, what) == 0) {
            t->why[i].count++;
            return;
        }
    if (t->nwhy == t->capwhy) {
        t->capwhy = t->capwhy ? 2 * t->capwhy : 16;
        t->why = realloc(t->why, sizeof *t->why * (size_t)t->capwhy);
        if (!t->why) die("out of memory");
    }
    t->why[t->nwhy++] = (Reason){what, full, 1};
}

/* Resolves a choice with sema's messages captured; false (and *msg, malloc'ed)
 * if sema rejects it. */
static bool bind_quiet(const Tune *t, const int64_t *pick, Spec *out, char **msg)
{
    int64_t val[SPEC_MAX_KEYS];
    for (int j = 0; j < t->open->nopen; j++) val[j] = pick[t->axis_of[j]];
    size_t len;
    *msg = NULL;
    FILE *f = open_memstream(msg, &len), *was = diag_stream;
    if (!f) die("open_memstream failed");
    bool color = diag_color;
    int errors = diag_errors, warnings = diag_warnings, max = diag_max_errors;
    diag_stream = f;
    diag_color = false;
    diag_max_errors = 1 << 30;
    bool good = sema_bind(t->open, val, out);
    fclose(f);
    diag_stream = was;
    diag_color = color;
    diag_errors = errors;
    diag_warnings = warnings;
    diag_max_errors = max;
    if (good) {
        free(*msg);
        *msg = NULL;
    }
    return good;
}

/* The layout a resolved spec has: what two choices must differ in to count twice. */
static void layout_key(const Spec *s, int64_t *key)
{
    for (int a = 0; a < NAXES; a++) key[a] = sema_value(s, axis_key(a));
    if (s->checkpointing.activations != CKPT_FULL) key[AX_EVERY] = 1;
    if (s->parallel.schedule != SCHED_INTERLEAVED) key[AX_VSTAGES] = 1;
    if (s->parallel.tp == 1) key[AX_TPO] = TPO_WGRAD;   /* no tp collective to overlap */
    key[NAXES] = s->parallel.dp;
    key[NAXES + 1] = s->parallel.microbatches;
}

/* FNV-1a over a layout. */
static uint64_t key_hash(const int64_t *key)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < NAXES + 2; i++) {
        h ^= (uint64_t)key[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* True if a candidate with this layout is already in the space; else adds it. */
static bool seen(Tune *t, const int64_t *key, int64_t idx)
{
    if (2 * (t->nc + 1) > t->nhash) {
        int64_t n = t->nhash ? 2 * t->nhash : 1024;
        free(t->hash);
        t->hash = malloc(sizeof *t->hash * (size_t)n);
        if (!t->hash) die("out of memory");
        for (int64_t i = 0; i < n; i++) t->hash[i] = -1;
        t->nhash = n;
        for (int64_t i = 0; i < t->nc; i++) seen(t, t->c[i].key, i);
    }
    for (uint64_t h = key_hash(key) & (uint64_t)(t->nhash - 1);; h = (h + 1) & (uint64_t)(t->nhash - 1)) {
        int64_t at = t->hash[h];
        if (at < 0) {
            t->hash[h] = idx;
            return false;
        }
        if (at != idx && memcmp(t->c[at].key, key, sizeof t->c[at].key) == 0) return true;
        if (at == idx) return false;
    }
}

/* ---- 2. the cheap bounds ---------------------------------------------------------- */

/* The model inventory for the spec's tp (the vocabulary is padded per tp). */
static const Model *model_for(Tune *t, const Spec *s)
{
    for (int i = 0; i < t->nmodels; i++)
        if (t->model_tp[i] == s->parallel.tp) return t->models[i];
    if (t->nmodels == 64) die("more than 64 tensor-parallel degrees");
    Model *m = arena_alloc(&g_arena, sizeof *m);
    model_build(s, m);
    t->model_tp[t->nmodels] = s->parallel.tp;
    return t->models[t->nmodels++] = m;
}

/* Bytes per element of the working dtype. */
static int work_bytes(const Spec *s) { return s->precision.dtype == DT_FP32 ? 4 : 2; }

/* Bytes per element of the optimizer's state on a rank's shard: the moments
 * (Adam's two, SGD's momentum) and the fp32 master copy of a 16-bit model. */
static int opt_bytes(const Spec *s)
{
    int moments = s->train.optimizer == OPT_SGD ? (s->train.momentum > 0 ? 4 : 0) : 8;
    return moments + (s->precision.dtype != DT_FP32 ? 4 : 0);
}

/* Device bytes of model states for psi parameters on a rank of dp, by the
 * ZeRO formulas (what is offloaded counts nothing), plus the runtime reserve. */
static double states_bound(const Spec *s, double psi, double dp)
{
    int z = (int)s->zero.stage, wb = work_bytes(s);
    bool opt_off = s->offload.optimizer != OFF_NONE, par_off = s->offload.params != OFF_NONE;
    double params = par_off ? 0 : z == 3 ? wb * psi / dp : wb * psi;
    double grads = opt_off ? 0 : z >= 2 ? wb * psi / dp : wb * psi;
    double kept = opt_off ? 1 - s->offload.optimizer_ratio : 1;
    double opt = kept * opt_bytes(s) * psi / (z >= 1 ? dp : 1);
    return params + grads + opt + (double)s->cluster.runtime_reserve;
}

/* Bytes of one layer's input for a microbatch on one rank: kept for backward
 * under every checkpointing policy (in device memory unless cpu checkpointing). */
static double input_bytes(const Spec *s)
{
    if (s->checkpointing.cpu) return 0;
    double split = s->parallel.sequence_parallel || s->checkpointing.partition_activations ? (double)s->parallel.tp : 1;
    return (double)work_bytes(s) * (double)s->train.micro_batch * (double)s->model.seq_len * (double)s->model.hidden /
           split;
}

/* Seconds of an M×K by K×N GEMM at the efficiency of its shape. */
static double gemm_time(const Spec *s, double M, double N, double K)
{
    return 2 * M * N * K / (cost_peak(s) * cost_gemm_eff(cost_profile(s), M, N, K));
}

/* The compute of one layer for one microbatch on one rank, in seconds: its
 * GEMMs each at the efficiency of its shape and the attention core at its
 * own, the memory-bound kernels around them left out.  Forward, backward
 * (twice the forward's FLOPs) and the recompute of the policy (none counted
 * for full checkpointing of every k > 1; of every layer, each layer its
 * group's last, all but the MLP down projection); *wa: the attention part's weight
 * GEMMs, which tp_comm_overlap runs after its collective (0 without it). */
static void layer_times(const Spec *s, const Model *m, double *fwd, double *bwd, double *re, double *wa)
{
    double T = (double)(s->train.micro_batch * m->s), t = (double)s->parallel.tp, h = (double)m->h;
    double hd = (double)m->hd, a = (double)m->a, kv = (double)m->kv, ffn = (double)m->ffn;
    double attn = gemm_time(s, T, (a + 2 * kv) * hd / t, h) + gemm_time(s, T, h, a * hd / t);
    double down = gemm_time(s, T, h, ffn / t);      /* the MLP down projection */
    double gemms = attn + gemm_time(s, T, (m->gated ? 2 : 1) * ffn / t, h) + down;
    *wa = t > 1 && s->parallel.tp_comm_overlap != TPO_NONE ? attn : 0;
    double core = 4 * T * (double)m->s * a * hd / t / (cost_peak(s) * cost_attn_eff(cost_profile(s), hd));
    *fwd = gemms + core;
    *bwd = 2 * *fwd;
    int pol = s->checkpointing.activations;
    *re = pol == CKPT_SELECTIVE ? core : pol == CKPT_FULL && s->checkpointing.every == 1 ? *fwd - down : 0;
}

/* The head's logits GEMM for one microbatch, forward and backward, in
 * seconds: the FLOPs of the vocabulary, at the efficiency of the padded one. */
static double head_time(const Spec *s, const Model *m)
{
    double T = (double)(s->train.micro_batch * m->s), t = (double)s->parallel.tp, h = (double)m->h;
    double flops = 3 * 2 * T * h * (double)m->V / t;
    return flops / (cost_peak(s) * cost_gemm_eff(cost_profile(s), T, (double)m->Vpad / t, h));
}

/* Seconds of one layer's tensor-parallel communication in a microbatch's
 * forward: two all-reduces of [T, h] (or, under sequence parallelism, the
 * all-gathers and reduce-scatters that move as much) on the fastest link
 * there is and no latency; the next GEMM waits for each.  (The backward's
 * may overlap its weight-gradient GEMMs: not counted.)  tp_comm_overlap full
 * runs the collective after each part's row-parallel GEMM (the all-reduce;
 * under sequence parallelism the reduce-scatter, half of the bytes, and the
 * all-gather before its column GEMMs, the other half) in k chunks, each
 * behind the next chunk's GEMM: only one chunk of each, 1/k of it at no
 * latency, is sure to be waited for. */
static double tp_comm(const Spec *s)
{
    double bytes = (double)work_bytes(s) * (double)s->train.micro_batch * (double)s->model.seq_len *
                   (double)s->model.hidden;
    double all = 2 * cost_collective(COLL_ALLREDUCE, bytes, s->parallel.tp, s->cluster.intra_node, 0);
    if (s->parallel.tp == 1 || s->parallel.tp_comm_overlap != TPO_FULL) return all;
    return all / (double)s->parallel.tp_overlap_chunks;
}

/* Whether the time bounds hold for this spec: they price the GEMMs at the
 * peak and efficiency curves of cost.c's device model; a CPU profile's
 * measured rates can exceed that peak (a profile's peak is the rate of its
 * largest GEMM, not a bound of its rates), so under one the search prunes by
 * memory only, and plans and simulates every layout that fits. */
static bool timed(const Spec *s) { return !cost_cpu_priced(s); }

/* Step 2's bounds of a resolved candidate. */
static void cheap_bounds(Tune *t, const Spec *s, Cand *c)
{
    const Model *m = model_for(t, s);
    double tp = (double)s->parallel.tp, pp = (double)s->parallel.pp, dp = (double)s->parallel.dp;
    double psi = (double)m->params_mem / (tp * pp);
    c->mem_lb = states_bound(s, psi, dp) + floor((double)m->l / pp) * input_bytes(s);
    double f, b, r, wa;
    layer_times(s, m, &f, &b, &r, &wa);
    double busiest = ceil((double)m->l / pp);   /* some stage holds at least this many layers */
    c->time_lb = timed(s) ? (double)s->parallel.microbatches * busiest * (f + b + r + tp_comm(s)) : 0;
}

/* Device bytes one layer keeps for backward per microbatch in flight, by the
 * checkpointing policy (act.c's sizes): its input and what the policy saves,
 * or under full checkpointing the checkpointed input of every every-th layer
 * (the fewest any reading of `every` keeps); none under cpu checkpointing. */
static double kept_bytes(const Spec *s, const Partition *p)
{
    int pol = s->checkpointing.activations;
    if (s->checkpointing.cpu) return 0;
    if (pol == CKPT_FULL) {
        double ck = (double)(p->act.ckpt < p->act.x ? p->act.ckpt : p->act.x);
        return s->checkpointing.every == 1 ? ck : 0;
    }
    return (double)(p->act.x + p->act.saved[pol]);
}

/* Step 3's bounds, from the partition: each stage's own parameters and
 * layers, and the pipeline's fill and drain before and after each stage's
 * work (the first microbatch's forward through the model chunks before it,
 * the last one's backward through them; with tp_comm_overlap each chunk's
 * last attention weight GEMMs may run while its input gradient is sent on). */
static void part_bounds(const Spec *s, const Partition *p, Cand *c)
{
    const Model *m = p->model;
    double f, b, r, wa;
    layer_times(s, m, &f, &b, &r, &wa);
    double comm = tp_comm(s), head = head_time(s, m), mem = 0, time = 0;
    for (int k = 0; k < p->nclasses; k++) {
        const RankClass *rc = &p->classes[k];
        int64_t layers = 0, chunk = INT64_MAX;
        bool has_head = false;
        for (int i = 0; i < rc->nchunks; i++) {
            has_head |= rc->chunks[i].head;
            layers += rc->chunks[i].nlayers;
            if (rc->chunks[i].nlayers < chunk) chunk = rc->chunks[i].nlayers;
        }
        double psi = (double)rc->numel;
        /* the microbatch-chunks whose forward is done and backward is not, each
         * keeping at least what its policy keeps of every layer */
        double act = (double)sched_max_in_flight(p, rc->stage) * (double)(rc->nchunks ? chunk : 0) * kept_bytes(s, p);
        mem = fmax(mem, states_bound(s, psi, (double)p->dp) + act);
        int64_t before = 0;     /* layers of the model chunks ahead of this stage's first */
        int first = rc->nchunks ? rc->chunks[0].model_chunk : 0;
        for (int i = 0; i < first; i++) before += p->chunk_layers[i];
        double work = (double)p->m * ((double)layers * (f + b + r + comm) + (has_head ? head : 0));
        time = fmax(time, (double)before * (f + b + comm) + work - (double)first * wa);
    }
    c->mem_lb2 = fmax(c->mem_lb, mem);
    c->time_lb2 = timed(s) ? fmax(c->time_lb, time) : 0;
}

/* Enumerates the space from axis a on (pick holds the axes before it). */
static void enumerate(Tune *t, int64_t *pick, int a)
{
    if (a == NAXES) {
        t->choices++;
        Spec s;
        char *msg;
        if (!bind_quiet(t, pick, &s, &msg)) {
            count_reason(t, msg ? msg : "error: rejected");
            free(msg);
            return;
        }
        if (t->nc == t->capc) {
            t->capc = t->capc ? 2 * t->capc : 1024;
            t->c = realloc(t->c, sizeof *t->c * (size_t)t->capc);
            if (!t->c) die("out of memory");
        }
        Cand *c = &t->c[t->nc];
        memset(c, 0, sizeof *c);
        memcpy(c->pick, pick, sizeof c->pick);
        layout_key(&s, c->key);
        c->fate = -1;
        if (seen(t, c->key, t->nc)) {
            t->duplicates++;
            return;
        }
        cheap_bounds(t, &s, c);
        c->gpu_memory = s.cluster.gpu_memory;
        t->nc++;
        return;
    }
    int64_t v[MAX_VALUES];
    int n;
    const OpenKey *ok = t->ok[a];
    if (!ok) v[0] = SEMA_UNBOUND, n = 1;
    else if (ok->any) n = auto_values(t, pick, a, v);
    else {
        n = ok->n < MAX_VALUES ? ok->n : MAX_VALUES;
        memcpy(v, ok->v, sizeof *v * (size_t)n);
    }
    for (int i = 0; i < n; i++) {
        pick[a] = v[i];
        enumerate(t, pick, a + 1);
    }
    pick[a] = SEMA_UNBOUND;
}

/* ---- 3. branch and bound ------------------------------------------------------------ */

/* Candidates by their time bound, then their memory bound, then their index
 * (so that the order, and the winner among equals, is the same on every run). */
static int by_bound(const void *x, const void *y, void *ctx)
{
    const Tune *t = ctx;
    int64_t i = *(const int64_t *)x, j = *(const int64_t *)y;
    const Cand *a = &t->c[i], *b = &t->c[j];
    if (a->time_lb != b->time_lb) return a->time_lb < b->time_lb ? -1 : 1;
    if (a->mem_lb != b->mem_lb) return a->mem_lb < b->mem_lb ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* Inserts candidate i among the best (fastest first), keeping at most top. */
static void keep_best(Tune *t, int64_t i)
{
    int n = t->ntop;
    if (n == t->o->top && t->c[t->top[n - 1]].step <= t->c[i].step) return;
    if (n < t->o->top) t->ntop++;
    int at = t->ntop - 1;
    while (at > 0 && t->c[t->top[at - 1]].step > t->c[i].step) {
        t->top[at] = t->top[at - 1];
        at--;
    }
    t->top[at] = i;
}

/* The N-th best step time so far (infinity until there are N). */
static double threshold(const Tune *t)
{
    return t->ntop < t->o->top ? INFINITY : t->c[t->top[t->ntop - 1]].step;
}

/* Step 3 for one candidate, in an arena of its own, freed after (only the
 * numbers stay): the partition's bounds, then, unless they rule it out (or
 * always with exact), the memory plan and, if it fits, the simulated step. */
static void evaluate(Tune *t, Cand *c, bool exact)
{
    Arena saved = g_arena;
    g_arena = (Arena){0};
    Spec *s = arena_alloc(&g_arena, sizeof *s);
    char *msg;
    if (!bind_quiet(t, c->pick, s, &msg)) die("a candidate that resolved once no longer resolves: %s", msg);
    Model *m = arena_alloc(&g_arena, sizeof *m);
    Partition *p = arena_alloc(&g_arena, sizeof *p);
    if (!part_check(s, false)) {
        c->fate = F_NO_PLAN;
    } else {
        model_build(s, m);
        part_build(s, m, p);
        part_bounds(s, p, c);
        if (!exact && c->mem_lb2 > (double)c->gpu_memory) {
            c->fate = F_BOUND_MEM;
        } else if (!exact && c->time_lb2 >= threshold(t)) {
            c->fate = F_PRUNED;
        } else {
            Plan *pl = arena_alloc(&g_arena, sizeof *pl);
            Sim sim;
            bool simulated = period_plan(s, false, pl, &sim);   /* many microbatches from a few (verified: step 4) */
            if (!simulated && !plan_build(s, pl, false)) {
                c->fate = F_NO_PLAN;
            } else {
                c->device = pl->mem.classes[pl->mem.worst].device_total;
                c->fate = pl->mem.fits ? F_FITS : F_NO_FIT;
                if (pl->mem.fits) {
                    if (!simulated) sim_run(pl, &sim);
                    c->step = sim.step_time;
                    c->tokens_s = sim.tokens_per_s;
                    c->mfu = sim.mfu;
                    c->bubble = sim.bubble;
                    c->exposed = 0;
                    for (int g = 0; g < NGROUPS; g++) c->exposed += sim.exposed[g];
                }
            }
        }
    }
    arena_free(&g_arena);
    g_arena = saved;
}

/* A progress line on a terminal. */
static void progress(const Tune *t, int64_t done, int64_t of, bool last)
{
    if (!t->tty) return;
    double best = t->ntop ? t->c[t->top[0]].step : 0;
    fprintf(stderr, "\rshardc tune: %lld of %lld candidates looked at, %lld planned, best %.4g s  (%.1f s)%s",
            (long long)done, (long long)of, (long long)(t->fates[F_NO_FIT] + t->fates[F_FITS] + t->fates[F_NO_PLAN]),
            best, now() - t->t0, last ? "\n" : "");
}

static const char *layout_text(const int64_t *key);

/* Counts (and shows) a bound above the exact value (--exhaustive checks every one). */
static void check_bounds(Tune *t, const Cand *c)
{
    bool mem_wrong = (c->fate == F_FITS || (c->fate == F_NO_FIT && c->device <= c->gpu_memory)) &&
                     (c->mem_lb > (double)c->device * (1 + 1e-9) || c->mem_lb2 > (double)c->device * (1 + 1e-9));
    bool time_wrong = c->fate == F_FITS && (c->time_lb > c->step * (1 + 1e-9) || c->time_lb2 > c->step * (1 + 1e-9));
    if (mem_wrong || time_wrong) t->bound_violations++;
    if (mem_wrong || time_wrong)
        fprintf(stderr, "shardc tune: a bound above the exact value: %s  memory %.6g, %.6g > %lld bytes or time %.6g, %.6g > %.6g s\n",
                layout_text(c->key), c->mem_lb, c->mem_lb2, (long long)c->device, c->time_lb, c->time_lb2, c->step);
}

/* Steps 2 and 3 over every candidate. */
static void search(Tune *t)
{
    int64_t *order = malloc(sizeof *order * (size_t)(t->nc ? t->nc : 1));
    if (!order) die("out of memory");
    for (int64_t i = 0; i < t->nc; i++) order[i] = i;
    qsort_r(order, (size_t)t->nc, sizeof *order, by_bound, t);
    t->top = malloc(sizeof *t->top * (size_t)t->o->top);
    bool all = t->o->exhaustive;
    double last_shown = 0;
    for (int64_t k = 0; k < t->nc; k++) {
        Cand *c = &t->c[order[k]];
        if (!all && c->time_lb >= threshold(t)) {
            for (int64_t q = k; q < t->nc; q++) t->c[order[q]].fate = F_PRUNED;
            t->fates[F_PRUNED] += t->nc - k;
            break;
        }
        if (!all && c->mem_lb > (double)c->gpu_memory) {
            c->fate = F_BOUND_MEM;
        } else {
            evaluate(t, c, all);
        }
        t->fates[c->fate]++;
        if (c->fate == F_FITS) keep_best(t, order[k]);
        if (all) check_bounds(t, c);
        if (now() - last_shown > 0.2) {
            progress(t, k + 1, t->nc, false);
            last_shown = now();
        }
    }
    progress(t, t->nc, t->nc, true);
    free(order);
}

/* ---- 4. the results ---------------------------------------------------------------- */

/* A candidate's layout in words: "tp 8 pp 8 dp 16 1f1b sp zero 1 mb 1 selective". */
static const char *layout_text(const int64_t *key)
{
    const char *ck = key[AX_CKPT] == CKPT_FULL
                         ? (key[AX_EVERY] == 1 ? "full" : arena_printf(&g_arena, "full/%lld", (long long)key[AX_EVERY]))
                         : schema_enum_name(axis_key(AX_CKPT), (int)key[AX_CKPT]);
    const char *sched = key[AX_SCHED] == SCHED_INTERLEAVED
                            ? arena_printf(&g_arena, "interleaved/%lld", (long long)key[AX_VSTAGES])
                            : schema_enum_name(axis_key(AX_SCHED), (int)key[AX_SCHED]);
    const char *off = key[AX_PARAM_OFF] != OFF_NONE ? "opt+params"
                    : key[AX_OPT_OFF] != OFF_NONE   ? "opt" : "-";
    return arena_printf(&g_arena, "%3lld %3lld %5lld  %-14s %-3s %-5s %4lld %4lld %5lld  %-9s %-10s",
                        (long long)key[AX_TP], (long long)key[AX_PP], (long long)key[NAXES], sched,
                        key[AX_SP] ? "on" : "off", schema_enum_name(axis_key(AX_TPO), (int)key[AX_TPO]),
                        (long long)key[AX_ZERO], (long long)key[AX_MICRO], (long long)key[NAXES + 1], ck, off);
}

/* The rejected, by reason, as text. */
static void text_rejected(FILE *out, const Tune *t)
{
    fprintf(out, "\n%lld choices: %lld layouts", (long long)t->choices, (long long)t->nc);
    if (t->duplicates) fprintf(out, " (%lld choices resolved to a layout already counted)", (long long)t->duplicates);
    fprintf(out, "\n");
    static const char *what[NFATES] = {
        "do not fit: the memory lower bound exceeds the device",
        "cannot be planned",
        "do not fit: the exact memory plan exceeds the cluster",
        "fit, planned and simulated",
        "pruned: their step-time lower bound cannot beat the top",
    };
    for (int f = 0; f < NFATES; f++)
        if (t->fates[f]) fprintf(out, "  %8lld  %s\n", (long long)t->fates[f], what[f]);
    for (int i = 0; i < t->nwhy; i++)
        fprintf(out, "  %8lld  not a valid spec: %s\n", (long long)t->why[i].count, t->why[i].example);
    if (t->o->exhaustive) fprintf(out, "bounds above the exact value: %lld\n", (long long)t->bound_violations);
}

/* The ranked table. */
static void text_table(FILE *out, const Tune *t)
{
    fprintf(out, "rank  tp  pp    dp  schedule       sp  tpo   zero   mb   mbs  ckpt      offload     step s  tokens/s    MFU"
                 "   peak mem  bubble  exposed\n");
    for (int i = 0; i < t->ntop; i++) {
        const Cand *c = &t->c[t->top[i]];
        fprintf(out, "%4d %s %8.4g %9.4g %5.1f%% %10s %6.1f%% %7.1f%%\n", i + 1, layout_text(c->key), c->step,
                c->tokens_s, 100 * c->mfu, util_bytes(c->device), 100 * c->bubble, 100 * c->exposed);
    }
}

/* One candidate as JSON. */
static cJSON *json_cand(const Cand *c)
{
    cJSON *o = cJSON_CreateObject(), *l = cJSON_AddObjectToObject(o, "layout");
    cJSON_AddNumberToObject(l, "tp", (double)c->key[AX_TP]);
    cJSON_AddNumberToObject(l, "pp", (double)c->key[AX_PP]);
    cJSON_AddNumberToObject(l, "dp", (double)c->key[NAXES]);
    cJSON_AddStringToObject(l, "schedule", schema_enum_name(axis_key(AX_SCHED), (int)c->key[AX_SCHED]));
    cJSON_AddNumberToObject(l, "virtual_stages", (double)c->key[AX_VSTAGES]);
    cJSON_AddBoolToObject(l, "sequence_parallel", c->key[AX_SP] != 0);
    cJSON_AddStringToObject(l, "tp_comm_overlap", schema_enum_name(axis_key(AX_TPO), (int)c->key[AX_TPO]));
    cJSON_AddNumberToObject(l, "zero_stage", (double)c->key[AX_ZERO]);
    cJSON_AddNumberToObject(l, "micro_batch", (double)c->key[AX_MICRO]);
    cJSON_AddNumberToObject(l, "microbatches", (double)c->key[NAXES + 1]);
    cJSON_AddStringToObject(l, "checkpointing", schema_enum_name(axis_key(AX_CKPT), (int)c->key[AX_CKPT]));
    cJSON_AddNumberToObject(l, "checkpointing_every", (double)c->key[AX_EVERY]);
    cJSON_AddStringToObject(l, "offload_optimizer", schema_enum_name(axis_key(AX_OPT_OFF), (int)c->key[AX_OPT_OFF]));
    cJSON_AddStringToObject(l, "offload_params", schema_enum_name(axis_key(AX_PARAM_OFF), (int)c->key[AX_PARAM_OFF]));
    cJSON_AddNumberToObject(o, "step_time_s", c->step);
    cJSON_AddNumberToObject(o, "tokens_per_s", c->tokens_s);
    cJSON_AddNumberToObject(o, "mfu", c->mfu);
    cJSON_AddNumberToObject(o, "peak_device_bytes", (double)c->device);
    cJSON_AddNumberToObject(o, "bubble", c->bubble);
    cJSON_AddNumberToObject(o, "exposed_comm", c->exposed);
    cJSON_AddNumberToObject(o, "time_bound_s", fmax(c->time_lb, c->time_lb2));
    cJSON_AddNumberToObject(o, "memory_bound_bytes", fmax(c->mem_lb, c->mem_lb2));
    return o;
}

/* Everything as JSON (docs/tune.md). */
static char *tune_json(const Tune *t, const Plan *closest)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "spec", t->open->source);
    cJSON_AddNumberToObject(root, "gpu_memory", t->nc ? (double)t->c[0].gpu_memory : 0);
    cJSON *open = cJSON_AddArrayToObject(root, "open");
    for (int j = 0; j < t->open->nopen; j++) {
        const OpenKey *ok = &t->open->open[j];
        const SchemaKey *k = &schema_keys[ok->key];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "key", k->path);
        if (ok->any) cJSON_AddStringToObject(e, "values", "auto");
        else {
            cJSON *vs = cJSON_AddArrayToObject(e, "values");
            for (int i = 0; i < ok->n; i++)
                cJSON_AddItemToArray(vs, k->type == T_ENUM ? cJSON_CreateString(schema_enum_name(k, (int)ok->v[i]))
                                         : k->type == T_BOOL ? cJSON_CreateBool(ok->v[i] != 0)
                                                             : cJSON_CreateNumber((double)ok->v[i]));
        }
        cJSON_AddItemToArray(open, e);
    }
    cJSON *cnt = cJSON_AddObjectToObject(root, "counts");
    cJSON_AddNumberToObject(cnt, "choices", (double)t->choices);
    cJSON_AddNumberToObject(cnt, "duplicates", (double)t->duplicates);
    cJSON_AddNumberToObject(cnt, "layouts", (double)t->nc);
    static const char *fate[NFATES] = {"memory_bound", "cannot_plan", "does_not_fit", "fits", "pruned"};
    for (int f = 0; f < NFATES; f++) cJSON_AddNumberToObject(cnt, fate[f], (double)t->fates[f]);
    cJSON *inv = cJSON_AddArrayToObject(root, "invalid");
    for (int i = 0; i < t->nwhy; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "reason", t->why[i].what);
        cJSON_AddStringToObject(e, "example", t->why[i].example);
        cJSON_AddNumberToObject(e, "count", (double)t->why[i].count);
        cJSON_AddItemToArray(inv, e);
    }
    cJSON_AddBoolToObject(root, "exhaustive", t->o->exhaustive);
    if (t->o->exhaustive) cJSON_AddNumberToObject(root, "bound_violations", (double)t->bound_violations);
    cJSON *ranked = cJSON_AddArrayToObject(root, "ranked");
    for (int i = 0; i < t->ntop; i++) cJSON_AddItemToArray(ranked, json_cand(&t->c[t->top[i]]));
    if (closest) {
        cJSON *nf = cJSON_AddObjectToObject(root, "nothing_fits");
        cJSON_AddNumberToObject(nf, "closest_device_bytes", (double)closest->mem.classes[closest->mem.worst].device_total);
        cJSON_AddNumberToObject(nf, "gpu_memory", (double)closest->spec->cluster.gpu_memory);
        cJSON_AddItemToObject(nf, "fixes", report_json_fixes(closest));
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    char *s = arena_printf(&g_arena, "%s\n", text);
    free(text);
    return s;
}

/* Plans a candidate again, to keep: the winners' verification, the closest's fixes. */
static Plan *plan_again(const Tune *t, const Cand *c)
{
    Spec *s = arena_alloc(&g_arena, sizeof *s);
    char *msg;
    if (!bind_quiet(t, c->pick, s, &msg)) die("a candidate that resolved once no longer resolves: %s", msg);
    Plan *pl = arena_alloc(&g_arena, sizeof *pl);
    if (!plan_build(s, pl, true)) die("a candidate that was planned once can no longer be planned");
    return pl;
}

/* Nothing fits: the candidate closest to fitting, planned, with the changes
 * `plan` would suggest for it. */
static Plan *closest(const Tune *t)
{
    const Cand *best = NULL;
    for (int64_t i = 0; i < t->nc; i++) {
        const Cand *c = &t->c[i];
        if (c->fate != F_NO_FIT && c->fate != F_BOUND_MEM) continue;
        double bytes = c->fate == F_NO_FIT ? (double)c->device : fmax(c->mem_lb, c->mem_lb2);
        double have = !best ? INFINITY : best->fate == F_NO_FIT ? (double)best->device : fmax(best->mem_lb, best->mem_lb2);
        if (bytes < have) best = c;
    }
    if (!best) return NULL;
    Plan *pl = plan_again(t, best);
    fix_find(pl);
    return pl;
}

/* Writes the winner as a spec `check` resolves to the same layout. */
static bool write_best(const Tune *t, const Cand *c)
{
    Spec *s = arena_alloc(&g_arena, sizeof *s);
    char *msg;
    if (!bind_quiet(t, c->pick, s, &msg)) die("the winner no longer resolves: %s", msg);
    char *text;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    if (!f) die("open_memstream failed");
    fprintf(f, "# shardc tune's choice for %s: %.4g s per step predicted (%s)\n", t->open->source, c->step,
            layout_text(c->key));
    canon_print(f, s);
    fclose(f);
    bool good = util_write_atomic(t->o->out, text, len);
    free(text);
    return good;
}

/* ---- the entry point --------------------------------------------------------------------- */

/* shardc tune on an open spec (see tune.h). */
int tune_main(const Spec *open, const TuneOpts *o)
{
    Tune *t = arena_alloc(&g_arena, sizeof *t);
    t->open = open;
    t->o = o;
    t->tty = isatty(2) && !o->quiet;
    t->t0 = now();
    /* each candidate's arena is freed and the next one's allocated: keep the
     * pages in the heap rather than map and fault them in again each time */
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    for (int a = 0; a < NAXES; a++)
        if (!sema_tunable_keys[a] || !axis_key(a)) die("tune's axes and sema's tunable keys differ at %d", a);
    if (sema_tunable_keys[NAXES]) die("sema has a tunable key tune does not search: %s", sema_tunable_keys[NAXES]);
    for (int j = 0; j < open->nopen; j++) {
        int a = 0;
        while (strcmp(sema_tunable_keys[a], schema_keys[open->open[j].key].path) != 0) a++;
        t->axis_of[j] = a;
        t->ok[a] = &open->open[j];
    }
    int64_t pick[NAXES];
    for (int a = 0; a < NAXES; a++) pick[a] = SEMA_UNBOUND;
    enumerate(t, pick, 0);
    if (t->nc == 0) {
        /* every choice is invalid: the first one's errors, located at the keys */
        fprintf(stderr, "shardc tune: no choice of the open keys makes a valid spec; the first choice's errors:\n");
        for (int a = 0; a < NAXES; a++) pick[a] = SEMA_UNBOUND;
        for (int j = 0; j < open->nopen; j++) {
            const OpenKey *ok = &open->open[j];
            int64_t v[MAX_VALUES];
            int n = ok->any ? auto_values(t, pick, t->axis_of[j], v) : (v[0] = ok->v[0], 1);
            pick[t->axis_of[j]] = n ? v[0] : SEMA_UNBOUND;
        }
        int64_t val[SPEC_MAX_KEYS];
        for (int j = 0; j < open->nopen; j++) val[j] = pick[t->axis_of[j]];
        Spec s;
        sema_bind(open, val, &s);
        diag_hint("the open keys' values contradict the keys that are set; see the counts below");
        text_rejected(stderr, t);
        return EXIT_USER;
    }
    search(t);
    Plan *near = t->ntop ? NULL : closest(t);
    for (int i = 0; i < t->ntop; i++) {
        Plan *pl = plan_again(t, &t->c[t->top[i]]);
        if (!verify_plan(pl, stderr)) return EXIT_INTERNAL;
    }
    FILE *out = stdout;
    fprintf(out, "shardc tune %s: %lld layouts, %.1f s\n", open->source, (long long)t->nc, now() - t->t0);
    if (t->ntop) text_table(out, t);
    else {
        fprintf(out, "nothing fits: no layout of the space fits the cluster's %s per GPU\n",
                util_bytes(t->c[0].gpu_memory));
        if (near) {
            const Spec *s = near->spec;
            fprintf(out, "the closest layout (tp %lld pp %lld dp %lld, zero %lld, micro_batch %lld) needs %s on its "
                         "largest rank class\n",
                    (long long)s->parallel.tp, (long long)s->parallel.pp, (long long)s->parallel.dp,
                    (long long)s->zero.stage, (long long)s->train.micro_batch,
                    util_bytes(near->mem.classes[near->mem.worst].device_total));
            report_fixes(out, near);
        }
    }
    text_rejected(out, t);
    const char *json = o->json ? tune_json(t, near) : NULL;
    if (json && !util_write_atomic(o->json, json, strlen(json))) {
        diag_plain("tune: cannot write %s", o->json);
        return EXIT_USER;
    }
    if (o->out && t->ntop && !write_best(t, &t->c[t->top[0]])) {
        diag_plain("tune: cannot write %s", o->out);
        return EXIT_USER;
    }
    if (o->out && !t->ntop) fprintf(stderr, "shardc tune: nothing fits, so %s is not written\n", o->out);
    free(t->c);
    free(t->hash);
    free(t->why);
    free(t->top);
    if (fflush(out) != 0) return EXIT_USER;
    return t->ntop ? EXIT_OK : EXIT_USER;
}
