/* optim.c — optimizer steps on flat fp32 shards and the global gradient norm.
 *
 * The steps are elementwise (any thread split gives the same bits) and follow
 * torch.optim's single-tensor code (torch 1.13) operation by operation, with
 * the hyper-parameters rounded to fp32 where torch rounds them.
 *
 * The norm is exact before its final rounding: see kc_sumsq_add.
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

/* One AdamW step (decoupled weight decay, bias-corrected moments). */
void kc_adamw_step(float *params, uint16_t *params_bf16, const float *grads, float *m,
                   float *v, size_t n, KcAdamW h)
{
    const float decay = (float)(1.0 - h.lr * h.weight_decay);
    const float b1 = (float)h.beta1, b2 = (float)h.beta2;
    const float one_b1 = (float)(1.0 - h.beta1), one_b2 = (float)(1.0 - h.beta2);
    const float step_size = (float)(h.lr / (1.0 - pow(h.beta1, h.t)));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(h.beta2, h.t));
    const float eps = (float)h.eps, gs = h.grad_scale;
    float *restrict p = params;
    float *restrict mm = m, *restrict vv = v;
    const float *restrict g = grads;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gs;
        float pi = p[i] * decay;
        float mi = mm[i] * b1 + one_b1 * gi;
        float vi = vv[i] * b2 + one_b2 * gi * gi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        pi = pi + (-step_size) * (mi / denom);
        p[i] = pi;
        mm[i] = mi;
        vv[i] = vi;
    }
    if (params_bf16) kc_cast_f32_to_bf16(params_bf16, params, n);
}

/* One SGD step with optional momentum, dampening, nesterov, weight decay. */
void kc_sgd_step(float *params, const float *grads, float *buf, size_t n, KcSGD h)
{
    const float lr = (float)h.lr, mom = (float)h.momentum, wd = (float)h.weight_decay;
    const float one_damp = (float)(1.0 - h.dampening), gs = h.grad_scale;
    const int use_mom = h.momentum != 0.0;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float d = grads[i] * gs;
        if (wd != 0.0f) d = d + wd * params[i];
        if (use_mom) {
            float b = h.first_step ? d : buf[i] * mom + one_damp * d;
            buf[i] = b;
            d = h.nesterov ? d + mom * b : b;
        }
        params[i] = params[i] + (-lr) * d;
    }
}

/* Clears an exact sum-of-squares accumulator. */
void kc_sumsq_zero(KcSumsq *acc)
{
    memset(acc, 0, sizeof *acc);
}

/* dst += src, bin by bin: integer sums, so the order of merging is free. */
void kc_sumsq_merge(KcSumsq *dst, const KcSumsq *src)
{
    for (int e = 0; e < KC_SUMSQ_BINS; e++) {
        dst->lo[e] += src->lo[e];
        dst->hi[e] += src->hi[e];
    }
}

/* Adds the square of the float with bits u: a float is m * 2^(e-150) with a
 * 24-bit integer m, so its square is the 48-bit integer m*m in bin e.
 * Bin 255 counts infinities (lo) and NaNs (hi). */
static inline void kc_sumsq_bits(KcSumsq *acc, uint32_t u)
{
    uint32_t e = (u >> 23) & 0xff, mant = u & 0x7fffff;
    if (e == 255) {
        if (mant) acc->hi[255]++;
        else acc->lo[255]++;
        return;
    }
    uint64_t m = e ? mant | 0x800000u : mant;
    uint64_t m2 = m * m;
    acc->lo[e] += m2 & 0xffffff;   /* each half < 2^24: 2^40 adds fit */
    acc->hi[e] += m2 >> 24;
}

/* acc += sum of x[i]^2, exactly: per-thread accumulators merged by integer
 * addition, so the bins are the same for any thread count or sharding. */
void kc_sumsq_add(KcSumsq *acc, const float *x, size_t n)
{
    #pragma omp parallel
    {
        KcSumsq local;
        kc_sumsq_zero(&local);
        #pragma omp for schedule(static)
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            kc_sumsq_bits(&local, u);
        }
        #pragma omp critical(kc_sumsq)
        kc_sumsq_merge(acc, &local);
    }
}

/* As kc_sumsq_add for bf16 values (their fp32 value has the same bits << 16). */
void kc_sumsq_add_bf16(KcSumsq *acc, const uint16_t *x, size_t n)
{
    #pragma omp parallel
    {
        KcSumsq local;
        kc_sumsq_zero(&local);
        #pragma omp for schedule(static)
        for (size_t i = 0; i < n; i++) kc_sumsq_bits(&local, (uint32_t)x[i] << 16);
        #pragma omp critical(kc_sumsq)
        kc_sumsq_merge(acc, &local);
    }
}

/* The accumulated sum as a double: bins summed from the smallest scale up,
 * a fixed computation on canonical bins, hence deterministic. */
double kc_sumsq_value(const KcSumsq *acc)
{
    if (acc->hi[255]) return NAN;
    if (acc->lo[255]) return INFINITY;
    double sum = 0.0;
    for (int e = 0; e < 255; e++) {
        int k = 2 * ((e ? e : 1) - 150);   /* square of 2^(e-150); e = 0 is subnormal */
        sum += ldexp((double)acc->lo[e], k) + ldexp((double)acc->hi[e], k + 24);
    }
    return sum;
}

/* ||x||_2, exact up to the final roundings. */
double kc_global_norm(const float *x, size_t n)
{
    KcSumsq acc;
    kc_sumsq_zero(&acc);
    kc_sumsq_add(&acc, x, n);
    return sqrt(kc_sumsq_value(&acc));
}

/* x *= s. */
void kc_scale(float *x, size_t n, float s)
{
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* 1 if no element is inf or NaN (OR of exponent tests: order-free). */
int kc_all_finite(const float *x, size_t n)
{
    uint32_t bad = 0;
    #pragma omp parallel for schedule(static) reduction(|:bad)
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return !bad;
}
