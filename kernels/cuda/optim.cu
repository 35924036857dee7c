/* optim.cu — AdamW / Adam / SGD on flat fp32 master shards, and the exact
 * gradient sum of squares behind the global norm.
 *
 * The steps are elementwise and written with __fmul_rn / __fadd_rn (which
 * nvcc never contracts into FMAs) in the CPU twin's operation order, with its
 * host-side constants: on fp32 data a GPU step gives the same bits as
 * kc_adamw_step / kc_sgd_step, and the working copy is rounded by the same
 * bit-exact cast.
 *
 * The sum of squares bins every square by its float exponent as an integer
 * (kernels/cpu/optim.c, KcSumsq): each block accumulates 512 uint64 bins in
 * shared memory with integer atomics, then adds them to the device
 * accumulator with integer atomics.  Integer addition is associative, so the
 * bins, and the norm made from them by one thread in a fixed order, are
 * bit-identical on every run, for any grid, and equal to the CPU's.
 */
#include "common.cuh"

#include <math.h>

/* Constants of one AdamW step, rounded to fp32 on the host as kc_adamw_step does. */
struct KgAdamConst {
    float decay, b1, b2, one_b1, one_b2, step_size, bc2_sqrt, eps, l2, loss_scale;
};

/* The gradient multiplier *clip / loss_scale (the CPU backend's expression). */
__device__ __forceinline__ float kg_grad_mult(const float *clip, float loss_scale)
{
    return __fdiv_rn(clip ? *clip : 1.0f, loss_scale);
}

/* One AdamW (or Adam: l2 != 0 adds l2 * p to the gradient) step per element. */
__global__ void kg_adamw_kernel(KgT params, float *master, KgC grads, float *m, float *v, int64_t n,
                                KgAdamConst k, const float *clip, const int *skip)
{
    if (skip && *skip) return;
    float gs = kg_grad_mult(clip, k.loss_scale);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float p = master[i];
        float gi = __fmul_rn(kg_ld(grads.p, grads.dt, i), gs);
        if (k.l2 != 0.0f) gi = __fadd_rn(gi, __fmul_rn(k.l2, p));
        float pi = __fmul_rn(p, k.decay);
        float mi = __fadd_rn(__fmul_rn(m[i], k.b1), __fmul_rn(k.one_b1, gi));
        float vi = __fadd_rn(__fmul_rn(v[i], k.b2), __fmul_rn(__fmul_rn(k.one_b2, gi), gi));
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bc2_sqrt), k.eps);
        pi = __fadd_rn(pi, __fmul_rn(-k.step_size, __fdiv_rn(mi, denom)));
        master[i] = pi;
        m[i] = mi;
        v[i] = vi;
        if (params.p) kg_st(params.p, params.dt, i, pi);
    }
}

/* Constants of one SGD step (kc_sgd_step). */
struct KgSgdConst {
    float lr, mom, wd, one_damp, loss_scale;
    int use_mom, nesterov, first_step;
};

/* One SGD step per element. */
__global__ void kg_sgd_kernel(KgT params, float *master, KgC grads, float *buf, int64_t n,
                              KgSgdConst k, const float *clip, const int *skip)
{
    if (skip && *skip) return;
    float gs = kg_grad_mult(clip, k.loss_scale);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float p = master[i];
        float d = __fmul_rn(kg_ld(grads.p, grads.dt, i), gs);
        if (k.wd != 0.0f) d = __fadd_rn(d, __fmul_rn(k.wd, p));
        if (k.use_mom) {
            float b = k.first_step ? d : __fadd_rn(__fmul_rn(buf[i], k.mom), __fmul_rn(k.one_damp, d));
            buf[i] = b;
            d = k.nesterov ? __fadd_rn(d, __fmul_rn(k.mom, b)) : b;
        }
        p = __fadd_rn(p, __fmul_rn(-k.lr, d));
        master[i] = p;
        if (params.p) kg_st(params.p, params.dt, i, p);
    }
}

/* Checks the tensors of a step: master, moments F32 with n elements; grads,
 * params any floating dtype; returns params with p NULL when it is master. */
static cudaError_t kg_step_args(const char *fn, srt_t *params, srt_t master, srt_t grads,
                                srt_t m, int m_optional, srt_t v, int v_needed)
{
    int64_t n = master.n;
    KG_TRY(kg_arg(fn, "master", master, 0, KG_F32, 0));
    KG_TRY(kg_arg(fn, "grads", grads, n, KG_FLOAT, 0));
    KG_TRY(kg_arg(fn, "m", m, n, KG_F32, m_optional));
    if (v_needed) KG_TRY(kg_arg(fn, "v", v, n, KG_F32, 0));
    if (params->p == master.p) params->p = NULL;
    KG_TRY(kg_arg(fn, "params", *params, n, KG_FLOAT, 1));
    return cudaSuccess;
}

/* One AdamW / Adam step on a flat fp32 master range. */
extern "C" cudaError_t kg_adamw_step(srt_t params, srt_t master, srt_t grads, srt_t m, srt_t v,
                                     KgAdamW h, const float *clip_scale, const int *skip,
                                     cudaStream_t s)
{
    KG_TRY(kg_step_args(__func__, &params, master, grads, m, 0, v, 1));
    KG_REQ(h.t >= 1 && h.loss_scale > 0.0f);
    if (master.n <= 0) return cudaSuccess;
    KgAdamConst k;
    /* Adam: the CPU backend adds wd * p to the gradient and steps with no
     * decoupled decay (decay = (float)(1 - lr*0) = 1, an exact no-op). */
    double wd = h.l2 ? 0.0 : h.weight_decay;
    k.decay = (float)(1.0 - h.lr * wd);
    k.b1 = (float)h.beta1, k.b2 = (float)h.beta2;
    k.one_b1 = (float)(1.0 - h.beta1), k.one_b2 = (float)(1.0 - h.beta2);
    k.step_size = (float)(h.lr / (1.0 - pow(h.beta1, h.t)));
    k.bc2_sqrt = (float)sqrt(1.0 - pow(h.beta2, h.t));
    k.eps = (float)h.eps;
    k.l2 = h.l2 ? (float)h.weight_decay : 0.0f;
    k.loss_scale = h.loss_scale;
    KG_LAUNCH(kg_adamw_kernel, kg_grid(master.n, 256), 256, s, kg_t(params), (float *)master.p, kg_t(grads),
                                                          (float *)m.p, (float *)v.p, master.n, k,
                                                          clip_scale, skip);
    return kg_launched(__func__);
}

/* One SGD step on a flat fp32 master range. */
extern "C" cudaError_t kg_sgd_step(srt_t params, srt_t master, srt_t grads, srt_t buf, KgSGD h,
                                   const float *clip_scale, const int *skip, cudaStream_t s)
{
    KG_TRY(kg_step_args(__func__, &params, master, grads, buf, h.momentum == 0.0, buf, 0));
    KG_REQ(h.loss_scale > 0.0f);
    if (master.n <= 0) return cudaSuccess;
    KgSgdConst k;
    k.lr = (float)h.lr, k.mom = (float)h.momentum, k.wd = (float)h.weight_decay;
    k.one_damp = (float)(1.0 - h.dampening), k.loss_scale = h.loss_scale;
    k.use_mom = h.momentum != 0.0, k.nesterov = h.nesterov, k.first_step = h.first_step;
    KG_LAUNCH(kg_sgd_kernel, kg_grid(master.n, 256), 256, s, kg_t(params), (float *)master.p, kg_t(grads),
                                                        (float *)buf.p, master.n, k, clip_scale, skip);
    return kg_launched(__func__);
}

/* ---- the exact sum of squares ------------------------------------------------ */

/* The bin of the float with bits u and its square's two 24-bit halves (the
 * bins' lo and hi words); a NaN or an infinity counts 1 in bin 255's hi or lo. */
__device__ __forceinline__ uint32_t kg_sumsq_split(uint32_t u, uint32_t *a, uint32_t *b)
{
    uint32_t e = (u >> 23) & 0xffu, mant = u & 0x7fffffu;
    if (e == 255) {
        *a = mant ? 0u : 1u, *b = mant ? 1u : 0u;
        return e;
    }
    unsigned long long mm = e ? mant | 0x800000u : mant;
    unsigned long long m2 = mm * mm;   /* < 2^48 */
    *a = (uint32_t)(m2 & 0xffffffull), *b = (uint32_t)(m2 >> 24);
    return e;
}

/* acc += the bins of x's squares.  A gradient's values fall in a few
 * binades, so one shared bin per binade took every lane's atomic in turn
 * (124M values at 14 GB/s on an H200, 17 ms a step of GPT-2 124M): the lanes
 * of a warp that share a bin are grouped first (__match_any_sync), their
 * halves added (__reduce_add_sync: 32 values under 2^24 fit 32 bits), and
 * one lane per group adds to the block's bins.  Integer sums: the same bins
 * in any order, on any grid. */
__global__ void kg_sumsq_kernel(KgSumsq *acc, KgC x, int64_t n)
{
    __shared__ unsigned long long lo[KG_SUMSQ_BINS], hi[KG_SUMSQ_BINS];
    for (int e = threadIdx.x; e < KG_SUMSQ_BINS; e += blockDim.x) lo[e] = 0, hi[e] = 0;
    __syncthreads();
    int lane = threadIdx.x & 31;
    /* a warp's lanes make the same trips (the base is the warp's): its
     * operations stay full; lanes past the end add zeros to bin 0 */
    for (int64_t base = blockIdx.x * (int64_t)blockDim.x + (threadIdx.x & ~31); base < n;
         base += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = base + lane;
        uint32_t a = 0, b = 0, e = 0;
        if (i < n) {
            uint32_t u;
            if (x.dt == SRT_F32) u = __float_as_uint(((const float *)x.p)[i]);
            else if (x.dt == SRT_BF16) u = (uint32_t)((const uint16_t *)x.p)[i] << 16;
            else u = __float_as_uint(kg_f32_from_fp16(((const uint16_t *)x.p)[i]));
            e = kg_sumsq_split(u, &a, &b);
        }
        unsigned peers = __match_any_sync(0xffffffffu, e);
        uint32_t sa = __reduce_add_sync(peers, a), sb = __reduce_add_sync(peers, b);
        if (lane == __ffs((int)peers) - 1 && (sa | sb)) {
            if (sa) atomicAdd(&lo[e], (unsigned long long)sa);
            if (sb) atomicAdd(&hi[e], (unsigned long long)sb);
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < KG_SUMSQ_BINS; e += blockDim.x) {
        if (lo[e]) atomicAdd(&acc->lo[e], lo[e]);
        if (hi[e]) atomicAdd(&acc->hi[e], hi[e]);
    }
}

/* The norm, the overflow flag and the clipping scale from the bins: one
 * thread, kc_sumsq_value's sum (bins from the smallest scale up) and the CPU
 * backend's finish, in double. */
__global__ void kg_norm_finish_kernel(double *norm_out, float *clip_out, int *overflow_out,
                                      const KgSumsq *acc, double grad_clip, float loss_scale)
{
    double sum = 0.0;
    if (acc->hi[255]) sum = NAN;
    else if (acc->lo[255]) sum = INFINITY;
    else
        for (int e = 0; e < 255; e++) {
            int k = 2 * ((e ? e : 1) - 150);
            sum += ldexp((double)acc->lo[e], k) + ldexp((double)acc->hi[e], k + 24);
        }
    double norm = sqrt(sum) / (double)loss_scale;
    int overflow = !isfinite(norm);
    float clip = 1.0f;
    if (grad_clip > 0.0 && !overflow) {
        float coef = (float)(grad_clip / (norm + 1e-6));
        if (coef < 1.0f) clip = coef;
    }
    if (norm_out) *norm_out = norm;
    if (clip_out) *clip_out = clip;
    if (overflow_out) *overflow_out = overflow;
}

/* Clears a device sum-of-squares accumulator. */
extern "C" cudaError_t kg_sumsq_zero(KgSumsq *acc, cudaStream_t s)
{
    KG_REQ(acc != NULL);
    KG_TRY(cudaMemsetAsync(acc, 0, sizeof *acc, s));
    return kg_launched(__func__);
}

/* Adds the squares of x to the accumulator's bins. */
extern "C" cudaError_t kg_sumsq_add(KgSumsq *acc, srt_t x, cudaStream_t s)
{
    KG_REQ(acc != NULL);
    KG_ARG(x, 0, KG_FLOAT, 0);
    if (x.n <= 0) return cudaSuccess;
    /* a few blocks per SM are enough for a bandwidth-bound pass; more only
     * adds global atomics (the bins are the same for any grid) */
    int64_t blocks = (x.n + 1023) / 1024;
    KG_LAUNCH(kg_sumsq_kernel, (unsigned)(blocks < 1024 ? blocks : 1024), 512, s, acc, kg_t(x), x.n);
    return kg_launched(__func__);
}

/* The norm, clipping scale and overflow flag from the bins. */
extern "C" cudaError_t kg_norm_finish(double *norm, float *clip_scale, int *overflow,
                                      const KgSumsq *acc, double grad_clip, float loss_scale,
                                      cudaStream_t s)
{
    KG_REQ(acc != NULL && loss_scale > 0.0f);
    KG_LAUNCH(kg_norm_finish_kernel, 1, 1, s, norm, clip_scale, overflow, acc, grad_clip, loss_scale);
    return kg_launched(__func__);
}
