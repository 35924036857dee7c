/* common.cuh — what every kernels/cuda source shares: stored-dtype loads and
 * stores (bit-exact twins of kernels/cpu/cast.c), warp and block reductions
 * in a fixed order, and the launchers' argument checks.
 */
#ifndef SHARDK_CUDA_COMMON_CUH
#define SHARDK_CUDA_COMMON_CUH

#include "kernels.h"

#include <cuda_runtime.h>
#include <stdint.h>

/* ---- stored dtypes ------------------------------------------------------- */

/* fp32 -> bf16 bits, round to nearest even; a NaN stays a quiet NaN (the
 * same bits as kc_bf16_from_f32, so CPU and GPU stores agree exactly). */
__device__ __forceinline__ uint16_t kg_bf16_bits(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* x >> s (s >= 1) rounded to nearest, ties to even. */
__device__ __forceinline__ uint32_t kg_shift_rne(uint32_t x, int s)
{
    uint32_t q = x >> s, rem = x & ((1u << s) - 1u), half = 1u << (s - 1);
    return q + (rem > half || (rem == half && (q & 1u)));
}

/* fp32 -> fp16 bits (kc_fp16_from_f32): subnormals, inf on overflow. */
__device__ __forceinline__ uint16_t kg_fp16_bits(float f)
{
    uint32_t u = __float_as_uint(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t e = (u >> 23) & 0xffu, mant = u & 0x7fffffu;
    if (e == 255) return sign | (mant ? 0x7e00u | (uint16_t)(mant >> 13) : 0x7c00u);
    if (e >= 143) return sign | 0x7c00u;
    if (e >= 113) return sign | (uint16_t)kg_shift_rne(((e - 112) << 23) | mant, 13);
    if (e < 102) return sign;
    return sign | (uint16_t)kg_shift_rne(mant | 0x800000u, (int)(126 - e));
}

/* fp16 bits -> fp32, exact (kc_f32_from_fp16). */
__device__ __forceinline__ float kg_f32_from_fp16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (e == 0) return __uint_as_float(__float_as_uint((float)mant * 0x1p-24f) | sign);
    if (e == 31) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
    return __uint_as_float(sign | ((e + 112) << 23) | (mant << 13));
}

/* Element i of a tensor stored as dt, as fp32 (exact for every dtype). */
__device__ __forceinline__ float kg_ld(const void *p, int dt, size_t i)
{
    if (dt == SRT_BF16) return __uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16);
    if (dt == SRT_F16) return kg_f32_from_fp16(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* Stores x as element i of a tensor of dtype dt, rounded to nearest even. */
__device__ __forceinline__ void kg_st(void *p, int dt, size_t i, float x)
{
    if (dt == SRT_BF16) ((uint16_t *)p)[i] = kg_bf16_bits(x);
    else if (dt == SRT_F16) ((uint16_t *)p)[i] = kg_fp16_bits(x);
    else ((float *)p)[i] = x;
}

/* A tensor as the kernels see it: the pointer and its stored dtype. */
struct KgT {
    void *p;
    int dt;
};
static inline KgT kg_t(srt_t t)
{
    KgT r = { t.p, (int)t.dt };
    return r;
}
/* A tensor a kernel only reads: its parameters say so (and the emulator's
 * race detector, tests/gpu/emu, records it as a read); a launcher's kg_t
 * converts. */
struct KgC {
    const void *p;
    int dt;
    __host__ __device__ KgC(KgT t) : p(t.p), dt(t.dt) {}
};

/* ---- reductions (fixed order: the same bits on every run) ----------------- */

/* The sum over the warp, in every lane (a fixed butterfly). */
__device__ __forceinline__ float kg_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
/* The max over the warp, in every lane. */
__device__ __forceinline__ float kg_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* The sum (is_max 0) or max (1) over the block, in every thread; blockDim.x
 * a multiple of 32, at most 1024; sh: 32 floats of shared memory.  Warp
 * results are combined by one warp in warp order. */
__device__ __forceinline__ float kg_block_reduce(float v, int is_max, float *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = is_max ? kg_warp_max(v) : kg_warp_sum(v);
    __syncthreads();   /* sh may still be read by a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = lane < nw ? sh[lane] : (is_max ? -INFINITY : 0.0f);
    r = is_max ? kg_warp_max(r) : kg_warp_sum(r);
    return r;
}

/* ---- launchers ------------------------------------------------------------- */

/* Launches kern over grid blocks of block threads on stream s.  A macro so
 * that tests/gpu/emu (the kernels run on the CPU, for machines without a
 * GPU) can supply its own. */
#ifndef KG_LAUNCH
#define KG_LAUNCH(kern, grid, block, s, ...) kern<<<(grid), (block), 0, (s)>>>(__VA_ARGS__)
#endif

/* Dtype masks for kg_arg. */
#define KG_M(dt) (1u << (dt))
#define KG_FLOAT (KG_M(SRT_F32) | KG_M(SRT_BF16) | KG_M(SRT_F16))
#define KG_F32 KG_M(SRT_F32)
#define KG_I32 KG_M(SRT_I32)

/* Records why a launcher rejected its arguments; returns cudaErrorInvalidValue. */
cudaError_t kg_bad(const char *fn, const char *fmt, ...);
/* Checks a tensor argument: absent (p NULL) only when optional; dtype in
 * mask; at least need elements. */
cudaError_t kg_arg(const char *fn, const char *name, srt_t t, int64_t need, unsigned mask,
                   int optional);
/* The error of the launch just made (cudaGetLastError), after a launch. */
cudaError_t kg_launched(const char *fn);
/* Blocks of `threads` for a grid-stride loop over n elements (n > 0). */
unsigned kg_grid(int64_t n, int threads);

#define KG_TRY(expr)                          \
    do {                                      \
        cudaError_t kg_e_ = (expr);           \
        if (kg_e_ != cudaSuccess) return kg_e_; \
    } while (0)
#define KG_ARG(t, need, mask, optional) KG_TRY(kg_arg(__func__, #t, (t), (need), (mask), (optional)))
#define KG_REQ(cond)                                                  \
    do {                                                              \
        if (!(cond)) return kg_bad(__func__, "requires %s", #cond);   \
    } while (0)

#endif
