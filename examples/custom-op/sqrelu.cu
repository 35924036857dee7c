// sqrelu.cu — squared ReLU on the GPU: device pointers, the same ABI and
// semantics as sqrelu.c.  The kernels run on the legacy default stream, which
// orders them after the runtime's earlier work on it; each call returns after
// its kernel has finished, so the caller may treat it as synchronous.
#include "sqrelu.h"

#include <cuda_runtime.h>

// out = relu(inp)^2 (one thread per element).
__global__ static void sqrelu_forward_kernel(float *out, const float *inp, int64_t n)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float r = fmaxf(inp[i], 0.0f);
        out[i] = r * r;
    }
}

// dinp += 2 relu(inp) dout.
__global__ static void sqrelu_backward_kernel(float *dinp, const float *inp, const float *dout, int64_t n)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dinp[i] += 2.0f * fmaxf(inp[i], 0.0f) * dout[i];
}

static unsigned blocks(int64_t n) { return (unsigned)((n + 255) / 256); }

extern "C" void sqrelu_forward(float *out, const float *inp, int64_t n)
{
    if (n <= 0) return;
    sqrelu_forward_kernel<<<blocks(n), 256>>>(out, inp, n);
    cudaStreamSynchronize(0);
}

extern "C" void sqrelu_backward(float *dinp, const float *inp, const float *dout, int64_t n)
{
    if (n <= 0) return;
    sqrelu_backward_kernel<<<blocks(n), 256>>>(dinp, inp, dout, n);
    cudaStreamSynchronize(0);
}
