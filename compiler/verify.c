/* verify.c — the schedule verifier, run on every plan before anything is
 * emitted.  A schedule that fails is a compiler bug (the caller exits 3); each
 * failure names the ops:
 *
 *   internal error: schedule of stage S: <what>: op N (label) on stream X and op M (label) on stream Y
 *
 * The checks, over sim.h's conventions (ops of a stream run in list order; an
 * OP_WAIT holds its stream until the op it names has ended):
 *  1. collectives: every group's members issue the same collectives in the
 *     same order with the same sizes.  Members of a tp or dp group share a
 *     rank class, so their sequences are one list; the groups spanning classes
 *     (the tied embedding's all-reduce between the first and last stage, the
 *     global gradient norm over the world) are compared class against class;
 *  2. point to point: every send has its receive (same microbatch, the
 *     neighbouring model chunk, the same size), and the step cannot deadlock:
 *     every class's streams are run in order with blocking sends and receives
 *     (both ends must have reached the transfer) and cross-class collectives
 *     (every member must have), order only, no times;
 *  3. events: a vector clock per stream over the list (an OP_WAIT takes in
 *     the clock of the op it waits for); a read or write of a buffer on stream
 *     S after a write on stream T != S needs S's clock to have seen that write,
 *     and a write after a read likewise (ZeRO 0-1's gradients by bucket,
 *     tp_comm_overlap full's part outputs by token-row chunk: buf_op_parts).  A
 *     ZeRO-3 inner wait (Op.inner) must name the gather of a unit the next op
 *     on its stream computes with, and covers only that op's read of that
 *     unit: each module's parameters are read after their own wait, not
 *     after another module's (whose gather came later on the same stream);
 *  4. the arena: no two buffers share bytes while both are live, and when a
 *     buffer takes bytes another held earlier, every use of the earlier one
 *     happens before every use of the later one — swept over each arena in
 *     list order with segment trees over the byte offsets, so a 16 384-GPU
 *     plan checks in a fraction of a second;
 *  5. split backwards (tp_comm_overlap): on the compute stream, every layer
 *     part's data op is followed by that part's weight op, waits aside, and
 *     every weight op follows its data op — the weight op reads what the data
 *     op leaves in its scratch, an order within one stream that 3 does not see.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

enum { VERIFY_MAX_REPORTS = 24 };

/* The group a communication op belongs to, as the verifier sees it. */
enum { VG_NONE, VG_TP, VG_DP, VG_P2P, VG_EMBED, VG_WORLD, NVG, VG_WAIT = NVG };   /* VG_WAIT: a wait */
static const char *const vg_names[NVG] = {"none", "tp", "dp", "pp", "embed", "world"};

typedef int Clock[NSTREAMS];

/* Scratch reused from class to class (a 64-stage plan would otherwise touch
 * 64 times the memory of one class); freed when the verifier returns. */
enum { P_CLK, P_AT, P_ACC, P_FIRST, P_LAST, P_IDS, P_XS, P_XS2, P_CNT, P_BORN, P_DIED, P_LIVE, P_LIVE2, P_DEAD, P_DEAD2,
       NPOOLS };
typedef struct Pool { void *p; size_t cap; } Pool;

typedef struct V {
    const Plan *mp;
    FILE *out;
    int fails, reported;
    Clock *clk;                 /* the class being checked: per op, its stream's clock after it */
    unsigned char **grp, **strm;        /* per class, per op: its group, its stream (NSTREAMS: none), */
    int **dep;                  /* and a wait's target (-1: not a wait or none; -2: not before it),
                                   so the later checks need not walk the ops again */
    Pool pool[NPOOLS];
} V;

/* Scratch pool k of at least `bytes`, its old contents dropped. */
static void *vscratch(V *v, int k, size_t bytes)
{
    Pool *pl = &v->pool[k];
    if (bytes > pl->cap) {
        free(pl->p);
        pl->cap = bytes > 2 * pl->cap ? bytes : 2 * pl->cap;
        pl->p = malloc(pl->cap);
        if (!pl->p) die("verify: out of memory (%zu bytes)", pl->cap);
    }
    return pl->p;
}

/* The schedule of class c. */
static const Sched *vsched(const V *v, int c) { return &v->mp->sched.classes[c]; }

/* One op as a failure names it: "op 12 (fwd L3 mb0) on stream compute". */
static const char *vop(const V *v, int c, int op, int from)
{
    const Sched *s = vsched(v, c);
    if (op < 0 || op >= s->nops) return "no op";
    const char *stage = c != from ? arena_printf(&g_arena, " of stage %d", s->cls->stage) : "";
    return arena_printf(&g_arena, "op %d (%s) on stream %s%s", op, sched_op_label(s, op),
                        sched_stream_name(s->ops[op].stream), stage);
}

/* Reports one failure of class c naming two ops (op2 < 0: one). */
static void vfail(V *v, int c, const char *what, int op1, int c2, int op2)
{
    v->fails++;
    if (!v->out || v->reported++ >= VERIFY_MAX_REPORTS) return;
    const char *a = vop(v, c, op1, c);
    fprintf(v->out, "internal error: schedule of stage %d: %s: %s", vsched(v, c)->cls->stage, what, a);
    if (op2 >= 0) fprintf(v->out, " and %s", vop(v, c2, op2, c));
    fputc('\n', v->out);
}

/* Whether two layer backward ops are the halves of one part's backward. */
static bool same_part(const Op *a, const Op *b)
{
    return a->layer == b->layer && a->mb == b->mb && a->chunk == b->chunk && a->sub == b->sub;
}

/* Check 5: each data op of a split backward directly followed, on the
 * compute stream (waits aside), by its part's weight op. */
static void check_split(V *v, int c)
{
    const Sched *s = vsched(v, c);
    int data = -1;              /* a data op awaiting its weight op */
    for (int i = 0; i < s->nops; i++) {
        const Op *o = &s->ops[i];
        if (o->stream != ST_COMPUTE || o->kind == OP_WAIT) continue;
        bool w = o->kind == OP_LAYER_BWD && o->grads == GR_WEIGHT;
        if (data >= 0 && !(w && same_part(&s->ops[data], o)))
            vfail(v, c, "a split backward's data op not followed by its weight op", data, c, i);
        else if (data < 0 && w)
            vfail(v, c, "a weight op without its data op just before it", i, c, -1);
        data = o->kind == OP_LAYER_BWD && o->grads == GR_DATA ? i : -1;
    }
    if (data >= 0) vfail(v, c, "a split backward's data op not followed by its weight op", data, c, -1);
}

/* The group of op o. */
static int vgroup(const Op *o)
{
    switch (o->kind) {
    case OP_TP_ALLREDUCE: case OP_TP_ALLGATHER: case OP_TP_REDUCE_SCATTER: return VG_TP;
    case OP_GATHER: case OP_GRAD_REDUCE: case OP_PARAM_GATHER: return VG_DP;
    case OP_SEND_FWD: case OP_RECV_FWD: case OP_SEND_BWD: case OP_RECV_BWD: return VG_P2P;
    case OP_TIED_REDUCE: return VG_EMBED;
    case OP_GRAD_NORM: return VG_WORLD;
    default: return VG_NONE;
    }
}

/* ---- 3. events: vector clocks ---------------------------------------------------- */

/* The last write and read of a buffer (or one part of it) on each stream. */
typedef struct VAcc { int w[NSTREAMS], r[NSTREAMS]; } VAcc;

/* Per-buffer access state: entry 0 every access; for buffers with parts, 1
 * the whole-buffer ones and 2 + p part p's. */
typedef struct VBufs { VAcc *acc; int *at; } VBufs;

/* The entries an access by op o of buffer k touches: [*lo, *hi); *parted:
 * by part (checked against whole accesses too). */
static void vrange(const Sched *s, const VBufs *vb, int k, const Op *o, int *lo, int *hi, bool *parted)
{
    int at = vb->at[k], a, z;
    *parted = buf_op_parts(&s->bufs[k], o, &a, &z);
    if (!*parted) {
        *lo = at, *hi = at + 1;
        return;
    }
    *lo = at + 2 + a, *hi = at + 3 + (z < a ? a : z);
}

/* Checks that op i's access of buffer k follows, on its stream's clock,
 * every conflicting access on other streams. */
static void vcheck_access(V *v, int c, int i, int k, bool write, const VBufs *vb, const int *clk)
{
    const Sched *s = vsched(v, c);
    const Op *o = &s->ops[i];
    int lo, hi;
    bool parted;
    vrange(s, vb, k, o, &lo, &hi, &parted);
    for (int t = 0; t < NSTREAMS; t++) {
        if (t == o->stream) continue;
        int w = parted ? vb->acc[vb->at[k] + 1].w[t] : vb->acc[lo].w[t];
        int r = parted ? vb->acc[vb->at[k] + 1].r[t] : vb->acc[lo].r[t];
        for (int a = lo; parted && a < hi; a++) {
            if (vb->acc[a].w[t] > w) w = vb->acc[a].w[t];
            if (vb->acc[a].r[t] > r) r = vb->acc[a].r[t];
        }
        if (w > clk[t])
            vfail(v, c, arena_printf(&g_arena, "%s of %s not ordered after its write by an event",
                                     write ? "write" : "read", s->bufs[k].name), w, c, i);
        else if (write && r > clk[t])
            vfail(v, c, arena_printf(&g_arena, "write of %s not ordered after its read by an event",
                                     s->bufs[k].name), r, c, i);
    }
}

/* Records op i's access of buffer k. */
static void vrecord(const Sched *s, VBufs *vb, int k, int i, bool write)
{
    const Op *o = &s->ops[i];
    int lo, hi, st = o->stream;
    bool parted;
    vrange(s, vb, k, o, &lo, &hi, &parted);
    int at = vb->at[k];
    VAcc *all = &vb->acc[at];
    *(write ? &all->w[st] : &all->r[st]) = i;
    if (parted) {
        for (int a = lo; a < hi; a++) *(write ? &vb->acc[a].w[st] : &vb->acc[a].r[st]) = i;
    } else if (buf_parts(&s->bufs[k]) > 0) {
        *(write ? &vb->acc[at + 1].w[st] : &vb->acc[at + 1].r[st]) = i;
    }
}

/* Vector clocks over class c's list (clk[i]: op i's stream's clock after
 * it), checking every access against them. */
static void check_events(V *v, int c)
{
    const Sched *s = vsched(v, c);
    Clock *clk = vscratch(v, P_CLK, sizeof(Clock) * (size_t)(s->nops + 1));
    v->clk = clk;
    VBufs vb;
    vb.at = vscratch(v, P_AT, sizeof(int) * (size_t)(s->nbufs + 1));
    int na = 0;
    for (int k = 0; k < s->nbufs; k++) vb.at[k] = na, na += buf_parts(&s->bufs[k]) > 0 ? 2 + buf_parts(&s->bufs[k]) : 1;
    vb.acc = vscratch(v, P_ACC, sizeof(VAcc) * (size_t)(na + 1));
    memset(vb.acc, 0xff, sizeof(VAcc) * (size_t)na);    /* -1: no access */
    Clock cur[NSTREAMS];
    memset(cur, 0xff, sizeof cur);
    int inner[NSTREAMS][OP_MAX_UNITS], ninner[NSTREAMS] = {0};     /* the gathers of inner waits, per stream */
    unsigned char *grp = v->grp[c] = arena_alloc(&g_arena, (size_t)(s->nops + 1));
    unsigned char *strm = v->strm[c] = arena_alloc(&g_arena, (size_t)(s->nops + 1));
    int *dep = v->dep[c] = arena_alloc(&g_arena, sizeof(int) * (size_t)(s->nops + 1));
    for (int i = 0; i < s->nops; i++) {
        const Op *o = &s->ops[i];
        int st = o->stream;
        grp[i] = (unsigned char)vgroup(o);
        dep[i] = o->kind != OP_WAIT || o->aux < 0 ? -1 : o->aux < i ? o->aux : -2;
        if (o->kind == OP_WAIT) grp[i] = VG_WAIT;
        strm[i] = (unsigned char)(st >= 0 && st < NSTREAMS ? st : NSTREAMS);
        if (st < 0 || st >= NSTREAMS) {
            vfail(v, c, "op on no stream", i, c, -1);
            memset(clk[i], 0xff, sizeof(Clock));
            continue;
        }
        int at;
        if (o->kind == OP_WAIT && o->aux >= i) {
            vfail(v, c, "a wait for a later op (it can never end)", i, c, o->aux < s->nops ? o->aux : -1);
        } else if (o->kind == OP_WAIT && o->inner) {
            /* a module's own wait inside the next op: it orders that op's
             * reads of the unit it gathers, nothing else, until the op ends */
            if (sched_wait_unit(s, i, &at) < 0 || ninner[st] == OP_MAX_UNITS)
                vfail(v, c, "an inner wait for no unit the next op on its stream computes with", i, c, at);
            else
                inner[st][ninner[st]++] = o->aux;
        } else if (o->kind == OP_WAIT && o->aux >= 0) {
            for (int t = 0; t < NSTREAMS; t++)
                if (clk[o->aux][t] > cur[st][t]) cur[st][t] = clk[o->aux][t];
        } else if (o->kind != OP_WAIT) {
            for (int k = 0; k < o->nrd; k++) {
                const Buffer *b = &s->bufs[o->rd[k]];
                Clock mine;     /* a gathered unit's read: its own inner wait's clock too */
                memcpy(mine, cur[st], sizeof mine);
                for (int q = 0; q < ninner[st]; q++)
                    if (sched_gather_of(&s->ops[inner[st][q]], b))
                        for (int t = 0; t < NSTREAMS; t++)
                            if (clk[inner[st][q]][t] > mine[t]) mine[t] = clk[inner[st][q]][t];
                vcheck_access(v, c, i, o->rd[k], false, &vb, mine);
            }
            for (int k = 0; k < o->nwr; k++) vcheck_access(v, c, i, o->wr[k], true, &vb, cur[st]);
            for (int k = 0; k < o->nrd; k++) vrecord(s, &vb, o->rd[k], i, false);
            for (int k = 0; k < o->nwr; k++) vrecord(s, &vb, o->wr[k], i, true);
            for (int q = 0; q < ninner[st]; q++)    /* ended: its inner waits are behind it */
                for (int t = 0; t < NSTREAMS; t++)
                    if (clk[inner[st][q]][t] > cur[st][t]) cur[st][t] = clk[inner[st][q]][t];
            ninner[st] = 0;
        }
        cur[st][st] = i;
        memcpy(clk[i], cur[st], sizeof(Clock));
    }
}

/* ---- 4. the arena: segment trees over byte offsets ----------------------------------- */

/* A max tree over leaf intervals: `add` (live counts) or `chmax` (the last
 * uses of dead buffers, one channel per stream), and range maximum queries.
 * Bottom-up over a power of two of leaves (node 1 the root, leaf x at n + x):
 * a range [lo, hi) is covered by the nodes the two walks up from its ends
 * meet, and every ancestor of those lies on the paths from leaf lo and leaf
 * hi - 1 to the root, so an update or a query touches those two paths and
 * the nodes between them, no recursion (the recursive trees were a fifth of
 * the 1008B row's instructions). */
typedef struct Tree { int n; int *mx, *tag; } Tree;

/* A tree of at least n leaves with `ch` channels, every value `init`, in
 * scratch pools k and k + 1. */
static void tree_init(V *v, int k, Tree *t, int n, int ch, int init)
{
    t->n = 1;
    while (t->n < n) t->n *= 2;
    size_t sz = 2 * (size_t)t->n * (size_t)ch;
    t->mx = vscratch(v, k, sizeof(int) * sz);
    t->tag = vscratch(v, k + 1, sizeof(int) * sz);
    for (size_t i = 0; i < sz; i++) t->mx[i] = t->tag[i] = init;
}

/* ---- the live counts: tag[p] is an addition pending over p's leaves,
 *      mx[p] the largest leaf under p, tag[p] included ---- */

/* Moves node p's pending addition down to its children. */
static void live_push(Tree *t, int p)
{
    int d = t->tag[p];
    if (!d) return;
    t->mx[2 * p] += d, t->tag[2 * p] += d;
    t->mx[2 * p + 1] += d, t->tag[2 * p + 1] += d;
    t->tag[p] = 0;
}

/* Recomputes node p's largest from its children. */
static void live_pull(Tree *t, int p)
{
    int a = t->mx[2 * p], b = t->mx[2 * p + 1];
    t->mx[p] = (a > b ? a : b) + t->tag[p];
}

/* Adds d to leaves [lo, hi) and returns their largest value before it. */
static int tree_add_max(Tree *t, int lo, int hi, int d)
{
    int most = -(1 << 30);
    if (lo >= hi) return most;
    int l0 = lo + t->n, r0 = hi - 1 + t->n;
    /* the paths above leaves l0 and r0, from the root down (one node where they meet) */
    for (int h = __builtin_ctz((unsigned)t->n); h > 0; h--) {
        live_push(t, l0 >> h);
        if (r0 >> h != l0 >> h) live_push(t, r0 >> h);
    }
    for (int l = l0, r = r0 + 1; l < r; l >>= 1, r >>= 1) {
        if (l & 1) {
            if (t->mx[l] > most) most = t->mx[l];
            t->mx[l] += d, t->tag[l] += d, l++;
        }
        if (r & 1) {
            --r;
            if (t->mx[r] > most) most = t->mx[r];
            t->mx[r] += d, t->tag[r] += d;
        }
    }
    for (int l = l0 >> 1, r = r0 >> 1; l >= 1; l >>= 1, r >>= 1) {    /* and back up, a level at a time */
        live_pull(t, l);
        if (r != l) live_pull(t, r);
    }
    return most;
}

/* ---- the dead buffers' last uses: tag[p] a value every leaf under p has,
 *      mx[p] the largest under p, per stream ---- */

/* Raises leaves [lo, hi) of every stream's channel to at least val[k]. */
static void tree_chmax(Tree *t, int lo, int hi, const int *val)
{
    if (lo >= hi) return;
    int l0 = lo + t->n, r0 = hi - 1 + t->n;
    for (int l = l0, r = r0 + 1; l < r; l >>= 1, r >>= 1) {
        for (int side = 0; side < 2; side++) {
            if (!(side ? r & 1 : l & 1)) continue;
            int p = side ? --r : l++;
            int *tag = &t->tag[p * NSTREAMS], *mx = &t->mx[p * NSTREAMS];
            for (int k = 0; k < NSTREAMS; k++) {
                if (val[k] > tag[k]) tag[k] = val[k];
                if (val[k] > mx[k]) mx[k] = val[k];
            }
        }
    }
    /* every ancestor of a covering node: on the two paths (once where they meet) */
    for (int l = l0, r = r0; l >= 1; l >>= 1, r >>= 1)
        for (int p = l;; p = r) {
            int *mx = &t->mx[p * NSTREAMS];
            for (int k = 0; k < NSTREAMS; k++)
                if (val[k] > mx[k]) mx[k] = val[k];
            if (p == r) break;
        }
}

/* The largest value of every stream's channel over [lo, hi), into out: the
 * covering nodes' largest and the tags of every node on the two paths (each
 * holds a leaf of the range, so its tag is a value in the range). */
static void tree_max(const Tree *t, int lo, int hi, int *out)
{
    if (lo >= hi) return;
    int l0 = lo + t->n, r0 = hi - 1 + t->n;
    for (int l = l0, r = r0 + 1; l < r; l >>= 1, r >>= 1) {
        if (l & 1) {
            const int *mx = &t->mx[l++ * NSTREAMS];
            for (int k = 0; k < NSTREAMS; k++)
                if (mx[k] > out[k]) out[k] = mx[k];
        }
        if (r & 1) {
            const int *mx = &t->mx[--r * NSTREAMS];
            for (int k = 0; k < NSTREAMS; k++)
                if (mx[k] > out[k]) out[k] = mx[k];
        }
    }
    for (int l = l0, r = r0; l >= 1; l >>= 1, r >>= 1)
        for (int p = l;; p = r) {
            const int *tag = &t->tag[p * NSTREAMS];
            for (int k = 0; k < NSTREAMS; k++)
                if (tag[k] > out[k]) out[k] = tag[k];
            if (p == r) break;
        }
}

/* Sorts n non-negative int64 values (least significant digit first, 11 bits
 * a pass, as many passes as the largest value needs); tmp holds n. */
static void sort_i64(int64_t *a, int64_t *tmp, int n)
{
    int64_t most = 0;
    for (int i = 0; i < n; i++)
        if (a[i] > most) most = a[i];
    for (int shift = 0; shift < 63 && (most >> shift) > 0; shift += 11) {
        int cnt[2049] = {0};
        for (int i = 0; i < n; i++) cnt[((a[i] >> shift) & 2047) + 1]++;
        for (int k = 0; k < 2048; k++) cnt[k + 1] += cnt[k];
        for (int i = 0; i < n; i++) tmp[cnt[(a[i] >> shift) & 2047]++] = a[i];
        memcpy(a, tmp, sizeof(int64_t) * (size_t)n);
    }
}

/* The leaf index of byte offset x (a coordinate). */
static int leaf_of(const int64_t *xs, int n, int64_t x)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (xs[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* What the arena sweep knows of each buffer. */
typedef struct Uses { int *first, *last; } Uses;    /* [buffer · NSTREAMS + stream]: real uses */

/* The first and last use of every buffer on every stream (waits are not uses). */
static Uses buffer_uses(V *v, const Sched *s)
{
    Uses u;
    size_t n = (size_t)s->nbufs * NSTREAMS + 1;
    u.first = vscratch(v, P_FIRST, sizeof(int) * n);
    u.last = vscratch(v, P_LAST, sizeof(int) * n);
    memset(u.first, 0xff, sizeof(int) * n);
    memset(u.last, 0xff, sizeof(int) * n);
    for (int i = 0; i < s->nops; i++) {
        const Op *o = &s->ops[i];
        if (o->kind == OP_WAIT || o->stream < 0 || o->stream >= NSTREAMS) continue;
        for (int j = 0; j < o->nrd + o->nwr; j++) {
            int k = j < o->nrd ? o->rd[j] : o->wr[j - o->nrd];
            size_t x = (size_t)k * NSTREAMS + (size_t)o->stream;
            if (u.first[x] < 0) u.first[x] = i;
            u.last[x] = i;
        }
    }
    return u;
}

/* Buffer ids of one space sorted by a lifetime end (first or last), by counting. */
static int *sort_by_time(V *v, const Sched *s, const int *ids, int n, bool by_last)
{
    int *cnt = vscratch(v, P_CNT, sizeof(int) * (size_t)(s->nops + 2));
    int *out = vscratch(v, by_last ? P_DIED : P_BORN, sizeof(int) * (size_t)(n + 1));
    memset(cnt, 0, sizeof(int) * (size_t)(s->nops + 2));
    for (int j = 0; j < n; j++) cnt[(by_last ? s->bufs[ids[j]].last : s->bufs[ids[j]].first) + 1]++;
    for (int i = 0; i <= s->nops; i++) cnt[i + 1] += cnt[i];
    for (int j = 0; j < n; j++) out[cnt[by_last ? s->bufs[ids[j]].last : s->bufs[ids[j]].first]++] = ids[j];
    return out;
}

/* Reports the live buffer of ids[] sharing bytes with buffer b at its birth. */
static void report_overlap(V *v, int c, const int *ids, int n, int b)
{
    const Sched *s = vsched(v, c);
    const Buffer *x = &s->bufs[b];
    for (int j = 0; j < n; j++) {
        const Buffer *y = &s->bufs[ids[j]];
        if (ids[j] == b || y->first > x->first || y->last < x->first) continue;
        if (y->offset >= x->offset + x->bytes || x->offset >= y->offset + y->bytes) continue;
        vfail(v, c, arena_printf(&g_arena, "%s and %s share %s arena bytes while both are live", y->name, x->name,
                                 mem_space_name(x->space)), y->first, c, x->first);
        return;
    }
}

/* Sweeps one arena of class c in list order: at each buffer's birth, no live
 * buffer may share its bytes, and each of its first uses per stream must
 * follow (on that stream's clock) the last use on every other stream of the
 * dead buffers that held any of its bytes. */
static void check_arena(V *v, int c, int space, const Uses *u)
{
    const Sched *s = vsched(v, c);
    const Clock *clk = v->clk;
    int *ids = vscratch(v, P_IDS, sizeof(int) * (size_t)(s->nbufs + 1)), n = 0;
    for (int k = 0; k < s->nbufs; k++) {
        const Buffer *b = &s->bufs[k];
        if (b->space != space || b->bytes <= 0 || b->first < 0 || b->last < b->first || b->last >= s->nops) continue;
        ids[n++] = k;
    }
    if (n == 0) return;
    int64_t *xs = vscratch(v, P_XS, sizeof(int64_t) * (size_t)(2 * n));
    for (int j = 0; j < n; j++) xs[2 * j] = s->bufs[ids[j]].offset, xs[2 * j + 1] = s->bufs[ids[j]].offset + s->bufs[ids[j]].bytes;
    sort_i64(xs, vscratch(v, P_XS2, sizeof(int64_t) * (size_t)(2 * n)), 2 * n);
    int nx = 0;
    for (int j = 0; j < 2 * n; j++)
        if (nx == 0 || xs[j] != xs[nx - 1]) xs[nx++] = xs[j];
    int leaves = nx - 1 > 0 ? nx - 1 : 1;
    Tree live, dead;
    tree_init(v, P_LIVE, &live, leaves, 1, 0);
    tree_init(v, P_DEAD, &dead, leaves, NSTREAMS, -1);
    int *born = sort_by_time(v, s, ids, n, false), *died = sort_by_time(v, s, ids, n, true);
    for (int jb = 0, jd = 0; jb < n; jb++) {
        int b = born[jb];
        const Buffer *x = &s->bufs[b];
        for (; jd < n && s->bufs[died[jd]].last < x->first; jd++) {   /* retire the dead */
            int d = died[jd];
            const Buffer *y = &s->bufs[d];
            int lo = leaf_of(xs, nx, y->offset), hi = leaf_of(xs, nx, y->offset + y->bytes);
            tree_add_max(&live, lo, hi, -1);
            tree_chmax(&dead, lo, hi, &u->last[(size_t)d * NSTREAMS]);
        }
        int lo = leaf_of(xs, nx, x->offset), hi = leaf_of(xs, nx, x->offset + x->bytes);
        if (tree_add_max(&live, lo, hi, 1) > 0) report_overlap(v, c, ids, n, b);
        int lasts[NSTREAMS];
        memset(lasts, 0xff, sizeof lasts);
        tree_max(&dead, lo, hi, lasts);
        for (int t = 0; t < NSTREAMS; t++) {
            int last = lasts[t];
            if (last < 0) continue;
            for (int st = 0; st < NSTREAMS; st++) {
                int f = u->first[(size_t)b * NSTREAMS + (size_t)st];
                if (st == t || f < 0 || clk[f][t] >= last) continue;
                vfail(v, c, arena_printf(&g_arena, "%s reuses %s arena bytes while a use on another stream may be "
                                         "pending", x->name, mem_space_name(space)), last, c, f);
            }
        }
    }
}

/* ---- 1. collectives: the same order and sizes in every member ----------------------- */

/* Whether class c is a member of cross-class group g. */
static bool vmember(const V *v, int g, int c)
{
    const Partition *p = &v->mp->part;
    if (g == VG_WORLD) return p->world > 1;
    /* the tied embedding: the stage holding the first model chunk and the
     * stage holding the last (pp > 1) */
    if (g == VG_EMBED) return v->mp->model.tied && p->pp > 1 && (c == 0 || c == p->pp - 1);
    return false;
}

/* Compares the sequences of (kind, aux, bytes) the members of each group
 * spanning classes issue; flags a class issuing into a group it is not in. */
static void check_collectives(V *v)
{
    const Plan *mp = v->mp;
    int nc = mp->mem.nclasses;
    for (int g = VG_EMBED; g <= VG_WORLD; g++) {
        int **seq = arena_alloc(&g_arena, sizeof(int *) * (size_t)nc), *len = arena_alloc(&g_arena, sizeof(int) * (size_t)nc);
        int ref = -1;
        for (int c = 0; c < nc; c++) {
            const Sched *s = vsched(v, c);
            const unsigned char *grp = v->grp[c];
            int n = 0;
            for (int i = 0; i < s->nops; i++) n += grp[i] == g;
            seq[c] = arena_alloc(&g_arena, sizeof(int) * (size_t)(n + 1));
            len[c] = 0;
            for (int i = 0; n > 0 && i < s->nops; i++)
                if (grp[i] == g) seq[c][len[c]++] = i;
            if (len[c] > 0 && !vmember(v, g, c))
                vfail(v, c, arena_printf(&g_arena, "a collective of the %s group issued outside it", vg_names[g]),
                      seq[c][0], c, -1);
            if (vmember(v, g, c) && ref < 0) ref = c;
        }
        for (int c = ref + 1; ref >= 0 && c < nc; c++) {
            if (!vmember(v, g, c)) continue;
            const Sched *a = vsched(v, ref), *b = vsched(v, c);
            int n = len[c] > len[ref] ? len[c] : len[ref];
            for (int k = 0; k < n; k++) {
                const Op *x = k < len[ref] ? &a->ops[seq[ref][k]] : NULL, *y = k < len[c] ? &b->ops[seq[c][k]] : NULL;
                if (x && y && x->kind == y->kind && x->aux == y->aux && x->bytes == y->bytes) continue;
                const char *what = !x || !y ? "collective without a counterpart in another member of"
                                            : "collectives in a different order or size across";
                vfail(v, c, arena_printf(&g_arena, "%s the %s group", what, vg_names[g]),
                      y ? seq[c][k] : len[c] ? seq[c][len[c] - 1] : -1, ref, x ? seq[ref][k] : -1);
                break;
            }
        }
    }
}

/* ---- 2. point to point: pairs, then an order-only run of the whole step ------------ */

typedef struct Run {
    V *v;
    int nc, N;
    int *base;                  /* [nc + 1]: first global op of each class */
    int *partner;               /* [N]: a send's receive and back, or -1 */
    int *inst, *inst_need, *inst_cnt;   /* cross-class collectives: instance, members, arrived */
    int *inst_first, *inst_ops;         /* CSR: the ops of each instance */
    int ninst;
    int *st_first, *st_ops, *head;      /* per class × stream: ops in order, the next one */
    int *sid, *dep;             /* [N]: the op's class × stream; a wait's target (global), else -1 */
    unsigned char *what;        /* [N]: RUN_PLAIN, RUN_WAIT, RUN_P2P (no Op loads while running) */
    bool *done, *arrived;
    int *queue, qn;
    bool *queued;
} Run;

/* The class of global op g. */
static int run_class(const Run *r, int g)
{
    int lo = 0, hi = r->nc - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (r->base[mid] <= g) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* The op behind global number g. */
static const Op *run_op(const Run *r, int g)
{
    int c = run_class(r, g);
    return &vsched(r->v, c)->ops[g - r->base[c]];
}

/* Pairs every send with its receive: keyed by direction, the sender's model
 * chunk and the microbatch.  Returns false (reported) on any stray. */
static bool pair_p2p(Run *r)
{
    V *v = r->v;
    const Partition *p = &v->mp->part;
    int64_t nmc = p->pp * p->v, m = p->m, nk = 2 * nmc * m;
    int *send = arena_alloc(&g_arena, sizeof(int) * (size_t)(nk + 1)), *recv = arena_alloc(&g_arena, sizeof(int) * (size_t)(nk + 1));
    for (int64_t k = 0; k < nk; k++) send[k] = recv[k] = -1;
    bool ok = true;
    for (int c = 0; c < r->nc; c++) {
        const Sched *s = vsched(v, c);
        for (int i = 0; i < s->nops; i++) {
            if (v->grp[c][i] != VG_P2P) continue;
            const Op *o = &s->ops[i];
            bool is_send = o->kind == OP_SEND_FWD || o->kind == OP_SEND_BWD;
            bool bwd = o->kind == OP_SEND_BWD || o->kind == OP_RECV_BWD;
            if (o->chunk < 0 || o->chunk >= s->cls->nchunks || o->mb < 0 || o->mb >= m) {
                vfail(v, c, "transfer without a model chunk or microbatch", i, c, -1);
                ok = false;
                continue;
            }
            int64_t mc = s->cls->chunks[o->chunk].model_chunk, sender = is_send ? mc : bwd ? mc + 1 : mc - 1;
            int64_t peer = is_send ? (bwd ? mc - 1 : mc + 1) : sender;
            if (peer < 0 || peer >= nmc) {
                vfail(v, c, "transfer to or from a model chunk that does not exist", i, c, -1);
                ok = false;
                continue;
            }
            int *slot = &(is_send ? send : recv)[((bwd ? 1 : 0) * nmc + sender) * m + o->mb];
            int g = r->base[c] + i;
            if (*slot >= 0) {
                int c2 = run_class(r, *slot);
                vfail(v, c, "the same transfer issued twice", i, c2, *slot - r->base[c2]);
                ok = false;
                continue;
            }
            *slot = g;
        }
    }
    for (int64_t k = 0; k < nk; k++) {
        int a = send[k], b = recv[k];
        if (a < 0 && b < 0) continue;
        int ca = a >= 0 ? run_class(r, a) : -1, cb = b >= 0 ? run_class(r, b) : -1;
        if (a < 0 || b < 0) {
            int c = a >= 0 ? ca : cb, g = a >= 0 ? a : b;
            vfail(v, c, a >= 0 ? "a send without its receive" : "a receive without its send", g - r->base[c], c, -1);
            ok = false;
        } else if (run_op(r, a)->bytes != run_op(r, b)->bytes) {
            vfail(v, ca, "a send and its receive of different sizes", a - r->base[ca], cb, b - r->base[cb]);
            ok = false;
        } else {
            r->partner[a] = b, r->partner[b] = a;
        }
    }
    return ok;
}

/* Cross-class collectives: the k-th of a group in each member class is one. */
static void group_collectives(Run *r)
{
    V *v = r->v;
    int *cnt = arena_alloc(&g_arena, sizeof(int) * (size_t)(r->nc * NVG + 1));
    memset(cnt, 0, sizeof(int) * (size_t)(r->nc * NVG + 1));
    int most[NVG] = {0}, first[NVG + 1] = {0};
    for (int c = 0; c < r->nc; c++) {
        const Sched *s = vsched(v, c);
        for (int i = 0; i < s->nops; i++) {
            int g = v->grp[c][i];
            if (g != VG_EMBED && g != VG_WORLD) continue;
            int k = ++cnt[c * NVG + g];
            if (k > most[g]) most[g] = k;
        }
    }
    for (int g = 0; g < NVG; g++) first[g + 1] = first[g] + most[g];
    r->ninst = first[NVG];
    r->inst_need = arena_alloc(&g_arena, sizeof(int) * (size_t)(r->ninst + 1));
    r->inst_cnt = arena_alloc(&g_arena, sizeof(int) * (size_t)(r->ninst + 1));
    r->inst_first = arena_alloc(&g_arena, sizeof(int) * (size_t)(r->ninst + 2));
    r->inst_ops = arena_alloc(&g_arena, sizeof(int) * (size_t)(r->nc * (r->ninst + 1) + 1));
    memset(r->inst_need, 0, sizeof(int) * (size_t)(r->ninst + 1));
    for (int pass = 0; pass < 2; pass++) {
        memset(cnt, 0, sizeof(int) * (size_t)(r->nc * NVG + 1));
        for (int c = 0; c < r->nc; c++) {
            const Sched *s = vsched(v, c);
            for (int i = 0; i < s->nops; i++) {
                int g = v->grp[c][i];
                if (g != VG_EMBED && g != VG_WORLD) continue;
                int k = first[g] + cnt[c * NVG + g]++, gl = r->base[c] + i;
                if (pass == 0) {
                    r->inst_need[k]++;
                } else {
                    r->inst[gl] = k;
                    r->inst_ops[r->inst_first[k] + r->inst_cnt[k]++] = gl;
                }
            }
        }
        if (pass == 0) {
            r->inst_first[0] = 0;
            for (int k = 0; k < r->ninst; k++) r->inst_first[k + 1] = r->inst_first[k] + r->inst_need[k];
            memset(r->inst_cnt, 0, sizeof(int) * (size_t)(r->ninst + 1));
        }
    }
    memset(r->inst_cnt, 0, sizeof(int) * (size_t)(r->ninst + 1));
}

enum { RUN_PLAIN, RUN_WAIT, RUN_P2P };

/* Queues class c to be run again. */
static void run_wake(Run *r, int c)
{
    if (!r->queued[c]) r->queued[c] = true, r->queue[r->qn++] = c;
}

/* Op g ends: its stream moves on. */
static void run_finish(Run *r, int g)
{
    r->done[g] = true;
    r->head[r->sid[g]]++;
    run_wake(r, r->sid[g] / NSTREAMS);
}

/* Tries the op at the head of a stream; true if it ended. */
static bool run_try(Run *r, int g)
{
    if (r->what[g] == RUN_WAIT) {
        if (r->dep[g] != -1 && (r->dep[g] < 0 || !r->done[r->dep[g]])) return false;
        run_finish(r, g);
        return true;
    }
    if (r->what[g] == RUN_P2P) {    /* blocking: both ends must be there */
        int p = r->partner[g];
        r->arrived[g] = true;
        if (p < 0 || !r->arrived[p] || r->done[p]) return false;
        run_finish(r, p);
        run_finish(r, g);
        return true;
    }
    if (r->inst[g] >= 0) {          /* a collective across classes: every member */
        int k = r->inst[g];
        if (!r->arrived[g]) r->arrived[g] = true, r->inst_cnt[k]++;
        if (r->inst_cnt[k] < r->inst_need[k]) return false;
        for (int j = r->inst_first[k]; j < r->inst_first[k + 1]; j++) run_finish(r, r->inst_ops[j]);
        return true;
    }
    run_finish(r, g);
    return true;
}

/* Runs class c's streams as far as they go. */
static void run_class_streams(Run *r, int c)
{
    for (bool moved = true; moved;) {
        moved = false;
        for (int st = 0; st < NSTREAMS; st++) {
            int sid = c * NSTREAMS + st;
            while (r->head[sid] < r->st_first[sid + 1]) {
                int g = r->st_ops[r->head[sid]];
                if (r->done[g] || !run_try(r, g)) break;
                moved = true;
            }
        }
    }
}

/* Names a stuck op and what it waits for. */
static void report_deadlock(Run *r)
{
    V *v = r->v;
    int best = -1, other = -1;
    for (int sid = 0; sid < r->nc * NSTREAMS; sid++) {
        if (r->head[sid] >= r->st_first[sid + 1]) continue;
        int g = r->st_ops[r->head[sid]], o2 = -1;
        const Op *o = run_op(r, g);
        int c = run_class(r, g);
        if (o->kind == OP_WAIT && o->aux >= 0) o2 = r->base[c] + o->aux;
        else if (vgroup(o) == VG_P2P) o2 = r->partner[g];
        else if (r->inst[g] >= 0)
            for (int j = r->inst_first[r->inst[g]]; j < r->inst_first[r->inst[g] + 1] && o2 < 0; j++)
                if (!r->arrived[r->inst_ops[j]]) o2 = r->inst_ops[j];
        bool cross = o2 >= 0 && run_class(r, o2) != c;
        if (best < 0 || (cross && (other < 0 || run_class(r, other) == run_class(r, best)))) best = g, other = o2;
    }
    if (best < 0) return;
    int c = run_class(r, best), c2 = other >= 0 ? run_class(r, other) : c;
    vfail(v, c, "deadlock (blocking sends and receives, collectives across stages)", best - r->base[c], c2,
          other >= 0 ? other - r->base[c2] : -1);
}

/* Pairs the transfers, then (run) runs every class's streams in order. */
static void check_p2p(V *v, bool run)
{
    Run r = {.v = v, .nc = v->mp->mem.nclasses};
    r.base = arena_alloc(&g_arena, sizeof(int) * (size_t)(r.nc + 1));
    for (int c = 0; c < r.nc; c++) r.base[c + 1] = r.base[c] + vsched(v, c)->nops;
    r.N = r.base[r.nc];
    r.partner = arena_alloc(&g_arena, sizeof(int) * (size_t)(r.N + 1));
    r.inst = arena_alloc(&g_arena, sizeof(int) * (size_t)(r.N + 1));
    memset(r.partner, 0xff, sizeof(int) * (size_t)(r.N + 1));
    memset(r.inst, 0xff, sizeof(int) * (size_t)(r.N + 1));
    int before = v->fails;
    if (!pair_p2p(&r) || v->fails > before || !run) return;    /* the run would only restate it */
    group_collectives(&r);
    int ns = r.nc * NSTREAMS;
    r.st_first = arena_alloc(&g_arena, sizeof(int) * (size_t)(ns + 1));
    r.st_ops = arena_alloc(&g_arena, sizeof(int) * (size_t)(r.N + 1));
    r.head = arena_alloc(&g_arena, sizeof(int) * (size_t)(ns + 1));
    memset(r.st_first, 0, sizeof(int) * (size_t)(ns + 1));
    for (int c = 0; c < r.nc; c++) {
        const Sched *s = vsched(v, c);
        for (int i = 0; i < s->nops; i++)
            if (v->strm[c][i] < NSTREAMS) r.st_first[c * NSTREAMS + v->strm[c][i] + 1]++;
    }
    for (int sid = 0; sid < ns; sid++) r.st_first[sid + 1] += r.st_first[sid];
    memcpy(r.head, r.st_first, sizeof(int) * (size_t)(ns + 1));
    r.sid = arena_alloc(&g_arena, sizeof(int) * (size_t)(r.N + 1));
    r.dep = arena_alloc(&g_arena, sizeof(int) * (size_t)(r.N + 1));
    r.what = arena_alloc(&g_arena, (size_t)(r.N + 1));
    for (int c = 0; c < r.nc; c++) {
        const Sched *s = vsched(v, c);
        for (int i = 0; i < s->nops; i++) {
            int g = r.base[c] + i, d = v->dep[c][i];
            if (v->strm[c][i] >= NSTREAMS) continue;
            r.sid[g] = c * NSTREAMS + v->strm[c][i];
            r.st_ops[r.head[r.sid[g]]++] = g;
            r.what[g] = v->grp[c][i] == VG_WAIT ? RUN_WAIT : v->grp[c][i] == VG_P2P ? RUN_P2P : RUN_PLAIN;
            /* a wait for nothing ends at once; one for an op not before it never does */
            r.dep[g] = d >= 0 ? r.base[c] + d : d;
        }
    }
    memcpy(r.head, r.st_first, sizeof(int) * (size_t)(ns + 1));
    r.done = arena_alloc(&g_arena, sizeof(bool) * (size_t)(r.N + 1));
    r.arrived = arena_alloc(&g_arena, sizeof(bool) * (size_t)(r.N + 1));
    memset(r.done, 0, sizeof(bool) * (size_t)(r.N + 1));
    memset(r.arrived, 0, sizeof(bool) * (size_t)(r.N + 1));
    r.queue = arena_alloc(&g_arena, sizeof(int) * (size_t)(r.nc + 1));
    r.queued = arena_alloc(&g_arena, sizeof(bool) * (size_t)(r.nc + 1));
    for (int c = 0; c < r.nc; c++) r.queue[r.qn++] = c, r.queued[c] = true;
    while (r.qn > 0) {
        int c = r.queue[--r.qn];
        r.queued[c] = false;
        run_class_streams(&r, c);
    }
    for (int sid = 0; sid < ns; sid++)
        if (r.head[sid] < r.st_first[sid + 1]) {
            report_deadlock(&r);
            return;
        }
}

/* ---- the entry point ----------------------------------------------------------------- */

/* Checks every class's schedule; each failure is reported naming the ops. */
bool verify_plan(const Plan *mp, FILE *report)
{
    V v = {.mp = mp, .out = report};
    v.grp = arena_alloc(&g_arena, sizeof(unsigned char *) * (size_t)(mp->mem.nclasses + 1));
    v.strm = arena_alloc(&g_arena, sizeof(unsigned char *) * (size_t)(mp->mem.nclasses + 1));
    v.dep = arena_alloc(&g_arena, sizeof(int *) * (size_t)(mp->mem.nclasses + 1));
    for (int c = 0; c < mp->mem.nclasses; c++) {
        check_events(&v, c);
        check_split(&v, c);
        Uses u = buffer_uses(&v, vsched(&v, c));
        check_arena(&v, c, SPACE_DEVICE, &u);
        check_arena(&v, c, SPACE_HOST, &u);
    }
    int before = v.fails;
    check_collectives(&v);
    check_p2p(&v, v.fails == before);
    for (int k = 0; k < NPOOLS; k++) free(v.pool[k].p);
    if (report && v.reported > VERIFY_MAX_REPORTS)
        fprintf(report, "internal error: %d more schedule failures not shown\n", v.reported - VERIFY_MAX_REPORTS);
    return v.fails == 0;
}
