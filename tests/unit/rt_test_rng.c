/* rt_test_rng.c — the counter-based initialisation RNG (runtime/core/rng.c):
 *  - Philox4x32-10 reproduces Random123's known-answer vectors;
 *  - every shard (row split, column split, any rectangle, a ZeRO flat range,
 *    vectors) equals the same elements of the full tensor, bit for bit;
 *  - reproducible; seed and tensor name change the stream;
 *  - N(mean, std) and U[lo, hi) have the right moments. */
#include "rng.h"
#include "check.h"

#include <stdint.h>

/* Random123's kat_vectors for philox4x32_10. */
static void test_kat(void)
{
    static const uint32_t in[3][6] = {
        {0, 0, 0, 0, 0, 0},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0},
    };
    static const uint32_t out[3][4] = {
        {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t c[4] = {in[i][0], in[i][1], in[i][2], in[i][3]}, k[2] = {in[i][4], in[i][5]};
        rng_philox(c, k);
        for (int j = 0; j < 4; j++) CHECK_EQ(c[j], out[i][j]);
    }
}

/* Shards of a [rows, cols] tensor equal the full tensor's elements. */
static void test_shards(void)
{
    enum { R = 37, C = 53 };
    static float full[R * C], part[R * C];
    const char *name = "h.3.attn.c_attn.weight";
    uint64_t seed = 1337;
    rng_normal_fill(full, seed, name, C, 0, R, 0, C, 0.0f, 0.02f);
    /* row halves (column-parallel tp 2), column halves (row-parallel), a rectangle */
    int64_t rects[][4] = {{0, 18, 0, C}, {18, R, 0, C}, {0, R, 0, 26}, {0, R, 26, C}, {5, 20, 7, 41},
                          {36, 37, 52, 53}, {0, 1, 1, 2}};
    for (size_t t = 0; t < sizeof rects / sizeof *rects; t++) {
        int64_t r0 = rects[t][0], r1 = rects[t][1], c0 = rects[t][2], c1 = rects[t][3];
        rng_normal_fill(part, seed, name, C, r0, r1, c0, c1, 0.0f, 0.02f);
        int bad = 0;
        for (int64_t r = r0; r < r1; r++)
            for (int64_t c = c0; c < c1; c++)
                bad += memcmp(&part[(r - r0) * (c1 - c0) + (c - c0)], &full[r * C + c], 4) != 0;
        CHECK_EQ(bad, 0);
    }
    /* flat ranges with odd and even ends (a ZeRO shard cuts tensors anywhere) */
    int64_t flats[][2] = {{0, R * C}, {1, 2}, {3, 1000}, {1000, 1001}, {999, R * C}, {R * C - 1, R * C}};
    for (size_t t = 0; t < sizeof flats / sizeof *flats; t++) {
        rng_normal_fill_flat(part, seed, name, flats[t][0], flats[t][1], 0.0f, 0.02f);
        CHECK(memcmp(part, full + flats[t][0], (size_t)(flats[t][1] - flats[t][0]) * 4) == 0);
    }
    /* pieces: a flat range of a column shard, and a rectangle past the padded end */
    int bad;
    rng_normal_fill_piece(part, seed, name, R, C, 3, 30, 26, C, 5, 300, 0.0f, 0.02f);
    bad = 0;
    for (int64_t e = 5; e < 300; e++) {
        int64_t r = 3 + e / (C - 26), c = 26 + e % (C - 26);
        bad += memcmp(&part[e - 5], &full[r * C + c], 4) != 0;
    }
    CHECK_EQ(bad, 0);
    rng_normal_fill_piece(part, seed, name, R, C, 30, 40, 50, 60, 0, 0, 0.0f, 0.02f);
    bad = 0;
    for (int64_t r = 30; r < 40; r++)
        for (int64_t c = 50; c < 60; c++) {
            float x = part[(r - 30) * 10 + (c - 50)];
            bad += r < R && c < C ? memcmp(&x, &full[r * C + c], 4) != 0 : x != 0.0f;
        }
    CHECK_EQ(bad, 0);
    /* one element at a time */
    CHECK((float)(0.02 * rng_normal_at(seed, rng_tensor_id(name), 17 * C + 9)) == full[17 * C + 9]);
    /* a vector: cols = 0, c0 = 0, c1 = 1 */
    static float v[101], w[101];
    rng_normal_fill(v, seed, "h.0.ln_1.bias", 0, 0, 101, 0, 1, 1.0f, 0.5f);
    rng_normal_fill(w, seed, "h.0.ln_1.bias", 0, 33, 70, 0, 1, 1.0f, 0.5f);
    CHECK(memcmp(w, v + 33, 37 * 4) == 0);
    rng_normal_fill_flat(w, seed, "h.0.ln_1.bias", 33, 70, 1.0f, 0.5f);
    CHECK(memcmp(w, v + 33, 37 * 4) == 0);
    rng_normal_fill_piece(w, seed, "h.0.ln_1.bias", 101, 0, 90, 110, 0, 1, 3, 0, 1.0f, 0.5f);  /* f1 <= f0: all */
    CHECK(memcmp(w, v + 90, 11 * 4) == 0);
    CHECK(w[11] == 0.0f && w[19] == 0.0f);
    /* uniform shards too */
    rng_uniform_fill(full, seed, name, C, 0, R, 0, C, -1.0f, 1.0f);
    rng_uniform_fill(part, seed, name, C, 5, 20, 7, 41, -1.0f, 1.0f);
    bad = 0;
    for (int64_t r = 5; r < 20; r++)
        for (int64_t c = 7; c < 41; c++) bad += part[(r - 5) * 34 + (c - 7)] != full[r * C + c];
    CHECK_EQ(bad, 0);
}

/* The same inputs give the same numbers; seed and name change them. */
static void test_streams(void)
{
    static float a[1000], b[1000], c[1000], d[1000];
    rng_normal_fill_flat(a, 42, "wte.weight", 0, 1000, 0, 1);
    rng_normal_fill_flat(b, 42, "wte.weight", 0, 1000, 0, 1);
    rng_normal_fill_flat(c, 43, "wte.weight", 0, 1000, 0, 1);
    rng_normal_fill_flat(d, 42, "wpe.weight", 0, 1000, 0, 1);
    CHECK(memcmp(a, b, sizeof a) == 0);
    int same_c = 0, same_d = 0;
    for (int i = 0; i < 1000; i++) same_c += a[i] == c[i], same_d += a[i] == d[i];
    CHECK(same_c < 3);
    CHECK(same_d < 3);
    CHECK(rng_tensor_id("wte.weight") != rng_tensor_id("wpe.weight"));
    /* the uniform stream is not the normal stream's raw bits */
    CHECK(rng_uniform_at(42, rng_tensor_id("x"), 0) != rng_uniform_at(42, rng_tensor_id("x"), 1));
}

/* Moments of N(0, 0.02) and U[-2, 3) over a million draws. */
static void test_moments(void)
{
    enum { N = 1000000 };
    float *x = malloc(N * sizeof *x);
    rng_normal_fill_flat(x, 7, "stats", 0, N, 0.0f, 0.02f);
    double s = 0, s2 = 0, s4 = 0;
    int in1 = 0;
    for (int i = 0; i < N; i++) {
        s += x[i], s2 += (double)x[i] * x[i], s4 += pow(x[i] / 0.02, 4);
        in1 += fabs(x[i]) < 0.02;
    }
    double mean = s / N, sd = sqrt(s2 / N - mean * mean);
    CHECK_ABS(mean, 0.0, 5 * 0.02 / 1000);           /* 5 standard errors */
    CHECK_ABS(sd, 0.02, 0.02 * 0.004);
    CHECK_ABS(s4 / N, 3.0, 0.05);                    /* normal kurtosis */
    CHECK_ABS((double)in1 / N, 0.682689, 0.003);     /* mass within one sigma */
    rng_uniform_fill(x, 7, "stats", 0, 0, N, 0, 1, -2.0f, 3.0f);
    double lo = 1e9, hi = -1e9;
    s = s2 = 0;
    for (int i = 0; i < N; i++) {
        s += x[i], s2 += (double)x[i] * x[i];
        lo = fmin(lo, x[i]), hi = fmax(hi, x[i]);
    }
    mean = s / N;
    CHECK_ABS(mean, 0.5, 0.01);
    CHECK_ABS(s2 / N - mean * mean, 25.0 / 12, 0.02);
    CHECK(lo >= -2.0 && hi < 3.0);
    free(x);
}

int main(void)
{
    test_kat();
    test_shards();
    test_streams();
    test_moments();
    if (!failures) printf("rt_test_rng: ok\n");
    return failures != 0;
}
