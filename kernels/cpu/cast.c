/* cast.c — fp32 <-> bf16 and fp32 <-> fp16 by bit manipulation.
 *
 * Rounding is to nearest, ties to even, as the hardware converters do.
 * A NaN stays a NaN (made quiet, sign and top payload bits kept); fp16
 * overflow gives infinity and small values become subnormals.  Nothing here
 * depends on the compiler's or the CPU's support for 16-bit floats.
 */
#include "kernels.h"

#include <string.h>

/* The bits of a float, and back. */
static inline uint32_t kc_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float kc_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* fp32 -> bf16: keep the top 16 bits, rounded to nearest even. */
uint16_t kc_bf16_from_f32(float f)
{
    uint32_t u = kc_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);   /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);   /* carries into the exponent; max finite rounds to inf */
    return (uint16_t)(u >> 16);
}

/* bf16 -> fp32: exact. */
float kc_f32_from_bf16(uint16_t h)
{
    return kc_float((uint32_t)h << 16);
}

/* x >> s (s >= 1) rounded to nearest, ties to even. */
static inline uint32_t kc_shift_rne(uint32_t x, int s)
{
    uint32_t q = x >> s, rem = x & ((1u << s) - 1u), half = 1u << (s - 1);
    return q + (rem > half || (rem == half && (q & 1u)));
}

/* fp32 -> fp16 (IEEE binary16). */
uint16_t kc_fp16_from_f32(float f)
{
    uint32_t u = kc_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t e = (u >> 23) & 0xffu, mant = u & 0x7fffffu;
    if (e == 255) return sign | (mant ? 0x7e00u | (uint16_t)(mant >> 13) : 0x7c00u);
    if (e >= 143) return sign | 0x7c00u;        /* >= 2^16: overflow */
    if (e >= 113)                               /* normal: 10-bit mantissa, carry may reach inf */
        return sign | (uint16_t)kc_shift_rne(((e - 112) << 23) | mant, 13);
    if (e < 102) return sign;                   /* < 2^-25: rounds to zero */
    /* subnormal: units of 2^-24; a round-up to 0x400 is the smallest normal */
    return sign | (uint16_t)kc_shift_rne(mant | 0x800000u, (int)(126 - e));
}

/* fp16 -> fp32: exact. */
float kc_f32_from_fp16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (e == 0) {
        float v = (float)mant * 0x1p-24f;   /* zero or subnormal, exact */
        return kc_float(kc_bits(v) | sign);
    }
    if (e == 31) return kc_float(sign | 0x7f800000u | (mant << 13));
    return kc_float(sign | ((e + 112) << 23) | (mant << 13));
}

/* out(n) = bf16(inp). */
void kc_cast_f32_to_bf16(uint16_t *out, const float *inp, size_t n)
{
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = kc_bf16_from_f32(inp[i]);
}

/* out(n) = fp32(inp). */
void kc_cast_bf16_to_f32(float *out, const uint16_t *inp, size_t n)
{
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = kc_f32_from_bf16(inp[i]);
}

/* out(n) = fp16(inp). */
void kc_cast_f32_to_fp16(uint16_t *out, const float *inp, size_t n)
{
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = kc_fp16_from_f32(inp[i]);
}

/* out(n) = fp32(inp). */
void kc_cast_fp16_to_f32(float *out, const uint16_t *inp, size_t n)
{
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = kc_f32_from_fp16(inp[i]);
}

/* x := fp32(bf16(x)), the value a bf16 store would keep. */
void kc_round_bf16(float *x, size_t n)
{
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] = kc_f32_from_bf16(kc_bf16_from_f32(x[i]));
}
