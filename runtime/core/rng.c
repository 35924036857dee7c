/* rng.c — Philox4x32-10 keyed by (seed, tensor, element): see rng.h. */
#include "rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* One Philox4x32-10 block: ten rounds of multiply-xor with a bumped key. */
void rng_philox(uint32_t ctr[4], const uint32_t key[2])
{
    uint32_t k0 = key[0], k1 = key[1];
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    ctr[0] = c0, ctr[1] = c1, ctr[2] = c2, ctr[3] = c3;
}

/* 64-bit FNV-1a: a stable id for a tensor name on every platform. */
uint64_t rng_tensor_id(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The Philox block of pair index `pair` in the stream of (seed, tid). */
static void block(uint32_t out[4], uint64_t seed, uint64_t tid, uint64_t pair)
{
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    out[0] = (uint32_t)pair;
    out[1] = (uint32_t)(pair >> 32);
    out[2] = (uint32_t)tid;
    out[3] = (uint32_t)(tid >> 32);
    rng_philox(out, key);
}

/* 53 random bits from two words, as a double in [0, 1). */
static double u53(uint32_t hi, uint32_t lo)
{
    uint64_t m = ((uint64_t)hi << 21) | (lo >> 11);
    return (double)m * 0x1.0p-53;
}

/* Both normals of one pair by Box-Muller; u1 is shifted into (0, 1] so log is finite. */
static void normal_pair(uint64_t seed, uint64_t tid, uint64_t pair, double *z0, double *z1)
{
    uint32_t w[4];
    block(w, seed, tid, pair);
    double u1 = u53(w[0], w[1]) + 0x1.0p-53;
    double u2 = u53(w[2], w[3]);
    double r = sqrt(-2.0 * log(u1));
    double a = 2.0 * M_PI * u2;
    *z0 = r * cos(a);
    *z1 = r * sin(a);
}

/* Element i of the standard normal stream: even i takes the cosine, odd the sine. */
double rng_normal_at(uint64_t seed, uint64_t tid, int64_t i)
{
    double z0, z1;
    normal_pair(seed, tid, (uint64_t)i >> 1, &z0, &z1);
    return (i & 1) ? z1 : z0;
}

/* Element i of the uniform stream: words 0-1 of the pair's block for even i, 2-3 for odd. */
double rng_uniform_at(uint64_t seed, uint64_t tid, int64_t i)
{
    uint32_t w[4];
    block(w, seed, tid ^ RNG_UNIFORM_DOMAIN, (uint64_t)i >> 1);
    return (i & 1) ? u53(w[2], w[3]) : u53(w[0], w[1]);
}

/* Normal elements [e0, e1) of one stream into out, one Philox block per pair. */
static void normal_range(float *out, uint64_t seed, uint64_t tid, int64_t e0, int64_t e1,
                         float mean, float std)
{
    int64_t i = e0;
    if (i < e1 && (i & 1)) {
        *out++ = (float)(mean + std * rng_normal_at(seed, tid, i));
        i++;
    }
    for (; i + 1 < e1; i += 2) {
        double z0, z1;
        normal_pair(seed, tid, (uint64_t)i >> 1, &z0, &z1);
        *out++ = (float)(mean + std * z0);
        *out++ = (float)(mean + std * z1);
    }
    if (i < e1) *out = (float)(mean + std * rng_normal_at(seed, tid, i));
}

/* Normal rectangle [r0, r1) x [c0, c1) of the logical [rows, cols] tensor. */
void rng_normal_fill(float *out, uint64_t seed, const char *tensor, int64_t cols,
                     int64_t r0, int64_t r1, int64_t c0, int64_t c1, float mean, float std)
{
    uint64_t tid = rng_tensor_id(tensor);
    int64_t stride = cols ? cols : 1, w = c1 - c0;
    for (int64_t r = r0; r < r1; r++)
        normal_range(out + (r - r0) * w, seed, tid, r * stride + c0, r * stride + c1, mean, std);
}

/* Uniform rectangle [r0, r1) x [c0, c1) of the logical [rows, cols] tensor in [lo, hi). */
void rng_uniform_fill(float *out, uint64_t seed, const char *tensor, int64_t cols,
                      int64_t r0, int64_t r1, int64_t c0, int64_t c1, float lo, float hi)
{
    uint64_t tid = rng_tensor_id(tensor);
    int64_t stride = cols ? cols : 1;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = c0; c < c1; c++) {
            float x = (float)(lo + (hi - lo) * rng_uniform_at(seed, tid, r * stride + c));
            *out++ = x < hi ? x : nextafterf(hi, lo);   /* rounding to float may reach hi */
        }
}

/* Normal elements [e0, e1) of the flattened tensor (a ZeRO flat shard's part of it). */
void rng_normal_fill_flat(float *out, uint64_t seed, const char *tensor, int64_t e0, int64_t e1,
                          float mean, float std)
{
    normal_range(out, seed, rng_tensor_id(tensor), e0, e1, mean, std);
}

/* Elements [f0, f1) of the rectangle [r0, r1) x [c0, c1) of the logical [rows, cols]
 * tensor, one row segment at a time; outside the logical shape: 0. */
void rng_normal_fill_piece(float *out, uint64_t seed, const char *tensor, int64_t rows,
                           int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                           int64_t f0, int64_t f1, float mean, float std)
{
    uint64_t tid = rng_tensor_id(tensor);
    int64_t w = c1 - c0, stride = cols ? cols : 1;
    if (f1 <= f0) f0 = 0, f1 = (r1 - r0) * w;
    for (int64_t e = f0; e < f1;) {
        int64_t r = r0 + e / w, c = c0 + e % w, end = c + (f1 - e) < c1 ? c + (f1 - e) : c1;
        int64_t in = r < rows ? (end < stride ? end : stride) : c;     /* the logical part */
        float *o = out + (e - f0);
        if (in > c) normal_range(o, seed, tid, r * stride + c, r * stride + in, mean, std);
        for (int64_t k = in > c ? in : c; k < end; k++) o[k - c] = 0.0f;
        e += end - c;
    }
}
