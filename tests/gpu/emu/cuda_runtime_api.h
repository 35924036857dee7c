/* cuda_runtime_api.h — the emulator's stand-in for CUDA's host API: the few
 * calls kernels/cuda and tests/gpu/test_kernels.c make, on host memory.
 * Only the test_kernels_emu build puts this folder on the include path.
 */
#ifndef KG_EMU_CUDA_RUNTIME_API_H
#define KG_EMU_CUDA_RUNTIME_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNoDevice = 100,
} cudaError_t;
typedef struct KgEmuStream *cudaStream_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
    cudaMemcpyDeviceToDevice, cudaMemcpyDefault
};
struct cudaDeviceProp { char name[256]; int major, minor; };

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev);
/* Host memory poisoned with 0xff (NaN floats) and followed by guard bytes
 * that cudaFree checks: a kernel writing past a buffer ends the test. */
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k,
                            cudaStream_t s);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);

#ifdef __cplusplus
}
#endif

#endif
