/* cuemu.h — what the emulated vendor libraries (tests/gpu/emu: cudart.c,
 * cublaslt.c, cudnn.c, nccl.c) share, prefix cuemu_.  They stand in for
 * libcudart, libcublasLt, libcudnn and libnccl so that the CUDA trainer (the
 * same generated C, the same runtime/cuda objects compiled against the real
 * headers) runs on a machine without a GPU: device memory is host memory,
 * every stream runs its work synchronously at issue time and in issue order,
 * and an event is complete when it is recorded — except deferred work
 * (cuemu_defer), which completes later, as a GPU's work does.
 */
#ifndef CUEMU_H
#define CUEMU_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether [p, p + bytes) lies inside one live allocation that a kernel may
 * address: cudaMalloc'd device memory or cudaHostAlloc'd mapped memory
 * (cudart.c).  bytes 0 asks only for p. */
bool cuemu_device_range(const void *p, size_t bytes);

/* A device fault: prints "cuda emulator: WHO: message" and ends the process,
 * as an illegal address ends a CUDA context (used where the real library
 * would read or write memory it must not). */
void cuemu_fault(const char *who, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/* Records err (a cudaError_t) as the calling thread's last CUDA error, which
 * cudaGetLastError returns and clears (cudart.c): how the kernel executor
 * (emu.cpp) reports a launch it rejects. */
void cuemu_set_error(int err);

/* The race detector (cudart.c; on unless CUEMU_RACECHECK=0): the operation
 * who (its operand what) issued now on stream s (a cudaStream_t) reads or
 * writes [p, p + bytes) (bytes 0: the byte at p, a kernel's pointer
 * argument, whose extent is unknown).  A cuemu_fault naming both accesses
 * when an earlier access of another stream to overlapping bytes, one of the
 * two a write, is not ordered before it (events, stream waits, the legacy
 * default stream's implicit synchronisation, host synchronisations).
 * Memory outside the live allocations is not tracked. */
void cuemu_access(const char *who, const char *what, const void *s, const void *p, size_t bytes, bool write);

/* Host threads' hand-offs the emulation cannot see (a queue's mutex): the
 * calling thread publishes what it knows complete at obj, or takes in what
 * was published there (runtime/cuda/hostq.c calls them when linked here). */
void cuemu_host_release(const void *obj);
void cuemu_host_acquire(const void *obj);

/* Whether s is 0, a special stream or a live stream; if not, the thread's
 * last error is cudaErrorInvalidResourceHandle (a launch on it fails).  A
 * live stream's deferred work completes first (the launch follows it). */
bool cuemu_stream_live(const void *s);

/* Deferred work on stream s (the emulated NCCL's collectives, cudart.c):
 * poll(arg) makes progress without blocking and returns true once the work
 * is done (it then owns arg no more).  Only the calling thread polls it.  It
 * completes in stream order before s's next work, at a wait for an event
 * recorded after it and at host synchronisations; until then an event
 * recorded after it is pending (cudaEventQuery: cudaErrorNotReady). */
void cuemu_defer(const void *s, bool (*poll)(void *arg), void *arg);
/* Completes s's deferred work now (s NULL or the legacy default stream: all). */
void cuemu_settle(const void *s);

#ifdef __cplusplus
}
#endif

#endif
