/* fix.c — what would make a plan fit: when a plan does not fit its cluster,
 * each change that could help (the next ZeRO stage, offload, activation
 * checkpointing, a smaller micro-batch, more tp or pp, fewer dp ranks or more
 * nodes) is applied to a copy of the spec and the copy planned again
 * (plan_build); the changes that fit, or save device memory, are listed with
 * the bytes they save, best first, and when none fits alone, the best ones
 * together.
 */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

/* The changes tried, in the order they are listed when they save the same. */
typedef enum FixKind {
    FIX_FEWER_DP, FIX_NODES, FIX_ZERO, FIX_OPT_OFFLOAD, FIX_PARAM_OFFLOAD, FIX_CKPT, FIX_MICRO, FIX_TP, FIX_PP,
    NFIXKINDS
} FixKind;

typedef struct Cand { Spec s; const char *why; } Cand;

/* Sets the microbatch count in both places the spec keeps it. */
static void set_accum(Spec *s, int64_t m)
{
    s->parallel.microbatches = m;
    s->train.grad_accum = m;
}

/* The next ZeRO stage. */
static bool cand_zero(const Spec *s, Cand *c)
{
    if (s->zero.stage >= 3 || s->parallel.dp < 2) return false;
    c->s.zero.stage = s->zero.stage + 1;
    c->why = c->s.zero.stage == 1 ? "shard the optimizer states over dp"
           : c->s.zero.stage == 2 ? "shard the gradients too" : "shard the parameters too";
    return true;
}

/* Optimizer states and master weights to host memory (needs ZeRO >= 1). */
static bool cand_opt_offload(const Spec *s, Cand *c)
{
    if (s->offload.optimizer != OFF_NONE) return false;
    c->s.offload.optimizer = OFF_CPU;
    c->s.offload.optimizer_ratio = 1.0;
    if (s->zero.stage == 0) c->s.zero.stage = 1;
    c->why = "optimizer states, master weights and fp32 gradients in host memory";
    return true;
}

/* Parameters to host memory (needs ZeRO 3). */
static bool cand_param_offload(const Spec *s, Cand *c)
{
    if (s->offload.params != OFF_NONE) return false;
    c->s.offload.params = OFF_CPU;
    c->s.zero.stage = 3;
    c->why = "parameter shards in host memory, fetched for each use";
    return true;
}

/* Full activation checkpointing of every layer. */
static bool cand_ckpt(const Spec *s, Cand *c)
{
    if (s->checkpointing.activations == CKPT_FULL && s->checkpointing.every == 1) return false;
    c->s.checkpointing.activations = CKPT_FULL;
    c->s.checkpointing.every = 1;
    c->why = "keep only each layer's input; recompute the rest in backward";
    return true;
}

/* A smaller micro-batch b2 (dividing it), the same global batch. */
static bool cand_micro(const Spec *s, Cand *c, int64_t b2)
{
    int64_t b = s->train.micro_batch;
    if (b2 < 1 || b2 >= b || b % b2) return false;
    c->s.train.micro_batch = b2;
    set_accum(&c->s, s->parallel.microbatches * (b / b2));
    c->why = "fewer sequences per microbatch; more microbatches keep the global batch";
    return true;
}

/* Twice the tp (within a node) or pp, taking the GPUs from dp. */
static bool cand_split(const Spec *s, Cand *c, bool tp)
{
    int64_t dp = s->parallel.dp;
    if (dp % 2) return false;
    if (tp) {
        if (s->parallel.tp * 2 > s->cluster.gpus_per_node) return false;
        c->s.parallel.tp = s->parallel.tp * 2;
    } else {
        c->s.parallel.pp = s->parallel.pp * 2;
        c->s.parallel.stage_layers.n = 0;
    }
    c->s.parallel.dp = dp / 2;
    set_accum(&c->s, s->parallel.microbatches * 2);
    c->why = tp ? "split every layer over more GPUs of a node" : "split the layers over more pipeline stages";
    return true;
}

/* A layout that needs more GPUs than the cluster has: less dp, same batch. */
static bool cand_fewer_dp(const Spec *s, Cand *c)
{
    int64_t tp = s->parallel.tp, pp = s->parallel.pp, B = s->train.global_batch, b = s->train.micro_batch;
    int64_t gpus = s->cluster.nodes * s->cluster.gpus_per_node;
    if (tp * pp * s->parallel.dp <= gpus) return false;
    for (int64_t dp = gpus / (tp * pp); dp >= 1; dp--) {
        if (B % (b * dp)) continue;
        c->s.parallel.dp = dp;
        set_accum(&c->s, B / (b * dp));
        c->why = "fit the cluster's GPUs; more microbatches keep the global batch";
        return true;
    }
    return false;
}

/* Enough nodes for the layout. */
static bool cand_nodes(const Spec *s, Cand *c)
{
    int64_t gpn = s->cluster.gpus_per_node > 0 ? s->cluster.gpus_per_node : 1;
    int64_t world = s->parallel.tp * s->parallel.pp * s->parallel.dp;
    if (world <= s->cluster.nodes * gpn) return false;
    c->s.cluster.nodes = (world + gpn - 1) / gpn;
    c->why = "a cluster with the GPUs the layout needs";
    return true;
}

/* Builds the candidate of a kind from spec s (arg: the micro-batch). */
static bool cand_make(int kind, int64_t arg, const Spec *s, Cand *c)
{
    *c = (Cand){.s = *s};
    switch (kind) {
    case FIX_FEWER_DP: return cand_fewer_dp(s, c);
    case FIX_NODES: return cand_nodes(s, c);
    case FIX_ZERO: return cand_zero(s, c);
    case FIX_OPT_OFFLOAD: return cand_opt_offload(s, c);
    case FIX_PARAM_OFFLOAD: return cand_param_offload(s, c);
    case FIX_CKPT: return cand_ckpt(s, c);
    case FIX_MICRO: return cand_micro(s, c, arg);
    case FIX_TP: return cand_split(s, c, true);
    case FIX_PP: return cand_split(s, c, false);
    default: return false;
    }
}

/* The -D overrides that turn spec a into spec b. */
static const char *spec_delta(const Spec *a, const Spec *b)
{
    static const char *const offs[] = {"none", "cpu", "nvme"}, *const ckpts[] = {"none", "full", "selective"};
    char *out = "";
#define INT_KEY(field, key) \
    if (a->field != b->field) out = arena_printf(&g_arena, "%s -D " key "=%lld", out, (long long)b->field);
    INT_KEY(zero.stage, "zero.stage")
    if (a->offload.optimizer != b->offload.optimizer)
        out = arena_printf(&g_arena, "%s -D offload.optimizer=%s", out, offs[b->offload.optimizer]);
    if (a->offload.params != b->offload.params)
        out = arena_printf(&g_arena, "%s -D offload.params=%s", out, offs[b->offload.params]);
    if (a->checkpointing.activations != b->checkpointing.activations)
        out = arena_printf(&g_arena, "%s -D checkpointing.activations=%s", out, ckpts[b->checkpointing.activations]);
    INT_KEY(checkpointing.every, "checkpointing.every")
    INT_KEY(parallel.tp, "parallel.tp")
    INT_KEY(parallel.pp, "parallel.pp")
    if (a->parallel.stage_layers.n != b->parallel.stage_layers.n)
        out = arena_printf(&g_arena, "%s -D parallel.stage_layers=[]", out);
    INT_KEY(parallel.dp, "parallel.dp")
    INT_KEY(train.micro_batch, "train.micro_batch")
    INT_KEY(train.grad_accum, "train.grad_accum")
    INT_KEY(cluster.nodes, "cluster.nodes")
#undef INT_KEY
    return out[0] ? out + 1 : out;
}

/* Plans s in a scratch arena and keeps only the verdict and the largest
 * device total: the arena is freed after, so trying a dozen changes of a big
 * model costs the memory of one plan (g_arena is swapped for the call). */
static bool replan(const Spec *s, bool *fits, int64_t *total)
{
    Arena outer = g_arena;
    g_arena = (Arena){0};
    Plan *alt = arena_alloc(&g_arena, sizeof *alt);
    bool ok = plan_build(s, alt, false);
    if (ok) *fits = alt->mem.fits, *total = alt->mem.classes[alt->mem.worst].device_total;
    arena_free(&g_arena);
    g_arena = outer;
    return ok;
}

/* Re-plans candidate c (of kind, arg) and records it as a fix when it fits
 * or at least saves device memory. */
static bool try_cand(Plan *pl, const Cand *c, int kind, int64_t arg)
{
    bool fits;
    int64_t after, before = pl->mem.classes[pl->mem.worst].device_total;
    if (!replan(&c->s, &fits, &after)) return false;
    if (!fits && after >= before && pl->mem.fits_gpus) return false;     /* no help */
    pl->fixes[pl->nfixes++] = (Fix){.change = spec_delta(pl->spec, &c->s), .why = c->why, .fits = fits,
                                    .kind = kind, .arg = arg, .device_total = after, .saves = before - after};
    return true;
}

/* Fitting fixes first, then by bytes saved. */
static int by_merit(const void *pa, const void *pb)
{
    const Fix *a = pa, *b = pb;
    if (a->fits != b->fits) return a->fits ? -1 : 1;
    if (a->saves != b->saves) return a->saves > b->saves ? -1 : 1;
    return a->kind - b->kind;
}

/* The micro-batch fix: the largest smaller divisor that fits, else 1. */
static void try_micro(Plan *pl)
{
    const Spec *s = pl->spec;
    for (int64_t b2 = s->train.micro_batch - 1; b2 >= 1; b2--) {
        Cand c;
        if (!cand_make(FIX_MICRO, b2, s, &c)) continue;
        int before = pl->nfixes;
        if (!try_cand(pl, &c, FIX_MICRO, b2)) continue;
        if (pl->fixes[before].fits || b2 == 1) return;
        pl->nfixes = before;    /* keep looking for one that fits */
    }
}

/* When no single change fits: the changes together, best first, until the
 * plan fits (each prefix re-planned). */
static void try_combined(Plan *pl)
{
    Spec cur = *pl->spec;
    int used = 0, n = pl->nfixes;
    for (int i = 0; i < n && pl->nfixes < FIX_MAX; i++) {
        Cand c;
        bool fits;
        int64_t after;
        if (pl->fixes[i].saves <= 0 || !cand_make(pl->fixes[i].kind, pl->fixes[i].arg, &cur, &c)) continue;
        if (!replan(&c.s, &fits, &after)) continue;
        cur = c.s;
        if (++used < 2 || !fits) continue;
        pl->fixes[pl->nfixes++] = (Fix){.change = spec_delta(pl->spec, &cur), .why = "these changes together",
                                        .fits = true, .kind = NFIXKINDS, .device_total = after,
                                        .saves = pl->mem.classes[pl->mem.worst].device_total - after};
        return;
    }
}

/* Computes the changes that would make a plan fit, each by re-planning. */
void fix_find(Plan *pl)
{
    pl->fixes = arena_alloc(&g_arena, sizeof(Fix) * FIX_MAX);
    pl->nfixes = 0;
    if (pl->mem.fits) return;
    for (int kind = 0; kind < NFIXKINDS; kind++) {
        Cand c;
        if (kind == FIX_MICRO) try_micro(pl);
        else if (cand_make(kind, 0, pl->spec, &c)) try_cand(pl, &c, kind, 0);
    }
    qsort(pl->fixes, (size_t)pl->nfixes, sizeof(Fix), by_merit);
    if (pl->nfixes && !pl->fixes[0].fits) {
        try_combined(pl);
        qsort(pl->fixes, (size_t)pl->nfixes, sizeof(Fix), by_merit);
    }
}
