/* fill.cu — the launchers' shared checks, and the flat ops: zero, fill,
 * dtype conversion, bf16 rounding, scale, the loss-scale overflow check.
 * Every element is computed on its own, so the grid changes no bit.
 */
#include "common.cuh"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

static thread_local char kg_detail[256];

/* The reason for the last rejected call of this thread. */
extern "C" const char *kg_error_detail(void)
{
    return kg_detail;
}

/* Records why fn rejected its arguments. */
cudaError_t kg_bad(const char *fn, const char *fmt, ...)
{
    int n = snprintf(kg_detail, sizeof kg_detail, "%s: ", fn);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof kg_detail) vsnprintf(kg_detail + n, sizeof kg_detail - n, fmt, ap);
    va_end(ap);
    return cudaErrorInvalidValue;
}

/* Checks one tensor argument of fn (see common.cuh). */
cudaError_t kg_arg(const char *fn, const char *name, srt_t t, int64_t need, unsigned mask,
                   int optional)
{
    if (!t.p) return optional || need == 0 ? cudaSuccess : kg_bad(fn, "%s is required", name);
    if ((unsigned)t.dt > SRT_U8 || !(mask & KG_M(t.dt)))
        return kg_bad(fn, "%s has dtype %d, not one this kernel takes", name, (int)t.dt);
    if (t.n < need)
        return kg_bad(fn, "%s holds %lld elements, the shape needs %lld", name, (long long)t.n,
                      (long long)need);
    return cudaSuccess;
}

/* The launch's own error (bad configuration, no device, a sticky fault). */
cudaError_t kg_launched(const char *fn)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) snprintf(kg_detail, sizeof kg_detail, "%s: %s", fn, cudaGetErrorString(e));
    return e;
}

/* Enough blocks to cover n with `threads` each, capped (grid-stride loops
 * do the rest; the cap keeps tiny tails from launching millions of blocks). */
unsigned kg_grid(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 65536 ? b : 65536);
}

/* x[i] := v over n elements. */
__global__ void kg_fill_kernel(KgT x, float v, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        kg_st(x.p, x.dt, i, v);
}

/* dst[i] := src[i] with a dtype change. */
__global__ void kg_convert_kernel(KgT dst, KgC src, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        kg_st(dst.p, dst.dt, i, kg_ld(src.p, src.dt, i));
}

/* x[i] := f32(bf16(x[i])) for fp32 x. */
__global__ void kg_round_bf16_kernel(float *x, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __uint_as_float((uint32_t)kg_bf16_bits(x[i]) << 16);
}

/* x[i] *= s. */
__global__ void kg_scale_kernel(KgT x, float s, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        kg_st(x.p, x.dt, i, kg_ld(x.p, x.dt, i) * s);
}

/* *flag := 0 if some element is inf or NaN (all writers write the same 0). */
__global__ void kg_all_finite_kernel(int *flag, KgC x, int64_t n)
{
    int bad = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (x.dt == SRT_F32) bad |= (__float_as_uint(((const float *)x.p)[i]) & 0x7f800000u) == 0x7f800000u;
        else if (x.dt == SRT_BF16) bad |= (((const uint16_t *)x.p)[i] & 0x7f80u) == 0x7f80u;
        else bad |= (((const uint16_t *)x.p)[i] & 0x7c00u) == 0x7c00u;
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 0;
}

/* Bytes per element of dt. */
static int64_t kg_dtsize(srt_dtype dt)
{
    return dt == SRT_BF16 || dt == SRT_F16 ? 2 : dt == SRT_U8 ? 1 : 4;
}

/* x := 0. */
extern "C" cudaError_t kg_zero(srt_t x, cudaStream_t s)
{
    KG_ARG(x, 0, KG_FLOAT | KG_I32 | KG_M(SRT_U8), 0);
    if (x.n <= 0) return cudaSuccess;
    KG_TRY(cudaMemsetAsync(x.p, 0, (size_t)(x.n * kg_dtsize(x.dt)), s));
    return kg_launched(__func__);
}

/* x := value. */
extern "C" cudaError_t kg_fill(srt_t x, float value, cudaStream_t s)
{
    KG_ARG(x, 0, KG_FLOAT, 0);
    if (x.n <= 0) return cudaSuccess;
    KG_LAUNCH(kg_fill_kernel, kg_grid(x.n, 256), 256, s, kg_t(x), value, x.n);
    return kg_launched(__func__);
}

/* dst := src with a dtype conversion, or a copy. */
extern "C" cudaError_t kg_convert(srt_t dst, srt_t src, cudaStream_t s)
{
    KG_REQ(dst.n == src.n);
    if (dst.dt == src.dt) {   /* a plain copy, any dtype */
        KG_ARG(dst, 0, KG_FLOAT | KG_I32 | KG_M(SRT_U8), 0);
        KG_ARG(src, 0, KG_FLOAT | KG_I32 | KG_M(SRT_U8), 0);
        if (dst.n <= 0 || dst.p == src.p) return cudaSuccess;
        KG_TRY(cudaMemcpyAsync(dst.p, src.p, (size_t)(dst.n * kg_dtsize(dst.dt)),
                               cudaMemcpyDeviceToDevice, s));
        return kg_launched(__func__);
    }
    KG_ARG(dst, 0, KG_FLOAT, 0);
    KG_ARG(src, 0, KG_FLOAT, 0);
    if (dst.n <= 0) return cudaSuccess;
    KG_LAUNCH(kg_convert_kernel, kg_grid(dst.n, 256), 256, s, kg_t(dst), kg_t(src), dst.n);
    return kg_launched(__func__);
}

/* x := f32(bf16(x)). */
extern "C" cudaError_t kg_round_bf16(srt_t x, cudaStream_t s)
{
    KG_ARG(x, 0, KG_F32, 0);
    if (x.n <= 0) return cudaSuccess;
    KG_LAUNCH(kg_round_bf16_kernel, kg_grid(x.n, 256), 256, s, (float *)x.p, x.n);
    return kg_launched(__func__);
}

/* x *= scale. */
extern "C" cudaError_t kg_scale(srt_t x, float scale, cudaStream_t s)
{
    KG_ARG(x, 0, KG_FLOAT, 0);
    if (x.n <= 0) return cudaSuccess;
    KG_LAUNCH(kg_scale_kernel, kg_grid(x.n, 256), 256, s, kg_t(x), scale, x.n);
    return kg_launched(__func__);
}

/* Clears *all_finite when x holds an inf or a NaN. */
extern "C" cudaError_t kg_all_finite(int *all_finite, srt_t x, cudaStream_t s)
{
    KG_REQ(all_finite != NULL);
    KG_ARG(x, 0, KG_FLOAT, 0);
    if (x.n <= 0) return cudaSuccess;
    KG_LAUNCH(kg_all_finite_kernel, kg_grid(x.n, 256), 256, s, all_finite, kg_t(x), x.n);
    return kg_launched(__func__);
}
