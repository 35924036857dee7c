// rtk.cu — the CUDA backend's own kernels, for what kernels/cuda does not
// provide: the loss accumulation and the bias gradient (both reduce in a
// fixed order, no atomics, so a run and its resumption give the same bits),
// the GEMM's bias when the epilogue cannot take it, and GELU's in-place
// derivative for matmul_bwd_dgelu's fallback.  Written in kernels/cuda's
// style (KG_LAUNCH, 1-D grids, common.cuh's bit-exact loads and stores) so
// that tests/gpu/emu can also run it on the CPU, compiled as C++.
#include "../../kernels/cuda/common.cuh"

#include <stdint.h>

enum { RTK_BIAS_CHUNKS = 32 };   // cu.h's CU_BIAS_CHUNKS

// acc[0] += (sum of x in row order, per thread then a fixed tree) / n * scale.
__global__ static void rtk_loss_add(double *acc, const float *x, int n, double scale)
{
    __shared__ double part[256];
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += (double)x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) acc[0] += part[0] / (double)n * scale;
}

extern "C" cudaError_t cu_k_loss_add(double *acc, const float *x, int n, double scale, cudaStream_t s)
{
    if (n <= 0) return cudaSuccess;
    KG_LAUNCH(rtk_loss_add, 1, 256, s, acc, x, n, scale);
    return cudaGetLastError();
}

// Element i of a float tensor of dtype dt (SRT_F32 0, SRT_BF16 1, SRT_F16 2)
// as fp32: exact, as __bfloat162float / __half2float.
__device__ static float rtk_load(const void *p, int dt, int64_t i)
{
    return kg_ld(p, dt, (size_t)i);
}

// Stores v as dtype dt, rounded to nearest even (the bits of
// __float2bfloat16_rn / __float2half_rn, NaN payloads as kernels/cuda's).
__device__ static void rtk_store(void *p, int dt, int64_t i, float v)
{
    kg_st(p, dt, (size_t)i, v);
}

// partials[chunk][j] = sum of dout[i][j] over the chunk's rows, in row order;
// block b covers columns (b % xblocks) * blockDim.x... of chunk b / xblocks.
__global__ static void rtk_bias_partial(float *partials, const void *dout, int dt, int N, int OC, int rows,
                                        int xblocks)
{
    int j = (int)(blockIdx.x % (unsigned)xblocks) * blockDim.x + threadIdx.x;
    int chunk = (int)(blockIdx.x / (unsigned)xblocks);
    if (j >= OC) return;
    int r0 = chunk * rows, r1 = N < r0 + rows ? N : r0 + rows;
    float s = 0.0f;
    for (int i = r0; i < r1; i++) s += rtk_load(dout, dt, (int64_t)i * OC + j);
    partials[(int64_t)chunk * OC + j] = s;
}

// dbias[j] += sum of the partials in chunk order.
__global__ static void rtk_bias_final(void *dbias, int bdt, const float *partials, int OC, int chunks)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= OC) return;
    float s = 0.0f;
    for (int k = 0; k < chunks; k++) s += partials[(int64_t)k * OC + j];
    rtk_store(dbias, bdt, j, rtk_load(dbias, bdt, j) + s);
}

extern "C" cudaError_t cu_k_bias_grad(void *dbias, int dbias_dt, const void *dout, int dt, int N, int OC,
                                      float *partials, cudaStream_t s)
{
    if (N <= 0 || OC <= 0) return cudaSuccess;
    int rows = (N + RTK_BIAS_CHUNKS - 1) / RTK_BIAS_CHUNKS;
    int chunks = (N + rows - 1) / rows;
    int xblocks = (OC + 127) / 128;
    KG_LAUNCH(rtk_bias_partial, (unsigned)xblocks * (unsigned)chunks, 128, s, partials, dout, dt, N, OC, rows, xblocks);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    KG_LAUNCH(rtk_bias_final, (unsigned)xblocks, 128, s, dbias, dbias_dt, partials, OC, chunks);
    return cudaGetLastError();
}

// out[i][j] += bias[j] over N rows of OC (the GEMM's bias when the epilogue
// cannot take the bias pointer).
__global__ static void rtk_bias_add(void *out, int dt, const void *bias, int bdt, int64_t total, int OC)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    rtk_store(out, dt, i, rtk_load(out, dt, i) + rtk_load(bias, bdt, i % OC));
}

extern "C" cudaError_t cu_k_bias_add(void *out, int dt, const void *bias, int bias_dt, int N, int OC, cudaStream_t s)
{
    int64_t total = (int64_t)N * OC;
    if (total <= 0) return cudaSuccess;
    KG_LAUNCH(rtk_bias_add, (unsigned)((total + 255) / 256), 256, s, out, dt, bias, bias_dt, total, OC);
    return cudaGetLastError();
}

// d[i] = gelu'(pre[i]) * d[i], the tanh GELU's derivative with kernels/cuda's
// formula (expf): matmul_bwd_dgelu where cuBLASLt's DGELU epilogue cannot run.
__global__ static void rtk_dgelu_inplace(void *d, int dt, const void *pre, int pdt, int64_t n)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float k = 0.7978845608028654f;   // sqrt(2/pi)
    float x = rtk_load(pre, pdt, i);
    float u = k * (x + 0.044715f * x * x * x), sg = 1.0f / (1.0f + expf(-2.0f * u));
    float du = k * (1.0f + 3.0f * 0.044715f * x * x);
    float local = sg + x * 2.0f * sg * (1.0f - sg) * du;
    rtk_store(d, dt, i, 0.0f + local * rtk_load(d, dt, i));
}

extern "C" cudaError_t cu_k_dgelu_inplace(void *d, int dt, const void *pre, int pre_dt, int64_t n, cudaStream_t s)
{
    if (n <= 0) return cudaSuccess;
    KG_LAUNCH(rtk_dgelu_inplace, (unsigned)((n + 255) / 256), 256, s, d, dt, pre, pre_dt, n);
    return cudaGetLastError();
}
