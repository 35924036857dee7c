/* cuda_runtime_api.h — the emulator's stand-in for CUDA's host API as the
 * kernels see it when compiled as C++ (kernels/cuda, runtime/cuda/rtk.cu):
 * the few calls they make, ABI-compatible with the real header (the same
 * enum values, a pointer for a stream).  cudart.c implements them against
 * the real header; host code (tests/gpu/test_kernels.c, the runtime/cuda C files)
 * is compiled against the real header, never this one.
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

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k,
                            cudaStream_t s);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s);
cudaError_t cudaGetLastError(void);
cudaError_t cudaStreamQuery(cudaStream_t s);
const char *cudaGetErrorString(cudaError_t e);

#ifdef __cplusplus
}
#endif

#endif
