/* vmath.h — the branch-free exp of vmath.c as an inline function, for kernels
 * that fuse it into their own loops (activation.c, attention.c, head.c), and
 * row reductions that vectorise in a fixed order.  Included only by kernel
 * sources; the public entry is kc_vexp (kernels.h).
 *
 * Cephes' expf without branches: x = n ln2 + r, |r| <= ln2/2, exp(r) by a
 * degree-6 polynomial, times 2^n built from the exponent bits as two factors
 * (so that n = 128 and subnormal results still work).  Every select below is
 * an if-conversion candidate; the kernels are compiled with
 * -fno-trapping-math so that GCC vectorises it at every x86-64 level (with
 * trapping math only the AVX-512 clone, which has masked moves, did).
 */
#ifndef SHARDK_CPU_VMATH_H
#define SHARDK_CPU_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Helpers inlined into every multiversioned caller, so they get its ISA. */
#define KC_INLINE static inline __attribute__((always_inline))

/* 2^k for -127 < k < 128, from its exponent bits. */
KC_INLINE float kc_pow2i(int k)
{
    uint32_t u = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* exp(x): within 2 ulp on [-87, 88.7], subnormal results down to e^-104,
 * 0 below, inf above 88.72, NaN kept. */
KC_INLINE float kc_exp1(float x)
{
    const float lo = -104.0f, hi = 88.75f;   /* beyond: 0 and inf */
    float xc = x < lo ? lo : x;
    xc = xc > hi ? hi : xc;
    xc = x == x ? xc : 0.0f;                  /* NaN: computed as 0, replaced below */
    /* n = round(x / ln2) by the 1.5 * 2^23 trick (round to nearest even) */
    float fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    int n = (int)fn;
    /* r = x - n ln2, with ln2 split in two for exactness (Cody-Waite) */
    float r = xc - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * (r * r) + r + 1.0f;
    int n1 = n >> 1;                          /* floor(n/2): n = n1 + (n - n1) */
    y = y * kc_pow2i(n1) * kc_pow2i(n - n1);
    y = x < lo ? 0.0f : y;
    y = x > hi ? INFINITY : y;
    return x == x ? y : x;
}

/* Row reductions in KC_LANES interleaved partials, then the partials in lane
 * order: a fixed order (so the same bits on every run and thread count)
 * that vectorises, where one running sum cannot be reordered and adds one
 * element per 4 cycles.  The max is exact in any order. */
enum { KC_LANES = 16 };

/* max x[i] over n (-inf for n = 0). */
KC_INLINE float kc_max_lanes(const float *x, int n)
{
    float acc[KC_LANES];
    for (int l = 0; l < KC_LANES; l++) acc[l] = -INFINITY;
    int i = 0;
    for (; i + KC_LANES <= n; i += KC_LANES)
        for (int l = 0; l < KC_LANES; l++) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
    for (int l = 0; i < n; i++, l++) acc[l] = x[i] > acc[l] ? x[i] : acc[l];
    float m = -INFINITY;
    for (int l = 0; l < KC_LANES; l++) m = acc[l] > m ? acc[l] : m;
    return m;
}

/* Σ x[i] over n, fp32. */
KC_INLINE float kc_sum_lanes(const float *x, int n)
{
    float acc[KC_LANES] = {0};
    int i = 0;
    for (; i + KC_LANES <= n; i += KC_LANES)
        for (int l = 0; l < KC_LANES; l++) acc[l] += x[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += x[i];
    float d = 0.0f;
    for (int l = 0; l < KC_LANES; l++) d += acc[l];
    return d;
}

/* Σ x[i] over n, accumulated in double. */
KC_INLINE double kc_sum_lanes_d(const float *x, int n)
{
    double acc[KC_LANES] = {0};
    int i = 0;
    for (; i + KC_LANES <= n; i += KC_LANES)
        for (int l = 0; l < KC_LANES; l++) acc[l] += x[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += x[i];
    double d = 0.0;
    for (int l = 0; l < KC_LANES; l++) d += acc[l];
    return d;
}

/* Σ x[i]·y[i] over n, fp32. */
KC_INLINE float kc_dot_lanes(const float *x, const float *y, int n)
{
    float acc[KC_LANES] = {0};
    int i = 0;
    for (; i + KC_LANES <= n; i += KC_LANES)
        for (int l = 0; l < KC_LANES; l++) acc[l] += x[i + l] * y[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += x[i] * y[i];
    float d = 0.0f;
    for (int l = 0; l < KC_LANES; l++) d += acc[l];
    return d;
}

#endif
