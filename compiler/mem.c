/* mem.c — the memory plan: buffer lifetimes from the step's op list, static
 * offsets in one device arena, one pinned-host arena and the NVMe files by
 * interval packing, the peak and the op where it happens, the live-bytes
 * lower bound and the arena's ratio to it, and the verdict against the
 * cluster.  Its input is the schedule (sched.c); it never builds one.
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
    const Sched *s = cm->sched;
    for (int k = 0; k < s->nbufs; k++) {
        const Buffer *b = &s->bufs[k];
        if (b->space == space && b->first <= op && op <= b->last) sum += b->bytes;
    }
    return sum;
}

/* Peaks per space, the device peak's op and its breakdown by category. */
static void peaks(ClassMem *cm)
{
    const Sched *s = cm->sched;
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
void mem_layout(ClassMem *cm, Sched *s, int64_t reserve)
{
    cm->sched = s;
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
    const Sched *s = cm->sched;
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
static void verdict(const Partition *p, MemPlan *mp)
{
    const Spec *s = p->spec;
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
    mp->fits_gpus = p->world <= mp->cluster_gpus;
    mp->fits_device = mp->classes[mp->worst].device_total <= s->cluster.gpu_memory;
    mp->fits_host = mp->host_node <= s->cluster.host_memory;
    mp->fits_nvme = mp->nvme_node <= s->cluster.nvme_capacity;
    mp->fits = mp->fits_gpus && mp->fits_device && mp->fits_host && mp->fits_nvme;
}

/* The memory plan of every rank class of a schedule, and the verdict. */
void mem_plan(const Partition *p, Schedule *sc, MemPlan *out)
{
    memset(out, 0, sizeof *out);
    out->nclasses = sc->nclasses;
    out->classes = arena_alloc(&g_arena, sizeof(ClassMem) * (size_t)out->nclasses);
    for (int i = 0; i < out->nclasses; i++) {
        ClassMem *cm = &out->classes[i];
        cm->cls = &p->classes[i];
        mem_layout(cm, &sc->classes[i], p->spec->cluster.runtime_reserve);
    }
    verdict(p, out);
}
