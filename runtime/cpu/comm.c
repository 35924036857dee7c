/* comm.c — collectives over MPI, one communicator per srt_group.
 *
 * Determinism: a float sum must not depend on MPI's choice of algorithm (its
 * association order changes with sizes and process counts), or layouts and
 * resumed runs would drift apart.  So SUM and MAX of floats are done here in
 * a fixed order: MPI_Alltoallv hands member i the i-th slice of every
 * member's contribution, member i reduces its slice in group-rank order
 * (accumulating in double, rounding once to the dtype), and
 * MPI_Allgatherv returns the slices to everyone.  Every member gets the same
 * bits; srt_reduce_scatter runs the same slice reduction, so ZeRO-2's
 * reduce-scatter equals ZeRO-0's all-reduce bit for bit.  Large buffers go
 * in rounds that fit a fixed receive scratch (CPU_COMM_BYTES).  Integer
 * sums take the same path (exact in double for 64 members; they wrap like
 * the hardware's).  Data movement (all-gather, broadcast, send/recv) uses
 * MPI directly: it is exact.  Sends and receives are non-blocking: a
 * stream's requests wait in issue order until something orders a later op
 * after them (backend.c says where).
 *
 * No silent hang: every MPI operation here is non-blocking and waited for by
 * the watchdog (runtime/core/watchdog.c): tests with a sleeping backoff, so
 * a waiting rank does not spin, and past train.comm_timeout a message naming
 * the op, the group and the ranks that did not arrive, then every rank ends.
 */
#include "cpu.h"
#include "watchdog.h"

#include <limits.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

/* The MPI datatype that moves one element of dt. */
static MPI_Datatype cpu_mpi_type(srt_dtype dt)
{
    switch (dt) {
    case SRT_F32: return MPI_FLOAT;
    case SRT_BF16: case SRT_F16: return MPI_UINT16_T;
    case SRT_I32: return MPI_INT32_T;
    case SRT_U8: return MPI_UINT8_T;
    }
    return MPI_BYTE;
}

/* Dies when an MPI call failed (MPI_ERRORS_RETURN is set on our communicators). */
static void cpu_mpi_ok(srt_ctx *c, int rc, const char *what)
{
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    ctx_fatal(c, 1, "%s failed: %s", what, msg);
}

/* The communicator of group g (a member's). */
static MPI_Comm cpu_comm(srt_ctx *c, srt_group g)
{
    MPI_Comm m = cpu_st(c)->comm[g];
    if (m == MPI_COMM_NULL) ctx_die(c, "no communicator for group %d", (int)g);
    return m;
}

/* A collective of group g just posted (rc, its request q; wd_arrive came
 * before the post): waited for under the watchdog. */
static void cpu_coll_wait(srt_ctx *c, srt_group g, int rc, MPI_Request *q, const char *op)
{
    cpu_mpi_ok(c, rc, op);
    wd_wait(c, 1, q, &(wd_what){op, g, cpu_comm(c, g), NULL});
}

/* Counts beyond int are beyond the CPU backend (tiny models, a few ranks). */
static int cpu_count(srt_ctx *c, int64_t n, const char *what)
{
    if (n > INT_MAX) ctx_fatal(c, 1, "%s of %lld elements: more than the CPU backend moves at once",
                               what, (long long)n);
    return (int)n;
}

/* Splits the world into one communicator per group, by the colours ctx.c
 * computed (members ordered by their group rank). */
void cpu_comm_init(srt_ctx *c)
{
    cpu_state *st = cpu_st(c);
    for (int g = 0; g < SRT_NGROUPS; g++) st->comm[g] = MPI_COMM_NULL;
    if (!c->mpi) return;
    for (int g = 0; g < SRT_NGROUPS; g++) {
        int color = c->gcolor[g] < 0 ? MPI_UNDEFINED : (int)c->gcolor[g];
        int key = c->grank[g] < 0 ? 0 : (int)c->grank[g];
        cpu_mpi_ok(c, MPI_Comm_split(MPI_COMM_WORLD, color, key, &st->comm[g]), "MPI_Comm_split");
        if (st->comm[g] != MPI_COMM_NULL) {
            MPI_Comm_set_errhandler(st->comm[g], MPI_ERRORS_RETURN);
            int size = 0;
            MPI_Comm_size(st->comm[g], &size);
            if (size != c->gsize[g]) ctx_die(c, "group %d has %d members, expected %lld", g, size,
                                             (long long)c->gsize[g]);
        }
    }
    if (c->world > 1) st->comm_buf = ctx_alloc(c, CPU_COMM_BYTES, "the collectives' scratch");
}

/* Frees the communicators. */
void cpu_comm_fini(srt_ctx *c)
{
    cpu_state *st = cpu_st(c);
    int fin = 0;
    MPI_Finalized(&fin);
    for (int g = 0; g < SRT_NGROUPS; g++)
        if (st->comm[g] != MPI_COMM_NULL && !fin) MPI_Comm_free(&st->comm[g]);
    free(st->comm_buf);
}

/* ---- the fixed-order float reduction ----------------------------------------------------- */

/* Element i of a float array of dtype dt, as a double. */
static inline double cpu_get(const void *p, srt_dtype dt, int64_t i)
{
    switch (dt) {
    case SRT_F32: return ((const float *)p)[i];
    case SRT_BF16: return kc_f32_from_bf16(((const uint16_t *)p)[i]);
    case SRT_F16: return kc_f32_from_fp16(((const uint16_t *)p)[i]);
    case SRT_I32: return ((const int32_t *)p)[i];
    case SRT_U8: return ((const uint8_t *)p)[i];
    }
    return 0.0;
}

static inline void cpu_put(void *p, srt_dtype dt, int64_t i, double v)
{
    switch (dt) {
    case SRT_F32: ((float *)p)[i] = (float)v; break;
    case SRT_BF16: ((uint16_t *)p)[i] = kc_bf16_from_f32((float)v); break;
    case SRT_F16: ((uint16_t *)p)[i] = kc_fp16_from_f32((float)v); break;
    case SRT_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)(uint64_t)(int64_t)v; break;   /* wraps */
    case SRT_U8: ((uint8_t *)p)[i] = (uint8_t)(uint64_t)(int64_t)v; break;
    }
}

/* out[i] = the reduction of parts[r][i] over r = 0..S-1 in that order
 * (parts: S rows of len elements). */
static void cpu_reduce_rows(void *out, const uint8_t *parts, srt_dtype dt, int64_t S, int64_t len,
                            srt_redop op)
{
    int64_t es = ops_dtype_size(dt);
    #pragma omp parallel for schedule(static) if (len > 16384)
    for (int64_t i = 0; i < len; i++) {
        double acc = cpu_get(parts, dt, i);
        for (int64_t r = 1; r < S; r++) {
            double v = cpu_get(parts + r * len * es, dt, i);
            if (op == SRT_SUM) acc += v;
            else if (v > acc || isnan(v)) acc = v;
        }
        cpu_put(out, dt, i, acc);
    }
}

/* The fixed-order all-reduce (see the file's comment). */
void cpu_all_reduce(srt_ctx *c, srt_stream s, srt_group g, srt_t x, srt_redop op)
{
    int64_t S = c->gsize[g], r = c->grank[g];
    if (S == 1 || x.n == 0) return;
    MPI_Comm comm = cpu_comm(c, g);
    MPI_Datatype T = cpu_mpi_type(x.dt);
    cpu_state *st = cpu_st(c);
    int64_t es = ops_dtype_size(x.dt);
    int64_t round = (CPU_COMM_BYTES / es / S) * S;   /* elements per round: S slices */
    int cnt[64], dsp[64], rcnt[64], rdsp[64];
    if (S > 64) ctx_fatal(c, 1, "all_reduce over %lld ranks: the CPU backend handles 64", (long long)S);
    for (int64_t o = 0; o < x.n; o += round) {
        int64_t L = x.n - o < round ? x.n - o : round;
        for (int64_t j = 0, at = 0; j < S; j++) {
            cnt[j] = (int)(L / S + (j < L % S));
            dsp[j] = (int)at;
            at += cnt[j];
        }
        for (int64_t j = 0; j < S; j++) rcnt[j] = cnt[r], rdsp[j] = (int)(j * cnt[r]);
        uint8_t *base = (uint8_t *)x.p + o * es;
        MPI_Request q;
        wd_arrive(c, g);
        cpu_coll_wait(c, g, MPI_Ialltoallv(base, cnt, dsp, T, st->comm_buf, rcnt, rdsp, T, comm, &q), &q,
                      "all_reduce (MPI_Ialltoallv)");
        cpu_reduce_rows(base + (int64_t)dsp[r] * es, st->comm_buf, x.dt, S, cnt[r], op);
        wd_arrive(c, g);
        cpu_coll_wait(c, g, MPI_Iallgatherv(MPI_IN_PLACE, 0, T, base, cnt, dsp, T, comm, &q), &q,
                      "all_reduce (MPI_Iallgatherv)");
    }
}

/* The fixed-order reduce-scatter: one slice reduction per round. */
void cpu_reduce_scatter(srt_ctx *c, srt_stream s, srt_group g, srt_t out, srt_t in)
{
    int64_t S = c->gsize[g], n = out.n, es = ops_dtype_size(out.dt);
    if (S == 1) {
        if (out.p != in.p) memmove(out.p, in.p, (size_t)(n * es));
        return;
    }
    if (n == 0) return;
    MPI_Comm comm = cpu_comm(c, g);
    MPI_Datatype T = cpu_mpi_type(out.dt);
    cpu_count(c, S * n, "reduce_scatter");
    if (S > 64) ctx_fatal(c, 1, "reduce_scatter over %lld ranks: the CPU backend handles 64", (long long)S);
    cpu_state *st = cpu_st(c);
    int64_t round = CPU_COMM_BYTES / es / S;
    int cnt[64], dsp[64], rcnt[64], rdsp[64];
    for (int64_t o = 0; o < n; o += round) {
        int64_t L = n - o < round ? n - o : round;
        for (int64_t j = 0; j < S; j++) {
            cnt[j] = (int)L, dsp[j] = (int)(j * n + o);
            rcnt[j] = (int)L, rdsp[j] = (int)(j * L);
        }
        MPI_Request q;
        wd_arrive(c, g);
        cpu_coll_wait(c, g, MPI_Ialltoallv(in.p, cnt, dsp, T, st->comm_buf, rcnt, rdsp, T, comm, &q), &q,
                      "reduce_scatter (MPI_Ialltoallv)");
        cpu_reduce_rows((uint8_t *)out.p + o * es, st->comm_buf, out.dt, S, L, SRT_SUM);
    }
}

/* MPI_Iallgather, in place when in is this member's slice of out. */
void cpu_all_gather(srt_ctx *c, srt_stream s, srt_group g, srt_t out, srt_t in)
{
    int64_t S = c->gsize[g], r = c->grank[g], n = in.n, es = ops_dtype_size(in.dt);
    uint8_t *mine = (uint8_t *)out.p + r * n * es;
    if (S == 1) {
        if ((void *)mine != in.p) memmove(mine, in.p, (size_t)(n * es));
        return;
    }
    if (n == 0) return;
    MPI_Datatype T = cpu_mpi_type(in.dt);
    int cnt = cpu_count(c, n, "all_gather");
    cpu_count(c, S * n, "all_gather");
    const void *src = (void *)mine == in.p ? MPI_IN_PLACE : in.p;
    uint8_t *ilo = in.p, *ihi = ilo + n * es, *olo = out.p, *ohi = olo + S * n * es;
    if (src != MPI_IN_PLACE && ilo < ohi && olo < ihi)
        ctx_die(c, "all_gather: in overlaps out but is not this member's slice of it");
    MPI_Request q;
    wd_arrive(c, g);
    cpu_coll_wait(c, g, MPI_Iallgather(src, cnt, T, out.p, cnt, T, cpu_comm(c, g), &q), &q,
                  "all_gather (MPI_Iallgather)");
}

/* MPI_Ibcast in pieces that fit an int count. */
void cpu_broadcast(srt_ctx *c, srt_stream s, srt_group g, srt_t x, int64_t root)
{
    if (c->gsize[g] == 1 || x.n == 0) return;
    int64_t es = ops_dtype_size(x.dt);
    int64_t step = INT_MAX / 2;
    for (int64_t o = 0; o < x.n; o += step) {
        int64_t len = x.n - o < step ? x.n - o : step;
        MPI_Request q;
        wd_arrive(c, g);
        cpu_coll_wait(c, g, MPI_Ibcast((uint8_t *)x.p + o * es, (int)len, cpu_mpi_type(x.dt), (int)root,
                                       cpu_comm(c, g), &q), &q, "broadcast (MPI_Ibcast)");
    }
}

/* ---- point to point ------------------------------------------------------------------------- */

/* Drops stream s's leading requests that have completed (MPI_REQUEST_NULL). */
static void cpu_p2p_trim(cpu_state *st, srt_stream s)
{
    int k = 0;
    while (k < st->np2p[s] && st->p2p_req[s][k] == MPI_REQUEST_NULL) k++;
    if (!k) return;
    int rest = st->np2p[s] - k;
    memmove(&st->p2p_req[s][0], &st->p2p_req[s][k], (size_t)rest * sizeof st->p2p_req[s][0]);
    memmove(&st->p2p_lo[s][0], &st->p2p_lo[s][k], (size_t)rest * sizeof st->p2p_lo[s][0]);
    memmove(&st->p2p_hi[s][0], &st->p2p_hi[s][k], (size_t)rest * sizeof st->p2p_hi[s][0]);
    memmove(&st->p2p_recv[s][0], &st->p2p_recv[s][k], (size_t)rest * sizeof st->p2p_recv[s][0]);
    memmove(&st->p2p_peer[s][0], &st->p2p_peer[s][k], (size_t)rest * sizeof st->p2p_peer[s][0]);
    st->np2p[s] = rest;
    st->np2p_all -= k;
    st->p2p_base[s] += k;
}

int64_t cpu_p2p_issued(srt_ctx *c, srt_stream s)
{
    cpu_state *st = cpu_st(c);
    return st->p2p_base[s] + st->np2p[s];
}

/* Waits for entries [k, k + n) of stream s's requests under the watchdog,
 * which names the peers of those that never complete. */
static void cpu_p2p_wait(srt_ctx *c, srt_stream s, int k, int n)
{
    cpu_state *st = cpu_st(c);
    wd_wait(c, n, &st->p2p_req[s][k], &(wd_what){"send/recv", SRT_PP, cpu_comm(c, SRT_PP), &st->p2p_peer[s][k]});
}

/* Waits for stream s's requests numbered below seq (a prefix: in issue order,
 * as the stream would run them). */
void cpu_p2p_complete(srt_ctx *c, srt_stream s, int64_t seq)
{
    cpu_state *st = cpu_st(c);
    int64_t n = seq - st->p2p_base[s];
    if (n <= 0) return;
    if (n > st->np2p[s]) n = st->np2p[s];
    cpu_p2p_wait(c, s, 0, (int)n);
    cpu_p2p_trim(st, s);
}

/* MPI_Testsome over each stream's pending requests: without it a rank busy in
 * kernels would not answer a peer's rendezvous until its next wait. */
void cpu_p2p_progress(srt_ctx *c)
{
    cpu_state *st = cpu_st(c);
    int idx[CPU_MAX_PENDING], out = 0;
    for (int s = 0; s < SRT_NSTREAMS; s++) {
        if (!st->np2p[s]) continue;
        cpu_mpi_ok(c, MPI_Testsome(st->np2p[s], st->p2p_req[s], &out, idx, MPI_STATUSES_IGNORE),
                   "MPI_Testsome (send/recv)");
        cpu_p2p_trim(st, (srt_stream)s);
    }
}

/* Waits for entry k of stream s alone (MPI needs no order among them). */
static void cpu_p2p_wait_one(srt_ctx *c, srt_stream s, int k)
{
    cpu_p2p_wait(c, s, k, 1);
    cpu_p2p_trim(cpu_st(c), s);
}

/* Before a transfer of [lo, hi) (a receive writes it): completes each
 * pending request it conflicts with (a receive's bytes, or a send's under a
 * receive), as the stream's order or the events between them would have;
 * only those, so that unrelated transfers still pair freely. */
static void cpu_p2p_conflicts(srt_ctx *c, const uint8_t *lo, const uint8_t *hi, bool write)
{
    cpu_state *st = cpu_st(c);
    for (int s = 0; s < SRT_NSTREAMS; s++)
        for (int k = st->np2p[s] - 1; k >= 0; k--)
            if (st->p2p_req[s][k] != MPI_REQUEST_NULL && lo < st->p2p_hi[s][k] &&
                st->p2p_lo[s][k] < hi && (write || st->p2p_recv[s][k])) {
                cpu_p2p_wait_one(c, (srt_stream)s, k);
                k = st->np2p[s];   /* the trim moved the entries: look again */
            }
}

/* Posts a non-blocking send or receive of x with peer on stream s. */
static void cpu_p2p_post(srt_ctx *c, srt_stream s, srt_t x, int64_t peer, bool recv)
{
    cpu_state *st = cpu_st(c);
    const uint8_t *lo = x.p, *hi = lo + x.n * ops_dtype_size(x.dt);
    cpu_p2p_conflicts(c, lo, hi, recv);
    if (st->np2p[s] == CPU_MAX_PENDING) cpu_p2p_wait_one(c, s, 0);   /* the oldest */
    int k = st->np2p[s];
    int n = cpu_count(c, x.n, recv ? "recv" : "send");
    MPI_Request *r = &st->p2p_req[s][k];
    if (recv)
        cpu_mpi_ok(c, MPI_Irecv(x.p, n, cpu_mpi_type(x.dt), (int)peer, 0, cpu_comm(c, SRT_PP), r),
                   "MPI_Irecv");
    else
        cpu_mpi_ok(c, MPI_Isend(x.p, n, cpu_mpi_type(x.dt), (int)peer, 0, cpu_comm(c, SRT_PP), r),
                   "MPI_Isend");
    st->p2p_lo[s][k] = lo, st->p2p_hi[s][k] = hi, st->p2p_recv[s][k] = recv, st->p2p_peer[s][k] = (int)peer;
    st->np2p[s]++;
    st->np2p_all++;
}

/* A non-blocking send (completed lazily: see backend.c). */
void cpu_send(srt_ctx *c, srt_stream s, srt_t x, int64_t peer)
{
    cpu_p2p_post(c, s, x, peer, false);
}

/* A non-blocking receive into x (completed lazily: see backend.c). */
void cpu_recv(srt_ctx *c, srt_stream s, srt_t x, int64_t peer)
{
    cpu_p2p_post(c, s, x, peer, true);
}

/* ---- raw helpers for ops that communicate inside ---------------------------------------------- */

void cpu_allgather_f32(srt_ctx *c, srt_group g, float *out, const float *in, int64_t n)
{
    if (c->gsize[g] == 1) { memmove(out, in, (size_t)n * 4); return; }
    int cnt = cpu_count(c, n, "all_gather");
    MPI_Request q;
    wd_arrive(c, g);
    cpu_coll_wait(c, g, MPI_Iallgather(in, cnt, MPI_FLOAT, out, cnt, MPI_FLOAT, cpu_comm(c, g), &q), &q,
                  "all_gather (MPI_Iallgather)");
}

/* Integer sum (exact) of the norm's bins. */
void cpu_allreduce_u64(srt_ctx *c, srt_group g, uint64_t *x, int64_t n)
{
    if (c->gsize[g] == 1) return;
    MPI_Request q;
    wd_arrive(c, g);
    cpu_coll_wait(c, g, MPI_Iallreduce(MPI_IN_PLACE, x, cpu_count(c, n, "all_reduce"), MPI_UINT64_T, MPI_SUM,
                                       cpu_comm(c, g), &q), &q, "all_reduce (MPI_Iallreduce)");
}
