/* test_cuemu_nccl.c — the emulated NCCL (tests/gpu/emu/nccl.c) under
 * `mpirun -np 4`, driven as runtime/cuda/comm.c drives it: rank 0's unique
 * id broadcast over MPI, a world communicator split into tp and dp groups
 * (tp 2 x dp 2) and a group that leaves ranks out, every collective in
 * fp32, bf16, fp16, int32 and uint8, in place and not, against results
 * computed here from NCCL's definitions (fp16 and bf16 summed in fp32 in
 * rank order and rounded once, bit for bit), grouped sends and receives,
 * the calls NCCL rejects with its error codes, and asynchrony (a collective
 * returns before its peers have issued theirs; an event after it is pending
 * until they have).
 *
 *   test_cuemu_nccl            the checks (4 ranks)
 *   test_cuemu_nccl fault-host a collective on host memory: must die as a device fault
 *   test_cuemu_nccl fault-size a receive smaller than its send: must die naming the mismatch
 *   test_cuemu_nccl fault-overlap  an all-gather with sendbuff == recvbuff: must die on rank 1
 *   test_cuemu_nccl block      two ranks' groups each hold a send only: must block (as NCCL)
 *
 * Built and registered by tests/gpu/CMakeLists.txt (it needs MPI, the real
 * nccl.h and libcuemu.a), not by the tests/unit glob.
 */
#include "check.h"
#include "../../kernels/cpu/kernels.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <unistd.h>

static int wr, ws;             /* this process's MPI world rank and size */
static cudaStream_t stream;

enum { N = 1037 };             /* odd, so no block lines up with anything */

/* A collective's result, after the stream has completed it (collectives are
 * asynchronous, as on a GPU: their results are there after a synchronisation). */
static ncclResult_t synced(ncclResult_t r)
{
    if (cudaStreamSynchronize(stream) != cudaSuccess) failures++;
    return r;
}

/* Device memory from the emulated cudart (the collectives check their buffers against it). */
static void *dev(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc(%zu) failed\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

/* What world rank r contributes at element i: fractions whose fp32 sums round. */
static float val(int r, size_t i)
{
    float v = 1.0f / (float)(3 + r + (int)(i % 97)) + (float)(i % 13) * 0.125f;
    return (i + (size_t)r) % 3 == 0 ? -v : v;
}

/* fp32 sum over members in comm-rank order of f(member, i). */
static float ref_sum(const int *members, int n, size_t i, float (*f)(int, size_t))
{
    float a = f(members[0], i);
    for (int k = 1; k < n; k++) a += f(members[k], i);
    return a;
}

/* val rounded to bf16 and back, and to fp16 and back: the values the 16-bit buffers hold. */
static float val_bf16(int r, size_t i) { return kc_f32_from_bf16(kc_bf16_from_f32(val(r, i))); }
static float val_fp16(int r, size_t i) { return kc_f32_from_fp16(kc_fp16_from_f32(val(r, i))); }

/* fp32 all-reduce (sum, max, min, prod, avg), out of place and in place, across a chunk boundary. */
static void test_allreduce_f32(ncclComm_t comm, const int *members, int n)
{
    float *in = dev(N * 4), *out = dev(N * 4);
    for (size_t i = 0; i < N; i++) in[i] = val(wr, i);
    CHECK_EQ(synced(ncclAllReduce(in, out, N, ncclFloat32, ncclSum, comm, stream)), ncclSuccess);
    int bad = 0;
    for (size_t i = 0; i < N; i++) bad += out[i] != ref_sum(members, n, i, val);
    CHECK_EQ(bad, 0);
    for (size_t i = 0; i < N; i++) CHECK(in[i] == val(wr, i));   /* sendbuff untouched */
    CHECK_EQ(synced(ncclAllReduce(in, in, N, ncclFloat32, ncclSum, comm, stream)), ncclSuccess);
    CHECK_EQ(memcmp(in, out, N * 4), 0);
    ncclRedOp_t ops[] = { ncclMax, ncclMin, ncclProd, ncclAvg };
    for (int o = 0; o < 4; o++) {
        for (size_t i = 0; i < N; i++) in[i] = val(wr, i);
        CHECK_EQ(synced(ncclAllReduce(in, out, N, ncclFloat32, ops[o], comm, stream)), ncclSuccess);
        bad = 0;
        for (size_t i = 0; i < N; i++) {
            float a = val(members[0], i);
            for (int k = 1; k < n; k++) {
                float b = val(members[k], i);
                a = ops[o] == ncclMax ? fmaxf(a, b) : ops[o] == ncclMin ? fminf(a, b) : ops[o] == ncclProd ? a * b : a + b;
            }
            if (ops[o] == ncclAvg) a /= (float)n;
            bad += out[i] != a;
        }
        CHECK_EQ(bad, 0);
    }
    cudaFree(in);
    cudaFree(out);
    /* more than one 4 MiB step of the emulation's gather: the chunks join up */
    size_t big = ((size_t)4 << 20) / 4 / (size_t)n + 4099;
    float *b = dev(big * 4);
    for (size_t i = 0; i < big; i++) b[i] = val(wr, i);
    CHECK_EQ(synced(ncclAllReduce(b, b, big, ncclFloat32, ncclSum, comm, stream)), ncclSuccess);
    bad = 0;
    for (size_t i = 0; i < big; i++) bad += b[i] != ref_sum(members, n, i, val);
    CHECK_EQ(bad, 0);
    cudaFree(b);
}

/* bf16 and fp16 all-reduce: summed in fp32 in rank order, rounded once, bit for bit. */
static void test_allreduce_16(ncclComm_t comm, const int *members, int n)
{
    uint16_t *h = dev(N * 2), *o = dev(N * 2);
    for (size_t i = 0; i < N; i++) h[i] = kc_bf16_from_f32(val(wr, i));
    CHECK_EQ(synced(ncclAllReduce(h, o, N, ncclBfloat16, ncclSum, comm, stream)), ncclSuccess);
    CHECK_EQ(synced(ncclAllReduce(h, h, N, ncclBfloat16, ncclSum, comm, stream)), ncclSuccess);
    int bad = 0;
    for (size_t i = 0; i < N; i++) {
        uint16_t want = kc_bf16_from_f32(ref_sum(members, n, i, val_bf16));
        bad += o[i] != want || h[i] != want;
    }
    CHECK_EQ(bad, 0);
    for (size_t i = 0; i < N; i++) h[i] = kc_bf16_from_f32(val(wr, i));
    CHECK_EQ(synced(ncclAllReduce(h, o, N, ncclBfloat16, ncclMax, comm, stream)), ncclSuccess);
    bad = 0;
    for (size_t i = 0; i < N; i++) {
        float a = val_bf16(members[0], i);
        for (int k = 1; k < n; k++) a = fmaxf(a, val_bf16(members[k], i));
        bad += o[i] != kc_bf16_from_f32(a);
    }
    CHECK_EQ(bad, 0);
    for (size_t i = 0; i < N; i++) h[i] = kc_fp16_from_f32(val(wr, i));
    CHECK_EQ(synced(ncclAllReduce(h, o, N, ncclFloat16, ncclSum, comm, stream)), ncclSuccess);
    bad = 0;
    for (size_t i = 0; i < N; i++) bad += o[i] != kc_fp16_from_f32(ref_sum(members, n, i, val_fp16));
    CHECK_EQ(bad, 0);
    cudaFree(h);
    cudaFree(o);
}

/* int32 sum and uint8 max (integers wrap as NCCL's do). */
static void test_allreduce_int(ncclComm_t comm, const int *members, int n)
{
    int32_t *a = dev(N * 4);
    uint8_t *u = dev(N);
    for (size_t i = 0; i < N; i++) {
        a[i] = (int32_t)((uint32_t)(wr + 1) * 1000003u * (uint32_t)(i + 1));   /* large: the sums wrap */
        u[i] = (uint8_t)(wr * 37 + i);
    }
    CHECK_EQ(synced(ncclAllReduce(a, a, N, ncclInt32, ncclSum, comm, stream)), ncclSuccess);
    CHECK_EQ(synced(ncclAllReduce(u, u, N, ncclUint8, ncclMax, comm, stream)), ncclSuccess);
    int bad = 0;
    for (size_t i = 0; i < N; i++) {
        uint32_t s = 0;
        uint8_t m = 0;
        for (int k = 0; k < n; k++) {
            s += (uint32_t)(members[k] + 1) * 1000003u * (uint32_t)(i + 1);
            uint8_t v = (uint8_t)(members[k] * 37 + i);
            m = v > m ? v : m;
        }
        bad += a[i] != (int32_t)s || u[i] != m;
    }
    CHECK_EQ(bad, 0);
    cudaFree(a);
    cudaFree(u);
}

/* all-gather: rank-ordered blocks, out of place and in place (sendbuff == recvbuff + rank * count). */
static void test_allgather(ncclComm_t comm, const int *members, int n, int me)
{
    float *in = dev(N * 4), *out = dev((size_t)n * N * 4);
    for (size_t i = 0; i < N; i++) in[i] = val(wr, i);
    CHECK_EQ(synced(ncclAllGather(in, out, N, ncclFloat32, comm, stream)), ncclSuccess);
    int bad = 0;
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < N; i++) bad += out[(size_t)k * N + i] != val(members[k], i);
    CHECK_EQ(bad, 0);
    memset(out, 0, (size_t)n * N * 4);
    for (size_t i = 0; i < N; i++) out[(size_t)me * N + i] = val(wr, i);
    CHECK_EQ(synced(ncclAllGather(out + (size_t)me * N, out, N, ncclFloat32, comm, stream)), ncclSuccess);
    bad = 0;
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < N; i++) bad += out[(size_t)k * N + i] != val(members[k], i);
    CHECK_EQ(bad, 0);
    uint16_t *h = dev(N * 2), *ho = dev((size_t)n * N * 2);
    for (size_t i = 0; i < N; i++) h[i] = kc_bf16_from_f32(val(wr, i));
    CHECK_EQ(synced(ncclAllGather(h, ho, N, ncclBfloat16, comm, stream)), ncclSuccess);
    bad = 0;
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < N; i++) bad += ho[(size_t)k * N + i] != kc_bf16_from_f32(val(members[k], i));
    CHECK_EQ(bad, 0);
    cudaFree(in);
    cudaFree(out);
    cudaFree(h);
    cudaFree(ho);
}

/* reduce-scatter: block `me` of the sum, out of place and in place (recvbuff == sendbuff + rank * count). */
static void test_reducescatter(ncclComm_t comm, const int *members, int n, int me)
{
    size_t tot = (size_t)n * N;
    float *in = dev(tot * 4), *out = dev(N * 4);
    for (size_t i = 0; i < tot; i++) in[i] = val(wr, i);
    CHECK_EQ(synced(ncclReduceScatter(in, out, N, ncclFloat32, ncclSum, comm, stream)), ncclSuccess);
    int bad = 0;
    for (size_t i = 0; i < N; i++) bad += out[i] != ref_sum(members, n, (size_t)me * N + i, val);
    CHECK_EQ(bad, 0);
    CHECK_EQ(synced(ncclReduceScatter(in, in + (size_t)me * N, N, ncclFloat32, ncclSum, comm, stream)), ncclSuccess);
    CHECK_EQ(memcmp(in + (size_t)me * N, out, N * 4), 0);
    uint16_t *h = dev(tot * 2);
    for (size_t i = 0; i < tot; i++) h[i] = kc_bf16_from_f32(val(wr, i));
    CHECK_EQ(synced(ncclReduceScatter(h, h + (size_t)me * N, N, ncclBfloat16, ncclSum, comm, stream)), ncclSuccess);
    bad = 0;
    for (size_t i = 0; i < N; i++)
        bad += h[(size_t)me * N + i] != kc_bf16_from_f32(ref_sum(members, n, (size_t)me * N + i, val_bf16));
    CHECK_EQ(bad, 0);
    cudaFree(in);
    cudaFree(out);
    cudaFree(h);
}

/* broadcast from the last member: in place, and out of place (sendbuff read on the root only). */
static void test_broadcast(ncclComm_t comm, const int *members, int n, int me)
{
    int root = n - 1;
    float *a = dev(N * 4), *b = dev(N * 4);
    for (size_t i = 0; i < N; i++) a[i] = val(wr, i);
    CHECK_EQ(synced(ncclBroadcast(a, a, N, ncclFloat32, root, comm, stream)), ncclSuccess);
    int bad = 0;
    for (size_t i = 0; i < N; i++) bad += a[i] != val(members[root], i);
    CHECK_EQ(bad, 0);
    for (size_t i = 0; i < N; i++) a[i] = val(wr, i) + 1.0f;
    /* a non-root's sendbuff is ignored: NULL is fine there */
    CHECK_EQ(synced(ncclBroadcast(me == root ? a : NULL, b, N, ncclFloat32, root, comm, stream)), ncclSuccess);
    bad = 0;
    for (size_t i = 0; i < N; i++) bad += b[i] != val(members[root], i) + 1.0f;
    CHECK_EQ(bad, 0);
    int32_t *x = dev(N * 4);
    for (size_t i = 0; i < N; i++) x[i] = wr * 100000 + (int32_t)i;
    CHECK_EQ(synced(ncclBroadcast(x, x, N, ncclInt32, 0, comm, stream)), ncclSuccess);
    bad = 0;
    for (size_t i = 0; i < N; i++) bad += x[i] != members[0] * 100000 + (int32_t)i;
    CHECK_EQ(bad, 0);
    cudaFree(a);
    cudaFree(b);
    cudaFree(x);
}

/* Every collective on comm, whose comm rank k is world rank members[k]. */
static void test_collectives(ncclComm_t comm, const int *members, int n)
{
    int cn = 0, me = -1;
    CHECK_EQ(ncclCommCount(comm, &cn), ncclSuccess);
    CHECK_EQ(ncclCommUserRank(comm, &me), ncclSuccess);
    CHECK_EQ(cn, n);
    CHECK(me >= 0 && me < n && members[me] == wr);
    test_allreduce_f32(comm, members, n);
    test_allreduce_16(comm, members, n);
    test_allreduce_int(comm, members, n);
    test_allgather(comm, members, n, me);
    test_reducescatter(comm, members, n, me);
    test_broadcast(comm, members, n, me);
    /* count 0 does nothing, even with NULL buffers */
    CHECK_EQ(synced(ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, comm, stream)), ncclSuccess);
}

/* Sends and receives: pairs that send to each other before receiving (grouped,
 * nested), a ring, an ungrouped send, and a send read at ncclGroupEnd. */
static void test_p2p(ncclComm_t world, ncclComm_t tp)
{
    size_t big = (size_t)1 << 20;   /* 4 MiB: far beyond any eager buffering */
    float *s = dev(big * 4), *r = dev(big * 4);
    int peer = 1 - wr % 2;          /* the other tp member */
    for (size_t i = 0; i < big; i++) s[i] = val(wr, i);
    CHECK_EQ(ncclGroupStart(), ncclSuccess);
    CHECK_EQ(ncclGroupStart(), ncclSuccess);
    CHECK_EQ(ncclSend(s, big, ncclFloat32, peer, tp, stream), ncclSuccess);
    CHECK_EQ(ncclGroupEnd(), ncclSuccess);   /* inner end: nothing runs yet */
    CHECK_EQ(ncclRecv(r, big, ncclFloat32, peer, tp, stream), ncclSuccess);
    CHECK_EQ(ncclGroupEnd(), ncclSuccess);
    int bad = 0, pw = (wr / 2) * 2 + peer;
    for (size_t i = 0; i < big; i++) bad += r[i] != val(pw, i);
    CHECK_EQ(bad, 0);

    /* a ring over the world, two sends to the same peer matched in order */
    int next = (wr + 1) % ws, prev = (wr + ws - 1) % ws;
    uint16_t *h = dev(2 * N * 2), *g = dev(2 * N * 2);
    for (size_t i = 0; i < 2 * N; i++) h[i] = kc_bf16_from_f32(val(wr, i));
    CHECK_EQ(ncclGroupStart(), ncclSuccess);
    CHECK_EQ(ncclSend(h, N, ncclBfloat16, next, world, stream), ncclSuccess);
    CHECK_EQ(ncclSend(h + N, N, ncclBfloat16, next, world, stream), ncclSuccess);
    CHECK_EQ(ncclRecv(g, N, ncclBfloat16, prev, world, stream), ncclSuccess);
    CHECK_EQ(ncclRecv(g + N, N, ncclBfloat16, prev, world, stream), ncclSuccess);
    CHECK_EQ(ncclGroupEnd(), ncclSuccess);
    bad = 0;
    for (size_t i = 0; i < 2 * N; i++) bad += g[i] != kc_bf16_from_f32(val(prev, i));
    CHECK_EQ(bad, 0);

    /* ungrouped: the even member sends first, the odd one receives first */
    if (wr % 2 == 0) {
        CHECK_EQ(ncclSend(s, N, ncclFloat32, peer, tp, stream), ncclSuccess);
        CHECK_EQ(ncclRecv(r, N, ncclFloat32, peer, tp, stream), ncclSuccess);
    } else {
        CHECK_EQ(ncclRecv(r, N, ncclFloat32, peer, tp, stream), ncclSuccess);
        CHECK_EQ(ncclSend(s, N, ncclFloat32, peer, tp, stream), ncclSuccess);
    }
    bad = 0;
    for (size_t i = 0; i < N; i++) bad += r[i] != val(pw, i);
    CHECK_EQ(bad, 0);

    /* nothing starts before ncclGroupEnd: what the send buffer holds then is what goes */
    for (size_t i = 0; i < N; i++) s[i] = -1.0f;
    CHECK_EQ(ncclGroupStart(), ncclSuccess);
    CHECK_EQ(ncclSend(s, N, ncclFloat32, peer, tp, stream), ncclSuccess);
    CHECK_EQ(ncclRecv(r, N, ncclFloat32, peer, tp, stream), ncclSuccess);
    for (size_t i = 0; i < N; i++) s[i] = (float)wr + 0.5f;
    CHECK_EQ(ncclGroupEnd(), ncclSuccess);
    bad = 0;
    for (size_t i = 0; i < N; i++) bad += r[i] != (float)pw + 0.5f;
    CHECK_EQ(bad, 0);

    /* a collective inside a group runs at its end, with the sends */
    float *c = dev(N * 4);
    for (size_t i = 0; i < N; i++) c[i] = val(wr, i);
    CHECK_EQ(ncclGroupStart(), ncclSuccess);
    CHECK_EQ(synced(ncclAllReduce(c, c, N, ncclFloat32, ncclSum, world, stream)), ncclSuccess);
    CHECK_EQ(ncclSend(s, N, ncclFloat32, peer, tp, stream), ncclSuccess);
    CHECK_EQ(ncclRecv(r, N, ncclFloat32, peer, tp, stream), ncclSuccess);
    CHECK(c[0] == val(wr, 0));   /* not yet */
    CHECK_EQ(ncclGroupEnd(), ncclSuccess);
    int all[4] = { 0, 1, 2, 3 };
    bad = 0;
    for (size_t i = 0; i < N; i++) bad += c[i] != ref_sum(all, ws, i, val) || r[i] != (float)pw + 0.5f;
    CHECK_EQ(bad, 0);
    cudaFree(s);
    cudaFree(r);
    cudaFree(h);
    cudaFree(g);
    cudaFree(c);
}

/* cudaEventQuery from a thread that is not the MPI thread (as the CUDA backend's watchdog asks). */
static void *query_thread(void *ev)
{
    static cudaError_t r;
    r = cudaEventQuery((cudaEvent_t)ev);
    return &r;
}

/* A collective is asynchronous: on rank 0 the call returns before the other
 * ranks have issued theirs, an event recorded after it is pending (to the
 * issuing thread and to another one), and it completes once they have; its
 * result is there after cudaEventSynchronize. */
static void test_async(ncclComm_t world)
{
    float *x = dev(N * 4);
    for (size_t i = 0; i < N; i++) x[i] = val(wr, i);
    cudaEvent_t ev;
    CHECK_EQ(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), cudaSuccess);
    int go = 1;
    if (wr == 0) {
        CHECK_EQ(ncclAllReduce(x, x, N, ncclFloat32, ncclSum, world, stream), ncclSuccess);
        CHECK_EQ(cudaEventRecord(ev, stream), cudaSuccess);
        CHECK_EQ(cudaEventQuery(ev), cudaErrorNotReady);
        pthread_t t;
        void *res = NULL;
        CHECK_EQ(pthread_create(&t, NULL, query_thread, ev), 0);
        pthread_join(t, &res);
        CHECK(res && *(cudaError_t *)res == cudaErrorNotReady);
        CHECK_EQ(cudaStreamQuery(stream), cudaErrorNotReady);
        for (int r = 1; r < ws; r++) MPI_Send(&go, 1, MPI_INT, r, 7, MPI_COMM_WORLD);
    } else {
        MPI_Recv(&go, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK_EQ(ncclAllReduce(x, x, N, ncclFloat32, ncclSum, world, stream), ncclSuccess);
        CHECK_EQ(cudaEventRecord(ev, stream), cudaSuccess);
    }
    CHECK_EQ(cudaEventSynchronize(ev), cudaSuccess);
    CHECK_EQ(cudaEventQuery(ev), cudaSuccess);
    int all[4] = { 0, 1, 2, 3 }, bad = 0;
    for (size_t i = 0; i < N; i++) bad += x[i] != ref_sum(all, ws, i, val);
    CHECK_EQ(bad, 0);
    cudaEventDestroy(ev);
    cudaFree(x);
}

/* A collective from a second thread (the emulation's MPI is the main thread's only). */
static void *other_thread(void *arg)
{
    float *x = ((void **)arg)[0];
    ncclComm_t world = ((void **)arg)[1];
    static ncclResult_t r;
    r = ncclAllReduce(x, x, N, ncclFloat32, ncclSum, world, stream);
    return &r;
}

/* The calls NCCL rejects, with its codes and a message in ncclGetLastError. */
static void test_rejections(ncclComm_t world, ncclUniqueId id)
{
    ncclComm_t bad = (ncclComm_t)(uintptr_t)1;
    CHECK_EQ(ncclCommInitRank(&bad, ws + 1, id, wr), ncclInvalidArgument);
    CHECK(bad == NULL);
    CHECK_HAS(ncclGetLastError(NULL), "one process per NCCL rank");
    CHECK_EQ(ncclCommInitRank(&bad, ws, id, (wr + 1) % ws), ncclInvalidArgument);
    CHECK_EQ(ncclCommInitRank(&bad, 0, id, 0), ncclInvalidArgument);
    CHECK_HAS(ncclGetLastError(NULL), "Invalid rank requested");
    CHECK_EQ(ncclCommInitRank(&bad, ws, id, ws), ncclInvalidArgument);
    CHECK_EQ(ncclCommInitRank(NULL, ws, id, wr), ncclInvalidArgument);
    /* rank 3 brings an id of its own: every rank is refused alike */
    ncclUniqueId other = id;
    if (wr == 3) CHECK_EQ(ncclGetUniqueId(&other), ncclSuccess);
    CHECK(wr != 3 || memcmp(&other, &id, sizeof id) != 0);
    CHECK_EQ(ncclCommInitRank(&bad, ws, other, wr), ncclInvalidUsage);
    CHECK_HAS(ncclGetLastError(NULL), "different ncclUniqueId");
    CHECK(bad == NULL);
    /* two ranks on one device: NCCL's "Duplicate GPU detected" */
    CHECK_EQ(cudaSetDevice(wr % 2), cudaSuccess);
    CHECK_EQ(ncclCommInitRank(&bad, ws, id, wr), ncclInvalidUsage);
    CHECK_HAS(ncclGetLastError(NULL), "Duplicate GPU detected : rank 0 and rank 2 both on CUDA device 0");
    CHECK(bad == NULL);
    CHECK_EQ(cudaSetDevice(wr), cudaSuccess);

    float *x = dev(N * 4);
    for (size_t i = 0; i < N; i++) x[i] = 1.0f;
    CHECK_EQ(ncclSend(x, N, ncclFloat32, ws, world, stream), ncclInvalidArgument);
    CHECK_HAS(ncclGetLastError(NULL), "invalid peer");
    CHECK_EQ(ncclRecv(x, N, ncclFloat32, -1, world, stream), ncclInvalidArgument);
    CHECK_EQ(ncclBroadcast(x, x, N, ncclFloat32, ws, world, stream), ncclInvalidArgument);
    CHECK_HAS(ncclGetLastError(NULL), "invalid root");
    CHECK_EQ(ncclAllReduce(x, x, N, ncclNumTypes, ncclSum, world, stream), ncclInvalidArgument);
    CHECK_HAS(ncclGetLastError(NULL), "invalid type");
    CHECK_EQ(ncclAllReduce(x, x, N, ncclFloat32, ncclNumOps, world, stream), ncclInvalidArgument);
    CHECK_HAS(ncclGetLastError(NULL), "reduction operation");
    CHECK_EQ(ncclAllReduce(x, x, N, ncclFloat32, ncclSum, NULL, stream), ncclInvalidArgument);
    CHECK_HAS(ncclGetLastError(NULL), "comm argument is NULL");
    CHECK_EQ(ncclGroupEnd(), ncclInvalidUsage);
    CHECK_HAS(ncclGetLastError(NULL), "not in a group call");
    /* a rejected call in a group fails the whole group, which then runs nothing */
    CHECK_EQ(ncclGroupStart(), ncclSuccess);
    CHECK_EQ(synced(ncclAllReduce(x, x, N, ncclFloat32, ncclSum, world, stream)), ncclSuccess);
    CHECK_EQ(ncclSend(x, N, ncclFloat32, -3, world, stream), ncclInvalidArgument);
    CHECK_EQ(ncclGroupEnd(), ncclInvalidArgument);
    CHECK(x[0] == 1.0f);
    /* and the next group starts clean */
    CHECK_EQ(ncclGroupStart(), ncclSuccess);
    CHECK_EQ(synced(ncclAllReduce(x, x, N, ncclFloat32, ncclSum, world, stream)), ncclSuccess);
    CHECK_EQ(ncclGroupEnd(), ncclSuccess);
    CHECK(x[0] == (float)ws);
    int level = 0;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE) {
        pthread_t t;
        void *args[2] = { x, world }, *res = NULL;
        CHECK_EQ(pthread_create(&t, NULL, other_thread, args), 0);
        pthread_join(t, &res);
        CHECK_EQ(*(ncclResult_t *)res, ncclInternalError);
        CHECK_HAS(ncclGetLastError(NULL), "MPI_THREAD_MULTIPLE");
        CHECK(x[0] == (float)ws);
    }

    ncclComm_t sub = (ncclComm_t)(uintptr_t)1;
    CHECK_EQ(ncclCommSplit(world, -5, 0, &sub, NULL), ncclInvalidArgument);
    CHECK(sub == NULL);
    ncclResult_t ae = ncclInternalError;
    CHECK_EQ(ncclCommGetAsyncError(world, &ae), ncclSuccess);
    CHECK_EQ(ae, ncclSuccess);
    CHECK_EQ(ncclCommDestroy(NULL), ncclSuccess);
    CHECK(strcmp(ncclGetErrorString(ncclInvalidUsage), "invalid usage (run with NCCL_DEBUG=WARN for details)") == 0);
    cudaFree(x);
}

/* A split that leaves ranks out gets NULL there; finalize, destroy and what follows. */
static void test_lifecycle(ncclComm_t world)
{
    ncclComm_t pair = (ncclComm_t)(uintptr_t)1;
    /* ranks 1 and 3 only, key reversing their order */
    CHECK_EQ(ncclCommSplit(world, wr % 2 ? 7 : NCCL_SPLIT_NOCOLOR, -wr, &pair, NULL), ncclSuccess);
    if (wr % 2 == 0) {
        CHECK(pair == NULL);
        return;
    }
    int members[2] = { 3, 1 };
    CHECK(pair != NULL);
    test_allreduce_f32(pair, members, 2);
    test_broadcast(pair, members, 2, wr == 3 ? 0 : 1);
    CHECK_EQ(ncclCommFinalize(pair), ncclSuccess);
    CHECK_EQ(ncclCommFinalize(pair), ncclInvalidArgument);
    float *x = dev(4);
    CHECK_EQ(ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, pair, stream), ncclInvalidUsage);
    CHECK_EQ(ncclCommDestroy(pair), ncclSuccess);
    /* a destroyed communicator is no longer one */
    CHECK_EQ(ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, pair, stream), ncclInvalidArgument);
    CHECK_EQ(ncclCommDestroy(pair), ncclInvalidArgument);
    cudaFree(x);
}

/* SIGALRM in the blocking mode: the run waited as NCCL would, which is the pass. */
static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "blocked as NCCL would: a send's group waits for its receive\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
    _exit(0);
}

/* The fault modes: what a GPU would end with an illegal address or a hang. */
static int run_fault(const char *mode, ncclComm_t world)
{
    float *x = dev(N * 4);
    if (strcmp(mode, "block") == 0) {
        /* two groups that each hold a send: the receives come in the next groups, so
         * neither first group can complete however small the message (no buffering) */
        signal(SIGALRM, on_alarm);
        alarm(2);
        if (wr < 2) {
            ncclGroupStart();
            ncclSend(x, 1, ncclFloat32, 1 - wr, world, stream);
            ncclGroupEnd();
            ncclGroupStart();
            ncclRecv(x, 1, ncclFloat32, 1 - wr, world, stream);
            ncclGroupEnd();
        }
        fprintf(stderr, "the groups completed: sends were buffered\n");
        return 1;
    }
    if (strcmp(mode, "fault-overlap") == 0) {
        /* MPI's habit, not NCCL's in-place layout: in place on rank 0 only, an overlap on rank 1 */
        float *y = dev((size_t)ws * N * 4);
        ncclAllGather(y, y, N, ncclFloat32, world, stream);
    } else if (strcmp(mode, "fault-host") == 0) {
        float *h = calloc(N, 4);
        ncclAllReduce(h, x, N, ncclFloat32, ncclSum, world, stream);
    } else if (wr == 0) {
        ncclSend(x, N, ncclFloat32, 1, world, stream);
    } else if (wr == 1) {
        ncclRecv(x, N - 1, ncclFloat32, 0, world, stream);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return 0;   /* reached only when nothing faulted: the test's regex then fails */
}

/* The checks on 4 ranks, or one of the fault modes (argv[1]) on 2. */
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    MPI_Comm_size(MPI_COMM_WORLD, &ws);
    if (ws != 4 && argc < 2) {
        if (wr == 0) fprintf(stderr, "run me with mpirun -np 4 (got %d ranks)\n", ws);
        MPI_Finalize();
        return 1;
    }
    CHECK_EQ(cudaSetDevice(wr), cudaSuccess);   /* one device a rank, as runtime/cuda picks them */
    CHECK_EQ(cudaStreamCreate(&stream), cudaSuccess);
    ncclUniqueId id;
    if (wr == 0) CHECK_EQ(ncclGetUniqueId(&id), ncclSuccess);
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t world = NULL;
    CHECK_EQ(ncclCommInitRank(&world, ws, id, wr), ncclSuccess);
    if (!world) MPI_Abort(MPI_COMM_WORLD, 1);
    if (argc >= 2) return run_fault(argv[1], world);

    /* tp 2 x dp 2 as the runtime lays it out: tp groups {0,1} {2,3}, dp groups {0,2} {1,3} */
    ncclComm_t tp = NULL, dp = NULL;
    CHECK_EQ(ncclCommSplit(world, wr / 2, wr % 2, &tp, NULL), ncclSuccess);
    CHECK_EQ(ncclCommSplit(world, wr % 2, wr / 2, &dp, NULL), ncclSuccess);
    int wm[4] = { 0, 1, 2, 3 }, tm[2] = { (wr / 2) * 2, (wr / 2) * 2 + 1 }, dm[2] = { wr % 2, wr % 2 + 2 };
    test_collectives(world, wm, ws);
    test_collectives(tp, tm, 2);
    test_collectives(dp, dm, 2);
    test_p2p(world, tp);
    test_async(world);
    test_rejections(world, id);
    test_lifecycle(world);
    ncclComm_t mine[3] = { dp, tp, world };
    for (int k = 0; k < 3; k++) {
        CHECK_EQ(ncclCommFinalize(mine[k]), ncclSuccess);
        CHECK_EQ(ncclCommDestroy(mine[k]), ncclSuccess);
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (wr == 0) printf("test_cuemu_nccl: %d ranks, %d failures\n", ws, total);
    cudaStreamDestroy(stream);
    MPI_Finalize();
    return total != 0;
}
