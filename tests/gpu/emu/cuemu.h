/* cuemu.h — what the emulated vendor libraries (tests/gpu/emu: cudart.c,
 * cublaslt.c, cudnn.c, nccl.c) share, prefix cuemu_.  They stand in for
 * libcudart, libcublasLt, libcudnn and libnccl so that the CUDA trainer (the
 * same generated C, the same runtime/cuda objects compiled against the real
 * headers) runs on a machine without a GPU: device memory is host memory,
 * every stream runs its work synchronously at issue time and in issue order,
 * and an event is complete when it is recorded.
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

#ifdef __cplusplus
}
#endif

#endif
