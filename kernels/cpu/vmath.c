/* vmath.c — a vectorisable exp for the softmaxes (attention, cross-entropy).
 *
 * glibc's expf is accurate but scalar: one call per score made it as costly
 * as the matmuls around it.  This is Cephes' expf, written without branches
 * so that the compiler vectorises the loop: x = n ln2 + r, |r| <= ln2/2,
 * exp(r) by a degree-6 polynomial, times 2^n built from the exponent bits
 * (as two factors, so that n = 128 and subnormal results still work).
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

/* 2^k for -127 < k < 128, from its exponent bits. */
static inline float kc_pow2i(int k)
{
    uint32_t u = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* One exp; inline so that the loop below vectorises it. */
static inline float kc_exp1(float x)
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

/* y(n) = exp(x(n)). */
KC_MULTIVERSION
void kc_vexp(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = kc_exp1(x[i]);
}
