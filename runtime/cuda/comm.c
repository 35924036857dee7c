/* comm.c — collectives over NCCL, one communicator per srt_group.
 *
 * The world communicator is bootstrapped by broadcasting rank 0's
 * ncclUniqueId over MPI; the tp, dp, pp and embedding communicators are
 * ncclCommSplit of it with the context's group colours (gcolor) and group
 * ranks as keys, so a member's NCCL rank is its srt_group_rank.  A 1-rank
 * run makes no communicator: every group has one member and the collectives
 * are copies or nothing.
 *
 * Sends and receives between pipeline stages are grouped: the first one
 * opens ncclGroupStart, and the group ends (ncclGroupEnd) before the next
 * op that is not a send or receive on the same stream, or at an event or a
 * sync (backend.c), so that two stages that send to each other before
 * receiving do not deadlock.
 *
 * The watchdog: every collective records an event on its stream after it;
 * a thread polls those events and every communicator's
 * ncclCommGetAsyncError every 100 ms.  A collective not finished after
 * train.comm_timeout seconds (SRT_COMM_TIMEOUT or, for NCCL alone,
 * SRT_NCCL_TIMEOUT overriding it), or an asynchronous NCCL error,
 * aborts the communicators (ncclCommAbort) and ends every rank with a
 * message naming the op and the group, instead of a silent hang.
 */
#include "cu.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Ends the job when an NCCL call failed, naming the op and the group. */
static void cu_nccl(srt_ctx *c, ncclResult_t r, const char *what, srt_group g)
{
    if (r == ncclSuccess) return;
    const char *last = ncclGetLastError(NULL);   /* NCCL's own buffer: never NULL, "" when it has nothing */
    ctx_fatal(c, 1, "%s on the %s group: NCCL error %d (%s)%s%s", what, ops_group_name(g), (int)r,
              ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

/* The NCCL type of a dtype. */
static ncclDataType_t cu_nccl_type(srt_dtype dt)
{
    switch (dt) {
    case SRT_F32: return ncclFloat32;
    case SRT_BF16: return ncclBfloat16;
    case SRT_F16: return ncclFloat16;
    case SRT_I32: return ncclInt32;
    case SRT_U8: return ncclUint8;
    }
    return ncclUint8;
}

/* Aborts every communicator and ends the job (the watchdog's verdict). */
static _Noreturn void cu_comm_fail(srt_ctx *c, const char *msg)
{
    cu_state *st = cu_st(c);
    for (int g = 0; g < SRT_NGROUPS; g++)
        if (st->comm[g]) ncclCommAbort(st->comm[g]);
    ctx_fatal(c, 1, "%s", msg);
}

/* Checks the communicators' asynchronous errors and the collectives in
 * flight; returns a message when the job must end (msg filled), else false. */
static bool cu_comm_check(srt_ctx *c, char *msg, size_t len)
{
    cu_state *st = cu_st(c);
    for (int g = 0; g < SRT_NGROUPS; g++) {
        if (!st->comm[g]) continue;
        ncclResult_t ae = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(st->comm[g], &ae);
        if (r != ncclSuccess) ae = r;
        if (ae != ncclSuccess && ae != ncclInProgress) {
            pthread_mutex_lock(&st->mu);
            const char *op = NULL;
            for (int s = 0; s < SRT_NSTREAMS && !op; s++)
                if (st->inflight[s].op && st->inflight[s].g == (srt_group)g) op = st->inflight[s].op;
            pthread_mutex_unlock(&st->mu);
            snprintf(msg, len, "NCCL reported an asynchronous error on the %s group (%s)%s%s", ops_group_name((srt_group)g),
                     ncclGetErrorString(ae), op ? " during " : "", op ? op : "");
            return true;
        }
    }
    double now = cu_now();
    for (int s = 0; s < SRT_NSTREAMS; s++) {
        pthread_mutex_lock(&st->mu);
        cu_inflight f = st->inflight[s];
        pthread_mutex_unlock(&st->mu);
        if (!f.op) continue;
        cudaError_t q = cudaEventQuery(st->coll_done[s]);
        if (q == cudaSuccess) {
            pthread_mutex_lock(&st->mu);
            if (st->inflight[s].t0 == f.t0) st->inflight[s].op = NULL;
            pthread_mutex_unlock(&st->mu);
        } else if (q == cudaErrorNotReady && now - f.t0 > st->timeout_s) {
            snprintf(msg, len, "%s on the %s group (stream %s) did not finish within %.0f s (train.comm_timeout): "
                     "a rank is stuck or gone", f.op, ops_group_name(f.g), ops_stream_name((srt_stream)s),
                     st->timeout_s);
            return true;
        }
    }
    return false;
}

/* The watchdog thread: polls every 100 ms until told to stop. */
static void *cu_watchdog(void *arg)
{
    srt_ctx *c = arg;
    cu_state *st = cu_st(c);
    CU_CHECK(c, cudaSetDevice(st->device), "watchdog: cudaSetDevice");
    char msg[512];
    while (!atomic_load(&st->stop)) {
        usleep(100 * 1000);
        if (cu_comm_check(c, msg, sizeof msg)) cu_comm_fail(c, msg);
    }
    return NULL;
}

/* Called at stream syncs: a reported error ends the job now. */
void cu_comm_poll(srt_ctx *c)
{
    char msg[512];
    if (cu_comm_check(c, msg, sizeof msg)) cu_comm_fail(c, msg);
}

/* The world communicator, the group splits, the watchdog. */
void cu_comm_init(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    pthread_mutex_init(&st->mu, NULL);
    for (int s = 0; s < SRT_NSTREAMS; s++)
        CU_CHECK(c, cudaEventCreateWithFlags(&st->coll_done[s], cudaEventDisableTiming), "cudaEventCreate");
    /* train.comm_timeout (SRT_COMM_TIMEOUT overrides it: watchdog.c); SRT_NCCL_TIMEOUT, for NCCL alone */
    const char *to = getenv("SRT_NCCL_TIMEOUT");
    st->timeout_s = to && atof(to) > 0 ? atof(to) : c->comm_timeout;
    if (c->world == 1) return;
    if (!c->mpi) ctx_die(c, "a %lld-rank program without MPI", (long long)c->world);
    ncclUniqueId id;
    if (c->rank == 0) cu_nccl(c, ncclGetUniqueId(&id), "ncclGetUniqueId", SRT_WORLD);
    if (MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        ctx_die(c, "MPI_Bcast of the NCCL unique id failed");
    cu_nccl(c, ncclCommInitRank(&st->comm[SRT_WORLD], (int)c->world, id, (int)c->rank), "ncclCommInitRank",
            SRT_WORLD);
    for (int g = SRT_TP; g < SRT_NGROUPS; g++) {
        /* collective over the world: every rank calls, non-members with NOCOLOR */
        int color = c->gcolor[g] >= 0 && c->gsize[g] > 1 ? (int)c->gcolor[g] : NCCL_SPLIT_NOCOLOR;
        int key = c->grank[g] >= 0 ? (int)c->grank[g] : 0;
        ncclComm_t comm = NULL;
        cu_nccl(c, ncclCommSplit(st->comm[SRT_WORLD], color, key, &comm, NULL), "ncclCommSplit", (srt_group)g);
        st->comm[g] = color == NCCL_SPLIT_NOCOLOR ? NULL : comm;
    }
    st->nccl = true;
    atomic_store(&st->stop, false);
    if (pthread_create(&st->watchdog, NULL, cu_watchdog, c) != 0) ctx_die(c, "cannot start the NCCL watchdog");
    st->watchdog_on = true;
}

/* Stops the watchdog and frees the communicators. */
void cu_comm_fini(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    if (st->watchdog_on) {
        atomic_store(&st->stop, true);
        pthread_join(st->watchdog, NULL);
        st->watchdog_on = false;
    }
    for (int g = SRT_NGROUPS - 1; g >= 0; g--)
        if (st->comm[g]) {
            ncclCommFinalize(st->comm[g]);
            ncclCommDestroy(st->comm[g]);
            st->comm[g] = NULL;
        }
    for (int s = 0; s < SRT_NSTREAMS; s++)
        if (st->coll_done[s]) cudaEventDestroy(st->coll_done[s]);
    pthread_mutex_destroy(&st->mu);
}

/* The communicator of g (a member's, with more than one member). */
static ncclComm_t cu_comm(srt_ctx *c, srt_group g, const char *what)
{
    ncclComm_t m = cu_st(c)->comm[g];
    if (!m) ctx_die(c, "%s: no NCCL communicator for the %s group", what, ops_group_name(g));
    return m;
}

/* Marks a collective in flight on s for the watchdog (after its launch). */
static void cu_issued(srt_ctx *c, srt_stream s, srt_group g, const char *what)
{
    cu_state *st = cu_st(c);
    CU_CHECK(c, cudaEventRecord(st->coll_done[s], cu_stream(c, s)), "cudaEventRecord (watchdog)");
    pthread_mutex_lock(&st->mu);
    st->inflight[s] = (cu_inflight){ what, g, cu_now() };
    pthread_mutex_unlock(&st->mu);
}

/* Closes an open group of sends and receives. */
void cu_p2p_close(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    if (!st->p2p_open) return;
    srt_stream s = (srt_stream)(st->p2p_open - 1);
    st->p2p_open = 0;
    cu_nccl(c, ncclGroupEnd(), "ncclGroupEnd (send/recv)", SRT_PP);
    cu_issued(c, s, SRT_PP, "send/recv");
}

void cu_allreduce_raw(srt_ctx *c, srt_stream s, srt_group g, void *p, int64_t n, ncclDataType_t t, ncclRedOp_t op,
                      const char *what)
{
    if (c->gsize[g] <= 1) return;
    cu_nccl(c, ncclAllReduce(p, p, (size_t)n, t, op, cu_comm(c, g, what), cu_stream(c, s)), what, g);
    cu_issued(c, s, g, what);
}

void cu_all_reduce(srt_ctx *c, srt_stream s, srt_group g, srt_t x, srt_redop op)
{
    cu_allreduce_raw(c, s, g, x.p, x.n, cu_nccl_type(x.dt), op == SRT_MAX ? ncclMax : ncclSum, "all_reduce");
}

/* out = every member's in, in group-rank order. */
void cu_all_gather(srt_ctx *c, srt_stream s, srt_group g, srt_t out, srt_t in)
{
    if (c->gsize[g] <= 1) {
        if (out.p != in.p)
            CU_CHECK(c, cudaMemcpyAsync(out.p, in.p, (size_t)(in.n * cu_dsize(in.dt)), cudaMemcpyDefault,
                                        cu_stream(c, s)), "all_gather (one member)");
        return;
    }
    cu_nccl(c, ncclAllGather(in.p, out.p, (size_t)in.n, cu_nccl_type(in.dt), cu_comm(c, g, "all_gather"),
                             cu_stream(c, s)), "all_gather", g);
    cu_issued(c, s, g, "all_gather");
}

/* out = this member's slice of the sum of every member's in. */
void cu_reduce_scatter(srt_ctx *c, srt_stream s, srt_group g, srt_t out, srt_t in)
{
    if (c->gsize[g] <= 1) {
        if (out.p != in.p)
            CU_CHECK(c, cudaMemcpyAsync(out.p, in.p, (size_t)(out.n * cu_dsize(out.dt)), cudaMemcpyDefault,
                                        cu_stream(c, s)), "reduce_scatter (one member)");
        return;
    }
    cu_nccl(c, ncclReduceScatter(in.p, out.p, (size_t)out.n, cu_nccl_type(out.dt), ncclSum,
                                 cu_comm(c, g, "reduce_scatter"), cu_stream(c, s)), "reduce_scatter", g);
    cu_issued(c, s, g, "reduce_scatter");
}

void cu_broadcast(srt_ctx *c, srt_stream s, srt_group g, srt_t x, int64_t root)
{
    if (c->gsize[g] <= 1) return;
    cu_nccl(c, ncclBroadcast(x.p, x.p, (size_t)x.n, cu_nccl_type(x.dt), (int)root, cu_comm(c, g, "broadcast"),
                             cu_stream(c, s)), "broadcast", g);
    cu_issued(c, s, g, "broadcast");
}

/* Opens the group of sends and receives on s when none is open. */
static void cu_p2p_open(srt_ctx *c, srt_stream s)
{
    cu_state *st = cu_st(c);
    if (st->p2p_open) return;   /* backend.c closed any group of another stream */
    cu_nccl(c, ncclGroupStart(), "ncclGroupStart (send/recv)", SRT_PP);
    st->p2p_open = (int)s + 1;
}

void cu_send(srt_ctx *c, srt_stream s, srt_t x, int64_t peer)
{
    cu_p2p_open(c, s);
    cu_nccl(c, ncclSend(x.p, (size_t)x.n, cu_nccl_type(x.dt), (int)peer, cu_comm(c, SRT_PP, "send"),
                        cu_stream(c, s)), "send", SRT_PP);
}

void cu_recv(srt_ctx *c, srt_stream s, srt_t x, int64_t peer)
{
    cu_p2p_open(c, s);
    cu_nccl(c, ncclRecv(x.p, (size_t)x.n, cu_nccl_type(x.dt), (int)peer, cu_comm(c, SRT_PP, "recv"),
                        cu_stream(c, s)), "recv", SRT_PP);
}
