/* cudart.c — the emulated CUDA runtime (prefix emrt_), compiled against the
 * real cuda_runtime_api.h: the libcudart calls runtime/cuda, kernels/cuda
 * and the other emulated libraries make, on a machine without a GPU.
 *
 * Device memory is 256-byte aligned host memory poisoned with 0xff (a NaN in
 * every float dtype) and followed by guard bytes, checked at cudaFree, at
 * every synchronisation and at exit: a kernel or library that writes past a
 * buffer ends the run.  Every stream runs its work at issue time, in issue
 * order, so an event is complete once recorded and a synchronisation only
 * checks its handle; the race detector (below, cuemu_access) keeps the order
 * a GPU would guarantee and reports accesses it leaves unordered.  What the
 * real runtime rejects is rejected with its
 * error code; what would be an illegal address on a GPU (a copy reaching
 * outside an allocation, a copy whose kind contradicts its pointers) is a
 * cuemu_fault that ends the process.
 *
 * The one exception to work at issue is deferred work (cuemu_defer: the
 * emulated NCCL's collectives): it completes later, as a GPU's would, so an
 * event recorded after it stays pending (cudaEventQuery: cudaErrorNotReady)
 * until the stream's next work, a wait for the event, or a host
 * synchronisation completes it (below, "deferred work").
 */
#define _GNU_SOURCE             /* nanosleep under -std=c11 */
#include <cuda_runtime_api.h>

#include "cuemu.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    EMRT_GUARD = 4096,          /* guard bytes after every allocation          */
    EMRT_ALIGN = 256,           /* cudaMalloc's documented alignment            */
    EMRT_HOST_ALIGN = 4096,     /* pinned memory is whole pages (O_DIRECT I/O needs it) */
    EMRT_DEVICES = 8,           /* an 8-GPU node: one per local rank            */
    EMRT_MAX_ALLOCS = 4096,
};
#define EMRT_TOTAL ((size_t)80 << 30)   /* an H100-like device's memory */
#define EMRT_GUARD_BYTE 0xa5

/* One live allocation: device memory or pinned host memory. */
typedef struct emrt_alloc {
    unsigned char *p;
    size_t bytes;
    int host;                   /* cudaHostAlloc'd                            */
    unsigned flags;             /* cudaHostAlloc's flags                      */
    struct emrt_acc *acc;       /* the race detector's history of its bytes   */
    int nacc, acc_cap;
} emrt_alloc;

/* A vector clock of the race detector: v[id] is the last epoch of clock id
 * (a stream) known to happen before; ids past n are 0. */
typedef struct emrt_vc {
    uint32_t *v;
    int n;
} emrt_vc;

/* A stream's clock: its id (its own component) and what it has joined. */
typedef struct emrt_clock {
    int id;
    int blocking;               /* synchronises with the legacy default stream */
    emrt_vc vc;
} emrt_clock;

/* One recorded access: [lo, hi) read or written by the operation who/what,
 * epoch `epoch` of clock id on stream `stream`. */
typedef struct emrt_acc {
    uintptr_t lo, hi;
    int id;
    uint32_t epoch;
    int write;
    const char *who, *what;
    const void *stream;
} emrt_acc;

/* A stream or event handle; never freed, so a destroyed one stays known. */
typedef struct emrt_handle {
    int kind;                   /* 's' stream, 'e' event                      */
    int live;
    unsigned flags;
    emrt_clock clk;             /* a stream's clock; an event's snapshot in clk.vc */
    const void *dq_stream;      /* an event: the stream of its last record and   */
    uint64_t dq_ticket;         /* the deferred work before it there (0: none)   */
} emrt_handle;

static pthread_mutex_t emrt_mu = PTHREAD_MUTEX_INITIALIZER;
static emrt_alloc emrt_allocs[EMRT_MAX_ALLOCS];
static int emrt_nallocs;
static size_t emrt_device_bytes;            /* live cudaMalloc bytes           */
static emrt_handle **emrt_handles;         /* an open-addressing set by address */
static size_t emrt_nhandles, emrt_handle_cap;
static int emrt_device;                     /* cudaSetDevice's, per process     */
static _Thread_local cudaError_t emrt_last = cudaSuccess;

/* Records e as the thread's last error and returns it. */
static cudaError_t emrt_err(cudaError_t e)
{
    if (e != cudaSuccess) emrt_last = e;
    return e;
}

/* Records err as the thread's last CUDA error (a launch the kernel executor rejects). */
void cuemu_set_error(int err)
{
    emrt_err((cudaError_t)err);
}

/* Ends the process as an illegal address ends a CUDA context, naming who. */
void cuemu_fault(const char *who, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fprintf(stderr, "cuda emulator: %s: ", who);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

/* The live allocation holding p (mutex held); NULL if none. */
static emrt_alloc *emrt_find(const void *p)
{
    const unsigned char *q = p;
    for (int i = 0; i < emrt_nallocs; i++)
        if (q >= emrt_allocs[i].p && q < emrt_allocs[i].p + emrt_allocs[i].bytes + (emrt_allocs[i].bytes == 0))
            return &emrt_allocs[i];
    return NULL;
}

/* Ends the run when an allocation's guard bytes were overwritten. */
static void emrt_check_guard(const emrt_alloc *a, const char *who)
{
    for (size_t i = 0; i < EMRT_GUARD; i++)
        if (a->p[a->bytes + i] != EMRT_GUARD_BYTE)
            cuemu_fault(who, "something wrote %zu bytes past the %s allocation %p of %zu bytes", i + 1,
                        a->host ? "pinned host" : "device", (void *)a->p, a->bytes);
}

/* Checks every live allocation's guard (at synchronisations and at exit). */
static void emrt_check_guards(const char *who)
{
    pthread_mutex_lock(&emrt_mu);
    for (int i = 0; i < emrt_nallocs; i++) emrt_check_guard(&emrt_allocs[i], who);
    pthread_mutex_unlock(&emrt_mu);
}

static void emrt_rc_report(void);

/* The calls that make the host wait for the device (a GPU's host
 * synchronisations), counted over the run: CUEMU_SYNC_STATS=1 prints them at
 * exit, so a test can see what a training step costs in host syncs.  With
 * the race detector on, also the cudaEventQuery calls, by a thread that
 * issues work, of an event the thread has not seen complete (no sync since
 * its record): here the work is done, on a GPU it may not be, and the
 * caller's fallback would wait. */
enum { EMRT_SYNC_STREAM, EMRT_SYNC_EVENT, EMRT_SYNC_DEVICE, EMRT_SYNC_MEMCPY, EMRT_SYNC_MEMSET, EMRT_SYNC_POLL,
       EMRT_NSYNC };
static unsigned long emrt_syncs[EMRT_NSYNC];

/* One host synchronisation of kind k (any thread). */
static void emrt_sync_count(int k)
{
    __atomic_fetch_add(&emrt_syncs[k], 1, __ATOMIC_RELAXED);
}

/* At exit with CUEMU_SYNC_STATS=1: the host synchronisations of the run. */
static void emrt_sync_report(void)
{
    const char *e = getenv("CUEMU_SYNC_STATS");
    if (!e || strcmp(e, "1") != 0) return;
    unsigned long n = 0;
    for (int k = 0; k < EMRT_NSYNC; k++) n += emrt_syncs[k];
    fprintf(stderr, "cuda emulator: host synchronisations: %lu (cudaStreamSynchronize %lu, cudaEventSynchronize %lu, "
            "cudaDeviceSynchronize %lu, cudaMemcpy %lu, cudaMemset %lu, cudaEventQuery maybe pending %lu)\n", n,
            emrt_syncs[EMRT_SYNC_STREAM], emrt_syncs[EMRT_SYNC_EVENT], emrt_syncs[EMRT_SYNC_DEVICE],
            emrt_syncs[EMRT_SYNC_MEMCPY], emrt_syncs[EMRT_SYNC_MEMSET], emrt_syncs[EMRT_SYNC_POLL]);
}

/* atexit: the guards of what the program never freed. */
static void emrt_at_exit(void)
{
    emrt_check_guards("at exit");
    emrt_rc_report();
    emrt_sync_report();
}

/* A new poisoned, guarded allocation of bytes; NULL when out of memory. */
static void *emrt_alloc_new(size_t bytes, int host, unsigned flags)
{
    static int registered;
    size_t align = host ? EMRT_HOST_ALIGN : EMRT_ALIGN;
    size_t n = (bytes + EMRT_GUARD + align - 1) / align * align;
    unsigned char *m = aligned_alloc(align, n);
    if (!m) return NULL;
    memset(m, 0xff, bytes);
    memset(m + bytes, EMRT_GUARD_BYTE, EMRT_GUARD);
    pthread_mutex_lock(&emrt_mu);
    if (!registered) registered = 1, atexit(emrt_at_exit);
    if (emrt_nallocs == EMRT_MAX_ALLOCS) cuemu_fault(host ? "cudaHostAlloc" : "cudaMalloc", "more than %d live allocations", EMRT_MAX_ALLOCS);
    emrt_allocs[emrt_nallocs++] = (emrt_alloc){m, bytes, host, flags, NULL, 0, 0};
    if (!host) emrt_device_bytes += bytes;
    pthread_mutex_unlock(&emrt_mu);
    return m;
}

/* Frees the allocation starting at p of the given kind; cudaErrorInvalidValue
 * when p starts none (a foreign, interior or already freed pointer). */
static cudaError_t emrt_alloc_free(void *p, int host, const char *who)
{
    pthread_mutex_lock(&emrt_mu);
    for (int i = 0; i < emrt_nallocs; i++) {
        emrt_alloc *a = &emrt_allocs[i];
        if (a->p != p || a->host != host) continue;
        emrt_check_guard(a, who);
        if (!host) emrt_device_bytes -= a->bytes;
        free(a->p);
        free(a->acc);
        *a = emrt_allocs[--emrt_nallocs];
        pthread_mutex_unlock(&emrt_mu);
        return cudaSuccess;
    }
    pthread_mutex_unlock(&emrt_mu);
    return emrt_err(cudaErrorInvalidValue);
}

/* Whether [p, p + bytes) is inside one live allocation a kernel may address. */
bool cuemu_device_range(const void *p, size_t bytes)
{
    pthread_mutex_lock(&emrt_mu);
    emrt_alloc *a = emrt_find(p);
    bool ok = a && (!a->host || (a->flags & cudaHostAllocMapped)) &&
              (size_t)((const unsigned char *)p - a->p) + bytes <= a->bytes;
    pthread_mutex_unlock(&emrt_mu);
    return ok;
}

/* Whether p lies in cudaMalloc'd memory. */
static bool emrt_is_device(const void *p)
{
    pthread_mutex_lock(&emrt_mu);
    emrt_alloc *a = emrt_find(p);
    bool r = a && !a->host;
    pthread_mutex_unlock(&emrt_mu);
    return r;
}

/* Checks the host side of a copy: pageable memory, or a range inside one
 * pinned allocation (never cudaMalloc'd memory, which the host cannot address). */
static void emrt_host_side(const char *who, const char *side, const void *p, size_t bytes)
{
    pthread_mutex_lock(&emrt_mu);
    emrt_alloc *a = emrt_find(p);
    pthread_mutex_unlock(&emrt_mu);
    if (!a) return;
    if (!a->host) cuemu_fault(who, "the %s %p is device memory, but the copy's kind says host memory", side, p);
    if ((size_t)((const unsigned char *)p - a->p) + bytes > a->bytes)
        cuemu_fault(who, "the %s [%p, +%zu) runs past its pinned allocation of %zu bytes", side, p, bytes, a->bytes);
}

/* Checks the device side of a copy or memset: inside one live allocation a kernel may address. */
static void emrt_device_side(const char *who, const char *side, const void *p, size_t bytes)
{
    if (!cuemu_device_range(p, bytes))
        cuemu_fault(who, "the %s [%p, +%zu) is not inside one live device allocation", side, p, bytes);
}

/* Checks both sides of a copy against its kind. */
static cudaError_t emrt_copy_check(const char *who, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k)
{
    if ((unsigned)k > cudaMemcpyDefault) return emrt_err(cudaErrorInvalidMemcpyDirection);
    if (bytes == 0) return cudaSuccess;
    if (!dst || !src) return emrt_err(cudaErrorInvalidValue);
    bool dst_dev = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice ||
                   (k == cudaMemcpyDefault && emrt_is_device(dst));
    bool src_dev = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice ||
                   (k == cudaMemcpyDefault && emrt_is_device(src));
    if (dst_dev) emrt_device_side(who, "destination", dst, bytes);
    else emrt_host_side(who, "destination", dst, bytes);
    if (src_dev) emrt_device_side(who, "source", src, bytes);
    else emrt_host_side(who, "source", src, bytes);
    return cudaSuccess;
}

/* The set's slot for address h: where it is, or the empty slot it would take (mutex held). */
static size_t emrt_handle_slot(const void *h)
{
    size_t i = ((uintptr_t)h >> 4) * 0x9e3779b97f4a7c15ull & (emrt_handle_cap - 1);
    while (emrt_handles[i] && (const void *)emrt_handles[i] != h) i = (i + 1) & (emrt_handle_cap - 1);
    return i;
}

/* emrt_handle_of with the mutex held. */
static emrt_handle *emrt_handle_find(const void *h, int kind)
{
    emrt_handle *r = emrt_handle_cap ? emrt_handles[emrt_handle_slot(h)] : NULL;
    return r && r->kind == kind ? r : NULL;
}

/* Whether h is a handle of the kind this runtime made (live or destroyed);
 * only addresses are compared, so a foreign pointer is never read. */
static emrt_handle *emrt_handle_of(const void *h, int kind)
{
    pthread_mutex_lock(&emrt_mu);
    emrt_handle *r = emrt_handle_find(h, kind);
    pthread_mutex_unlock(&emrt_mu);
    return r;
}

/* A stream argument: 0 / cudaStreamLegacy / cudaStreamPerThread or a live stream. */
static cudaError_t emrt_stream_ok(cudaStream_t s)
{
    if (s == 0 || s == cudaStreamLegacy || s == cudaStreamPerThread) return cudaSuccess;
    emrt_handle *h = emrt_handle_of(s, 's');
    return h && h->live ? cudaSuccess : emrt_err(cudaErrorInvalidResourceHandle);
}

/* An event argument: a live event. */
static cudaError_t emrt_event_ok(cudaEvent_t e)
{
    emrt_handle *h = emrt_handle_of(e, 'e');
    return h && h->live ? cudaSuccess : emrt_err(cudaErrorInvalidResourceHandle);
}

/* A new live handle. */
static emrt_handle *emrt_handle_new(int kind, unsigned flags)
{
    emrt_handle *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    *h = (emrt_handle){kind, 1, flags, {-1, 0, {NULL, 0}}, NULL, 0};
    pthread_mutex_lock(&emrt_mu);
    if (2 * (emrt_nhandles + 1) > emrt_handle_cap) {   /* grow: rehash into twice the slots */
        emrt_handle **old = emrt_handles;
        size_t ocap = emrt_handle_cap;
        emrt_handle_cap = ocap ? 2 * ocap : 1024;
        emrt_handles = calloc(emrt_handle_cap, sizeof *emrt_handles);
        if (!emrt_handles) cuemu_fault("cudaStreamCreate/cudaEventCreate", "out of host memory");
        for (size_t i = 0; i < ocap; i++)
            if (old[i]) emrt_handles[emrt_handle_slot(old[i])] = old[i];
        free(old);
    }
    emrt_handles[emrt_handle_slot(h)] = h;
    emrt_nhandles++;
    pthread_mutex_unlock(&emrt_mu);
    return h;
}

/* Destroys a live handle of the kind; cudaErrorInvalidResourceHandle otherwise. */
static cudaError_t emrt_handle_destroy(const void *p, int kind)
{
    emrt_handle *h = emrt_handle_of(p, kind);
    if (!h || !h->live) return emrt_err(cudaErrorInvalidResourceHandle);
    h->live = 0;
    return cudaSuccess;
}

/* ---- the race detector ------------------------------------------------------------
 *
 * Every stream runs its work at issue here, so a missing event cannot give a
 * wrong answer; instead each operation is placed in the order a GPU would
 * guarantee (happens-before, by vector clocks) and two accesses to the same
 * bytes, one a write, that it does not order are a race (cuemu_fault).  Each
 * stream is a clock; an operation on it is its next epoch, after everything
 * its issuing host thread knows to be complete (that thread's vector) and,
 * on the legacy default stream, after the earlier work of every blocking
 * stream (and the reverse).  cudaEventRecord snapshots the stream's vector,
 * cudaStreamWaitEvent joins it, the host synchronisations join into the
 * calling thread's vector.  An allocation keeps the accesses not yet
 * superseded: one that a later access of the same bytes covers and follows
 * (a write after anything, a read after a read) can race with nothing the
 * later one would not race with. */

enum { EMRT_RC_KEEP = 4096 };   /* accesses an allocation keeps before collecting */

static int emrt_rc_state = -1;              /* -1 unknown, 0 off, 1 on        */
static int emrt_rc_ids;                     /* clock ids given out             */
static emrt_clock emrt_rc_legacy = { -1, 0, { NULL, 0 } };
static emrt_clock *emrt_rc_ptds[256];       /* every thread's per-thread default stream */
static int emrt_rc_nptds;
static _Thread_local emrt_clock *emrt_rc_my_ptds;
static _Thread_local emrt_vc emrt_rc_host;  /* what this host thread knows complete */
static _Thread_local int emrt_rc_issuer;    /* this thread has issued device work */
/* the host threads' hand-offs (cuemu_host_release / _acquire) */
static struct { const void *obj; emrt_vc vc; } emrt_rc_sync[64];
static int emrt_rc_nsync;
static size_t emrt_rc_evicted;              /* accesses dropped by the bound    */
static size_t emrt_rc_collected;            /* accesses every used stream had passed */
static size_t emrt_rc_checked, emrt_rc_compared;   /* accesses, and history entries compared */

/* Whether the detector runs (CUEMU_RACECHECK=0 turns it off). */
static int emrt_rc_on(void)
{
    if (emrt_rc_state < 0) {
        const char *e = getenv("CUEMU_RACECHECK");
        emrt_rc_state = !(e && e[0] == '0' && !e[1]);
        if (e && e[0] == '2' && !e[1]) emrt_rc_state = 2;   /* on, and its numbers at exit */
    }
    return emrt_rc_state;
}

/* At exit with CUEMU_RACECHECK=2: what the detector did. */
static void emrt_rc_report(void)
{
    if (emrt_rc_state == 2)
        fprintf(stderr, "cuda emulator: race detector: %zu accesses checked against %zu earlier ones, %zu collected, "
                "%zu forgotten by the bound, %d stream clocks\n", emrt_rc_checked, emrt_rc_compared, emrt_rc_collected,
                emrt_rc_evicted, emrt_rc_ids);
}

/* Component id of v (0 past its end). */
static uint32_t emrt_rc_get(const emrt_vc *v, int id)
{
    return id < v->n ? v->v[id] : 0;
}

/* Makes v hold at least n components. */
static void emrt_rc_grow(emrt_vc *v, int n)
{
    if (n <= v->n) return;
    int cap = (n + 15) & ~15;   /* ids are few: a multiple of 16, never more */
    uint32_t *nv = realloc(v->v, (size_t)cap * sizeof *nv);
    if (!nv) cuemu_fault("race detector", "out of host memory");
    memset(nv + v->n, 0, (size_t)(cap - v->n) * sizeof *nv);
    v->v = nv;
    v->n = cap;
}

/* a = a joined with b (componentwise max). */
static void emrt_rc_join(emrt_vc *a, const emrt_vc *b)
{
    emrt_rc_grow(a, b->n);
    for (int i = 0; i < b->n; i++)
        if (b->v[i] > a->v[i]) a->v[i] = b->v[i];
}

/* Gives c a clock id when it has none yet (mutex held). */
static void emrt_rc_init(emrt_clock *c)
{
    if (c->id < 0) c->id = emrt_rc_ids++;
    emrt_rc_grow(&c->vc, c->id + 1);
}

/* The clock of stream s (mutex held): the legacy default stream, this
 * thread's per-thread default stream, or a stream handle's; NULL if s is
 * not a live stream. */
static emrt_clock *emrt_rc_clock(const void *s)
{
    emrt_clock *c = NULL;
    if (s == NULL || s == (const void *)cudaStreamLegacy) c = &emrt_rc_legacy;
    else if (s == (const void *)cudaStreamPerThread) {
        if (!emrt_rc_my_ptds) {
            if (emrt_rc_nptds == (int)(sizeof emrt_rc_ptds / sizeof emrt_rc_ptds[0]))
                cuemu_fault("cudaStreamPerThread", "more than %d threads used their per-thread default stream",
                            emrt_rc_nptds);
            emrt_rc_my_ptds = calloc(1, sizeof *emrt_rc_my_ptds);
            if (!emrt_rc_my_ptds) cuemu_fault("cudaStreamPerThread", "out of host memory");
            /* not a non-blocking stream: it synchronises with the legacy one */
            *emrt_rc_my_ptds = (emrt_clock){ -1, 1, { NULL, 0 } };
            emrt_rc_ptds[emrt_rc_nptds++] = emrt_rc_my_ptds;
        }
        c = emrt_rc_my_ptds;
    } else {
        emrt_handle *h = emrt_handle_find(s, 's');
        if (h && h->live) c = &h->clk;
    }
    if (c) emrt_rc_init(c);
    return c;
}

/* Calls f(c) for every blocking stream's clock (mutex held). */
static void emrt_rc_each_blocking(void (*f)(emrt_clock *, emrt_vc *), emrt_vc *arg)
{
    for (size_t i = 0; i < emrt_handle_cap; i++) {
        emrt_handle *h = emrt_handles[i];
        if (h && h->kind == 's' && h->live && h->clk.blocking && h->clk.id >= 0) f(&h->clk, arg);
    }
    for (int i = 0; i < emrt_rc_nptds; i++)
        if (emrt_rc_ptds[i]->id >= 0) f(emrt_rc_ptds[i], arg);
}

/* into = into joined with c's vector. */
static void emrt_rc_join_into(emrt_clock *c, emrt_vc *into)
{
    emrt_rc_join(into, &c->vc);
}

/* Issues an operation on c now (mutex held): after what the calling host
 * thread knows complete and, between the legacy default stream and the
 * blocking streams, after each other's earlier work; its new epoch. */
static void emrt_rc_issue(emrt_clock *c)
{
    emrt_rc_issuer = 1;
    emrt_rc_join(&c->vc, &emrt_rc_host);
    if (c == &emrt_rc_legacy) emrt_rc_each_blocking(emrt_rc_join_into, &c->vc);
    else if (c->blocking) emrt_rc_join(&c->vc, &emrt_rc_legacy.vc);
    emrt_rc_grow(&c->vc, c->id + 1);
    c->vc.v[c->id]++;
}

/* How a fault names a stream. */
static const char *emrt_rc_sname(const void *s, char *buf, size_t n)
{
    if (s == NULL || s == (const void *)cudaStreamLegacy) return "the legacy default stream";
    if (s == (const void *)cudaStreamPerThread) return "the per-thread default stream";
    snprintf(buf, n, "stream %p", s);
    return buf;
}

/* Whether a happens before the clock vector v. */
static int emrt_rc_before(const emrt_acc *a, const emrt_vc *v)
{
    return emrt_rc_get(v, a->id) >= a->epoch;
}

/* floor = floor met with (componentwise min) clock c's vector, or c's vector
 * when *first; a stream that has issued nothing is left out (the legacy one
 * included): its first operation is placed after what the issuing thread
 * knows (emrt_rc_issue), not after what the other streams have passed, and
 * counting it would pin the floor at 0 and keep every access for ever. */
static void emrt_rc_meet(emrt_vc *floor, const emrt_clock *c, int *first)
{
    if (c->id < 0 || emrt_rc_get(&c->vc, c->id) == 0) return;
    if (*first) {
        emrt_rc_join(floor, &c->vc);
        *first = 0;
        return;
    }
    for (int k = 0; k < floor->n; k++) {
        uint32_t e = emrt_rc_get(&c->vc, k);
        if (e < floor->v[k]) floor->v[k] = e;
    }
}

/* Frees room in an allocation's history (mutex held): first the accesses
 * that happen before the present of every stream that has issued work
 * (nothing those issue from now on can race with them), then, if that is
 * not enough, the oldest half (a bound on the cost: races with those are
 * no longer seen). */
static void emrt_rc_collect(emrt_alloc *al)
{
    /* floor[k]: the least epoch of clock k that every stream that has issued work has joined */
    emrt_vc floor = { NULL, 0 };
    int first = 1;
    emrt_rc_meet(&floor, &emrt_rc_legacy, &first);
    for (size_t i = 0; i < emrt_handle_cap; i++)
        if (emrt_handles[i] && emrt_handles[i]->kind == 's' && emrt_handles[i]->live)
            emrt_rc_meet(&floor, &emrt_handles[i]->clk, &first);
    for (int i = 0; i < emrt_rc_nptds; i++) emrt_rc_meet(&floor, emrt_rc_ptds[i], &first);
    int n = 0;
    for (int i = 0; i < al->nacc; i++)
        if (!emrt_rc_before(&al->acc[i], &floor)) al->acc[n++] = al->acc[i];
    emrt_rc_collected += (size_t)(al->nacc - n);
    free(floor.v);
    if (n > EMRT_RC_KEEP / 2) {
        int drop = n / 2;
        emrt_rc_evicted += (size_t)drop;
        memmove(al->acc, al->acc + drop, (size_t)(n - drop) * sizeof *al->acc);
        n -= drop;
    }
    al->nacc = n;
}

/* Checks an access of [lo, hi) by who/what on stream s (clock c, epoch now
 * issued) against al's history and records it (mutex held). */
static void emrt_rc_check(emrt_alloc *al, emrt_clock *c, const void *s, const char *who, const char *what,
                          uintptr_t lo, uintptr_t hi, int write)
{
    int n = 0;
    emrt_rc_checked++;
    emrt_rc_compared += (size_t)al->nacc;
    for (int i = 0; i < al->nacc; i++) {
        emrt_acc *a = &al->acc[i];
        int overlap = a->lo < hi && lo < a->hi;
        int ordered = a->id == c->id || emrt_rc_before(a, &c->vc);
        if (overlap && (a->write || write) && !ordered) {
            char b1[64], b2[64];
            pthread_mutex_unlock(&emrt_mu);
            cuemu_fault("race", "%s (%s) %s [%p, +%zu) on %s and the earlier %s (%s) %s [%p, +%zu) on %s are not "
                        "ordered: no event, stream wait or host synchronisation puts one after the other",
                        who, what, write ? "writes" : "reads", (void *)lo, (size_t)(hi - lo),
                        emrt_rc_sname(s, b1, sizeof b1), a->who, a->what, a->write ? "writes" : "reads",
                        (void *)a->lo, (size_t)(a->hi - a->lo), emrt_rc_sname(a->stream, b2, sizeof b2));
        }
        /* superseded: covered, ordered before, and a write covers anything, a read a read */
        if (overlap && ordered && lo <= a->lo && a->hi <= hi && (write || !a->write)) continue;
        al->acc[n++] = *a;
    }
    al->nacc = n;
    if (al->nacc >= EMRT_RC_KEEP) emrt_rc_collect(al);
    if (al->nacc == al->acc_cap) {
        int cap = al->acc_cap ? 2 * al->acc_cap : 16;
        emrt_acc *na = realloc(al->acc, (size_t)cap * sizeof *na);
        if (!na) cuemu_fault("race detector", "out of host memory");
        al->acc = na;
        al->acc_cap = cap;
    }
    al->acc[al->nacc++] = (emrt_acc){ lo, hi, c->id, c->vc.v[c->id], write, who, what, s };
}

/* The race detector's entry: checks and records an access issued on stream s. */
void cuemu_access(const char *who, const char *what, const void *s, const void *p, size_t bytes, bool write)
{
    cuemu_settle(s);            /* the stream's deferred work comes before this */
    if (!emrt_rc_on() || !p) return;
    pthread_mutex_lock(&emrt_mu);
    emrt_clock *c = emrt_rc_clock(s);
    emrt_alloc *al = c ? emrt_find(p) : NULL;
    if (al) {
        emrt_rc_issue(c);
        uintptr_t lo = (uintptr_t)p, hi = lo + (bytes ? bytes : 1);
        emrt_rc_check(al, c, s, who, what, lo, hi, write);
    }
    pthread_mutex_unlock(&emrt_mu);
}

/* The calling host thread has waited for stream s: it joins s's vector
 * (the legacy default stream's includes the blocking streams' earlier work). */
static void emrt_rc_sync_stream(const void *s)
{
    if (!emrt_rc_on()) return;
    pthread_mutex_lock(&emrt_mu);
    emrt_clock *c = emrt_rc_clock(s);
    if (c) {
        emrt_rc_join(&emrt_rc_host, &c->vc);
        if (c == &emrt_rc_legacy) emrt_rc_each_blocking(emrt_rc_join_into, &emrt_rc_host);
    }
    pthread_mutex_unlock(&emrt_mu);
}

/* The calling host thread has waited for event h's last record. */
static void emrt_rc_sync_event(emrt_handle *h)
{
    if (!emrt_rc_on()) return;
    pthread_mutex_lock(&emrt_mu);
    emrt_rc_join(&emrt_rc_host, &h->clk.vc);
    pthread_mutex_unlock(&emrt_mu);
}

/* cudaEventQuery of h by a thread that issues work: counted when the thread
 * has not seen h's work complete (a GPU might answer cudaErrorNotReady). */
static void emrt_rc_poll(emrt_handle *h)
{
    if (!emrt_rc_on() || !emrt_rc_issuer) return;
    pthread_mutex_lock(&emrt_mu);
    int pending = 0;
    for (int i = 0; i < h->clk.vc.n; i++) pending |= h->clk.vc.v[i] > emrt_rc_get(&emrt_rc_host, i);
    pthread_mutex_unlock(&emrt_mu);
    if (pending) emrt_sync_count(EMRT_SYNC_POLL);
}

/* cudaDeviceSynchronize: every stream's work so far is complete, so the
 * history is forgotten and the thread knows every stream's present. */
static void emrt_rc_sync_device(void)
{
    if (!emrt_rc_on()) return;
    pthread_mutex_lock(&emrt_mu);
    for (int i = 0; i < emrt_nallocs; i++) emrt_allocs[i].nacc = 0;
    emrt_rc_init(&emrt_rc_legacy);
    emrt_rc_join(&emrt_rc_host, &emrt_rc_legacy.vc);
    emrt_rc_each_blocking(emrt_rc_join_into, &emrt_rc_host);
    for (size_t i = 0; i < emrt_handle_cap; i++) {
        emrt_handle *h = emrt_handles[i];
        if (h && h->kind == 's' && h->clk.id >= 0) emrt_rc_join(&emrt_rc_host, &h->clk.vc);
    }
    pthread_mutex_unlock(&emrt_mu);
}

/* The slot of hand-off object obj (mutex held). */
static emrt_vc *emrt_rc_sync_of(const void *obj)
{
    for (int i = 0; i < emrt_rc_nsync; i++)
        if (emrt_rc_sync[i].obj == obj) return &emrt_rc_sync[i].vc;
    if (emrt_rc_nsync == (int)(sizeof emrt_rc_sync / sizeof emrt_rc_sync[0]))
        cuemu_fault("race detector", "more than %d host hand-off objects", emrt_rc_nsync);
    emrt_rc_sync[emrt_rc_nsync].obj = obj;
    return &emrt_rc_sync[emrt_rc_nsync++].vc;
}

/* Publishes at obj what this host thread knows complete (a hand-off the emulation cannot see). */
void cuemu_host_release(const void *obj)
{
    if (!emrt_rc_on()) return;
    pthread_mutex_lock(&emrt_mu);
    emrt_rc_join(emrt_rc_sync_of(obj), &emrt_rc_host);
    pthread_mutex_unlock(&emrt_mu);
}

/* Takes in what another host thread published at obj. */
void cuemu_host_acquire(const void *obj)
{
    if (!emrt_rc_on()) return;
    pthread_mutex_lock(&emrt_mu);
    emrt_rc_join(&emrt_rc_host, emrt_rc_sync_of(obj));
    pthread_mutex_unlock(&emrt_mu);
}

/* ---- deferred work ------------------------------------------------------------------
 *
 * An item of deferred work belongs to a stream and has a ticket (issue order,
 * over all streams).  Its poll makes progress without blocking and says when
 * it is done; only the thread that issued it polls it (the emulated NCCL's
 * MPI is that thread's).  It completes, in stream order, before the stream's
 * next work (cuemu_access, cuemu_stream_live), at a wait for an event
 * recorded after it (cudaStreamWaitEvent, cudaEventSynchronize), and at the
 * host synchronisations; cudaEventQuery and cudaStreamQuery poll it once on
 * the issuing thread and only look from any other (a watchdog thread sees a
 * collective that waits for a stopped peer as pending, as on a GPU). */

typedef struct emrt_dq {
    const void *s;
    uint64_t ticket;
    bool (*poll)(void *arg);
    void *arg;
    pthread_t owner;
    struct emrt_dq *next;
} emrt_dq;

static pthread_mutex_t emrt_dq_mu = PTHREAD_MUTEX_INITIALIZER;
static emrt_dq *emrt_dq_head, *emrt_dq_tail;
static uint64_t emrt_dq_last;               /* the last ticket given out          */

/* Whether deferred work s (NULL: any stream) has before ticket upto (mutex held):
 * the first such item, or NULL. */
static emrt_dq *emrt_dq_first(const void *s, uint64_t upto)
{
    for (emrt_dq *d = emrt_dq_head; d; d = d->next)
        if (d->ticket <= upto && (!s || d->s == s)) return d;
    return NULL;
}

/* Unlinks and frees d (mutex held). */
static void emrt_dq_remove(emrt_dq *d)
{
    emrt_dq **pp = &emrt_dq_head;
    while (*pp != d) pp = &(*pp)->next;
    *pp = d->next;
    if (emrt_dq_tail == d) {
        emrt_dq_tail = NULL;
        for (emrt_dq *e = emrt_dq_head; e; e = e->next) emrt_dq_tail = e;
    }
    free(d);
}

/* One pass over the calling thread's deferred work, as a GPU runs every
 * stream at once: each stream's first item is polled once (a stream's work
 * completes in order), those done removed.  Whether one was. */
static bool emrt_dq_pass(void)
{
    enum { MAX = 64 };
    emrt_dq *cand[MAX];
    int n = 0;
    pthread_mutex_lock(&emrt_dq_mu);
    for (emrt_dq *d = emrt_dq_head; d && n < MAX; d = d->next) {
        bool first = true;
        for (emrt_dq *e = emrt_dq_head; e != d && first; e = e->next) first = e->s != d->s;
        if (first && pthread_equal(d->owner, pthread_self())) cand[n++] = d;
    }
    pthread_mutex_unlock(&emrt_dq_mu);
    bool progressed = false;
    for (int i = 0; i < n; i++) {
        if (!cand[i]->poll(cand[i]->arg)) continue;
        pthread_mutex_lock(&emrt_dq_mu);
        emrt_dq_remove(cand[i]);
        pthread_mutex_unlock(&emrt_dq_mu);
        progressed = true;
    }
    return progressed;
}

/* Completes stream s's deferred work up to ticket upto (s NULL or the legacy
 * default stream: every stream's), moving every stream's along meanwhile
 * (one stream's collective may need a peer that first waits for another's);
 * block false: one pass.  Whether none of it is left.  Work of another
 * thread is only waited for (its thread completes it). */
static bool emrt_dq_settle(const void *s, uint64_t upto, bool block)
{
    if (s == (const void *)cudaStreamLegacy) s = NULL;
    long nap = 10000;
    for (;;) {
        bool progressed = emrt_dq_pass();
        pthread_mutex_lock(&emrt_dq_mu);
        bool pending = emrt_dq_first(s, upto) != NULL;
        pthread_mutex_unlock(&emrt_dq_mu);
        if (!pending) return true;
        if (!block) return false;
        if (progressed) {
            nap = 10000;
            continue;
        }
        struct timespec ts = { 0, nap };    /* a peer is late: sleep, not spin */
        nanosleep(&ts, NULL);
        if (nap < 1000000) nap *= 2;
    }
}

void cuemu_defer(const void *s, bool (*poll)(void *arg), void *arg)
{
    emrt_dq *d = calloc(1, sizeof *d);
    if (!d) cuemu_fault("cuemu_defer", "out of host memory");
    pthread_mutex_lock(&emrt_dq_mu);
    *d = (emrt_dq){ s == (const void *)cudaStreamLegacy ? NULL : s, ++emrt_dq_last, poll, arg, pthread_self(), NULL };
    if (emrt_dq_tail) emrt_dq_tail->next = d;
    else emrt_dq_head = d;
    emrt_dq_tail = d;
    pthread_mutex_unlock(&emrt_dq_mu);
}

void cuemu_settle(const void *s)
{
    emrt_dq_settle(s, UINT64_MAX, true);
}

/* The ticket of stream s's last deferred work (0: none pending). */
static uint64_t emrt_dq_mark(const void *s)
{
    uint64_t t = 0;
    pthread_mutex_lock(&emrt_dq_mu);
    for (emrt_dq *d = emrt_dq_head; d; d = d->next)
        if (d->s == s || s == NULL || s == (const void *)cudaStreamLegacy) t = d->ticket;
    pthread_mutex_unlock(&emrt_dq_mu);
    return t;
}

/* Whether s may take work; if not, the thread's last error says so.  Its
 * deferred work completes first (a launch follows it on the stream). */
bool cuemu_stream_live(const void *s)
{
    bool ok = emrt_stream_ok((cudaStream_t)s) == cudaSuccess;
    if (ok) cuemu_settle(s);
    return ok;
}

/* ---- device management ----------------------------------------------------------- */

/* The devices of a node: EMRT_DEVICES, or CUEMU_DEVICES (1..EMRT_DEVICES) to
 * stand for a smaller node (tests/e2e/calibrate.test.sh: one GPU). */
static int emrt_devices(void)
{
    const char *v = getenv("CUEMU_DEVICES");
    int n = v ? atoi(v) : 0;
    return n >= 1 && n <= EMRT_DEVICES ? n : EMRT_DEVICES;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count) return emrt_err(cudaErrorInvalidValue);
    *count = emrt_devices();
    return cudaSuccess;
}

/* Selects the process's device (only its number is kept: every device is this host). */
cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= emrt_devices()) return emrt_err(cudaErrorInvalidDevice);
    emrt_device = device;
    return cudaSuccess;
}

/* The device cudaSetDevice selected. */
cudaError_t cudaGetDevice(int *device)
{
    if (!device) return emrt_err(cudaErrorInvalidValue);
    *device = emrt_device;
    return cudaSuccess;
}

/* An H100-like device's properties, named as the emulator. */
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (!prop) return emrt_err(cudaErrorInvalidValue);
    if (device < 0 || device >= emrt_devices()) return emrt_err(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "shardc CPU emulator (H100-like, tests/gpu/emu)");
    prop->totalGlobalMem = EMRT_TOTAL;
    prop->sharedMemPerBlock = 48 << 10;
    prop->sharedMemPerMultiprocessor = 228 << 10;
    prop->sharedMemPerBlockOptin = 227 << 10;
    prop->regsPerBlock = 65536;
    prop->regsPerMultiprocessor = 65536;
    prop->warpSize = 32;
    prop->memPitch = SIZE_MAX >> 1;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024, prop->maxThreadsDim[1] = 1024, prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 0x7fffffff, prop->maxGridSize[1] = 65535, prop->maxGridSize[2] = 65535;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->totalConstMem = 64 << 10;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 132;
    prop->canMapHostMemory = 1;
    prop->unifiedAddressing = 1;
    prop->concurrentKernels = 1;
    prop->asyncEngineCount = 2;
    prop->pciDeviceID = device;
    prop->l2CacheSize = 50 << 20;
    prop->memoryBusWidth = 5120;
    return cudaSuccess;
}

/* Waits for every stream: the host knows all work complete, and the guards are checked. */
cudaError_t cudaDeviceSynchronize(void)
{
    cuemu_settle(NULL);
    emrt_sync_count(EMRT_SYNC_DEVICE);
    emrt_rc_sync_device();
    emrt_check_guards("cudaDeviceSynchronize");
    return cudaSuccess;
}

/* The thread's last error, which it clears. */
cudaError_t cudaGetLastError(void)
{
    cudaError_t e = emrt_last;
    emrt_last = cudaSuccess;
    return e;
}

/* The thread's last error, left in place. */
cudaError_t cudaPeekAtLastError(void)
{
    return emrt_last;
}

/* The name and description of the error codes this emulation returns. */
static const struct { cudaError_t e; const char *name, *text; } emrt_errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidPitchValue, "cudaErrorInvalidPitchValue", "invalid pitch argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
};

/* The description of an error code. */
const char *cudaGetErrorString(cudaError_t error)
{
    for (size_t i = 0; i < sizeof emrt_errors / sizeof emrt_errors[0]; i++)
        if (emrt_errors[i].e == error) return emrt_errors[i].text;
    return "unrecognized error code";
}

/* The enum name of an error code. */
const char *cudaGetErrorName(cudaError_t error)
{
    for (size_t i = 0; i < sizeof emrt_errors / sizeof emrt_errors[0]; i++)
        if (emrt_errors[i].e == error) return emrt_errors[i].name;
    return "unrecognized error code";
}

/* ---- memory ---------------------------------------------------------------------- */

/* Poisoned, guarded device memory, within the device's 80 GiB. */
cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    if (!devPtr) return emrt_err(cudaErrorInvalidValue);
    *devPtr = NULL;
    if (size == 0) return cudaSuccess;
    pthread_mutex_lock(&emrt_mu);
    bool room = size <= EMRT_TOTAL - emrt_device_bytes;
    pthread_mutex_unlock(&emrt_mu);
    if (!room || !(*devPtr = emrt_alloc_new(size, 0, 0))) return emrt_err(cudaErrorMemoryAllocation);
    return cudaSuccess;
}

/* Frees device memory after checking its guard (NULL does nothing). */
cudaError_t cudaFree(void *devPtr)
{
    if (!devPtr) return cudaSuccess;
    return emrt_alloc_free(devPtr, 0, "cudaFree");
}

/* Poisoned, guarded pinned host memory; mapped when the flags say so. */
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    if (!pHost || (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined)))
        return emrt_err(cudaErrorInvalidValue);
    *pHost = NULL;
    if (size == 0) return cudaSuccess;
    if (!(*pHost = emrt_alloc_new(size, 1, flags))) return emrt_err(cudaErrorMemoryAllocation);
    return cudaSuccess;
}

/* cudaHostAlloc with the default flags. */
cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

/* Frees pinned host memory after checking its guard (NULL does nothing). */
cudaError_t cudaFreeHost(void *ptr)
{
    if (!ptr) return cudaSuccess;
    return emrt_alloc_free(ptr, 1, "cudaFreeHost");
}

/* The device address of mapped pinned memory: its own (unified addressing). */
cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
    if (!pDevice || flags != 0) return emrt_err(cudaErrorInvalidValue);
    pthread_mutex_lock(&emrt_mu);
    emrt_alloc *a = emrt_find(pHost);
    bool mapped = a && a->host && (a->flags & cudaHostAllocMapped);
    pthread_mutex_unlock(&emrt_mu);
    if (!mapped) return emrt_err(cudaErrorInvalidValue);
    *pDevice = pHost;   /* unified addressing: the same address on both sides */
    return cudaSuccess;
}

/* The device's free and total bytes. */
cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
    if (!free || !total) return emrt_err(cudaErrorInvalidValue);
    pthread_mutex_lock(&emrt_mu);
    *free = EMRT_TOTAL - emrt_device_bytes;
    *total = EMRT_TOTAL;
    pthread_mutex_unlock(&emrt_mu);
    return cudaSuccess;
}

/* A copy's reads and writes, for the race detector, on stream s. */
static void emrt_copy_access(const char *who, const void *s, void *dst, const void *src, size_t count)
{
    cuemu_access(who, "source", s, src, count, false);
    cuemu_access(who, "destination", s, dst, count, true);
}

/* Whether p lies in cudaHostAlloc'd memory. */
static bool emrt_is_pinned(const void *p)
{
    pthread_mutex_lock(&emrt_mu);
    emrt_alloc *a = emrt_find(p);
    bool r = a && a->host;
    pthread_mutex_unlock(&emrt_mu);
    return r;
}

/* cudaMemcpy runs on the legacy default stream; how it synchronises with the
 * host follows CUDA's "API synchronization behavior": from pageable host
 * memory to the device, the stream is synchronised before the copy (which
 * may still be in flight at the return); to host memory, from pinned memory
 * and between host buffers, the copy is complete at the return; between
 * device buffers there is no host synchronisation. */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    cudaError_t e = emrt_copy_check("cudaMemcpy", dst, src, count, kind);
    if (e != cudaSuccess || count == 0) return e;
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice ||
                   (kind == cudaMemcpyDefault && emrt_is_device(dst));
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice ||
                   (kind == cudaMemcpyDefault && emrt_is_device(src));
    bool pageable_h2d = dst_dev && !src_dev && !emrt_is_pinned(src);
    cuemu_settle(NULL);
    if (pageable_h2d) emrt_rc_sync_stream(NULL);
    emrt_copy_access("cudaMemcpy", NULL, dst, src, count);
    memmove(dst, src, count);
    if (!pageable_h2d && !(dst_dev && src_dev)) emrt_rc_sync_stream(NULL);
    if (!(dst_dev && src_dev)) emrt_sync_count(EMRT_SYNC_MEMCPY);
    return cudaSuccess;
}

/* A copy on stream, done at issue; both sides checked against the kind. */
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    cudaError_t e = emrt_stream_ok(stream);
    if (e != cudaSuccess) return e;
    if ((e = emrt_copy_check("cudaMemcpyAsync", dst, src, count, kind)) != cudaSuccess) return e;
    if (count) emrt_copy_access("cudaMemcpyAsync", stream, dst, src, count);
    if (count) memmove(dst, src, count);
    return cudaSuccess;
}

/* A memset on the legacy default stream, done at issue. */
cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    if (count == 0) return cudaSuccess;
    emrt_device_side("cudaMemset", "destination", devPtr, count);
    cuemu_access("cudaMemset", "destination", NULL, devPtr, count, true);
    memset(devPtr, value, count);
    /* asynchronous to the host except into pinned host memory (CUDA's "API synchronization behavior") */
    if (emrt_is_pinned(devPtr)) emrt_rc_sync_stream(NULL), emrt_sync_count(EMRT_SYNC_MEMSET);
    return cudaSuccess;
}

/* A memset on stream, done at issue. */
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    cudaError_t e = emrt_stream_ok(stream);
    if (e != cudaSuccess) return e;
    if (count == 0) return cudaSuccess;
    emrt_device_side("cudaMemsetAsync", "destination", devPtr, count);
    cuemu_access("cudaMemsetAsync", "destination", stream, devPtr, count, true);
    memset(devPtr, value, count);
    return cudaSuccess;
}

/* A memset of height rows of width bytes, pitch apart, on stream. */
cudaError_t cudaMemset2DAsync(void *devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream)
{
    cudaError_t e = emrt_stream_ok(stream);
    if (e != cudaSuccess) return e;
    if (width == 0 || height == 0) return cudaSuccess;
    if (pitch < width) return emrt_err(cudaErrorInvalidPitchValue);
    emrt_device_side("cudaMemset2DAsync", "destination", devPtr, pitch * (height - 1) + width);
    cuemu_access("cudaMemset2DAsync", "destination", stream, devPtr, pitch * (height - 1) + width, true);
    for (size_t r = 0; r < height; r++) memset((unsigned char *)devPtr + r * pitch, value, width);
    return cudaSuccess;
}

/* ---- streams and events ---------------------------------------------------------- */

/* A new stream, blocking unless cudaStreamNonBlocking. */
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    if (!pStream || (flags & ~(unsigned)cudaStreamNonBlocking)) return emrt_err(cudaErrorInvalidValue);
    emrt_handle *h = emrt_handle_new('s', flags);
    if (!h) return emrt_err(cudaErrorMemoryAllocation);
    h->clk = (emrt_clock){ -1, !(flags & cudaStreamNonBlocking), { NULL, 0 } };
    *pStream = (cudaStream_t)(void *)h;
    return cudaSuccess;
}

/* A new blocking stream. */
cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

/* Destroys a stream; its handle stays known, so later use is an error. */
cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    if (emrt_stream_ok(stream) == cudaSuccess) cuemu_settle(stream);
    return emrt_handle_destroy(stream, 's');
}

/* Waits for stream: the host knows its work complete, and the guards are checked. */
cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    cudaError_t e = emrt_stream_ok(stream);
    if (e == cudaSuccess) cuemu_settle(stream), emrt_sync_count(EMRT_SYNC_STREAM), emrt_rc_sync_stream(stream),
                          emrt_check_guards("cudaStreamSynchronize");
    return e;
}

/* cudaSuccess when the stream's work is done (the host has then seen it
 * complete); cudaErrorNotReady while deferred work is pending. */
cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    cudaError_t e = emrt_stream_ok(stream);
    if (e != cudaSuccess) return e;
    if (!emrt_dq_settle(stream, UINT64_MAX, false)) return cudaErrorNotReady;
    emrt_rc_sync_stream(stream);
    return cudaSuccess;
}

/* Makes stream's later work wait for event's last record. */
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    cudaError_t e = emrt_stream_ok(stream);
    if (e != cudaSuccess) return e;
    if ((e = emrt_event_ok(event)) != cudaSuccess) return e;
    if (flags & ~(unsigned)cudaEventWaitExternal) return emrt_err(cudaErrorInvalidValue);
    emrt_handle *eh = emrt_handle_of(event, 'e');
    emrt_dq_settle(eh->dq_stream, eh->dq_ticket, true);   /* work at issue: the event's work is done first */
    if (emrt_rc_on()) {   /* the stream's later work follows the event's last record */
        pthread_mutex_lock(&emrt_mu);
        emrt_clock *c = emrt_rc_clock(stream);
        emrt_rc_join(&c->vc, &emrt_handle_find(event, 'e')->clk.vc);
        pthread_mutex_unlock(&emrt_mu);
    }
    return cudaSuccess;
}

/* A new event, with flags checked as the real runtime checks them. */
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
    if (!event || (flags & ~known)) return emrt_err(cudaErrorInvalidValue);
    /* an interprocess event must not record timing (the documented contract) */
    if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)) return emrt_err(cudaErrorInvalidValue);
    emrt_handle *h = emrt_handle_new('e', flags);
    if (!h) return emrt_err(cudaErrorMemoryAllocation);
    *event = (cudaEvent_t)(void *)h;
    return cudaSuccess;
}

/* A new event with the default flags. */
cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

/* Destroys an event; its handle stays known, so later use is an error. */
cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    return emrt_handle_destroy(event, 'e');
}

/* Records event on stream: a snapshot of the stream's work so far. */
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    cudaError_t e = emrt_event_ok(event);
    if (e != cudaSuccess) return e;
    if ((e = emrt_stream_ok(stream)) != cudaSuccess) return e;
    emrt_handle *eh = emrt_handle_of(event, 'e');
    eh->dq_stream = stream == (cudaStream_t)cudaStreamLegacy ? NULL : (const void *)stream;
    eh->dq_ticket = emrt_dq_mark(eh->dq_stream);
    if (emrt_rc_on()) {   /* a snapshot of the stream's work so far, as an operation on it */
        pthread_mutex_lock(&emrt_mu);
        emrt_clock *c = emrt_rc_clock(stream);
        emrt_rc_issue(c);
        emrt_vc *ev = &emrt_handle_find(event, 'e')->clk.vc;
        emrt_rc_grow(ev, c->vc.n);
        memset(ev->v, 0, (size_t)ev->n * sizeof *ev->v);
        memcpy(ev->v, c->vc.v, (size_t)c->vc.n * sizeof *ev->v);
        pthread_mutex_unlock(&emrt_mu);
    }
    return cudaSuccess;
}

/* cudaSuccess when the work before the event's last record is done (the host
 * has then seen the record complete; work is done at issue unless deferred):
 * cudaErrorNotReady while deferred work before it is pending. */
cudaError_t cudaEventQuery(cudaEvent_t event)
{
    cudaError_t e = emrt_event_ok(event);
    if (e != cudaSuccess) return e;
    emrt_handle *h = emrt_handle_of(event, 'e');
    if (!emrt_dq_settle(h->dq_stream, h->dq_ticket, false)) return cudaErrorNotReady;
    emrt_rc_poll(h), emrt_rc_sync_event(h);
    return cudaSuccess;
}

/* Waits for event's last record: the host knows that work complete. */
cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    cudaError_t e = emrt_event_ok(event);
    if (e != cudaSuccess) return e;
    emrt_handle *h = emrt_handle_of(event, 'e');
    emrt_dq_settle(h->dq_stream, h->dq_ticket, true);
    emrt_sync_count(EMRT_SYNC_EVENT), emrt_rc_sync_event(h);
    return cudaSuccess;
}
