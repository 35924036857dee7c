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

/* Lifetimes: from the first op touching a buffer to the last (the schedule
 * numbered those once its list was final: sched_events); the model states
 * live for the whole step (and across steps). */
static void lifetimes(Sched *s)
{
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

/* ---- families: the transients laid out by (layer, microbatch) -------------------- */

/* Do two buffers' lifetimes intersect? */
static bool live_together(const Buffer *a, const Buffer *b)
{
    return a->first <= b->last && b->first <= a->last;
}

/* A buffer's sort key: the overlap check and the layout sort these, so the
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

/* Where a buffer's layer is in its class: its chunk and its index among the
 * chunk's layers; a buffer of no layer of the class keeps its own chunk
 * (or none) and index 0. */
void mem_place(const RankClass *c, const Buffer *b, int *chunk, int *li)
{
    *chunk = b->chunk, *li = 0;
    if (b->layer == NO_LAYER) return;
    for (int k = 0; k < c->nchunks; k++) {
        const Chunk *ch = &c->chunks[k];
        if (b->layer >= ch->first_layer && b->layer < ch->first_layer + ch->nlayers) {
            *chunk = k, *li = b->layer - ch->first_layer;
            return;
        }
    }
}

/* The layer coordinate of a buffer: its index among its chunk's layers. */
static int layer_coord(const RankClass *c, const Buffer *b)
{
    int chunk, li;
    mem_place(c, b, &chunk, &li);
    return li;
}

/* The chunk a buffer's family is of (its layer's, or its own). */
static int family_chunk(const RankClass *c, const Buffer *b)
{
    int chunk, li;
    mem_place(c, b, &chunk, &li);
    return chunk;
}

/* Does a transient of chunk `chunk` (family_chunk) belong to family f? */
static bool same_family(const BufFamily *f, const Buffer *b, int chunk)
{
    return f->role == b->role && f->sub == b->sub && f->idx == b->idx && f->space == b->space && f->chunk == chunk;
}

/* A family instance as choosing its places reads it: its layer coordinate,
 * microbatch (0 for none) and lifetime. */
typedef struct Inst { int li, mb, first, last; } Inst;

/* Would places (li % lm, mb % w) keep every two instances of the family
 * that are live at once apart?  in: its instances by birth. */
static bool places_ok(const Inst *in, int n, int lm, int w, int *last)
{
    int nplaces = lm * w;
    for (int p = 0; p < nplaces; p++) last[p] = -1;
    for (int i = 0; i < n; i++) {
        int p = (in[i].li % lm) * w + in[i].mb % w;
        if (last[p] >= in[i].first) return false;
        if (in[i].last > last[p]) last[p] = in[i].last;
    }
    return true;
}

/* The fewest places (lm · w) for the family's instances: lm from 1 (every
 * layer shares) up to the class's layers, w from 1 up to the microbatches. */
static void choose_places(const Sched *s, const RankClass *c, const int *ids, int n, BufFamily *f, Arena *tmp)
{
    int nl = 0;
    for (int k = 0; k < c->nchunks; k++)
        if (c->chunks[k].nlayers > nl) nl = c->chunks[k].nlayers;
    int m = (int)s->part->m;
    if (nl < 1) nl = 1;
    int *last = arena_alloc(tmp, sizeof(int) * (size_t)(nl * (m + 1) + 1));
    Inst *in = arena_alloc(tmp, sizeof(Inst) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        const Buffer *b = &s->bufs[ids[i]];
        in[i] = (Inst){layer_coord(c, b), b->mb < 0 ? 0 : b->mb, b->first, b->last};
    }
    int64_t best = -1;
    for (int lm = 1; lm <= nl; lm = lm < 8 || lm == nl ? lm + 1 : nl) {
        for (int w = 1; w <= m && (best < 0 || (int64_t)lm * w < best); w++) {
            if (!places_ok(in, n, lm, w, last)) continue;
            best = (int64_t)lm * w;
            f->lm = lm, f->w = w;
            break;
        }
    }
    if (best < 0) die("mem: the %s buffers of stage %d cannot be laid out by layer and microbatch", s->bufs[ids[0]].name,
                      c->stage);
}

/* A family's lifetimes as sorted, merged intervals. */
typedef struct Spans { int (*iv)[2]; int n; } Spans;

/* Do two families' lifetimes meet? */
static bool spans_meet(const Spans *a, const Spans *b)
{
    int i = 0, j = 0;
    while (i < a->n && j < b->n) {
        if (a->iv[i][1] < b->iv[j][0]) i++;
        else if (b->iv[j][1] < a->iv[i][0]) j++;
        else return true;
    }
    return false;
}

/* The lifetimes of a family's instances (ids by birth), merged where they overlap. */
static Spans family_spans(const Sched *s, const int *ids, int n, Arena *tmp)
{
    Spans sp = {arena_alloc(tmp, sizeof(int[2]) * (size_t)(n + 1)), 0};
    for (int i = 0; i < n; i++) {
        const Buffer *b = &s->bufs[ids[i]];
        if (sp.n && b->first <= sp.iv[sp.n - 1][1]) {
            if (b->last > sp.iv[sp.n - 1][1]) sp.iv[sp.n - 1][1] = b->last;
        } else {
            sp.iv[sp.n][0] = b->first, sp.iv[sp.n][1] = b->last;
            sp.n++;
        }
    }
    return sp;
}

/* First fit of the families (blocks of bytes[f], conflicting pairwise as
 * meet says) in the order given, from base; offsets into off; returns the top. */
static int64_t fit_blocks(int nf, const int *order, const int64_t *bytes, const bool *meet, int64_t base, int64_t *off)
{
    int64_t top = base;
    for (int k = 0; k < nf; k++) {
        int f = order[k];
        int64_t at = base;
        for (bool moved = true; moved;) {   /* bump past every placed block it meets */
            moved = false;
            for (int j = 0; j < k; j++) {
                int g = order[j];
                if (!meet[(size_t)f * nf + g] || off[g] >= at + bytes[f] || off[g] + bytes[g] <= at) continue;
                at = off[g] + bytes[g], moved = true;
            }
        }
        off[f] = at;
        if (at + bytes[f] > top) top = at + bytes[f];
    }
    return top;
}

/* The place of a buffer in its family's block: layer-major with arithmetic
 * places, slot-major with the pipeline's slots (its (chunk, microbatch)'s). */
static int64_t place_of(const RankClass *c, const BufFamily *fa, const Buffer *b)
{
    int li = layer_coord(c, b) % fa->lm;
    if (fa->slot) {
        int chunk = family_chunk(c, b), mb = b->mb < 0 ? 0 : b->mb;
        return ((int64_t)fa->slot[chunk * fa->m + mb] * fa->lm + li) * fa->size;
    }
    return ((int64_t)li * fa->w + (b->mb < 0 ? 0 : b->mb % fa->w)) * fa->size;
}

/* A (chunk, microbatch) of a family with its instances' lifetime. */
typedef struct Unit { int first, last, chunk, mb; } Unit;

/* Orders units by birth. */
static int by_first(const void *pa, const void *pb)
{
    const Unit *x = pa, *y = pb;
    return x->first != y->first ? x->first - y->first : x->chunk != y->chunk ? x->chunk - y->chunk : x->mb - y->mb;
}

/* The same role kept by several model chunks of an interleaved stage: their
 * microbatch windows peak at different times, so instead of a block per
 * chunk (w places each), one block whose places are the slots of a colouring
 * of the (chunk, microbatch) pairs by lifetime (as few as are ever live at
 * once: an interval graph).  The families fams[mem[0..nm)] (one per chunk;
 * their buffers ids) become fams[mem[0]] when that takes fewer bytes. */
static void merge_chunks(ClassMem *cm, Sched *s, const int *mem, int nm, const int *ids, int n, Arena *tmp)
{
    const RankClass *c = cm->cls;
    int m = (int)s->part->m, nunits = c->nchunks * m, lm = 1;
    int64_t size = 0, apart = 0;
    for (int j = 0; j < nm; j++) {
        const BufFamily *fa = &cm->fams[mem[j]];
        apart += (int64_t)fa->lm * fa->w * fa->size;
        if (fa->size > size) size = fa->size;
    }
    Unit *u = arena_alloc(tmp, sizeof(Unit) * (size_t)(nunits + 1));
    for (int k = 0; k < nunits; k++) u[k] = (Unit){-1, -1, k / m, k % m};
    for (int i = 0; i < n; i++) {
        const Buffer *b = &s->bufs[ids[i]];
        if (b->mb < 0) return;                      /* not per microbatch */
        Unit *x = &u[family_chunk(c, b) * m + b->mb];
        if (x->first < 0 || b->first < x->first) x->first = b->first;
        if (b->last > x->last) x->last = b->last;
        if (layer_coord(c, b) + 1 > lm) lm = layer_coord(c, b) + 1;
    }
    qsort(u, (size_t)nunits, sizeof(Unit), by_first);
    int *slot = arena_alloc(&g_arena, sizeof(int) * (size_t)(nunits + 1));
    int *busy = arena_alloc(tmp, sizeof(int) * (size_t)(nunits + 1));     /* per colour: its last op */
    int ncolours = 0;
    for (int k = 0; k < nunits; k++) {      /* greedy by birth: optimal for intervals */
        if (u[k].first < 0) continue;
        int col = 0;
        while (col < ncolours && busy[col] >= u[k].first) col++;
        if (col == ncolours) ncolours++;
        busy[col] = u[k].last;
        slot[u[k].chunk * m + u[k].mb] = col;
    }
    if ((int64_t)ncolours * lm * size >= apart) return;
    BufFamily *fa = &cm->fams[mem[0]];
    fa->chunk = -1, fa->lm = lm, fa->w = ncolours, fa->size = size, fa->slot = slot, fa->m = m;
    for (int j = 1; j < nm; j++) fa->ninst += cm->fams[mem[j]].ninst, cm->fams[mem[j]].ninst = 0;
    for (int i = 0; i < n; i++) s->bufs[ids[i]].fam = mem[0];
}

/* Each family's buffers by birth: ids[first[f - f0] .. first[f - f0 + 1]) for
 * the families f0 .. f0 + nf of the n transients keys. */
static void family_members(const Sched *s, const Key *keys, int n, int f0, int nf, int *ids, int *first, Arena *tmp)
{
    int *fill = arena_alloc(tmp, sizeof(int) * (size_t)(nf + 1));
    memset(first, 0, sizeof(int) * (size_t)(nf + 1));
    for (int i = 0; i < n; i++) first[s->bufs[keys[i].id].fam - f0 + 1]++;
    for (int f = 0; f < nf; f++) first[f + 1] += first[f];
    memcpy(fill, first, sizeof(int) * (size_t)(nf + 1));
    for (int i = 0; i < n; i++) ids[fill[s->bufs[keys[i].id].fam - f0]++] = keys[i].id;
}

/* Sorts n keys of transients (a: the birth, an op of nops) as by_key does:
 * by counting births, then each op's few births by the rest (a schedule's
 * buffers are born a few per op: qsort's comparisons were most of the sort). */
static void sort_by_birth(Key *keys, int n, int nops, Arena *tmp)
{
    int *at = arena_alloc(tmp, sizeof(int) * (size_t)(nops + 2));
    Key *out = arena_alloc(tmp, sizeof(Key) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        if (keys[i].a < 0 || keys[i].a >= nops) die("mem: a buffer born at op %lld of %d", (long long)keys[i].a, nops);
        at[keys[i].a + 1]++;
    }
    for (int k = 0; k < nops; k++) at[k + 1] += at[k];
    for (int i = 0; i < n; i++) out[at[keys[i].a]++] = keys[i];
    /* at[k] is now the end of op k's births */
    for (int k = 0, lo = 0; k < nops; lo = at[k++]) {
        int hi = at[k];
        if (hi - lo > 32) {
            qsort(out + lo, (size_t)(hi - lo), sizeof(Key), by_key);
            continue;
        }
        for (int i = lo + 1; i < hi; i++)
            for (int j = i; j > lo && by_key(&out[j], &out[j - 1]) < 0; j--) {
                Key x = out[j];
                out[j] = out[j - 1], out[j - 1] = x;
            }
    }
    memcpy(keys, out, sizeof(Key) * (size_t)n);
}

/* Lays out one space: the persistent buffers at the bottom in order, then
 * the transients by family (arithmetic places; the chunks of an interleaved
 * stage merged when that is smaller), each family's block by first fit among
 * the blocks it is live with (born first, then largest first; and largest
 * first: the tighter).  Returns the arena size. */
static int64_t layout_space(ClassMem *cm, Sched *s, int space, Arena *tmp)
{
    const RankClass *c = cm->cls;
    int64_t base = 0;
    Key *keys = arena_alloc(tmp, sizeof(Key) * (size_t)(s->nbufs + 1));
    int n = 0;
    for (int k = 0; k < s->nbufs; k++) {
        Buffer *b = &s->bufs[k];
        if (b->space != space) continue;
        b->fam = -1;
        if (b->persistent) {
            b->offset = base;
            base += align_up(b->bytes);
        } else {
            keys[n++] = (Key){b->first, -b->bytes, b->last, k};
        }
    }
    sort_by_birth(keys, n, s->nops, tmp);
    /* the families, in the order their first buffer is born */
    int f0 = cm->nfams;
    for (int i = 0; i < n; i++) {
        Buffer *b = &s->bufs[keys[i].id];
        int f = f0, chunk = family_chunk(c, b);
        while (f < cm->nfams && !same_family(&cm->fams[f], b, chunk)) f++;
        if (f == cm->nfams)
            cm->fams[cm->nfams++] = (BufFamily){.role = b->role, .sub = b->sub, .idx = b->idx,
                                                .chunk = chunk, .space = space, .lm = 1, .w = 1};
        BufFamily *fa = &cm->fams[f];
        fa->ninst++;
        if (align_up(b->bytes) > fa->size) fa->size = align_up(b->bytes);
        b->fam = f;
    }
    int nf = cm->nfams - f0;
    if (nf == 0) return base;
    int *ids = arena_alloc(tmp, sizeof(int) * (size_t)(n + 1)), *first = arena_alloc(tmp, sizeof(int) * (size_t)(nf + 1));
    family_members(s, keys, n, f0, nf, ids, first, tmp);
    for (int f = 0; f < nf; f++) choose_places(s, c, ids + first[f], first[f + 1] - first[f], &cm->fams[f0 + f], tmp);
    /* one role of several chunks: merged into one block when that is smaller */
    int *mem = arena_alloc(tmp, sizeof(int) * (size_t)(nf + 1)), *ids2 = arena_alloc(tmp, sizeof(int) * (size_t)(n + 1));
    for (int f = 0; f < nf && c->nchunks > 1; f++) {
        const BufFamily *fa = &cm->fams[f0 + f];
        if (!fa->ninst || fa->chunk != 0) continue;
        int nm = 0, k = 0;
        for (int g = f; g < nf; g++) {
            const BufFamily *x = &cm->fams[f0 + g];
            if (x->ninst && x->chunk >= 0 && x->role == fa->role && x->sub == fa->sub && x->idx == fa->idx) mem[nm++] = f0 + g;
        }
        for (int j = 0; j < nm; j++)
            for (int i = first[mem[j] - f0]; i < first[mem[j] - f0 + 1]; i++) ids2[k++] = ids[i];
        if (nm > 1) merge_chunks(cm, s, mem, nm, ids2, k, tmp);
    }
    family_members(s, keys, n, f0, nf, ids, first, tmp);
    int64_t *bytes = arena_alloc(tmp, sizeof(int64_t) * (size_t)nf);
    Spans *spans = arena_alloc(tmp, sizeof(Spans) * (size_t)nf);
    for (int f = 0; f < nf; f++) {
        const BufFamily *fa = &cm->fams[f0 + f];
        bytes[f] = fa->ninst ? (int64_t)fa->lm * fa->w * fa->size : 0;
        spans[f] = family_spans(s, ids + first[f], first[f + 1] - first[f], tmp);
    }
    bool *meet = arena_alloc(tmp, sizeof(bool) * (size_t)nf * (size_t)nf);
    for (int f = 0; f < nf; f++)
        for (int g = f + 1; g < nf; g++) meet[(size_t)f * nf + g] = meet[(size_t)g * nf + f] = spans_meet(&spans[f], &spans[g]);
    int *order = arena_alloc(tmp, sizeof(int) * (size_t)nf);
    int64_t *off[2];
    int64_t top[2];
    for (int t = 0; t < 2; t++) {   /* 0: born first (the families are in birth order), then larger; 1: larger first */
        off[t] = arena_alloc(tmp, sizeof(int64_t) * (size_t)nf);
        for (int f = 0; f < nf; f++) order[f] = f;
        for (int i = 1; t == 1 && i < nf; i++)
            for (int j = i; j > 0 && bytes[order[j]] > bytes[order[j - 1]]; j--) {
                int x = order[j];
                order[j] = order[j - 1], order[j - 1] = x;
            }
        top[t] = fit_blocks(nf, order, bytes, meet, base, off[t]);
    }
    int best = top[1] < top[0];
    for (int f = 0; f < nf; f++) cm->fams[f0 + f].base = off[best][f];
    for (int i = 0; i < n; i++) {
        Buffer *b = &s->bufs[keys[i].id];
        const BufFamily *fa = &cm->fams[b->fam];
        b->offset = fa->base + place_of(c, fa, b);
    }
    return top[best];
}

/* ---- peaks ------------------------------------------------------------------------ */

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

/* Peaks per space, the device peak's op and its breakdown by category: the
 * live bytes of every space, whole and by category, swept once over the ops
 * (a buffer counts from its first op to its last; a maximum can only be new
 * at an op where a buffer is born; the peak's op is the first at the peak). */
static void peaks(ClassMem *cm, Arena *tmp)
{
    const Sched *s = cm->sched;
    int n = s->nops > 0 ? s->nops : 1;
    /* the buffers born at each op, and those whose last op is just before it (CSR) */
    int *born = arena_alloc(tmp, sizeof(int) * (size_t)(n + 2)), *gone = arena_alloc(tmp, sizeof(int) * (size_t)(n + 2));
    int *bids = arena_alloc(tmp, sizeof(int) * (size_t)(s->nbufs + 1)), *gids = arena_alloc(tmp, sizeof(int) * (size_t)(s->nbufs + 1));
    for (int k = 0; k < s->nbufs; k++) {
        const Buffer *b = &s->bufs[k];
        if (b->space < 0 || b->space >= NSPACES || b->first >= n) continue;
        born[b->first + 1]++;
        if (b->last + 1 < n) gone[b->last + 2]++;
    }
    for (int i = 0; i <= n; i++) born[i + 1] += born[i], gone[i + 1] += gone[i];
    for (int k = 0; k < s->nbufs; k++) {
        const Buffer *b = &s->bufs[k];
        if (b->space < 0 || b->space >= NSPACES || b->first >= n) continue;
        bids[born[b->first]++] = k;
        if (b->last + 1 < n) gids[gone[b->last + 1]++] = k;
    }
    /* born[i] is now where op i + 1's births start: op i's are [born[i - 1], born[i]) */
    int64_t live[NSPACES][NCATS + 1] = {{0}}, most[NSPACES][NCATS + 1] = {{0}};   /* [NCATS]: the space's whole */
    cm->peak_op = 0;
    for (int i = 0, jb = 0, jg = 0; i < n; i++) {
        for (; jg < gone[i]; jg++) {
            const Buffer *b = &s->bufs[gids[jg]];
            live[b->space][NCATS] -= b->bytes;
            if (b->cat >= 0 && b->cat < NCATS) live[b->space][b->cat] -= b->bytes;
        }
        if (jb == born[i]) continue;
        int first = jb;
        for (; jb < born[i]; jb++) {
            const Buffer *b = &s->bufs[bids[jb]];
            live[b->space][NCATS] += b->bytes;
            if (b->cat >= 0 && b->cat < NCATS) live[b->space][b->cat] += b->bytes;
        }
        /* only a space and category a buffer was born in can be at a new
         * maximum: those of op i's births, once all are counted */
        for (int j = first; j < born[i]; j++) {
            const Buffer *b = &s->bufs[bids[j]];
            int sp = b->space;
            if (live[sp][NCATS] > most[sp][NCATS]) {
                most[sp][NCATS] = live[sp][NCATS];
                if (sp == SPACE_DEVICE) cm->peak_op = i;
            }
            if (b->cat >= 0 && b->cat < NCATS && live[sp][b->cat] > most[sp][b->cat]) most[sp][b->cat] = live[sp][b->cat];
        }
    }
    for (int sp = 0; sp < NSPACES; sp++) cm->peak[sp] = most[sp][NCATS];
    for (int c = 0; c < NCATS; c++) {
        cm->max_cat[c] = most[SPACE_DEVICE][c];
        cm->host_cat[c] = most[SPACE_HOST][c];
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
    Arena tmp = {0};    /* the layout's scratch: back to the pool for the next class when done */
    /* room for a family per buffer while they are found, in the scratch; the
     * plan keeps the few there are (a 64-stage plan's buffers would leave
     * some 20 MB of empty room behind) */
    cm->fams = arena_alloc(&tmp, sizeof(BufFamily) * (size_t)(s->nbufs + 1));
    cm->nfams = 0;
    for (int sp = 0; sp < NSPACES; sp++) cm->arena[sp] = layout_space(cm, s, sp, &tmp);
    peaks(cm, &tmp);
    BufFamily *fams = arena_alloc(&g_arena, sizeof(BufFamily) * (size_t)(cm->nfams + 1));
    memcpy(fams, cm->fams, sizeof(BufFamily) * (size_t)cm->nfams);
    cm->fams = fams;
    arena_free(&tmp);
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
