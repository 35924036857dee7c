/* cudart.c — the emulated CUDA runtime (prefix emrt_), compiled against the
 * real cuda_runtime_api.h: the libcudart calls runtime/cuda, kernels/cuda
 * and the other emulated libraries make, on a machine without a GPU.
 *
 * Device memory is 256-byte aligned host memory poisoned with 0xff (a NaN in
 * every float dtype) and followed by guard bytes, checked at cudaFree, at
 * every synchronisation and at exit: a kernel or library that writes past a
 * buffer ends the run.  Every stream runs its work at issue time, in issue
 * order, so an event is complete once recorded and a synchronisation only
 * checks its handle.  What the real runtime rejects is rejected with its
 * error code; what would be an illegal address on a GPU (a copy reaching
 * outside an allocation, a copy whose kind contradicts its pointers) is a
 * cuemu_fault that ends the process.
 */
#include <cuda_runtime_api.h>

#include "cuemu.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
} emrt_alloc;

/* A stream or event handle; never freed, so a destroyed one stays known. */
typedef struct emrt_handle {
    int kind;                   /* 's' stream, 'e' event                      */
    int live;
    unsigned flags;
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

void cuemu_set_error(int err)
{
    emrt_err((cudaError_t)err);
}

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

/* atexit: the guards of what the program never freed. */
static void emrt_at_exit(void)
{
    emrt_check_guards("at exit");
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
    emrt_allocs[emrt_nallocs++] = (emrt_alloc){m, bytes, host, flags};
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
        *a = emrt_allocs[--emrt_nallocs];
        pthread_mutex_unlock(&emrt_mu);
        return cudaSuccess;
    }
    pthread_mutex_unlock(&emrt_mu);
    return emrt_err(cudaErrorInvalidValue);
}

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

/* Whether h is a handle of the kind this runtime made (live or destroyed);
 * only addresses are compared, so a foreign pointer is never read. */
static emrt_handle *emrt_handle_of(const void *h, int kind)
{
    emrt_handle *r = NULL;
    pthread_mutex_lock(&emrt_mu);
    if (emrt_handle_cap) r = emrt_handles[emrt_handle_slot(h)];
    pthread_mutex_unlock(&emrt_mu);
    return r && r->kind == kind ? r : NULL;
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
    *h = (emrt_handle){kind, 1, flags};
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

/* ---- device management ----------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count) return emrt_err(cudaErrorInvalidValue);
    *count = EMRT_DEVICES;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= EMRT_DEVICES) return emrt_err(cudaErrorInvalidDevice);
    emrt_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    if (!device) return emrt_err(cudaErrorInvalidValue);
    *device = emrt_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (!prop) return emrt_err(cudaErrorInvalidValue);
    if (device < 0 || device >= EMRT_DEVICES) return emrt_err(cudaErrorInvalidDevice);
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

cudaError_t cudaDeviceSynchronize(void)
{
    emrt_check_guards("cudaDeviceSynchronize");
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = emrt_last;
    emrt_last = cudaSuccess;
    return e;
}

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

const char *cudaGetErrorString(cudaError_t error)
{
    for (size_t i = 0; i < sizeof emrt_errors / sizeof emrt_errors[0]; i++)
        if (emrt_errors[i].e == error) return emrt_errors[i].text;
    return "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t error)
{
    for (size_t i = 0; i < sizeof emrt_errors / sizeof emrt_errors[0]; i++)
        if (emrt_errors[i].e == error) return emrt_errors[i].name;
    return "unrecognized error code";
}

/* ---- memory ---------------------------------------------------------------------- */

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

cudaError_t cudaFree(void *devPtr)
{
    if (!devPtr) return cudaSuccess;
    return emrt_alloc_free(devPtr, 0, "cudaFree");
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    if (!pHost || (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined)))
        return emrt_err(cudaErrorInvalidValue);
    *pHost = NULL;
    if (size == 0) return cudaSuccess;
    if (!(*pHost = emrt_alloc_new(size, 1, flags))) return emrt_err(cudaErrorMemoryAllocation);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void *ptr)
{
    if (!ptr) return cudaSuccess;
    return emrt_alloc_free(ptr, 1, "cudaFreeHost");
}

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

cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
    if (!free || !total) return emrt_err(cudaErrorInvalidValue);
    pthread_mutex_lock(&emrt_mu);
    *free = EMRT_TOTAL - emrt_device_bytes;
    *total = EMRT_TOTAL;
    pthread_mutex_unlock(&emrt_mu);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    cudaError_t e = emrt_copy_check("cudaMemcpy", dst, src, count, kind);
    if (e != cudaSuccess) return e;
    if (count) memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    cudaError_t e = emrt_stream_ok(stream);
    if (e != cudaSuccess) return e;
    if ((e = emrt_copy_check("cudaMemcpyAsync", dst, src, count, kind)) != cudaSuccess) return e;
    if (count) memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    if (count == 0) return cudaSuccess;
    emrt_device_side("cudaMemset", "destination", devPtr, count);
    memset(devPtr, value, count);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    cudaError_t e = emrt_stream_ok(stream);
    if (e != cudaSuccess) return e;
    if (count == 0) return cudaSuccess;
    emrt_device_side("cudaMemsetAsync", "destination", devPtr, count);
    memset(devPtr, value, count);
    return cudaSuccess;
}

cudaError_t cudaMemset2DAsync(void *devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream)
{
    cudaError_t e = emrt_stream_ok(stream);
    if (e != cudaSuccess) return e;
    if (width == 0 || height == 0) return cudaSuccess;
    if (pitch < width) return emrt_err(cudaErrorInvalidPitchValue);
    emrt_device_side("cudaMemset2DAsync", "destination", devPtr, pitch * (height - 1) + width);
    for (size_t r = 0; r < height; r++) memset((unsigned char *)devPtr + r * pitch, value, width);
    return cudaSuccess;
}

/* ---- streams and events ---------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    if (!pStream || (flags & ~(unsigned)cudaStreamNonBlocking)) return emrt_err(cudaErrorInvalidValue);
    emrt_handle *h = emrt_handle_new('s', flags);
    if (!h) return emrt_err(cudaErrorMemoryAllocation);
    *pStream = (cudaStream_t)(void *)h;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    return emrt_handle_destroy(stream, 's');
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    cudaError_t e = emrt_stream_ok(stream);
    if (e == cudaSuccess) emrt_check_guards("cudaStreamSynchronize");
    return e;
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    return emrt_stream_ok(stream);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    cudaError_t e = emrt_stream_ok(stream);
    if (e != cudaSuccess) return e;
    if ((e = emrt_event_ok(event)) != cudaSuccess) return e;
    if (flags & ~(unsigned)cudaEventWaitExternal) return emrt_err(cudaErrorInvalidValue);
    return cudaSuccess;
}

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

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    return emrt_handle_destroy(event, 'e');
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    cudaError_t e = emrt_event_ok(event);
    if (e != cudaSuccess) return e;
    return emrt_stream_ok(stream);
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    return emrt_event_ok(event);   /* the work before a record is done when it is issued */
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    return emrt_event_ok(event);
}
