/* backend.c — the CUDA backend's table: device selection by local rank, the
 * arenas (device memory, pinned host memory) and the host's copies into
 * and out of the device arena, streams and events,
 * the measured device memory, and init/fini of the other modules (see cu.h). */
#include "cu.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Ends the job when e is not cudaSuccess: out of memory is the user's (a plan
 * too big for the device), anything else an internal error naming the op. */
void cu_check_at(srt_ctx *c, cudaError_t e, const char *what, const char *file, int line)
{
    if (e == cudaSuccess) return;
    if (e == cudaErrorMemoryAllocation)
        ctx_fatal(c, 1, "%s: out of device memory (%s)", what, cudaGetErrorString(e));
    ctx_die_at(c, file, line, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Ends the job when a kg_ launcher failed: bad arguments with the kernel's
 * reason, anything else as a CUDA error. */
void cu_kg(srt_ctx *c, cudaError_t e, const char *op)
{
    if (e == cudaSuccess) return;
    if (e == cudaErrorInvalidValue) ctx_die(c, "%s: kg_ kernel rejected its arguments: %s", op, kg_error_detail());
    CU_CHECK(c, e, op);
}

/* Seconds on the monotonic clock. */
double cu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether p lies in the pinned host arena. */
bool cu_is_host(const srt_ctx *c, const void *p)
{
    const uint8_t *b = p;
    return c->host && b >= c->host && b < c->host + c->host_bytes;
}

/* This process's rank among the ranks of its node (the device it uses). */
static int cu_local_rank(srt_ctx *c)
{
    int init = 0;
    MPI_Initialized(&init);
    if (!init) return 0;
    MPI_Comm local;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, (int)c->rank, MPI_INFO_NULL, &local) !=
        MPI_SUCCESS)
        ctx_die(c, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed");
    int r = 0;
    MPI_Comm_rank(local, &r);
    MPI_Comm_free(&local);
    return r;
}

/* The backend's state, made on first use (the arena hook runs before init). */
static cu_state *cu_state_of(srt_ctx *c)
{
    if (c->bs) return c->bs;
    cu_state *st = ctx_alloc(c, (int64_t)sizeof *st, "the CUDA backend's state");
    c->bs = st;
    st->nvme.fd = -1;
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0)
        ctx_fatal(c, 1, "no CUDA device is usable (%s): this trainer was built with --backend cuda",
                  e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
    int lr = cu_local_rank(c);
    st->device = lr % ndev;
    CU_CHECK(c, cudaSetDevice(st->device), "cudaSetDevice");
    struct cudaDeviceProp prop;
    CU_CHECK(c, cudaGetDeviceProperties(&prop, st->device), "cudaGetDeviceProperties");
    snprintf(st->device_name, sizeof st->device_name, "%s", prop.name);
    st->sm_major = prop.major, st->sm_minor = prop.minor, st->nsm = prop.multiProcessorCount;
    CU_CHECK(c, cudaMemGetInfo(&st->free0, &st->total), "cudaMemGetInfo");
    return st;
}

/* The arenas: device memory on this rank's device (its measured cost
 * kept), and pinned, mapped host memory; both zeroed, as ctx_alloc's are. */
static void *cu_arena_alloc(srt_ctx *c, int64_t bytes, int space)
{
    cu_state *st = cu_state_of(c);
    size_t n = (size_t)(bytes > 0 ? bytes : 1);
    n = (n + 4095) & ~(size_t)4095;
    void *p = NULL;
    if (space == 0) {
        CU_CHECK(c, cudaMalloc(&p, n), "cudaMalloc (the device arena)");
        CU_CHECK(c, cudaMemset(p, 0, n), "cudaMemset (the device arena)");
        CU_CHECK(c, cudaDeviceSynchronize(), "cudaDeviceSynchronize after zeroing the device arena");
        size_t fr = 0, tot = 0;
        CU_CHECK(c, cudaMemGetInfo(&fr, &tot), "cudaMemGetInfo (after the device arena)");
        st->used_arena = st->free0 > fr ? st->free0 - fr : 0;
    } else {
        CU_CHECK(c, cudaHostAlloc(&p, n, cudaHostAllocPortable | cudaHostAllocMapped),
                 "cudaHostAlloc (the pinned host arena)");
        memset(p, 0, n);
    }
    return p;
}

/* Releases an arena. */
static void cu_arena_free(srt_ctx *c, void *p, int space)
{
    if (!p) return;
    if (space == 0) cudaFree(p);
    else cudaFreeHost(p);
}

/* Device arena bytes [off, off + bytes) into host memory dst, once the
 * device's queued work is done (ctx_dev_read; the host never addresses the arena). */
static void cu_dev_read(srt_ctx *c, void *dst, int64_t off, int64_t bytes)
{
    cu_host_drain(c);
    cu_p2p_close(c);
    CU_CHECK(c, cudaDeviceSynchronize(), "cudaDeviceSynchronize before reading the device arena");
    CU_CHECK(c, cudaMemcpy(dst, c->dev + off, (size_t)bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (device arena to host)");
}

/* Host memory src into device arena bytes [off, off + bytes), once the
 * device's queued work is done (ctx_dev_write). */
static void cu_dev_write(srt_ctx *c, int64_t off, const void *src, int64_t bytes)
{
    cu_host_drain(c);
    cu_p2p_close(c);
    CU_CHECK(c, cudaDeviceSynchronize(), "cudaDeviceSynchronize before writing the device arena");
    CU_CHECK(c, cudaMemcpy(c->dev + off, src, (size_t)bytes, cudaMemcpyHostToDevice), "cudaMemcpy (host to device arena)");
}

/* Device bytes in use now (cudaMemGetInfo: the whole device, other
 * processes included, less what was in use before the arena). */
static size_t cu_used(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) return 0;
    return st->free0 > fr ? st->free0 - fr : 0;
}

/* Streams, events, the scalars, then the modules. */
static void cu_init(srt_ctx *c)
{
    cu_state *st = cu_state_of(c);
    for (int s = 0; s < SRT_NSTREAMS; s++)
        CU_CHECK(c, cudaStreamCreate(&st->stream[s]), "cudaStreamCreate");
    for (int e = 0; e < SRT_MAX_EVENTS; e++)
        CU_CHECK(c, cudaEventCreateWithFlags(&st->event[e], cudaEventDisableTiming), "cudaEventCreate");
    CU_CHECK(c, cudaHostAlloc((void **)&st->loss_acc, SRT_NSTREAMS * sizeof(double),
                              cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc (the loss)");
    memset(st->loss_acc, 0, SRT_NSTREAMS * sizeof(double));
    cu_optim_init(c);
    cu_compute_init(c);
    cu_gemm_init(c);
    cu_attn_init(c);
    cu_comm_init(c);
    cu_io_init(c);
    cu_host_init(c);
    CU_CHECK(c, cudaDeviceSynchronize(), "cudaDeviceSynchronize after start-up");
    st->used_min = st->used_peak = cu_used(c);
    if (c->rank == 0) {
        printf("shardrt: cuda: rank 0 on device %d (%s, sm_%d%d, %d SMs); device arena %lld bytes (plan %lld), "
               "measured device memory after start-up %.1f MiB (cudaMemGetInfo)\n",
               st->device, st->device_name, st->sm_major, st->sm_minor, st->nsm, (long long)c->dev_bytes,
               (long long)c->cls->device_arena, (double)st->used_min / 1048576.0);
        printf("shardrt: cuda: device memory (cudaMemGetInfo): %.1f MiB free of %.1f MiB before the arena, "
               "the arena (cudaMalloc) took %.1f MiB, the backend's own start-up %.1f MiB more\n",
               (double)st->free0 / 1048576.0, (double)st->total / 1048576.0, (double)st->used_arena / 1048576.0,
               (double)(st->used_min > st->used_arena ? st->used_min - st->used_arena : 0) / 1048576.0);
        fflush(stdout);
    }
}

/* Waits for the device, reports the measured peak, releases everything. */
static void cu_fini(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    if (!st) return;
    cu_host_fini(c);
    cu_p2p_close(c);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) ctx_die(c, "cudaDeviceSynchronize at the end: %s", cudaGetErrorString(e));
    size_t now = cu_used(c);
    if (now > st->used_peak) st->used_peak = now;
    if (c->rank == 0) {
        printf("shardrt: cuda: peak device memory measured %.1f MiB (cudaMemGetInfo at stream syncs), "
               "planned device arena %.1f MiB\n", (double)st->used_peak / 1048576.0,
               (double)c->cls->device_arena / 1048576.0);
        fflush(stdout);
    }
    cu_io_fini(c);
    cu_comm_fini(c);
    cu_attn_fini(c);
    cu_gemm_fini(c);
    cu_compute_fini(c);
    cu_optim_fini(c);
    cudaFreeHost(st->loss_acc);
    for (int ev = 0; ev < SRT_MAX_EVENTS; ev++) cudaEventDestroy(st->event[ev]);
    for (int s = 0; s < SRT_NSTREAMS; s++) cudaStreamDestroy(st->stream[s]);
    free(st);
    c->bs = NULL;
}

/* An open group of sends and receives closes before any other op (or any
 * op of another stream): NCCL groups are per thread, not per stream. */
static void cu_before_op(srt_ctx *c, srt_stream s, int op)
{
    cu_state *st = cu_st(c);
    if (s == SRT_HOST && !cu_host_op_ok(op))
        ctx_die(c, "%s issued on SRT_HOST: the CUDA backend's host worker runs only grad_sumsq, "
                "grad_norm_finish and optimizer_step", ops_name(op));
    if (st->p2p_open && ((op != SRT_OP_send && op != SRT_OP_recv) || st->p2p_open - 1 != (int)s))
        cu_p2p_close(c);
}

/* cudaEventRecord of ev on s; on SRT_HOST the host queue's ticket (host.c). */
static void cu_event_record(srt_ctx *c, srt_stream s, int ev)
{
    cu_p2p_close(c);
    if (s == SRT_HOST) {
        cu_host_record(c, ev);
        return;
    }
    cu_st(c)->ev_host[ev] = false;
    CU_CHECK(c, cudaEventRecord(cu_st(c)->event[ev], cu_stream(c, s)), "cudaEventRecord");
}

/* s waits for ev: on the device between device streams (the host does not
 * block); SRT_HOST's waits and waits for host events as host.c says. */
static void cu_event_wait(srt_ctx *c, srt_stream s, int ev)
{
    cu_p2p_close(c);
    if (s == SRT_HOST) {
        cu_host_wait(c, ev);
        return;
    }
    if (cu_st(c)->ev_host[ev]) {
        cu_host_block(c, ev);
        return;
    }
    CU_CHECK(c, cudaStreamWaitEvent(cu_stream(c, s), cu_st(c)->event[ev], 0), "cudaStreamWaitEvent");
}

/* The host waits for s; the stream's losses join c->loss, communicator
 * errors end the job, and the device memory in use is sampled. */
static void cu_stream_sync(srt_ctx *c, srt_stream s)
{
    cu_state *st = cu_st(c);
    cu_p2p_close(c);
    if (s == SRT_HOST) cu_host_drain(c);
    CU_CHECK(c, cudaStreamSynchronize(st->stream[s]), "cudaStreamSynchronize");
    if (st->loss_pending[s]) {
        c->loss += st->loss_acc[s];
        st->loss_acc[s] = 0.0;
        st->loss_pending[s] = false;
    }
    if (st->norm_pending == (int)s + 1) cu_norm_settle(c);
    if (st->nccl) cu_comm_poll(c);
    if (s == SRT_COMPUTE) {
        size_t u = cu_used(c);
        if (u > st->used_peak) st->used_peak = u;
    }
}

const srt_backend g_backend = {
    .name = "cuda",
    .arena_alloc = cu_arena_alloc,
    .arena_free = cu_arena_free,
    .dev_read = cu_dev_read,
    .dev_write = cu_dev_write,
    .init = cu_init,
    .fini = cu_fini,
    .before_op = cu_before_op,
    .event_record = cu_event_record,
    .event_wait = cu_event_wait,
    .stream_sync = cu_stream_sync,
#define SRT_OP(name, arity, kind) .name = cu_##name,
    SRT_OPS(SRT_OP)
#undef SRT_OP
};
