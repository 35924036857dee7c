/* mem.c — the memory plan: buffer lifetimes from the step's op list, static
 * offsets in one device arena, one pinned-host arena and the NVMe files by
 * interval packing, the peak and the op where it happens, the live-bytes
 * lower bound and the arena's ratio to it, the verdict against the cluster,
 * and the changes that would make a plan fit, each checked by re-planning a
 * modified copy of the spec.
 *
 * The arena is what the trainer allocates: one device allocation, never
 * another during training.  Its size is the plan's answer; the peak of live
 * bytes is the bound no allocator can beat, and the ratio says how close the
 * packing came.
 */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

enum { ALIGN = 256 };

/* Rounds up to the arena alignment. */
static int64_t align_up(int64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

const char *mem_cat_name(int cat)
{
    static const char *const names[NCATS] = {"params", "grads", "optimizer", "activations", "logits",
                                             "workspace", "comm"};
    return cat >= 0 && cat < NCATS ? names[cat] : "?";
}

const char *mem_space_name(int space)
{
    static const char *const names[NSPACES] = {"device", "host", "nvme"};
    return space >= 0 && space < NSPACES ? names[space] : "?";
}

/* ---- lifetimes ---------------------------------------------------------------- */

/* Extends buffer id's lifetime to op i. */
static void touch(Buffer *b, int i)
{
    if (b->first < 0 || i < b->first) b->first = i;
    if (i > b->last) b->last = i;
}

/* Lifetimes: from the first op touching a buffer to the last; the model
 * states live for the whole step (and across steps). */
static void lifetimes(Sched *s)
{
    for (int k = 0; k < s->nbufs; k++) s->bufs[k].first = s->bufs[k].last = -1;
    for (int i = 0; i < s->nops; i++) {
        const Op *o = &s->ops[i];
        for (int k = 0; k < o->nrd; k++) touch(&s->bufs[o->rd[k]], i);
        for (int k = 0; k < o->nwr; k++) touch(&s->bufs[o->wr[k]], i);
    }
    for (int k = 0; k < s->nbufs; k++) {
        Buffer *b = &s->bufs[k];
        if (b->persistent) {
            b->first = 0;
            b->last = s->nops > 0 ? s->nops - 1 : 0;
        } else if (b->first < 0) {
            die("mem: buffer %s is never used", b->name);
        }
    }
}

/* ---- interval packing ----------------------------------------------------------- */

/* Up to this many transient buffers, the size-ordered packing (quadratic) is
 * tried besides the time-ordered one (n · live). */
enum { SIZE_ORDER_MAX = 4000 };

/* Do two buffers' lifetimes intersect? */
static bool live_together(const Buffer *a, const Buffer *b)
{
    return a->first <= b->last && b->first <= a->last;
}

/* A buffer's sort key: the packer and the overlap check sort these, so the
 * comparisons need no context. */
typedef struct Key { int64_t a, b, c; int id; } Key;

/* Orders keys by a, then b, then c, then id. */
static int by_key(const void *pa, const void *pb)
{
    const Key *x = pa, *y = pb;
    if (x->a != y->a) return x->a < y->a ? -1 : 1;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    if (x->c != y->c) return x->c < y->c ? -1 : 1;
    return x->id - y->id;
}

/* Placed buffers in offset order, with their offsets in this trial. */
typedef struct Packer {
    const Buffer *bufs;
    int64_t *off;               /* by buffer id */
    int *placed;
    int n;
} Packer;

/* The lowest offset >= base where b fits between the placed buffers that are
 * live at the same time (first fit by offset). */
static int64_t first_fit(const Packer *pk, const Buffer *b, int64_t base)
{
    int64_t at = base, size = align_up(b->bytes);
    for (int i = 0; i < pk->n; i++) {
        int q = pk->placed[i];
        if (!live_together(b, &pk->bufs[q])) continue;
        if (pk->off[q] >= at + size) break;
        int64_t end = pk->off[q] + align_up(pk->bufs[q].bytes);
        if (end > at) at = end;
    }
    return at;
}

/* Inserts id into the offset-ordered placed list. */
static void place(Packer *pk, int id)
{
    int i = pk->n++;
    while (i > 0 && pk->off[pk->placed[i - 1]] > pk->off[id]) {
        pk->placed[i] = pk->placed[i - 1];
        i--;
    }
    pk->placed[i] = id;
}

/* Drops the placed buffers that died before op t (time-ordered packing keeps
 * only the buffers still live, so the scan is short). */
static void expire(Packer *pk, int t)
{
    int k = 0;
    for (int i = 0; i < pk->n; i++)
        if (pk->bufs[pk->placed[i]].last >= t) pk->placed[k++] = pk->placed[i];
    pk->n = k;
}

/* First fit of the buffers in key order; returns the arena top. by_time:
 * keys are in birth order, so only live buffers need to stay placed. */
static int64_t pack_order(const Sched *s, const Key *keys, int n, int64_t base, bool by_time, int64_t *off)
{
    Packer pk = {s->bufs, off, arena_alloc(&g_arena, sizeof(int) * (size_t)(n + 1)), 0};
    int64_t top = base;
    int last_t = -1;
    for (int i = 0; i < n; i++) {
        const Buffer *b = &s->bufs[keys[i].id];
        if (by_time && b->first != last_t) expire(&pk, last_t = b->first);
        off[keys[i].id] = first_fit(&pk, b, base);
        place(&pk, keys[i].id);
        int64_t end = off[keys[i].id] + align_up(b->bytes);
        if (end > top) top = end;
    }
    return top;
}

/* Packs one space: persistent buffers at the bottom in order, then the
 * transients by first fit, in birth order and (when few) largest first,
 * keeping the tighter.  Returns the arena size. */
static int64_t pack_space(Sched *s, int space)
{
    Key *keys = arena_alloc(&g_arena, sizeof(Key) * (size_t)(s->nbufs + 1));
    int64_t *off[2];
    for (int t = 0; t < 2; t++) off[t] = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(s->nbufs + 1));
    int n = 0;
    int64_t base = 0;
    for (int k = 0; k < s->nbufs; k++) {
        Buffer *b = &s->bufs[k];
        if (b->space != space) continue;
        if (b->persistent) {
            b->offset = base;
            base += align_up(b->bytes);
        } else {    /* born first, then larger, then longer-lived */
            keys[n++] = (Key){b->first, -b->bytes, -b->last, k};
        }
    }
    qsort(keys, (size_t)n, sizeof(Key), by_key);
    int64_t top = pack_order(s, keys, n, base, true, off[0]);
    int best = 0;
    if (n <= SIZE_ORDER_MAX) {
        for (int i = 0; i < n; i++) {   /* larger, then earlier, then longer-lived */
            const Buffer *b = &s->bufs[keys[i].id];
            keys[i] = (Key){-b->bytes, b->first, -b->last, keys[i].id};
        }
        qsort(keys, (size_t)n, sizeof(Key), by_key);
        int64_t top2 = pack_order(s, keys, n, base, false, off[1]);
        if (top2 < top) top = top2, best = 1;
    }
    for (int i = 0; i < n; i++) s->bufs[keys[i].id].offset = off[best][keys[i].id];
    return top;
}

/* ---- peaks ------------------------------------------------------------------------ */

/* Live bytes per op of one space and (cat >= 0) one category, into d. */
static int64_t *live_curve(const Sched *s, int space, int cat, int64_t *d)
{
    memset(d, 0, sizeof(int64_t) * (size_t)(s->nops + 2));
    for (int k = 0; k < s->nbufs; k++) {
        const Buffer *b = &s->bufs[k];
        if (b->space != space || (cat >= 0 && b->cat != cat)) continue;
        d[b->first] += b->bytes;
        d[b->last + 1] -= b->bytes;
    }
    for (int i = 1; i <= s->nops; i++) d[i] += d[i - 1];
    return d;
}

/* The maximum of a curve and where it is. */
static int64_t curve_max(const int64_t *c, int n, int *at)
{
    int64_t best = 0;
    int where = 0;
    for (int i = 0; i < n; i++)
        if (c[i] > best) best = c[i], where = i;
    if (at) *at = where;
    return best;
}

/* Bytes live in a space at op i. */
int64_t mem_live_at(const ClassMem *cm, int space, int op)
{
    int64_t sum = 0;
    const Sched *s = &cm->sched;
    for (int k = 0; k < s->nbufs; k++) {
        const Buffer *b = &s->bufs[k];
        if (b->space == space && b->first <= op && op <= b->last) sum += b->bytes;
    }
    return sum;
}

/* Peaks per space, the device peak's op and its breakdown by category. */
static void peaks(ClassMem *cm)
{
    const Sched *s = &cm->sched;
    int n = s->nops > 0 ? s->nops : 1;
    int64_t *d = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(s->nops + 2));
    for (int sp = 0; sp < NSPACES; sp++) {
        int at;
        cm->peak[sp] = curve_max(live_curve(s, sp, -1, d), n, &at);
        if (sp == SPACE_DEVICE) cm->peak_op = at;
    }
    for (int c = 0; c < NCATS; c++) {
        cm->max_cat[c] = curve_max(live_curve(s, SPACE_DEVICE, c, d), n, NULL);
        cm->host_cat[c] = curve_max(live_curve(s, SPACE_HOST, c, d), n, NULL);
        cm->at_peak[c] = 0;
    }
    cm->model_states = 0;
    for (int k = 0; k < s->nbufs; k++) {
        const Buffer *b = &s->bufs[k];
        if (b->space != SPACE_DEVICE) continue;
        if (b->first <= cm->peak_op && cm->peak_op <= b->last) cm->at_peak[b->cat] += b->bytes;
        if (b->persistent && b->cat <= CAT_OPTIMIZER) cm->model_states += b->bytes;
    }
}

/* Lifetimes, offsets in every arena, peaks and the ratio. */
void mem_layout(ClassMem *cm, int64_t reserve)
{
    Sched *s = &cm->sched;
    lifetimes(s);
    for (int sp = 0; sp < NSPACES; sp++) cm->arena[sp] = pack_space(s, sp);
    peaks(cm);
    cm->reserve = reserve;
    cm->device_total = cm->arena[SPACE_DEVICE] + reserve;
    cm->ratio = cm->peak[SPACE_DEVICE] > 0 ? (double)cm->arena[SPACE_DEVICE] / (double)cm->peak[SPACE_DEVICE] : 1.0;
}

/* True when no two buffers that are live at the same time share bytes. */
bool mem_check_overlap(const ClassMem *cm)
{
    const Sched *s = &cm->sched;
    Key *keys = arena_alloc(&g_arena, sizeof(Key) * (size_t)(s->nbufs + 1));
    for (int k = 0; k < s->nbufs; k++) keys[k] = (Key){s->bufs[k].space, s->bufs[k].offset, 0, k};
    qsort(keys, (size_t)s->nbufs, sizeof(Key), by_key);
    for (int i = 0; i < s->nbufs; i++) {
        const Buffer *a = &s->bufs[keys[i].id];
        for (int j = i + 1; j < s->nbufs; j++) {
            const Buffer *b = &s->bufs[keys[j].id];
            if (b->space != a->space || b->offset >= a->offset + a->bytes) break;
            if (live_together(a, b)) return false;
        }
    }
    return true;
}

/* ---- the plan and the verdict --------------------------------------------------------- */

/* Compares the plan against the cluster: GPUs, device, host and NVMe memory. */
static void verdict(MemPlan *mp)
{
    const Spec *s = mp->spec;
    int64_t gpn = s->cluster.gpus_per_node > 0 ? s->cluster.gpus_per_node : 1;
    mp->cluster_gpus = s->cluster.nodes * gpn;
    mp->worst = 0;
    int64_t host = 0, nvme = 0;
    for (int i = 0; i < mp->nclasses; i++) {
        const ClassMem *cm = &mp->classes[i];
        if (cm->device_total > mp->classes[mp->worst].device_total) mp->worst = i;
        if (cm->arena[SPACE_HOST] > host) host = cm->arena[SPACE_HOST];
        if (cm->arena[SPACE_NVME] > nvme) nvme = cm->arena[SPACE_NVME];
    }
    /* a node holds gpus_per_node ranks; the worst class stands for each */
    mp->host_node = host * gpn;
    mp->nvme_node = nvme * gpn;
    mp->fits_gpus = mp->part.world <= mp->cluster_gpus;
    mp->fits_device = mp->classes[mp->worst].device_total <= s->cluster.gpu_memory;
    mp->fits_host = mp->host_node <= s->cluster.host_memory;
    mp->fits_nvme = mp->nvme_node <= s->cluster.nvme_capacity;
    mp->fits = mp->fits_gpus && mp->fits_device && mp->fits_host && mp->fits_nvme;
}

/* Plans a spec end to end.  mp must stay where it is: the partition points
 * into it. */
bool mem_plan(const Spec *s, MemPlan *mp, bool report)
{
    memset(mp, 0, sizeof *mp);
    mp->spec = s;
    if (!part_check(s, report)) return false;
    model_build(s, &mp->model);
    part_build(s, &mp->model, &mp->part);
    if (!part_check_staging(s, &mp->part, report)) return false;
    mp->nclasses = mp->part.nclasses;
    mp->classes = arena_alloc(&g_arena, sizeof(ClassMem) * (size_t)mp->nclasses);
    for (int i = 0; i < mp->nclasses; i++) {
        ClassMem *cm = &mp->classes[i];
        cm->cls = &mp->part.classes[i];
        sched_build(&mp->part, cm->cls, &cm->sched);
        mem_layout(cm, s->cluster.runtime_reserve);
    }
    verdict(mp);
    return true;
}

/* ---- fixes -------------------------------------------------------------------------- */

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
    MemPlan *alt = arena_alloc(&g_arena, sizeof *alt);
    bool ok = mem_plan(s, alt, false);
    if (ok) *fits = alt->fits, *total = alt->classes[alt->worst].device_total;
    arena_free(&g_arena);
    g_arena = outer;
    return ok;
}

/* Re-plans candidate c (of kind, arg) and records it as a fix when it fits
 * or at least saves device memory. */
static bool try_cand(MemPlan *mp, const Cand *c, int kind, int64_t arg)
{
    bool fits;
    int64_t after, before = mp->classes[mp->worst].device_total;
    if (!replan(&c->s, &fits, &after)) return false;
    if (!fits && after >= before && mp->fits_gpus) return false;     /* no help */
    mp->fixes[mp->nfixes++] = (Fix){.change = spec_delta(mp->spec, &c->s), .why = c->why, .fits = fits,
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
static void try_micro(MemPlan *mp)
{
    const Spec *s = mp->spec;
    for (int64_t b2 = s->train.micro_batch - 1; b2 >= 1; b2--) {
        Cand c;
        if (!cand_make(FIX_MICRO, b2, s, &c)) continue;
        int before = mp->nfixes;
        if (!try_cand(mp, &c, FIX_MICRO, b2)) continue;
        if (mp->fixes[before].fits || b2 == 1) return;
        mp->nfixes = before;    /* keep looking for one that fits */
    }
}

/* When no single change fits: the changes together, best first, until the
 * plan fits (each prefix re-planned). */
static void try_combined(MemPlan *mp)
{
    Spec cur = *mp->spec;
    int used = 0, n = mp->nfixes;
    for (int i = 0; i < n && mp->nfixes < MEM_MAX_FIXES; i++) {
        Cand c;
        bool fits;
        int64_t after;
        if (mp->fixes[i].saves <= 0 || !cand_make(mp->fixes[i].kind, mp->fixes[i].arg, &cur, &c)) continue;
        if (!replan(&c.s, &fits, &after)) continue;
        cur = c.s;
        if (++used < 2 || !fits) continue;
        mp->fixes[mp->nfixes++] = (Fix){.change = spec_delta(mp->spec, &cur), .why = "these changes together",
                                        .fits = true, .kind = NFIXKINDS, .device_total = after,
                                        .saves = mp->classes[mp->worst].device_total - after};
        return;
    }
}

/* Computes the changes that would make a plan fit, each by re-planning. */
void mem_fixes(MemPlan *mp)
{
    mp->fixes = arena_alloc(&g_arena, sizeof(Fix) * MEM_MAX_FIXES);
    mp->nfixes = 0;
    if (mp->fits) return;
    for (int kind = 0; kind < NFIXKINDS; kind++) {
        Cand c;
        if (kind == FIX_MICRO) try_micro(mp);
        else if (cand_make(kind, 0, mp->spec, &c)) try_cand(mp, &c, kind, 0);
    }
    qsort(mp->fixes, (size_t)mp->nfixes, sizeof(Fix), by_merit);
    if (mp->nfixes && !mp->fixes[0].fits) {
        try_combined(mp);
        qsort(mp->fixes, (size_t)mp->nfixes, sizeof(Fix), by_merit);
    }
}
