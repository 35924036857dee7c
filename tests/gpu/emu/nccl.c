/* nccl.c — an emulated NCCL over MPI, prefix emnc_ (the public symbols are
 * NCCL's own, from the real nccl.h).
 *
 * One emulated rank per MPI process: a communicator wraps a duplicate of an
 * MPI communicator, so ncclCommInitRank needs the world's size and this
 * process's world rank, and ncclCommSplit is MPI_Comm_split.  A
 * collective is asynchronous, as on a GPU: the call checks it, posts its
 * first non-blocking MPI operation and returns; the rest is deferred work of
 * its stream (cuemu_defer), completed before the stream's next work, at an
 * event wait or a host synchronisation (cudart.c), so an event recorded
 * after a collective that waits for a stopped peer stays pending and the
 * CUDA backend's watchdog sees it.  Collectives of one communicator are
 * posted in issue order: a new call completes the communicator's earlier
 * one first.  Reductions gather every rank's contribution
 * and combine them here, in rank order, so that every rank gets the same
 * bits on every run; fp16 and bf16 are summed in fp32 and rounded once
 * (kernels/cpu/cast.c's conversions).  Calls inside ncclGroupStart/End are
 * queued and run at the outermost ncclGroupEnd, as NCCL starts nothing on
 * the stream before it: sends and receives as MPI_Issend/MPI_Irecv completed
 * together, so two ranks may send to each other before receiving.  Sends are
 * synchronous (MPI_Ssend outside a group): NCCL's send may block until the
 * peer receives, and a program that relies on buffering must hang here too
 * rather than pass.
 *
 * Argument errors return NCCL's codes with NCCL's messages (ncclGetLastError,
 * printed when NCCL_DEBUG is set); a buffer outside device memory is a
 * device fault (cuemu_fault), as an illegal address is on a GPU.
 */
#define _GNU_SOURCE   /* clock_gettime, gethostname under -std=c11 */
#include "cuemu.h"
#include "../../../kernels/cpu/kernels.h"   /* the fp16/bf16 conversions the CPU backend uses */

#include <nccl.h>
#include <mpi.h>

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* What a live communicator holds. */
struct ncclComm {
    MPI_Comm mpi;              /* a duplicate: NCCL traffic never meets the program's own MPI */
    int rank, nranks;
    bool finalized;
    struct ncclComm *next;     /* the list of live communicators */
};

/* The kinds of queued operation. */
typedef enum { EMNC_ALLREDUCE, EMNC_ALLGATHER, EMNC_REDUCESCATTER, EMNC_BROADCAST, EMNC_REDUCE, EMNC_SEND,
               EMNC_RECV } emnc_kind;

/* One collective or point-to-point call, as issued. */
typedef struct {
    emnc_kind kind;
    const char *name;
    const void *send;
    void *recv;
    size_t count;              /* per rank: the collective's count argument */
    ncclDataType_t dt;
    ncclRedOp_t op;
    int peer;                  /* root or peer */
    ncclComm_t comm;
} emnc_op;

/* The live communicators (the watchdog thread asks about them too). */
static pthread_mutex_t emnc_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm *emnc_live;

/* ncclGetLastError's text: NCCL keeps one for the process. */
static char emnc_last[1024];

/* The group state of this thread (NCCL's is per thread). */
static _Thread_local int emnc_depth;
static _Thread_local ncclResult_t emnc_group_err;
static _Thread_local emnc_op *emnc_q;
static _Thread_local const void **emnc_qs;     /* each queued call's stream */
static _Thread_local size_t emnc_qn, emnc_qcap;

/* Elements combined per step, so that scratch stays small and MPI counts fit an int. */
#define EMNC_CHUNK_BYTES ((size_t)4 << 20)

/* Records an error's message (and prints it as NCCL_DEBUG=WARN would); returns r. */
static ncclResult_t emnc_err(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ncclResult_t emnc_err(ncclResult_t r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(emnc_last, sizeof emnc_last, fmt, ap);
    va_end(ap);
    if (getenv("NCCL_DEBUG")) fprintf(stderr, "NCCL WARN %s\n", emnc_last);
    if (emnc_depth > 0 && emnc_group_err == ncclSuccess) emnc_group_err = r;
    return r;
}

/* Whether MPI has been initialized and not finalized (NCCL's bootstrap needs it here). */
static bool emnc_mpi_up(void)
{
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    return up && !down;
}

/* An MPI failure as NCCL's system error, naming the call. */
static ncclResult_t emnc_mpi_err(const char *call, int code)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(code, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", code);
    return emnc_err(ncclSystemError, "%s failed: %s", call, s);
}

/* Whether comm is a live communicator (NCCL checks its magic numbers). */
static bool emnc_is_live(ncclComm_t comm)
{
    pthread_mutex_lock(&emnc_mu);
    struct ncclComm *m = emnc_live;
    while (m && m != comm) m = m->next;
    pthread_mutex_unlock(&emnc_mu);
    return m != NULL;
}

/* NCCL's CommCheck: a NULL or dead communicator is an invalid argument. */
static ncclResult_t emnc_comm_check(ncclComm_t comm, const char *who)
{
    if (!comm) return emnc_err(ncclInvalidArgument, "%s : comm argument is NULL", who);
    if (!emnc_is_live(comm)) return emnc_err(ncclInvalidArgument, "%s : Error: corrupted comm object detected", who);
    return ncclSuccess;
}

/* Adds a new communicator around mpi (which it now owns). */
static ncclComm_t emnc_comm_new(MPI_Comm mpi)
{
    struct ncclComm *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->mpi = mpi;
    MPI_Comm_rank(mpi, &m->rank);
    MPI_Comm_size(mpi, &m->nranks);
    MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
    pthread_mutex_lock(&emnc_mu);
    m->next = emnc_live;
    emnc_live = m;
    pthread_mutex_unlock(&emnc_mu);
    return m;
}

static bool emnc_thread_ok(void);

/* Unlinks and frees comm and its MPI communicator: the one place either is
 * released.  From another thread (the watchdog's ncclCommAbort, just before
 * the process ends) the MPI communicator is left to MPI_Finalize or exit. */
static void emnc_comm_release(ncclComm_t comm)
{
    pthread_mutex_lock(&emnc_mu);
    struct ncclComm **pp = &emnc_live;
    while (*pp && *pp != comm) pp = &(*pp)->next;
    if (*pp) *pp = comm->next;
    pthread_mutex_unlock(&emnc_mu);
    if (comm->mpi != MPI_COMM_NULL && emnc_mpi_up() && emnc_thread_ok()) MPI_Comm_free(&comm->mpi);
    free(comm);
}

/* Bytes of one element of dt (dt already checked). */
static size_t emnc_dsize(ncclDataType_t dt)
{
    switch (dt) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

/* Whether the call reduces (and so needs arithmetic on dt). */
static bool emnc_reduces(emnc_kind k)
{
    return k == EMNC_ALLREDUCE || k == EMNC_REDUCESCATTER || k == EMNC_REDUCE;
}

/* NCCL's ArgsCheck: root or peer, type, reduction operation. */
static ncclResult_t emnc_args_check(const emnc_op *o)
{
    ncclResult_t r = emnc_comm_check(o->comm, o->name);
    if (r != ncclSuccess) return r;
    if (o->comm->finalized)
        return emnc_err(ncclInvalidUsage, "%s : communicator %p has been finalized", o->name, (void *)o->comm);
    bool p2p = o->kind == EMNC_SEND || o->kind == EMNC_RECV;
    if ((p2p || o->kind == EMNC_BROADCAST || o->kind == EMNC_REDUCE) && (o->peer < 0 || o->peer >= o->comm->nranks))
        return emnc_err(ncclInvalidArgument, "%s : invalid %s %d (%s should be in the 0..%d range)", o->name,
                        p2p ? "peer" : "root", o->peer, p2p ? "peer" : "root", o->comm->nranks - 1);
    if ((unsigned)o->dt >= (unsigned)ncclNumTypes)
        return emnc_err(ncclInvalidArgument, "%s : invalid type %d", o->name, (int)o->dt);
    if (emnc_reduces(o->kind)) {
        if ((int)o->op < 0 || (int)o->op >= (int)ncclNumOps)
            return emnc_err(ncclInvalidArgument, "%s : reduction operation %d unknown to this communicator", o->name,
                            (int)o->op);
        if (o->dt == ncclFloat8e4m3 || o->dt == ncclFloat8e5m2)
            return emnc_err(ncclInvalidArgument, "%s : fp8 reduction not supported (the emulation has no fp8 "
                            "arithmetic, as NCCL has none before sm_90)", o->name);
    }
    return ncclSuccess;
}

/* The call's name in a device fault: "ncclRecv". */
static const char *emnc_who(const emnc_op *o)
{
    static _Thread_local char who[32];
    snprintf(who, sizeof who, "nccl%s", o->name);
    return who;
}

/* A device fault unless [p, p + bytes) is device memory. */
static void emnc_range(const emnc_op *o, const char *which, const void *p, size_t bytes)
{
    if (bytes && !cuemu_device_range(p, bytes))
        cuemu_fault(emnc_who(o), "%s %p (%zu bytes) is not inside one device allocation", which, p, bytes);
}

/* A device fault when two buffers overlap other than in NCCL's in-place layout. */
static void emnc_overlap(const emnc_op *o, const void *a, size_t na, const void *b, size_t nb, bool inplace)
{
    const char *pa = a, *pb = b;
    if (!inplace && na && nb && pa < pb + nb && pb < pa + na)
        cuemu_fault(emnc_who(o), "sendbuff %p (%zu bytes) and recvbuff %p (%zu bytes) overlap but are not in place",
                    a, na, b, nb);
}

/* The inputs of one reduction: n ranks' blocks of c elements each, combined in rank order. */
#define EMNC_FOLD(T, ACC, LOAD, STORE, COMBINE, AVG)                                \
    do {                                                                          \
        const T *x = in;                                                          \
        T *y = out;                                                               \
        for (size_t i = 0; i < c; i++) {                                          \
            ACC a = LOAD(x[i]);                                                   \
            for (int r = 1; r < n; r++) {                                         \
                ACC b = LOAD(x[(size_t)r * c + i]);                               \
                a = COMBINE;                                                      \
            }                                                                     \
            if (op == ncclAvg) a = AVG;                                           \
            y[i] = STORE(a);                                                      \
        }                                                                         \
    } while (0)

#define EMNC_ID(v) (v)
#define EMNC_FLOAT_COMBINE (op == ncclSum || op == ncclAvg ? a + b : op == ncclProd ? a * b \
                            : op == ncclMax ? fmax(a, b) : fmin(a, b))
#define EMNC_INT_COMBINE(UT) (op == ncclSum || op == ncclAvg ? (UT)a + (UT)b : op == ncclProd ? (UT)a * (UT)b \
                              : op == ncclMax ? (UT)(a > b ? a : b) : (UT)(a < b ? a : b))

/* out(c) = op over ranks of in(n, c): fp16/bf16 in fp32 rounded once, integers wrapping. */
static void emnc_fold(ncclDataType_t dt, ncclRedOp_t op, int n, const void *in, size_t c, void *out)
{
    switch (dt) {
    case ncclFloat32: EMNC_FOLD(float, float, EMNC_ID, EMNC_ID, (float)EMNC_FLOAT_COMBINE, a / (float)n); break;
    case ncclFloat64: EMNC_FOLD(double, double, EMNC_ID, EMNC_ID, EMNC_FLOAT_COMBINE, a / n); break;
    case ncclFloat16:
        EMNC_FOLD(uint16_t, float, kc_f32_from_fp16, kc_fp16_from_f32, (float)EMNC_FLOAT_COMBINE, a / (float)n);
        break;
    case ncclBfloat16:
        EMNC_FOLD(uint16_t, float, kc_f32_from_bf16, kc_bf16_from_f32, (float)EMNC_FLOAT_COMBINE, a / (float)n);
        break;
    case ncclInt8: EMNC_FOLD(int8_t, int8_t, EMNC_ID, EMNC_ID, (int8_t)EMNC_INT_COMBINE(uint8_t), a / n); break;
    case ncclUint8: EMNC_FOLD(uint8_t, uint8_t, EMNC_ID, EMNC_ID, (uint8_t)EMNC_INT_COMBINE(uint8_t), a / n); break;
    case ncclInt32: EMNC_FOLD(int32_t, int32_t, EMNC_ID, EMNC_ID, (int32_t)EMNC_INT_COMBINE(uint32_t), a / n); break;
    case ncclUint32:
        EMNC_FOLD(uint32_t, uint32_t, EMNC_ID, EMNC_ID, (uint32_t)EMNC_INT_COMBINE(uint32_t), a / (uint32_t)n);
        break;
    case ncclInt64: EMNC_FOLD(int64_t, int64_t, EMNC_ID, EMNC_ID, (int64_t)EMNC_INT_COMBINE(uint64_t), a / n); break;
    case ncclUint64:
        EMNC_FOLD(uint64_t, uint64_t, EMNC_ID, EMNC_ID, (uint64_t)EMNC_INT_COMBINE(uint64_t), a / (uint64_t)n);
        break;
    default: cuemu_fault("nccl", "no arithmetic for type %d", (int)dt);
    }
}

/* Elements per chunk for n ranks' blocks of elements of es bytes. */
static size_t emnc_chunk(size_t es, int n)
{
    size_t c = EMNC_CHUNK_BYTES / (es * (size_t)n);
    return c ? c : 1;
}

/* A collective in flight: the call (its communicator's MPI handle, rank and
 * size copied: an abort may free the communicator meanwhile), the chunk on
 * the move and its request, the scratch of one chunk.  Chunks go one after
 * the other: units [off, off + c) of total (elements; bytes for a broadcast). */
typedef struct emnc_flight {
    emnc_op o;
    MPI_Comm mpi;
    int rank, nranks;
    size_t es, total, cc;       /* bytes a unit, units in all, units a chunk */
    size_t off, c;
    MPI_Request req;
    char *buf;                  /* n blocks of a chunk (reduce-scatter: twice) */
    const void *stream;
    struct emnc_flight *next;
} emnc_flight;

/* The collectives in flight, newest first (the MPI thread's only). */
static emnc_flight *emnc_flights;

/* A failure of a collective in flight, which ncclCommGetAsyncError reports
 * (on every communicator: the emulation keeps one for the process). */
static ncclResult_t emnc_async_err = ncclSuccess;

/* Posts the MPI operation of the chunk at f->off; false (the async error
 * set) when MPI refuses it. */
static bool emnc_post(emnc_flight *f)
{
    const emnc_op *o = &f->o;
    size_t es = f->es, n = (size_t)f->nranks;
    f->c = f->total - f->off < f->cc ? f->total - f->off : f->cc;
    int bytes = (int)(f->c * es), rc = MPI_SUCCESS;
    const char *src = (const char *)o->send + f->off * es;
    switch (o->kind) {
    case EMNC_ALLREDUCE: case EMNC_ALLGATHER:
        rc = MPI_Iallgather(src, bytes, MPI_BYTE, f->buf, bytes, MPI_BYTE, f->mpi, &f->req);
        break;
    case EMNC_REDUCESCATTER:
        for (size_t r = 0; r < n; r++)   /* block r's chunk goes to rank r */
            memcpy(f->buf + r * f->c * es, (const char *)o->send + (r * o->count + f->off) * es, f->c * es);
        rc = MPI_Ialltoall(f->buf, bytes, MPI_BYTE, f->buf + n * f->cc * es, bytes, MPI_BYTE, f->mpi, &f->req);
        break;
    case EMNC_BROADCAST:
        rc = MPI_Ibcast((char *)o->recv + f->off, bytes, MPI_BYTE, o->peer, f->mpi, &f->req);
        break;
    case EMNC_REDUCE:
        rc = MPI_Igather(src, bytes, MPI_BYTE, f->buf, bytes, MPI_BYTE, o->peer, f->mpi, &f->req);
        break;
    default:
        break;
    }
    if (rc == MPI_SUCCESS) return true;
    emnc_mpi_err(o->name, rc);
    __atomic_store_n(&emnc_async_err, ncclSystemError, __ATOMIC_RELAXED);
    return false;
}

/* The chunk at f->off has arrived: its results into recvbuff. */
static void emnc_land(emnc_flight *f)
{
    const emnc_op *o = &f->o;
    size_t es = f->es, n = (size_t)f->nranks;
    switch (o->kind) {
    case EMNC_ALLREDUCE:
        emnc_fold(o->dt, o->op, f->nranks, f->buf, f->c, (char *)o->recv + f->off * es);
        break;
    case EMNC_ALLGATHER:
        for (size_t r = 0; r < n; r++)
            memcpy((char *)o->recv + (r * o->count + f->off) * es, f->buf + r * f->c * es, f->c * es);
        break;
    case EMNC_REDUCESCATTER:
        emnc_fold(o->dt, o->op, f->nranks, f->buf + n * f->cc * es, f->c, (char *)o->recv + f->off * es);
        break;
    case EMNC_REDUCE:
        if (f->rank == o->peer) emnc_fold(o->dt, o->op, f->nranks, f->buf, f->c, (char *)o->recv + f->off * es);
        break;
    default:
        break;
    }
}

/* Unlinks and frees f. */
static void emnc_flight_done(emnc_flight *f)
{
    emnc_flight **pp = &emnc_flights;
    while (*pp && *pp != f) pp = &(*pp)->next;
    if (*pp) *pp = f->next;
    free(f->buf);
    free(f);
}

/* The deferred work's poll (cudart.c calls it, on the MPI thread): lands
 * each chunk that has arrived and posts the next; true once the last has
 * landed (or MPI failed: ncclCommGetAsyncError then says so). */
static bool emnc_progress(void *arg)
{
    emnc_flight *f = arg;
    for (;;) {
        int done = 0;
        if (MPI_Test(&f->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            emnc_err(ncclSystemError, "%s : MPI_Test failed", f->o.name);
            __atomic_store_n(&emnc_async_err, ncclSystemError, __ATOMIC_RELAXED);
            f->off = f->total;
        } else if (!done) {
            return false;
        } else {
            emnc_land(f);
            f->off += f->c;
        }
        if (f->off >= f->total || !emnc_post(f)) {
            emnc_flight_done(f);
            return true;
        }
    }
}

/* Completes the collectives in flight on MPI communicator mpi (MPI_COMM_NULL: all). */
static void emnc_settle(MPI_Comm mpi)
{
    for (emnc_flight *f = emnc_flights; f;) {
        if (mpi != MPI_COMM_NULL && f->mpi != mpi) {
            f = f->next;
            continue;
        }
        cuemu_settle(f->stream);    /* completes f, after its stream's earlier work */
        f = emnc_flights;           /* the list changed: from the start */
    }
}

/* A device fault unless collective o's buffers are device memory, laid out
 * as NCCL allows (in place only in NCCL's layouts). */
static void emnc_buffers(const emnc_op *o)
{
    size_t bytes = o->count * emnc_dsize(o->dt), n = (size_t)o->comm->nranks;
    bool root = o->comm->rank == o->peer;
    switch (o->kind) {
    case EMNC_ALLREDUCE:
        emnc_range(o, "sendbuff", o->send, bytes);
        emnc_range(o, "recvbuff", o->recv, bytes);
        emnc_overlap(o, o->send, bytes, o->recv, bytes, o->send == o->recv);
        break;
    case EMNC_ALLGATHER:
        emnc_range(o, "sendbuff", o->send, bytes);
        emnc_range(o, "recvbuff", o->recv, bytes * n);
        emnc_overlap(o, o->send, bytes, o->recv, bytes * n,
                     o->send == (const char *)o->recv + (size_t)o->comm->rank * bytes);
        break;
    case EMNC_REDUCESCATTER:
        emnc_range(o, "sendbuff", o->send, bytes * n);
        emnc_range(o, "recvbuff", o->recv, bytes);
        emnc_overlap(o, o->send, bytes * n, o->recv, bytes,
                     (const char *)o->send + (size_t)o->comm->rank * bytes == o->recv);
        break;
    case EMNC_BROADCAST:   /* sendbuff is read on the root only */
        if (root) {
            emnc_range(o, "sendbuff", o->send, bytes);
            emnc_overlap(o, o->send, bytes, o->recv, bytes, o->send == o->recv);
        }
        emnc_range(o, "recvbuff", o->recv, bytes);
        break;
    case EMNC_REDUCE:      /* recvbuff is written on the root only */
        emnc_range(o, "sendbuff", o->send, bytes);
        if (root) {
            emnc_range(o, "recvbuff", o->recv, bytes);
            emnc_overlap(o, o->send, bytes, o->recv, bytes, o->send == o->recv);
        }
        break;
    default:
        break;
    }
}

/* Starts collective o on stream s: its buffers checked, the communicator's
 * collective in flight completed, its first chunk posted; the rest is s's
 * deferred work. */
static ncclResult_t emnc_start(const emnc_op *o, const void *s)
{
    if (o->kind == EMNC_SEND || o->kind == EMNC_RECV) return emnc_err(ncclInternalError, "%s : not a collective", o->name);
    emnc_buffers(o);
    emnc_settle(o->comm->mpi);      /* MPI's collectives on one communicator go in one order everywhere */
    size_t es = emnc_dsize(o->dt), n = (size_t)o->comm->nranks;
    bool bcast = o->kind == EMNC_BROADCAST;
    size_t cc = bcast ? EMNC_CHUNK_BYTES : emnc_chunk(es, o->comm->nranks);
    emnc_flight *f = calloc(1, sizeof *f);
    char *buf = bcast ? NULL : malloc(cc * es * n * (o->kind == EMNC_REDUCESCATTER ? 2 : 1));
    if (!f || (!bcast && !buf)) {
        free(f);
        free(buf);
        return emnc_err(ncclSystemError, "%s : out of host memory", o->name);
    }
    *f = (emnc_flight){ *o, o->comm->mpi, o->comm->rank, o->comm->nranks, bcast ? 1 : es,
                        bcast ? o->count * es : o->count, cc, 0, 0, MPI_REQUEST_NULL, buf, s, emnc_flights };
    if (bcast && f->rank == o->peer && o->send != o->recv) memcpy(o->recv, o->send, o->count * es);
    if (!emnc_post(f)) {
        free(buf);
        free(f);
        return ncclSystemError;
    }
    emnc_flights = f;
    cuemu_defer(s, emnc_progress, f);
    return ncclSuccess;
}

/* Posts one send or receive (count bytes at most INT_MAX: NCCL's own p2p
 * limit is far above what the trainers send, the emulation says so). */
static ncclResult_t emnc_p2p_post(const emnc_op *o, bool sync, MPI_Request *req)
{
    size_t bytes = o->count * emnc_dsize(o->dt);
    if (bytes > (size_t)INT32_MAX)
        return emnc_err(ncclInvalidArgument, "%s : %zu bytes is more than the emulation sends in one call", o->name,
                        bytes);
    int rc;
    if (o->kind == EMNC_SEND) {
        emnc_range(o, "sendbuff", o->send, bytes);
        /* synchronous mode, never buffered: a send completes once its receive
         * is posted, so a program whose groups wait on each other hangs here as
         * NCCL's would; the tag carries the datatype, which the receive must match */
        rc = sync ? MPI_Ssend(o->send, (int)bytes, MPI_BYTE, o->peer, (int)o->dt, o->comm->mpi)
                  : MPI_Issend(o->send, (int)bytes, MPI_BYTE, o->peer, (int)o->dt, o->comm->mpi, req);
    } else {
        emnc_range(o, "recvbuff", o->recv, bytes);
        rc = MPI_Irecv(o->recv, (int)bytes, MPI_BYTE, o->peer, MPI_ANY_TAG, o->comm->mpi, req);
    }
    if (rc != MPI_SUCCESS) return emnc_mpi_err(o->kind == EMNC_SEND ? "ncclSend: MPI_Send" : "ncclRecv: MPI_Recv", rc);
    return ncclSuccess;
}

/* Checks a completed receive got exactly what it asked for (NCCL would hang or corrupt otherwise). */
static void emnc_recv_done(const emnc_op *o, const MPI_Status *s, int rc)
{
    size_t want = o->count * emnc_dsize(o->dt);
    int got = 0;
    if (rc == MPI_ERR_TRUNCATE || (rc == MPI_ERR_IN_STATUS && s->MPI_ERROR == MPI_ERR_TRUNCATE))
        cuemu_fault(emnc_who(o), "the message from peer %d is longer than the receive of %zu bytes: a send and its "
                    "receive disagree on the size", o->peer, want);
    MPI_Get_count(s, MPI_BYTE, &got);
    if ((size_t)got != want || s->MPI_TAG != (int)o->dt)
        cuemu_fault(emnc_who(o), "received %d bytes of type %d from peer %d into a receive of %zu bytes of type %d: "
                    "NCCL needs the same count and datatype on both sides", got, s->MPI_TAG, o->peer, want, (int)o->dt);
}

/* Runs one collective of a group now: started, then completed. */
static ncclResult_t emnc_run_coll(const emnc_op *o, const void *s)
{
    ncclResult_t r = emnc_start(o, s);
    if (r == ncclSuccess) emnc_settle(o->comm->mpi);
    return r;
}

/* Runs one call outside a group: a collective (started: it completes
 * later), or a blocking send or receive (after the communicator's
 * collectives in flight). */
static ncclResult_t emnc_run_one(const emnc_op *o, const void *stream)
{
    if (o->kind != EMNC_SEND && o->kind != EMNC_RECV) return emnc_start(o, stream);
    emnc_settle(o->comm->mpi);
    if (o->kind == EMNC_SEND) return emnc_p2p_post(o, true, NULL);
    MPI_Request req;
    ncclResult_t r = emnc_p2p_post(o, false, &req);
    if (r != ncclSuccess) return r;
    MPI_Status s;
    int rc = MPI_Wait(&req, &s);
    emnc_recv_done(o, &s, rc);
    if (rc != MPI_SUCCESS) return emnc_mpi_err("ncclRecv: MPI_Wait", rc);
    return ncclSuccess;
}

/* Runs a whole group: every send and receive posted, the collectives in
 * issue order, then the sends and receives completed (the collectives in
 * flight before it first: MPI's order on each communicator). */
static ncclResult_t emnc_run_group(const emnc_op *q, const void *const *qs, size_t nq)
{
    emnc_settle(MPI_COMM_NULL);
    MPI_Request *req = calloc(nq ? nq : 1, sizeof *req);
    MPI_Status *st = calloc(nq ? nq : 1, sizeof *st);
    if (!req || !st) {
        free(req);
        free(st);
        return emnc_err(ncclSystemError, "ncclGroupEnd : out of host memory");
    }
    ncclResult_t r = ncclSuccess;
    for (size_t i = 0; i < nq; i++) {
        req[i] = MPI_REQUEST_NULL;
        if ((q[i].kind == EMNC_SEND || q[i].kind == EMNC_RECV) && r == ncclSuccess) r = emnc_p2p_post(&q[i], false, &req[i]);
    }
    for (size_t i = 0; i < nq && r == ncclSuccess; i++)
        if (q[i].kind != EMNC_SEND && q[i].kind != EMNC_RECV) r = emnc_run_coll(&q[i], qs[i]);
    int rc = MPI_Waitall((int)nq, req, st);
    for (size_t i = 0; i < nq && r == ncclSuccess; i++)
        if (q[i].kind == EMNC_RECV) emnc_recv_done(&q[i], &st[i], rc);
    if (rc != MPI_SUCCESS && r == ncclSuccess) r = emnc_mpi_err("ncclGroupEnd: MPI_Waitall", rc);
    free(req);
    free(st);
    return r;
}

/* Whether this thread may call MPI: the emulation's own limit, not NCCL's.
 * MPI without MPI_THREAD_MULTIPLE may be called from the thread that
 * initialised it only (two threads inside MPI would corrupt it silently). */
static bool emnc_thread_ok(void)
{
    int level = MPI_THREAD_SINGLE, main_thread = 1;
    MPI_Query_thread(&level);
    MPI_Is_thread_main(&main_thread);
    return level == MPI_THREAD_MULTIPLE || main_thread;
}

/* emnc_thread_ok as an NCCL error naming the call. */
static ncclResult_t emnc_thread_check(const char *who)
{
    if (!emnc_thread_ok())
        return emnc_err(ncclInternalError, "%s : called from a thread other than the one that called MPI_Init, "
                        "which did not ask for MPI_THREAD_MULTIPLE: the emulated NCCL runs over MPI and cannot", who);
    return ncclSuccess;
}

/* What call o reads and writes on stream s, for the race detector
 * (cuemu.h): in place, its write covers its read. */
static void emnc_access(const emnc_op *o, cudaStream_t s)
{
    size_t b = o->count * emnc_dsize(o->dt), n = (size_t)o->comm->nranks;
    bool root = o->comm->rank == o->peer;
    const char *who = "nccl";   /* the access names the call: "nccl (AllReduce)" */
    switch (o->kind) {
    case EMNC_ALLREDUCE: cuemu_access(who, o->name, s, o->send, b, false), cuemu_access(who, o->name, s, o->recv, b, true); break;
    case EMNC_ALLGATHER: cuemu_access(who, o->name, s, o->send, b, false), cuemu_access(who, o->name, s, o->recv, b * n, true); break;
    case EMNC_REDUCESCATTER: cuemu_access(who, o->name, s, o->send, b * n, false), cuemu_access(who, o->name, s, o->recv, b, true); break;
    case EMNC_BROADCAST:
        if (root) cuemu_access(who, o->name, s, o->send, b, false);
        cuemu_access(who, o->name, s, o->recv, b, true);
        break;
    case EMNC_REDUCE:
        cuemu_access(who, o->name, s, o->send, b, false);
        if (root) cuemu_access(who, o->name, s, o->recv, b, true);
        break;
    case EMNC_SEND: cuemu_access(who, o->name, s, o->send, b, false); break;
    case EMNC_RECV: cuemu_access(who, o->name, s, o->recv, b, true); break;
    }
}

/* Checks a call issued on stream s and runs it now, or queues it inside a group. */
static ncclResult_t emnc_issue(emnc_op o, cudaStream_t s)
{
    ncclResult_t r = emnc_args_check(&o);
    if (r != ncclSuccess) return r;
    if (!emnc_mpi_up()) return emnc_err(ncclInvalidUsage, "%s : MPI is not initialized (or already finalized)", o.name);
    if ((r = emnc_thread_check(o.name)) != ncclSuccess) return r;
    if (o.count == 0 && o.kind != EMNC_SEND && o.kind != EMNC_RECV) return ncclSuccess;   /* NCCL: nothing to do */
    if (o.count) emnc_access(&o, s);
    if (emnc_depth == 0) return emnc_run_one(&o, s);
    if (emnc_qn == emnc_qcap) {
        size_t cap = emnc_qcap ? 2 * emnc_qcap : 16;
        emnc_op *q = realloc(emnc_q, cap * sizeof *q);
        if (q) emnc_q = q;
        const void **qs = realloc(emnc_qs, cap * sizeof *qs);
        if (qs) emnc_qs = qs;
        if (!q || !qs) return emnc_err(ncclSystemError, "%s : out of host memory", o.name);
        emnc_qcap = cap;
    }
    emnc_qs[emnc_qn] = s;
    emnc_q[emnc_qn++] = o;
    return ncclSuccess;
}

/* ---- the public API ------------------------------------------------------ */

/* The NCCL version the header names. */
ncclResult_t ncclGetVersion(int *version)
{
    if (!version) return emnc_err(ncclInvalidArgument, "ncclGetVersion : version argument is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

/* NCCL's text for each result code. */
const char *ncclGetErrorString(ncclResult_t code)
{
    switch (code) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

/* The last error's message ("" when none), for any communicator. */
const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return emnc_last;
}

/* A fresh id: this process, the time and a counter, so two ids never match by chance. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    static unsigned long long counter;
    if (!uniqueId) return emnc_err(ncclInvalidArgument, "ncclGetUniqueId : uniqueId argument is NULL");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    memset(uniqueId, 0, sizeof *uniqueId);
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    snprintf(uniqueId->internal, sizeof uniqueId->internal, "emnc:%s:%ld:%lld.%09ld:%llu", host, (long)getpid(),
             (long long)ts.tv_sec, ts.tv_nsec, ++counter);
    return ncclSuccess;
}

/* What each rank brings to ncclCommInitRank. */
typedef struct {
    ncclUniqueId id;
    char host[64];
    int device;                /* cudaGetDevice's */
} emnc_peer;

/* Every rank passed the same id, and no two ranks of one host use one device
 * (NCCL's "Duplicate GPU detected"): all ranks see the same table, so all
 * fail alike.  A collective over MPI's world. */
static ncclResult_t emnc_peers_check(ncclUniqueId id, int ws)
{
    emnc_peer me;
    memset(&me, 0, sizeof me);
    me.id = id;
    gethostname(me.host, sizeof me.host - 1);
    if (cudaGetDevice(&me.device) != cudaSuccess)
        return emnc_err(ncclUnhandledCudaError, "ncclCommInitRank : cudaGetDevice failed");
    emnc_peer *all = malloc((size_t)ws * sizeof *all);
    if (!all) return emnc_err(ncclSystemError, "ncclCommInitRank : out of host memory");
    int rc = MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
        free(all);
        return emnc_mpi_err("ncclCommInitRank: MPI_Allgather", rc);
    }
    ncclResult_t r = ncclSuccess;
    for (int a = 0; a < ws && r == ncclSuccess; a++) {
        if (memcmp(&all[a].id, &all[0].id, sizeof id) != 0)
            r = emnc_err(ncclInvalidUsage, "ncclCommInitRank : rank %d passed a different ncclUniqueId than rank 0: "
                         "every rank must pass the id that one rank got from ncclGetUniqueId", a);
        for (int b = 0; b < a && r == ncclSuccess; b++)
            if (all[a].device == all[b].device && strcmp(all[a].host, all[b].host) == 0)
                r = emnc_err(ncclInvalidUsage, "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d "
                             "(of host %s)", b, a, all[a].device, all[a].host);
    }
    free(all);
    return r;
}

/* Joins the world: nranks must be MPI's world size and rank this process's
 * world rank, and every rank must pass the same id. */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    if (!comm) return emnc_err(ncclInvalidArgument, "ncclCommInitRank : comm argument is NULL");
    *comm = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return emnc_err(ncclInvalidArgument, "Invalid rank requested : %d/%d", rank, nranks);
    if (!emnc_mpi_up()) return emnc_err(ncclInvalidUsage, "ncclCommInitRank : MPI is not initialized");
    ncclResult_t r = emnc_thread_check("ncclCommInitRank");
    if (r != ncclSuccess) return r;
    int wr = 0, ws = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    MPI_Comm_size(MPI_COMM_WORLD, &ws);
    if (nranks != ws || rank != wr)
        return emnc_err(ncclInvalidArgument, "ncclCommInitRank : rank %d of %d, but this is MPI rank %d of %d: the "
                        "emulation runs one process per NCCL rank, in MPI world order", rank, nranks, wr, ws);
    if ((r = emnc_peers_check(commId, ws)) != ncclSuccess) return r;
    MPI_Comm dup;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    if (rc != MPI_SUCCESS) return emnc_mpi_err("ncclCommInitRank: MPI_Comm_dup", rc);
    *comm = emnc_comm_new(dup);
    if (!*comm) {
        MPI_Comm_free(&dup);
        return emnc_err(ncclSystemError, "ncclCommInitRank : out of host memory");
    }
    return ncclSuccess;
}

/* ncclCommInitRank with a configuration (checked as NCCL checks it; all of it
 * is a performance hint here, and a non-blocking communicator is ready at once). */
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config)
{
    if (config && (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, blocking) + sizeof(int)))
        return emnc_err(ncclInvalidArgument, "ncclCommInitRankConfig : config is not initialized with "
                        "NCCL_CONFIG_INITIALIZER");
    return ncclCommInitRank(comm, nranks, commId, rank);
}

/* A new communicator of the ranks that pass the same color, ordered by key
 * then by rank in comm; NCCL_SPLIT_NOCOLOR gives *newcomm = NULL. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
    ncclResult_t r = emnc_comm_check(comm, "ncclCommSplit");
    if (r != ncclSuccess) return r;
    if (!newcomm) return emnc_err(ncclInvalidArgument, "ncclCommSplit : newcomm argument is NULL");
    *newcomm = NULL;
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
        return emnc_err(ncclInvalidArgument, "ncclCommSplit : color %d must be non-negative or NCCL_SPLIT_NOCOLOR",
                        color);
    if (config && config->magic != 0xcafebeef)
        return emnc_err(ncclInvalidArgument, "ncclCommSplit : config is not initialized with NCCL_CONFIG_INITIALIZER");
    if (comm->finalized) return emnc_err(ncclInvalidUsage, "ncclCommSplit : communicator has been finalized");
    if ((r = emnc_thread_check("ncclCommSplit")) != ncclSuccess) return r;
    MPI_Comm sub;
    int rc = MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &sub);
    if (rc != MPI_SUCCESS) return emnc_mpi_err("ncclCommSplit: MPI_Comm_split", rc);
    if (sub == MPI_COMM_NULL) return ncclSuccess;
    *newcomm = emnc_comm_new(sub);
    if (!*newcomm) {
        MPI_Comm_free(&sub);
        return emnc_err(ncclSystemError, "ncclCommSplit : out of host memory");
    }
    return ncclSuccess;
}

/* Ends the communicator's work (its collectives in flight complete); it takes no more calls. */
ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    ncclResult_t r = emnc_comm_check(comm, "ncclCommFinalize");
    if (r != ncclSuccess) return r;
    if (emnc_thread_ok()) emnc_settle(comm->mpi);
    if (comm->finalized)
        return emnc_err(ncclInvalidArgument, "ncclCommFinalize : comm %p (rank = %d) has already been finalized",
                        (void *)comm, comm->rank);
    comm->finalized = true;
    return ncclSuccess;
}

/* ncclCommDestroy / ncclCommAbort: NULL does nothing, a live communicator is
 * released once, anything else is refused naming the call. */
static ncclResult_t emnc_comm_free(ncclComm_t comm, const char *who)
{
    if (!comm) return ncclSuccess;
    ncclResult_t r = emnc_comm_check(comm, who);
    if (r != ncclSuccess) return r;
    emnc_comm_release(comm);
    return ncclSuccess;
}

/* Frees the communicator after its collectives in flight (NULL is allowed and does nothing). */
ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (comm && emnc_is_live(comm) && emnc_thread_ok()) emnc_settle(comm->mpi);
    return emnc_comm_free(comm, "ncclCommDestroy");
}

/* Frees the communicator without waiting for its work (a collective in
 * flight is abandoned: the process is about to end). */
ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return emnc_comm_free(comm, "ncclCommAbort");
}

/* A collective in flight that MPI failed (any thread may ask: the watchdog's does). */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    ncclResult_t r = emnc_comm_check(comm, "ncclCommGetAsyncError");
    if (r != ncclSuccess) return r;
    if (!asyncError) return emnc_err(ncclInvalidArgument, "ncclCommGetAsyncError : asyncError argument is NULL");
    *asyncError = __atomic_load_n(&emnc_async_err, __ATOMIC_RELAXED);
    return ncclSuccess;
}

/* The number of ranks in comm. */
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    ncclResult_t r = emnc_comm_check(comm, "ncclCommCount");
    if (r != ncclSuccess) return r;
    if (!count) return emnc_err(ncclInvalidArgument, "ncclCommCount : count argument is NULL");
    *count = comm->nranks;
    return ncclSuccess;
}

/* This process's rank in comm. */
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    ncclResult_t r = emnc_comm_check(comm, "ncclCommUserRank");
    if (r != ncclSuccess) return r;
    if (!rank) return emnc_err(ncclInvalidArgument, "ncclCommUserRank : rank argument is NULL");
    *rank = comm->rank;
    return ncclSuccess;
}

/* recvbuff = op over ranks of sendbuff. */
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return emnc_issue((emnc_op){ EMNC_ALLREDUCE, "AllReduce", sendbuff, recvbuff, count, datatype, op, 0, comm }, stream);
}

/* recvbuff (nranks * sendcount) = every rank's sendbuff in rank order. */
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream)
{
    return emnc_issue((emnc_op){ EMNC_ALLGATHER, "AllGather", sendbuff, recvbuff, sendcount, datatype, ncclSum, 0,
                                 comm }, stream);
}

/* recvbuff (recvcount) = op over ranks of block `rank` of their sendbuff (nranks * recvcount). */
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return emnc_issue((emnc_op){ EMNC_REDUCESCATTER, "ReduceScatter", sendbuff, recvbuff, recvcount, datatype, op, 0,
                                 comm }, stream);
}

/* Every rank's recvbuff = root's sendbuff. */
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream)
{
    return emnc_issue((emnc_op){ EMNC_BROADCAST, "Broadcast", sendbuff, recvbuff, count, datatype, ncclSum, root,
                                 comm }, stream);
}

/* The in-place broadcast of older NCCL. */
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream)
{
    return emnc_issue((emnc_op){ EMNC_BROADCAST, "Bcast", buff, buff, count, datatype, ncclSum, root, comm }, stream);
}

/* root's recvbuff = op over ranks of sendbuff. */
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream)
{
    return emnc_issue((emnc_op){ EMNC_REDUCE, "Reduce", sendbuff, recvbuff, count, datatype, op, root, comm }, stream);
}

/* Sends count elements to peer (blocking outside a group). */
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    return emnc_issue((emnc_op){ EMNC_SEND, "Send", sendbuff, NULL, count, datatype, ncclSum, peer, comm }, stream);
}

/* Receives count elements from peer (blocking outside a group). */
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    return emnc_issue((emnc_op){ EMNC_RECV, "Recv", NULL, recvbuff, count, datatype, ncclSum, peer, comm }, stream);
}

/* Opens a group (groups nest; only the outermost end runs the calls). */
ncclResult_t ncclGroupStart(void)
{
    if (emnc_depth == 0) {
        emnc_qn = 0;
        emnc_group_err = ncclSuccess;
    }
    emnc_depth++;
    return ncclSuccess;
}

/* Closes a group; the outermost end runs every call queued since its start,
 * or none when one of them was rejected (that error is returned again). */
ncclResult_t ncclGroupEnd(void)
{
    if (emnc_depth == 0) return emnc_err(ncclInvalidUsage, "ncclGroupEnd: not in a group call.");
    if (--emnc_depth > 0) return ncclSuccess;
    ncclResult_t r = emnc_group_err;
    size_t nq = emnc_qn;
    emnc_qn = 0;
    emnc_group_err = ncclSuccess;
    if (r != ncclSuccess) return r;
    return emnc_run_group(emnc_q, emnc_qs, nq);
}
