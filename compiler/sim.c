/* sim.c — a discrete-event simulation of one training step of every rank
 * class at once (one class per pipeline stage), on the schedule's streams.
 *
 * The rules (sim.h states the schedule's conventions):
 *  - each stream of each class runs its ops in list order, one at a time;
 *  - an op starts once the previous op of its stream has ended and its
 *    dependencies have: the op an OP_WAIT names, and — whether or not the
 *    schedule spells it as a wait — the last op of another stream that wrote a
 *    buffer it reads (data cannot move before it exists; a correct schedule
 *    orders these by events anyway, and the verifier checks that it does);
 *  - point-to-point transfers block like NCCL's (rendezvous): a send starts
 *    once its stream reaches it and its receive is posted (the receiving
 *    stream has reached the receive), occupies the sender's stream for the
 *    transfer, and the receive ends with it.  SimOpts.eager lets sends go
 *    without waiting (a receive posted ahead, or a buffered message); the
 *    receive still ends no earlier than the transfer;
 *  - collectives spanning rank classes (the tied-embedding all-reduce of the
 *    first and last stage, the global gradient norm) start when every member
 *    has reached them; the members of a tp or dp group share a class, so they
 *    are in step by construction;
 *  - a backend that runs each op when it is issued (the CPU backend priced
 *    from a profile, cost_at_issue) also starts a rank's op only after the op
 *    issued before it, on any stream, has ended — or, for a send or a
 *    receive, has been posted: those are non-blocking, and sends go eagerly.
 * No op ever waits for a resource other than its stream, so the start of every
 * op is fixed once its dependencies have ended: streams are advanced as far as
 * they can go, a blocked stream is woken when the op it waits for ends, and if
 * nothing can move while ops remain, that is a deadlock.
 */
#include "sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { PENDING, ARRIVED, DONE };

/* The simulation's state over all classes; ops are numbered globally. */
typedef struct Ctx {
    const Plan *mp;
    bool rendezvous;
    bool at_issue;              /* the backend runs each op when issued (cost_at_issue) */
    int nc, N;
    int *base;                  /* [nc + 1]: first global op of each class      */
    int *cls_of;                /* [N]                                          */
    unsigned char *kind, *stream; /* [N]: each op's OpKind and Stream, packed: the
                                   passes below scan these, not the ops themselves */
    unsigned char *group;       /* [N]: the CommGroup it communicates in (cost_group) */
    double *dur, *ready;        /* [N]: duration; time its dependencies allow   */
    SimOp *t;                   /* [N]: start and end                           */
    unsigned char *state;       /* [N]: PENDING, ARRIVED (at a rendezvous), DONE */
    int *cause, *rcause;        /* [N]: the op whose end fixed its start / ready */
    int *dep_first, *deps;      /* CSR: waited ops and cross-stream producers   */
    int ndeps, capdeps;
    int *stage_lo, *stage_hi;   /* [N]: an op's ZeRO-3 inner waits, [lo, hi) of: */
    int *stage_dep;             /* the gather each waits for, and how far into the op */
    double *stage_at;           /* (seconds) its module's first use is: the op stalls
                                   there until that gather has ended */
    int nstage, capstage;
    int *partner;               /* [N]: a receive's send, a send's receive      */
    int *sync;                  /* [N]: the cross-class collective it is in     */
    int *sync_first, *sync_ops, *sync_arrived;
    int nsync;
    int ns;                     /* streams: nc · NSTREAMS                       */
    int *st_first, *st_ops, *st_pos;
    int *wait_head, *wait_next; /* streams blocked on an op, as linked lists    */
    int *queue, qn;
    bool *queued;
} Ctx;

/* The schedule of class c. */
static const Sched *sched_of(const Ctx *x, int c) { return &x->mp->sched.classes[c]; }

/* An op's label; a wait names its target unless that is a wait too (a broken
 * schedule may chain waits into a cycle). */
static const char *label(const Sched *s, int i)
{
    const Op *o = &s->ops[i];
    if (o->kind != OP_WAIT) return sched_op_label(s, i);
    if (o->aux >= 0 && o->aux < s->nops && s->ops[o->aux].kind != OP_WAIT)
        return arena_printf(&g_arena, "wait(%s)", sched_op_label(s, o->aux));
    return arena_printf(&g_arena, "wait(op %d)", o->aux);
}

/* "stage 2 dp-comm op 41 grad_reduce bucket3" */
static const char *describe(const Ctx *x, int g)
{
    int c = x->cls_of[g];
    const Sched *s = sched_of(x, c);
    int i = g - x->base[c];
    return arena_printf(&g_arena, "stage %d %s op %d %s", s->cls->stage, sched_stream_name(s->ops[i].stream), i,
                        label(s, i));
}

/* ---- building the graph --------------------------------------------------------- */

/* Appends dependency g of the op whose list starts at first (once). */
static void dep_add(Ctx *x, int first, int g)
{
    for (int j = first; j < x->ndeps; j++)
        if (x->deps[j] == g) return;
    if (x->ndeps == x->capdeps) x->capdeps *= 2, x->deps = realloc(x->deps, sizeof(int) * (size_t)x->capdeps);
    if (!x->deps) die("sim: out of memory");
    x->deps[x->ndeps++] = g;
}

/* Dependencies: the op a wait names; the last writer, on another stream, of
 * each buffer an op reads — of each part it reads of a buffer accessed by
 * part (Buffer.nparts: a gradient bucket, the parameters gathered ahead;
 * Buffer.rows: a token-row chunk of tp_comm_overlap full's forward), so
 * that a layer depends on its own bucket's writer, not on the last one's. */
static void class_deps(Ctx *x, int c)
{
    const Sched *s = sched_of(x, c);
    /* per buffer: the last writer of any part at at[b], then of each part */
    int *at = malloc(sizeof(int) * (size_t)(s->nbufs + 1)), na = 0;
    for (int b = 0; b < s->nbufs; b++) at[b] = na, na += 1 + buf_parts(&s->bufs[b]);
    int *last = malloc(sizeof(int) * (size_t)(na + 1));
    for (int k = 0; k < na; k++) last[k] = -1;
    int pend[NSTREAMS];         /* per stream: the first stage of the inner waits before its next op */
    for (int k = 0; k < NSTREAMS; k++) pend[k] = -1;
    for (int i = 0; i < s->nops; i++) {
        const Op *o = &s->ops[i];
        int g = x->base[c] + i, first = x->ndeps;
        x->dep_first[g] = first;
        x->stage_lo[g] = x->stage_hi[g] = x->nstage;
        if (o->kind == OP_WAIT && o->inner) {   /* the next op's, inside it: nothing holds the stream here */
            int op, k = sched_wait_unit(s, i, &op);
            if (k < 0) die("sim: %s is an inner wait of no unit of the op after it", describe(x, g));
            if (x->nstage == x->capstage) {
                x->capstage = 2 * x->capstage + 64;
                x->stage_dep = realloc(x->stage_dep, sizeof(int) * (size_t)x->capstage);
                x->stage_at = realloc(x->stage_at, sizeof(double) * (size_t)x->capstage);
                if (!x->stage_dep || !x->stage_at) die("sim: out of memory");
            }
            if (pend[o->stream] < 0) pend[o->stream] = x->nstage;
            x->stage_dep[x->nstage] = x->base[c] + o->aux;
            x->stage_at[x->nstage++] = cost_unit_start(s, op, k) * x->dur[x->base[c] + op];
            continue;
        }
        if (o->kind == OP_WAIT) {
            if (o->aux < 0 || o->aux >= s->nops) die("sim: %s waits for op %d, not in the schedule", describe(x, g), o->aux);
            dep_add(x, first, x->base[c] + o->aux);
            continue;
        }
        if (pend[o->stream] >= 0) x->stage_lo[g] = pend[o->stream], pend[o->stream] = -1;   /* its inner waits */
        for (int k = 0; k < o->nrd; k++) {
            int b = o->rd[k], lo, hi;
            bool staged = false;    /* a unit an inner wait gathers: its stage, not the op's start */
            for (int j = x->stage_lo[g]; j < x->stage_hi[g]; j++)
                staged |= sched_gather_of(&s->ops[x->stage_dep[j] - x->base[c]], &s->bufs[b]);
            if (staged) continue;
            if (buf_op_parts(&s->bufs[b], o, &lo, &hi)) lo += at[b] + 1, hi += at[b] + 1;
            else lo = hi = at[b];
            for (int a = lo; a <= hi; a++) {
                int w = last[a];
                if (w >= 0 && x->stream[x->base[c] + w] != o->stream) dep_add(x, first, x->base[c] + w);
            }
        }
        for (int k = 0; k < o->nwr; k++) {
            int b = o->wr[k], lo, hi;
            if (!buf_op_parts(&s->bufs[b], o, &lo, &hi)) lo = 0, hi = buf_parts(&s->bufs[b]) - 1;
            last[at[b]] = i;
            for (int a = lo; a <= hi; a++) last[at[b] + 1 + a] = i;
        }
    }
    free(last);
    free(at);
}

/* Numbers the ops, prices them, lays out each stream's ops in order, and
 * finds their dependencies (class_deps), class by class: a class's ops are
 * read again while still in cache (a 64-stage plan's 120 MB of ops were
 * read from memory twice). */
static void build_ops(Ctx *x)
{
    x->base = arena_alloc(&g_arena, sizeof(int) * (size_t)(x->nc + 1));
    for (int c = 0; c < x->nc; c++) x->base[c + 1] = x->base[c] + sched_of(x, c)->nops;
    int N = x->N = x->base[x->nc];
    size_t n = (size_t)N + 1;
    /* the arrays every op's entry of is written below come uncleared (raw) */
    x->cls_of = arena_alloc_raw(&g_arena, sizeof(int) * n);
    x->kind = arena_alloc_raw(&g_arena, n);
    x->stream = arena_alloc_raw(&g_arena, n);
    x->group = arena_alloc_raw(&g_arena, n);
    x->dur = arena_alloc_raw(&g_arena, sizeof(double) * n);
    x->ready = arena_alloc(&g_arena, sizeof(double) * n);
    x->t = arena_alloc(&g_arena, sizeof(SimOp) * n);
    x->state = arena_alloc(&g_arena, n);
    x->cause = arena_alloc_raw(&g_arena, sizeof(int) * n);
    x->rcause = arena_alloc_raw(&g_arena, sizeof(int) * n);
    x->partner = arena_alloc_raw(&g_arena, sizeof(int) * n);
    x->sync = arena_alloc_raw(&g_arena, sizeof(int) * n);
    x->wait_head = arena_alloc_raw(&g_arena, sizeof(int) * n);
    x->ns = x->nc * NSTREAMS;
    x->st_first = arena_alloc(&g_arena, sizeof(int) * (size_t)(x->ns + 1));
    x->st_pos = arena_alloc(&g_arena, sizeof(int) * (size_t)x->ns);
    x->st_ops = arena_alloc_raw(&g_arena, sizeof(int) * n);
    x->wait_next = arena_alloc(&g_arena, sizeof(int) * (size_t)x->ns);
    x->queue = arena_alloc(&g_arena, sizeof(int) * (size_t)x->ns);
    x->queued = arena_alloc(&g_arena, sizeof(bool) * (size_t)x->ns);
    x->dep_first = arena_alloc_raw(&g_arena, sizeof(int) * n);
    x->stage_lo = arena_alloc(&g_arena, sizeof(int) * n);
    x->stage_hi = arena_alloc(&g_arena, sizeof(int) * n);
    x->capdeps = N + 16;
    x->deps = malloc(sizeof(int) * (size_t)x->capdeps);
    if (!x->deps) die("sim: out of memory");
    for (int c = 0; c < x->nc; c++) {
        const Sched *s = sched_of(x, c);
        for (int i = 0; i < s->nops; i++) {
            int g = x->base[c] + i;
            if (s->ops[i].stream < 0 || s->ops[i].stream >= NSTREAMS)
                die("sim: %s is on no stream (%d)", describe(x, g), s->ops[i].stream);
            x->cls_of[g] = c;
            x->kind[g] = (unsigned char)s->ops[i].kind;
            x->stream[g] = (unsigned char)s->ops[i].stream;
            x->group[g] = (unsigned char)cost_group(s, i);
            x->dur[g] = cost_op_time(x->mp, s, i);
            if (!(x->dur[g] >= 0))      /* negative or NaN: a pricing bug, not a plan to show (a link of
                                           bandwidth 0, which a hand-made Spec may have, prices inf) */
                die("sim: %s is priced at %g s", describe(x, g), x->dur[g]);
            x->cause[g] = x->rcause[g] = x->partner[g] = x->sync[g] = x->wait_head[g] = -1;
            x->st_first[c * NSTREAMS + s->ops[i].stream + 1]++;
        }
        class_deps(x, c);       /* while the class's ops are still in cache */
    }
    x->dep_first[N] = x->ndeps;
    /* the raw arrays' entry past the last op, as if cleared: nothing reads it */
    x->cls_of[N] = x->st_ops[N] = 0, x->kind[N] = x->stream[N] = x->group[N] = 0, x->dur[N] = 0;
    x->cause[N] = x->rcause[N] = x->partner[N] = x->sync[N] = x->wait_head[N] = 0;
    for (int k = 0; k < x->ns; k++) x->st_first[k + 1] += x->st_first[k];
    for (int k = 0; k < x->ns; k++) x->st_pos[k] = x->st_first[k], x->wait_next[k] = -1;
    for (int c = 0; c < x->nc; c++)
        for (int g = x->base[c]; g < x->base[c + 1]; g++) x->st_ops[x->st_pos[c * NSTREAMS + x->stream[g]]++] = g;
    for (int k = 0; k < x->ns; k++) x->st_pos[k] = x->st_first[k];
}

/* Pairs each receive with its send: the same microbatch, from the stage
 * holding the neighbouring model chunk. */
static void build_pairs(Ctx *x)
{
    const Partition *p = &x->mp->part;
    int64_t nmc = p->pp * p->v, m = p->m;
    int *send = arena_alloc(&g_arena, sizeof(int) * (size_t)(2 * nmc * m));
    for (int64_t k = 0; k < 2 * nmc * m; k++) send[k] = -1;
    for (int pass = 0; pass < 2; pass++)
        for (int c = 0; c < x->nc; c++) {
            const Sched *s = sched_of(x, c);
            for (int i = 0; i < s->nops; i++) {
                int k = x->kind[x->base[c] + i];
                bool isend = k == OP_SEND_FWD || k == OP_SEND_BWD;
                bool irecv = k == OP_RECV_FWD || k == OP_RECV_BWD;
                if (!(pass == 0 ? isend : irecv)) continue;
                const Op *o = &s->ops[i];
                if (o->chunk < 0 || o->chunk >= s->cls->nchunks || o->mb < 0 || o->mb >= m)
                    die("sim: %s has no chunk or microbatch", describe(x, x->base[c] + i));
                int64_t mc = s->cls->chunks[o->chunk].model_chunk;
                bool fwd = o->kind == OP_SEND_FWD || o->kind == OP_RECV_FWD;
                if (irecv) mc += fwd ? -1 : 1;      /* the sender's model chunk */
                if (mc < 0 || mc >= nmc) continue;  /* no sender: never completes */
                int *slot = &send[((fwd ? 0 : 1) * nmc + mc) * m + o->mb];
                int g = x->base[c] + i;
                if (isend) {
                    if (*slot >= 0) die("sim: %s and %s send the same microbatch", describe(x, *slot), describe(x, g));
                    *slot = g;
                } else if (*slot >= 0) {
                    if (x->partner[*slot] >= 0) die("sim: %s and %s receive the same send", describe(x, x->partner[*slot]), describe(x, g));
                    x->partner[g] = *slot;
                    x->partner[*slot] = g;
                }
            }
        }
}

/* Collectives spanning classes: the k-th op of a kind in each class that has
 * one is one collective. */
static void build_syncs(Ctx *x)
{
    static const int kinds[] = {OP_TIED_REDUCE, OP_GRAD_NORM};
    int *cnt = arena_alloc(&g_arena, sizeof(int) * (size_t)x->nc);
    int nk = (int)(sizeof kinds / sizeof kinds[0]);
    int *first = arena_alloc(&g_arena, sizeof(int) * (size_t)(nk + 1));
    /* groups per kind: the most occurrences in any class */
    for (int k = 0; k < nk; k++) {
        int most = 0;
        for (int c = 0; c < x->nc; c++) {
            int n = 0;
            for (int g = x->base[c]; g < x->base[c + 1]; g++) n += x->kind[g] == kinds[k];
            if (n > most) most = n;
        }
        first[k + 1] = first[k] + most;
    }
    x->nsync = first[nk];
    x->sync_first = arena_alloc(&g_arena, sizeof(int) * (size_t)(x->nsync + 2));
    x->sync_arrived = arena_alloc(&g_arena, sizeof(int) * (size_t)(x->nsync + 1));
    x->sync_ops = arena_alloc(&g_arena, sizeof(int) * (size_t)(x->N + 1));
    int *size = arena_alloc(&g_arena, sizeof(int) * (size_t)(x->nsync + 1));
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < nk; k++)
            for (int c = 0; c < x->nc; c++) {
                cnt[c] = 0;
                for (int g = x->base[c]; g < x->base[c + 1]; g++) {
                    if (x->kind[g] != kinds[k]) continue;
                    int grp = first[k] + cnt[c]++;
                    if (pass == 0) size[grp]++;
                    else x->sync_ops[x->sync_first[grp] + x->sync_arrived[grp]++] = g;
                }
            }
        if (pass == 0)
            for (int k = 0; k < x->nsync; k++) x->sync_first[k + 1] = x->sync_first[k] + size[k];
    }
    for (int k = 0; k < x->nsync; k++) {
        x->sync_arrived[k] = 0;
        if (size[k] < 2) continue;      /* a class alone: nothing to wait for */
        for (int j = x->sync_first[k]; j < x->sync_first[k + 1]; j++) x->sync[x->sync_ops[j]] = k;
    }
}

/* ---- running ---------------------------------------------------------------------- */

/* Stream sid waits until op g ends (or arrives at its rendezvous). */
static void block(Ctx *x, int sid, int g)
{
    x->wait_next[sid] = x->wait_head[g];
    x->wait_head[g] = sid;
}

/* Queues the streams waiting on op g. */
static void wake(Ctx *x, int g)
{
    for (int sid = x->wait_head[g], nx; sid >= 0; sid = nx) {
        nx = x->wait_next[sid];
        x->wait_next[sid] = -1;
        if (!x->queued[sid]) x->queued[sid] = true, x->queue[x->qn++] = sid;
    }
    x->wait_head[g] = -1;
}

/* Marks op g done from start to end, the op `cause` having fixed its start. */
static void finish(Ctx *x, int g, double start, double end, int cause)
{
    x->t[g] = (SimOp){start, end};
    x->cause[g] = cause;
    x->state[g] = DONE;
    wake(x, g);
}

/* A cross-class collective: waits for every member, then all run together. */
static bool start_sync(Ctx *x, int sid, int g)
{
    int k = x->sync[g];
    if (x->state[g] == PENDING) x->state[g] = ARRIVED, x->sync_arrived[k]++;
    if (x->sync_arrived[k] < x->sync_first[k + 1] - x->sync_first[k]) {
        block(x, sid, g);
        return false;
    }
    int best = g;
    for (int j = x->sync_first[k]; j < x->sync_first[k + 1]; j++)
        if (x->ready[x->sync_ops[j]] > x->ready[best]) best = x->sync_ops[j];
    double start = x->ready[best];
    for (int j = x->sync_first[k]; j < x->sync_first[k + 1]; j++) {
        int m = x->sync_ops[j];
        finish(x, m, start, start + x->dur[m], x->rcause[best]);
    }
    return true;
}

/* A layer op with ZeRO-3 inner waits, ready at r: its work runs from r and
 * stops at each module's first use until that module's gather has ended
 * (stages in order of how far in).  Its span is its work's seconds ending
 * where the last piece ends: the stalls count as the compute stream's idle
 * time before it (the exposed gathers), not as its busy time. */
static void staged(Ctx *x, int g, double r)
{
    int lo = x->stage_lo[g], n = x->stage_hi[g] - lo, ord[OP_MAX_UNITS];
    if (n > OP_MAX_UNITS) die("sim: %s has more than %d inner waits", describe(x, g), OP_MAX_UNITS);
    for (int i = 0; i < n; i++) {   /* by stage_at: the modules in the op's order */
        int j = i;
        for (; j > 0 && x->stage_at[lo + ord[j - 1]] > x->stage_at[lo + i]; j--) ord[j] = ord[j - 1];
        ord[j] = i;
    }
    double t = r, done = 0;
    int cause = x->rcause[g];
    for (int i = 0; i < n; i++) {
        int k = lo + ord[i], d = x->stage_dep[k];
        double at = fmin(x->stage_at[k], x->dur[g]);
        t += at - done, done = at;
        if (x->t[d].end > t) t = x->t[d].end, cause = d;
    }
    double end = t + x->dur[g] - done;
    finish(x, g, end - x->dur[g], end, end - x->dur[g] > r ? cause : x->rcause[g]);
}

/* Starts op g (its stream and dependencies allow it from ready[g]); false if
 * it must wait for another class. */
static bool start_op(Ctx *x, int sid, int g)
{
    int kind = x->kind[g], p = x->partner[g];
    double r = x->ready[g];
    if (x->sync[g] >= 0) return start_sync(x, sid, g);
    if (kind == OP_RECV_FWD || kind == OP_RECV_BWD) {
        if (x->state[g] == PENDING) x->state[g] = ARRIVED, wake(x, g);     /* posted */
        if (p < 0) return false;                                            /* never sent */
        if (x->state[p] != DONE) {
            block(x, sid, p);
            return false;
        }
        double end = fmax(r, x->t[p].end), start = fmin(end, fmax(r, x->t[p].start));
        finish(x, g, start, end, x->t[p].end > r ? p : x->rcause[g]);
        return true;
    }
    if (x->rendezvous && (kind == OP_SEND_FWD || kind == OP_SEND_BWD)) {
        if (p < 0) return false;                                            /* never received */
        if (x->state[p] == PENDING) {
            block(x, sid, p);
            return false;
        }
        bool later = x->ready[p] > r;
        double start = later ? x->ready[p] : r;
        finish(x, g, start, start + x->dur[g], later ? x->rcause[p] : x->rcause[g]);
        return true;
    }
    if (x->stage_hi[g] > x->stage_lo[g]) {
        staged(x, g, r);
        return true;
    }
    finish(x, g, r, r + x->dur[g], x->rcause[g]);
    return true;
}

/* Advances stream sid as far as its ops' dependencies allow. */
static void run_stream(Ctx *x, int sid)
{
    int first = x->st_first[sid], end = x->st_first[sid + 1];
    while (x->st_pos[sid] < end) {
        int pos = x->st_pos[sid], g = x->st_ops[pos];
        if (x->state[g] == DONE) {
            x->st_pos[sid]++;
            continue;
        }
        double r = 0;
        int cause = -1;
        if (pos > first) cause = x->st_ops[pos - 1], r = x->t[cause].end;
        if (x->at_issue && g > x->base[x->cls_of[g]]) {
            /* the op issued before it on this rank: ended, or (a send or a
             * receive) posted, which is all the issuing thread waits for */
            int pv = g - 1, k = x->kind[pv];
            bool p2p = k == OP_SEND_FWD || k == OP_SEND_BWD || k == OP_RECV_FWD || k == OP_RECV_BWD;
            if (p2p ? x->state[pv] == PENDING : x->state[pv] != DONE) {
                block(x, sid, pv);
                return;
            }
            double at = p2p ? x->ready[pv] : x->t[pv].end;
            if (at > r) r = at, cause = pv;
        }
        for (int k = x->dep_first[g]; k < x->dep_first[g + 1]; k++) {
            int d = x->deps[k];
            if (x->state[d] != DONE) {
                block(x, sid, d);
                return;
            }
            if (x->t[d].end > r) r = x->t[d].end, cause = d;
        }
        for (int k = x->stage_lo[g]; k < x->stage_hi[g]; k++)     /* its inner waits' gathers: ended */
            if (x->state[x->stage_dep[k]] != DONE) {
                block(x, sid, x->stage_dep[k]);
                return;
            }
        x->ready[g] = r;
        x->rcause[g] = cause;
        if (!start_op(x, sid, g)) return;
        x->st_pos[sid]++;
    }
}

/* What a stuck op waits for, in words. */
static const char *stuck_reason(const Ctx *x, int g)
{
    for (int k = x->dep_first[g]; k < x->dep_first[g + 1]; k++)
        if (x->state[x->deps[k]] != DONE) return arena_printf(&g_arena, "waits for %s", describe(x, x->deps[k]));
    int kind = x->kind[g], p = x->partner[g];
    if (x->sync[g] >= 0) return "waits for the other stages to reach this collective";
    if (kind == OP_RECV_FWD || kind == OP_RECV_BWD)
        return p < 0 ? "no stage sends it" : arena_printf(&g_arena, "waits for %s", describe(x, p));
    if (kind == OP_SEND_FWD || kind == OP_SEND_BWD)
        return p < 0 ? "no stage receives it" : arena_printf(&g_arena, "waits for %s to be posted", describe(x, p));
    return "waits";
}

/* The deadlock report: every stream that cannot finish, at its stuck op. */
static const char *deadlock(const Ctx *x)
{
    const char *msg = "deadlock: no op can progress; the stuck ops:";
    int shown = 0, stuck = 0;
    for (int sid = 0; sid < x->ns; sid++) {
        if (x->st_pos[sid] >= x->st_first[sid + 1]) continue;
        int g = x->st_ops[x->st_pos[sid]];
        if (shown < 12) msg = arena_printf(&g_arena, "%s\n  %s %s", msg, describe(x, g), stuck_reason(x, g)), shown++;
        stuck++;
    }
    if (stuck > shown) msg = arena_printf(&g_arena, "%s\n  ... and %d more streams", msg, stuck - shown);
    return msg;
}

/* ---- what the step costs -------------------------------------------------------- */

/* Whether op kind is pipeline compute (the ideal time the bubble is measured against). */
static bool is_work(int kind)
{
    return kind == OP_EMBED_FWD || kind == OP_EMBED_BWD || kind == OP_LAYER_FWD || kind == OP_LAYER_BWD ||
           kind == OP_RECOMPUTE || kind == OP_HEAD;
}

typedef struct Span2 { double a, b; } Span2;

/* Orders intervals by start. */
static int span_cmp(const void *pa, const void *pb)
{
    const Span2 *a = pa, *b = pb;
    return a->a < b->a ? -1 : a->a > b->a;
}

/* Whether intervals are in order of start already (a group's ops mostly run
 * on one stream, one after another): merging them needs no sort then. */
static bool spans_sorted(const Span2 *v, int n)
{
    for (int i = 1; i < n; i++)
        if (v[i].a < v[i - 1].a) return false;
    return true;
}

/* Length of the intersection of two sorted lists of disjoint intervals. */
static double overlap(const Span2 *u, int nu, const Span2 *v, int nv)
{
    double tot = 0;
    for (int i = 0, j = 0; i < nu && j < nv;) {
        double lo = fmax(u[i].a, v[j].a), hi = fmin(u[i].b, v[j].b);
        if (hi > lo) tot += hi - lo;
        if (u[i].b < v[j].b) i++;
        else j++;
    }
    return tot;
}

/* Merges sorted intervals in place; returns the new count. */
static int merge_spans(Span2 *v, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (k > 0 && v[i].a <= v[k - 1].b) v[k - 1].b = fmax(v[k - 1].b, v[i].b);
        else v[k++] = v[i];
    }
    return k;
}

/* The pipeline's share of an idle stretch [from, to] of class c's compute
 * stream that ended when op g could go (g < 0: nothing did, the step ended;
 * `last` is the op that ended it).  The chain of dependencies that held g,
 * from its cause back to `from`, tiles the stretch: each op on it accounts for
 * the time from its own cause's end to its end.  The stretch is bubble where
 * that op is another stage's compute (its forward or backward: the fill and
 * drain of (p-1)/m, and any imbalance between stages; at the step's end its
 * optimizer, which this stage has run while that one drained); the rest — a
 * transfer, tp or dp communication on any stage — is not the pipeline's, and
 * this stage's own communication among it shows as exposed. */
static double pipeline_share(const Ctx *x, int c, int g, int last, double from, double to)
{
    double share = 0, hi = to;
    for (int z = g >= 0 ? x->cause[g] : last; z >= 0 && hi > from; z = x->cause[z]) {
        int cz = x->cause[z];
        double lo = fmax(from, cz >= 0 ? x->t[cz].end : x->t[z].start), end = fmin(hi, x->t[z].end);
        if (end > lo && x->cls_of[z] != c && x->stream[z] == ST_COMPUTE)
            share += end - lo;
        if (lo < hi) hi = lo;
    }
    return share;
}

/* Busy time, pipeline work and bubble, and exposed communication of class c
 * (`last`: the op that ends the step). */
static void class_metrics(const Ctx *x, int c, double step, int last, SimClass *sc)
{
    const Sched *s = sched_of(x, c);
    int b = x->base[c];
    sc->ops = x->t + b;
    sc->end = 0;
    for (int g = b; g < b + s->nops; g++) {
        const SimOp *t = &x->t[g];
        sc->busy[x->stream[g]] += t->end - t->start;
        if (t->end > sc->end) sc->end = t->end;
        if (x->stream[g] == ST_COMPUTE && is_work(x->kind[g])) sc->work += t->end - t->start;
    }
    /* the compute stream's idle intervals, and which of them the pipeline caused */
    Span2 *idle = malloc(sizeof(Span2) * (size_t)(s->nops + 2));
    int ni = 0;
    double prev = 0;
    for (int k = x->st_first[c * NSTREAMS + ST_COMPUTE]; k < x->st_first[c * NSTREAMS + ST_COMPUTE + 1]; k++) {
        int g = x->st_ops[k];
        if (x->t[g].start > prev) {
            idle[ni++] = (Span2){prev, x->t[g].start};
            sc->bubble += pipeline_share(x, c, g, last, prev, x->t[g].start);
        }
        if (x->t[g].end > prev) prev = x->t[g].end;
    }
    if (step > prev) idle[ni++] = (Span2){prev, step};
    if (step > prev) sc->bubble += pipeline_share(x, c, -1, last, prev, step);
    /* exposed: a group's ops running while the compute stream idles; each
     * group's spans gathered in one pass over the ops (counted first) */
    int nb[NGROUPS + 1] = {0};
    for (int g = b; g < b + s->nops; g++)
        if (x->t[g].end > x->t[g].start) nb[x->group[g] + 1]++;
    for (int grp = 0; grp < NGROUPS; grp++) nb[grp + 1] += nb[grp];
    Span2 *busy = malloc(sizeof(Span2) * (size_t)(nb[NGROUPS] + 1));
    int at[NGROUPS];
    memcpy(at, nb, sizeof at);
    for (int g = b; g < b + s->nops; g++)
        if (x->t[g].end > x->t[g].start) busy[at[x->group[g]]++] = (Span2){x->t[g].start, x->t[g].end};
    for (int grp = GRP_NONE + 1; grp < NGROUPS; grp++) {
        Span2 *v = busy + nb[grp];
        int n = nb[grp + 1] - nb[grp];
        if (!spans_sorted(v, n)) qsort(v, (size_t)n, sizeof *v, span_cmp);
        n = merge_spans(v, n);
        sc->exposed[grp] = overlap(idle, ni, v, n);
    }
    free(busy);
    free(idle);
}

/* Seconds class c spends on NVMe transfers. */
static double nvme_seconds(const Ctx *x, int c)
{
    bool params = x->mp->spec->offload.params == OFF_NVME;
    double t = 0;
    for (int g = x->base[c]; g < x->base[c + 1]; g++) {
        int k = x->kind[g];
        if (k == OP_OPT_READ || k == OP_OPT_WRITE || (params && k == OP_PARAM_FETCH)) t += x->t[g].end - x->t[g].start;
    }
    return t;
}

/* The critical path: from the op that ends last, back through the dependency
 * that fixed each op's start. */
static void critical_path(const Ctx *x, Sim *out)
{
    int last = -1;
    for (int g = 0; g < x->N; g++)
        if (last < 0 || x->t[g].end > x->t[last].end) last = g;
    int n = 0;
    for (int g = last; g >= 0; g = x->cause[g]) n++;
    out->critical = arena_alloc(&g_arena, sizeof(SimRef) * (size_t)(n + 1));
    out->ncritical = n;
    for (int g = last; g >= 0; g = x->cause[g]) {
        int c = x->cls_of[g];
        out->critical[--n] = (SimRef){c, g - x->base[c]};
    }
    double prev = 0;
    for (int i = 0; i < out->ncritical; i++) {
        const SimRef *r = &out->critical[i];
        double end = x->t[x->base[r->cls] + r->op].end;
        out->critical_kind[sched_of(x, r->cls)->ops[r->op].kind] += end - prev;
        prev = end;
    }
}

/* Step time, throughput, utilisation, bubble, exposure, copies, critical path. */
static void metrics(const Ctx *x, Sim *out)
{
    out->timeline = 0;
    for (int g = 0; g < x->N; g++) out->timeline = fmax(out->timeline, x->t[g].end);
    int last = -1;
    for (int g = 0; g < x->N; g++)
        if (last < 0 || x->t[g].end > x->t[last].end) last = g;
    for (int c = 0; c < x->nc; c++) {
        class_metrics(x, c, out->timeline, last, &out->classes[c]);
        out->classes[c].nvme = nvme_seconds(x, c);
    }
    sim_step_figures(x->mp, out);
    critical_path(x, out);
}

/* The step's figures from its classes' and its timeline. */
void sim_step_figures(const Plan *mp, Sim *out)
{
    double step = out->timeline, nb = 0;
    int nc = mp->mem.nclasses;
    out->bubble = 0, out->copy_time = 0, out->nvme_time = 0;
    for (int g = 0; g < NGROUPS; g++) out->exposed[g] = 0;
    for (int c = 0; c < nc; c++) {
        const SimClass *sc = &out->classes[c];
        if (sc->work > 0) out->bubble += sc->bubble / sc->work, nb++;
        for (int g = 0; g < NGROUPS; g++) out->exposed[g] += sc->exposed[g] / nc;
        out->copy_time = fmax(out->copy_time, sc->busy[ST_COPY]);
        out->nvme_time = fmax(out->nvme_time, sc->nvme);
    }
    if (nb > 0) out->bubble /= nb;
    for (int g = 0; g < NGROUPS; g++) out->exposed[g] = step > 0 ? out->exposed[g] / step : 0;
    /* ranks that share their cores in time: the step processor sharing allows
     * (applied once, to the timeline: period.c extrapolates the timeline) */
    double *busy = calloc((size_t)nc + 1, sizeof *busy);
    if (!busy) die("sim: out of memory");
    for (int c = 0; c < nc; c++)
        for (int k = 0; k < NSTREAMS; k++) busy[c] += out->classes[c].busy[k];
    out->step_time = step = cost_shared_step(mp, step, busy);
    free(busy);
    const Spec *s = mp->spec;
    double denom = step * (double)mp->part.world * cost_mfu_peak(s);
    out->tokens_per_s = step > 0 ? (double)s->train.global_batch * (double)mp->model.s / step : 0;
    out->mfu = denom > 0 ? mp->model.flops_model_step / denom : 0;
    out->hfu = denom > 0 ? mp->part.flops_hw_step / denom : 0;
}

/* ---- entry points ------------------------------------------------------------------ */

/* sim_run with options; NULL, or the deadlock naming the stuck ops. */
const char *sim_simulate(const Plan *mp, const SimOpts *opts, Sim *out)
{
    memset(out, 0, sizeof *out);
    /* a backend that runs ops at issue posts its sends without waiting */
    bool at_issue = cost_at_issue(mp->spec);
    Ctx x = {.mp = mp, .rendezvous = !(opts && opts->eager) && !at_issue, .at_issue = at_issue, .nc = mp->mem.nclasses};
    out->classes = arena_alloc(&g_arena, sizeof(SimClass) * (size_t)(x.nc + 1));
    build_ops(&x);
    build_pairs(&x);
    build_syncs(&x);
    for (int sid = 0; sid < x.ns; sid++) x.queue[x.qn++] = sid, x.queued[sid] = true;
    while (x.qn > 0) {
        int sid = x.queue[--x.qn];
        x.queued[sid] = false;
        run_stream(&x, sid);
    }
    const char *err = NULL;
    for (int sid = 0; sid < x.ns && !err; sid++)
        if (x.st_pos[sid] < x.st_first[sid + 1]) err = deadlock(&x);
    metrics(&x, out);
    free(x.deps);
    free(x.stage_dep), free(x.stage_at);
    return err;
}

/* Simulates one step of every rank class; a deadlock is an internal error. */
void sim_run(const Plan *mp, Sim *out)
{
    const char *err = sim_simulate(mp, NULL, out);
    if (err) die("sim: %s", err);
}

/* ---- the report --------------------------------------------------------------------- */

typedef struct Contrib { int kind; double sec, permille; } Contrib;

/* Orders contributions, largest first as printed (permille: to 0.1% of the
 * step, so that round-off does not reorder equal shares), then by kind. */
static int contrib_cmp(const void *pa, const void *pb)
{
    const Contrib *a = pa, *b = pb;
    if (a->permille != b->permille) return a->permille > b->permille ? -1 : 1;
    return (a->kind > b->kind) - (a->kind < b->kind);
}

/* The critical path's seconds by op kind (by[NOPKINDS]): each op adds the
 * time from its predecessor's end to its own. */
void sim_critical_by_kind(const Plan *mp, const Sim *sim, double *by)
{
    (void)mp;
    for (int k = 0; k < NOPKINDS; k++) by[k] = sim->critical_kind[k];
}

/* The critical path's time by op kind, largest first. */
static void print_critical(FILE *f, const Plan *mp, const Sim *sim)
{
    double sec[NOPKINDS];
    Contrib by[NOPKINDS];
    sim_critical_by_kind(mp, sim, sec);
    for (int k = 0; k < NOPKINDS; k++) by[k] = (Contrib){k, sec[k], sim->timeline > 0 ? round(1000 * sec[k] / sim->timeline) : 0};
    qsort(by, NOPKINDS, sizeof by[0], contrib_cmp);
    fprintf(f, "critical  path of %d ops:", sim->ncritical);
    for (int k = 0; k < 6 && by[k].sec > 0; k++)
        fprintf(f, "%s %s %.1f%%", k ? "," : "", sched_op_kind_name(by[k].kind), 100 * by[k].sec / sim->timeline);
    fputc('\n', f);
}

/* The schedule summary of `shardc plan`. */
void sim_summary(FILE *f, const Plan *mp, const Sim *sim)
{
    int nc = mp->mem.nclasses;
    fprintf(f, "schedule summary (simulated step; seconds busy per stream, by rank class)\n");
    fprintf(f, "class stage ");
    for (int st = 0; st < NSTREAMS; st++) fprintf(f, "%9s", sched_stream_name(st));
    fprintf(f, " |    idle  bubble\n");
    for (int c = 0; c < nc; c++) {
        if (nc > 9 && c == 4) fprintf(f, "  ...\n");
        if (nc > 9 && c >= 4 && c < nc - 4) continue;
        const SimClass *sc = &sim->classes[c];
        fprintf(f, "%5d %5d ", c, mp->mem.classes[c].cls->stage);
        for (int st = 0; st < NSTREAMS; st++) fprintf(f, "%9.4f", sc->busy[st]);
        double idle = sim->timeline - sc->busy[ST_COMPUTE];
        fprintf(f, " | %7.4f %6.1f%%\n", idle, sc->work > 0 ? 100 * sc->bubble / sc->work : 0);
    }
    fprintf(f, "\nstep      %.4f s predicted; %.4g tokens/s; MFU %.1f%%, HFU %.1f%% of %.3g TFLOP/s per GPU\n",
            sim->step_time, sim->tokens_per_s, 100 * sim->mfu, 100 * sim->hfu, cost_mfu_peak(mp->spec) / 1e12);
    if (sim->step_time < sim->timeline)
        fprintf(f, "shared    the ranks share their cores: the timeline above ends at %.4f s, and ranks that wait yield "
                   "their cores (processor sharing)\n", sim->timeline);
    fprintf(f, "bubble    %.1f%% of the ideal compute time (the average over stages; (p-1)/m for 1F1B)\n",
            100 * sim->bubble);
    fprintf(f, "exposed   ");
    for (int g = GRP_NONE + 1; g < NGROUPS; g++)
        fprintf(f, "%s %.1f%%%s", cost_group_name(g), 100 * sim->exposed[g], g + 1 < NGROUPS ? ", " : "");
    fprintf(f, " of the step (communication while the compute stream waits; average over rank classes)\n");
    fprintf(f, "copies    %.4f s on the copy stream, of it NVMe %.4f s (the busiest rank class)\n", sim->copy_time,
            sim->nvme_time);
    print_critical(f, mp, sim);
}
