/* test_kernels.c — every CUDA kernel (kg_) against its CPU twin (kc_) on
 * random inputs, with fp32 and bf16 storage.
 *
 * For bf16 the inputs are rounded to bf16 first, so both sides compute on the
 * same values; the GPU computes in fp32 and rounds what it stores.  A result
 * passes when |gpu - cpu| <= atol * max|cpu| + rtol * |cpu| elementwise:
 *   fp32: rtol 1e-5, atol 1e-6 (pointwise) or 1e-4 / 1e-5 (reductions in
 *         another order, transcendental functions: CUDA's expf, powf, sinf
 *         are within 2 ulp);
 *   bf16: rtol 2^-7, atol 2^-9 (the store rounds to 2^-9 relative; twice
 *         that covers a rounding that lands on the other side).
 * Casts, fp32 embedding backward, the optimizer steps on fp32 and the sum of
 * squares bins must match the CPU bit for bit; embedding backward and the
 * sum of squares are also run twice and must give identical bits.
 *
 * No CUDA device: prints "skipped: no CUDA device (...)" and exits 77.
 */
#include "../../kernels/cpu/kernels.h"
#include "../../kernels/cuda/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures, g_checks;

/* Ends the test on a CUDA error (an API call or a launcher). */
#define CK(x)                                                                          \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d: %s: %s [%s]\n", __FILE__, __LINE__, #x,            \
                    cudaGetErrorString(e_), kg_error_detail());                        \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

/* ---- random inputs ------------------------------------------------------------ */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

/* xorshift64*: a uniform 32-bit integer. */
static uint32_t rnd_u32(void)
{
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 0x2545f4914f6cdd1dull) >> 32);
}
/* Uniform in [lo, hi). */
static float rnd_f(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rnd_u32() >> 8) * 0x1p-24f;
}
/* n floats uniform in [lo, hi), rounded to bf16 when dt is bf16. */
static float *rnd_vec(size_t n, float lo, float hi, srt_dtype dt)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = rnd_f(lo, hi);
    if (dt == SRT_BF16) kc_round_bf16(x, n);
    if (dt == SRT_F16)
        for (size_t i = 0; i < n; i++) x[i] = kc_f32_from_fp16(kc_fp16_from_f32(x[i]));
    return x;
}
/* A copy of n floats. */
static float *dup(const float *x, size_t n)
{
    float *y = malloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

/* ---- device tensors ---------------------------------------------------------- */

/* A device tensor of dtype dt holding the host floats h (n). */
static srt_t dev_f(const float *h, size_t n, srt_dtype dt)
{
    srt_t t = { NULL, (int64_t)n, dt };
    size_t es = dt == SRT_F32 ? 4 : 2;
    CK(cudaMalloc(&t.p, n * es + 16));
    void *tmp = malloc(n * es + 1);
    if (dt == SRT_F32) memcpy(tmp, h, n * 4);
    else if (dt == SRT_BF16) kc_cast_f32_to_bf16(tmp, h, n);
    else kc_cast_f32_to_fp16(tmp, h, n);
    CK(cudaMemcpy(t.p, tmp, n * es, cudaMemcpyHostToDevice));
    free(tmp);
    return t;
}
/* A device int32 tensor holding h (n). */
static srt_t dev_i(const int32_t *h, size_t n)
{
    srt_t t = { NULL, (int64_t)n, SRT_I32 };
    CK(cudaMalloc(&t.p, n * 4 + 16));
    CK(cudaMemcpy(t.p, h, n * 4, cudaMemcpyHostToDevice));
    return t;
}
/* The device tensor t as host floats (malloc'd; the caller frees). */
static float *host_f(srt_t t)
{
    size_t n = (size_t)t.n, es = t.dt == SRT_F32 ? 4 : 2;
    float *h = malloc(n * 4 + 4);
    void *tmp = malloc(n * es + 1);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(tmp, t.p, n * es, cudaMemcpyDeviceToHost));
    if (t.dt == SRT_F32) memcpy(h, tmp, n * 4);
    else if (t.dt == SRT_BF16) kc_cast_bf16_to_f32(h, tmp, n);
    else kc_cast_fp16_to_f32(h, tmp, n);
    free(tmp);
    return h;
}
/* The raw bytes of t (malloc'd). */
static void *host_raw(srt_t t, size_t bytes)
{
    void *h = malloc(bytes + 1);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, t.p, bytes, cudaMemcpyDeviceToHost));
    return h;
}
static void dev_free(srt_t t)
{
    CK(cudaFree(t.p));
}
static const srt_t NONE = { NULL, 0, SRT_F32 };

/* A view of n elements at element offset off of t. */
static srt_t sub(srt_t t, int64_t off, int64_t n)
{
    srt_t r = t;
    r.p = (char *)t.p + off * (t.dt == SRT_F32 || t.dt == SRT_I32 ? 4 : 2);
    r.n = n;
    return r;
}

/* ---- comparisons ----------------------------------------------------------------- */

/* Checks gpu against cpu (n) elementwise within atol * max|cpu| + rtol * |cpu|. */
static void cmp(const char *what, srt_dtype dt, const float *gpu, const float *cpu, size_t n,
                double rtol32, double atol32)
{
    double rtol = dt == SRT_F32 ? rtol32 : 0x1p-7, atol = dt == SRT_F32 ? atol32 : 0x1p-9;
    double scale = 0.0, worst = 0.0;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(cpu[i]));
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)gpu[i] - cpu[i]), lim = atol * scale + rtol * fabs(cpu[i]);
        if (!(d <= lim)) {   /* NaN fails too */
            if (!bad) first = i;
            bad++;
        }
        if (d > worst) worst = d;
    }
    g_checks++;
    const char *dn = dt == SRT_F32 ? "f32" : dt == SRT_BF16 ? "bf16" : "f16";
    if (bad) {
        g_failures++;
        printf("FAIL %-34s %-4s %zu of %zu off; first [%zu] gpu %.9g cpu %.9g (max |cpu| %.3g)\n",
               what, dn, bad, n, first, gpu[first], cpu[first], scale);
    } else {
        printf("ok   %-34s %-4s max err %.3g (max |cpu| %.3g)\n", what, dn, worst, scale);
    }
}
/* Checks that two byte strings are equal. */
static void same_bits(const char *what, const void *a, const void *b, size_t bytes)
{
    g_checks++;
    if (memcmp(a, b, bytes)) {
        g_failures++;
        const unsigned char *x = a, *y = b;
        size_t i = 0;
        while (x[i] == y[i]) i++;
        printf("FAIL %-34s bits differ first at byte %zu of %zu\n", what, i, bytes);
    } else {
        printf("ok   %-34s bit-identical (%zu bytes)\n", what, bytes);
    }
}
/* same_bits for n fp32 results of arithmetic: bit for bit, except that any
 * NaN matches any NaN.  IEEE 754 leaves a NaN result's sign and payload to the
 * hardware: x86 propagates the operand's NaN, an NVIDIA GPU returns its
 * canonical 0x7fffffff (seen on an H200: scale's NaN * 0.3). */
static void same_arith_f32(const char *what, const float *a, const float *b, size_t n)
{
    g_checks++;
    for (size_t i = 0; i < n; i++) {
        uint32_t x, y;
        memcpy(&x, &a[i], 4), memcpy(&y, &b[i], 4);
        if (x != y && !(isnan(a[i]) && isnan(b[i]))) {
            g_failures++;
            printf("FAIL %-34s element %zu of %zu: %#010x, want %#010x\n", what, i, n, x, y);
            return;
        }
    }
    printf("ok   %-34s bit-identical, NaN for NaN (%zu bytes)\n", what, n * 4);
}
/* Checks a condition. */
static void expect(const char *what, int ok)
{
    g_checks++;
    if (!ok) g_failures++;
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
}

/* ---- the tests ------------------------------------------------------------------ */

/* Casts, zero, fill, scale, all_finite, on values with every special case. */
static void test_flat(void)
{
    enum { N = 4099 };
    float *x = rnd_vec(N, -3.0f, 3.0f, SRT_F32);
    float spec[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -3e-39f, 65504.0f, 65520.0f,
                     1e30f, 3.0e38f, 3.4028235e38f, 6e-8f, 2.9e-8f, 1.0f + 0x1p-8f, 1.0f + 0x3p-9f };
    memcpy(x, spec, sizeof spec);
    for (int i = 16; i < 400; i++) x[i] = ldexpf(rnd_f(-1, 1), (int)(rnd_u32() % 280) - 150);
    srt_t d = dev_f(x, N, SRT_F32);
    uint16_t *want = malloc(N * 2);
    /* f32 -> bf16, f32 -> f16: the bit-exact twins of kc_cast */
    srt_t b16 = { NULL, N, SRT_BF16 }, f16 = { NULL, N, SRT_F16 };
    CK(cudaMalloc(&b16.p, N * 2));
    CK(cudaMalloc(&f16.p, N * 2));
    CK(kg_convert(b16, d, 0));
    CK(kg_convert(f16, d, 0));
    uint16_t *got = host_raw(b16, N * 2);
    kc_cast_f32_to_bf16(want, x, N);
    same_bits("convert f32->bf16", got, want, N * 2);
    free(got);
    got = host_raw(f16, N * 2);
    kc_cast_f32_to_fp16(want, x, N);
    same_bits("convert f32->f16", got, want, N * 2);
    free(got);
    /* back to f32, and bf16 <-> f16 */
    srt_t back = { NULL, N, SRT_F32 };
    CK(cudaMalloc(&back.p, N * 4));
    float *wantf = malloc(N * 4), *gotf;
    CK(kg_convert(back, b16, 0));
    gotf = host_raw(back, N * 4);
    kc_cast_f32_to_bf16(want, x, N);
    kc_cast_bf16_to_f32(wantf, want, N);
    same_bits("convert bf16->f32", gotf, wantf, N * 4);
    free(gotf);
    CK(kg_convert(back, f16, 0));
    gotf = host_raw(back, N * 4);
    kc_cast_f32_to_fp16(want, x, N);
    kc_cast_fp16_to_f32(wantf, want, N);
    same_bits("convert f16->f32", gotf, wantf, N * 4);
    free(gotf);
    CK(kg_convert(f16, b16, 0));   /* bf16 -> f32 (exact) -> f16 */
    got = host_raw(f16, N * 2);
    kc_cast_f32_to_bf16(want, x, N);
    kc_cast_bf16_to_f32(wantf, want, N);
    kc_cast_f32_to_fp16(want, wantf, N);
    same_bits("convert bf16->f16", got, want, N * 2);
    free(got);
    /* round_bf16, scale */
    CK(kg_convert(back, d, 0));   /* same dtype: a copy */
    CK(kg_round_bf16(back, 0));
    gotf = host_raw(back, N * 4);
    memcpy(wantf, x, N * 4);
    kc_round_bf16(wantf, N);
    same_bits("round_bf16", gotf, wantf, N * 4);
    free(gotf);
    CK(kg_convert(back, d, 0));
    CK(kg_scale(back, 0.3f, 0));
    gotf = host_raw(back, N * 4);
    memcpy(wantf, x, N * 4);
    kc_scale(wantf, N, 0.3f);
    same_arith_f32("scale f32", gotf, wantf, N);
    free(gotf);
    /* fill, zero */
    CK(kg_fill(b16, 1.5f, 0));
    gotf = host_f(b16);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= gotf[i] == 1.5f;
    expect("fill bf16", ok);
    free(gotf);
    CK(kg_zero(back, 0));
    gotf = host_f(back);
    ok = 1;
    for (int i = 0; i < N; i++) ok &= gotf[i] == 0.0f && !signbit(gotf[i]);
    expect("zero f32", ok);
    free(gotf);
    /* all_finite: finite data stays 1; one inf / NaN clears it */
    int *flag, h;
    CK(cudaMalloc((void **)&flag, sizeof(int)));
    float *fin = rnd_vec(N, -1e30f, 1e30f, SRT_F32);
    srt_t df = dev_f(fin, N, SRT_F32), dfb = dev_f(fin, N, SRT_BF16), dfh = dev_f(fin, 1000, SRT_F32);
    h = 1;
    CK(cudaMemcpy(flag, &h, 4, cudaMemcpyHostToDevice));
    CK(kg_all_finite(flag, df, 0));
    CK(kg_all_finite(flag, dfb, 0));
    CK(cudaMemcpy(&h, flag, 4, cudaMemcpyDeviceToHost));
    expect("all_finite on finite f32 and bf16 data", h == 1 && kc_all_finite(fin, N));
    fin[N - 1] = NAN;
    srt_t dnan = dev_f(fin, N, SRT_BF16);
    CK(kg_all_finite(flag, dnan, 0));
    CK(cudaMemcpy(&h, flag, 4, cudaMemcpyDeviceToHost));
    expect("all_finite finds a NaN in bf16", h == 0 && !kc_all_finite(fin, N));
    h = 1;
    CK(cudaMemcpy(flag, &h, 4, cudaMemcpyHostToDevice));
    float big[3] = { 1.0f, 7e4f, 2.0f };   /* 7e4 overflows fp16 to inf */
    srt_t dbig = dev_f(big, 3, SRT_F16);
    CK(kg_all_finite(flag, dbig, 0));
    CK(cudaMemcpy(&h, flag, 4, cudaMemcpyDeviceToHost));
    expect("all_finite finds an inf in f16", h == 0);
    /* a bad argument is refused with a reason */
    srt_t small = d;
    small.n = 10;
    cudaError_t e = kg_convert(b16, small, 0);
    expect("convert refuses a size mismatch", e == cudaErrorInvalidValue && kg_error_detail()[0]);
    dev_free(d), dev_free(b16), dev_free(f16), dev_free(back), dev_free(df), dev_free(dfb);
    dev_free(dfh), dev_free(dnan), dev_free(dbig);
    CK(cudaFree(flag));
    free(x), free(want), free(wantf), free(fin);
}

/* Embedding forward and backward; backward also bit-exact (fp32) and twice. */
static void test_embedding_case(srt_dtype dt, int B, int T, int C, int v0, int v1, int vocab,
                                int skew)
{
    int BT = B * T, Vl = v1 - v0;
    int32_t *tok = malloc(BT * 4);
    for (int i = 0; i < BT; i++)
        tok[i] = skew ? v0 + (int)(rnd_u32() % 2) * 1024 + (rnd_u32() % 16 == 0)
                       : (int)(rnd_u32() % vocab);
    float *wte = rnd_vec((size_t)Vl * C, -1, 1, dt), *wpe = rnd_vec((size_t)T * C, -1, 1, dt);
    float *out = malloc((size_t)BT * C * 4);
    kc_embedding_forward(out, tok, wte, wpe, B, T, C, v0, v1);
    srt_t dtok = dev_i(tok, BT), dwte_ = dev_f(wte, (size_t)Vl * C, dt), dwpe_ = dev_f(wpe, (size_t)T * C, dt);
    srt_t dout_ = dev_f(out, (size_t)BT * C, dt);
    CK(kg_embedding_forward(dout_, dtok, dwte_, dwpe_, B, T, C, v0, v1, 0));
    float *g = host_f(dout_);
    cmp(skew ? "embedding fwd (skewed tokens)" : "embedding fwd", dt, g, out, (size_t)BT * C, 0, 0);
    free(g);
    /* backward into random initial gradients */
    float *dout = rnd_vec((size_t)BT * C, -1, 1, dt);
    float *gw0 = rnd_vec((size_t)Vl * C, -1, 1, dt), *gp0 = rnd_vec((size_t)T * C, -1, 1, dt);
    float *gw = dup(gw0, (size_t)Vl * C), *gp = dup(gp0, (size_t)T * C);
    kc_embedding_backward(gw, gp, dout, tok, B, T, C, v0, v1);
    srt_t ddo = dev_f(dout, (size_t)BT * C, dt);
    srt_t dgw = dev_f(gw0, (size_t)Vl * C, dt), dgp = dev_f(gp0, (size_t)T * C, dt);
    CK(kg_embedding_backward(dgw, dgp, ddo, dtok, B, T, C, v0, v1, 0));
    float *hgw = host_f(dgw), *hgp = host_f(dgp);
    cmp(skew ? "embedding bwd dwte (skewed, flushes)" : "embedding bwd dwte", dt, hgw, gw,
        (size_t)Vl * C, 0, 0);
    cmp("embedding bwd dwpe", dt, hgp, gp, (size_t)T * C, 0, 0);
    if (dt == SRT_F32) {
        same_bits("embedding bwd dwte == CPU bits", hgw, gw, (size_t)Vl * C * 4);
        same_bits("embedding bwd dwpe == CPU bits", hgp, gp, (size_t)T * C * 4);
    }
    /* again from the same start: the same bits */
    srt_t dgw2 = dev_f(gw0, (size_t)Vl * C, dt);
    CK(kg_embedding_backward(dgw2, NONE, ddo, dtok, B, T, C, v0, v1, 0));
    size_t bytes = (size_t)Vl * C * (dt == SRT_F32 ? 4 : 2);
    void *r1 = host_raw(dgw, bytes), *r2 = host_raw(dgw2, bytes);
    same_bits("embedding bwd deterministic", r1, r2, bytes);
    free(r1), free(r2), free(hgw), free(hgp);
    dev_free(dtok), dev_free(dwte_), dev_free(dwpe_), dev_free(dout_), dev_free(ddo);
    dev_free(dgw), dev_free(dgp), dev_free(dgw2);
    free(tok), free(wte), free(wpe), free(out), free(dout), free(gw0), free(gp0), free(gw), free(gp);
}

static void test_embedding(srt_dtype dt)
{
    test_embedding_case(dt, 3, 17, 40, 5, 50, 60, 0);
    /* rows 0, 1, 1024, 1025 of 1100: block 0 owns rows 0 and 1024 (row %
     * 1024) and sees ~2250 of the 2400 tokens, so its list fills, flushes
     * and sorts two rows; block 1 has rows 1 and 1025; 300 channels:
     * threads loop over columns */
    test_embedding_case(dt, 4, 600, 300, 10, 1110, 0, 1);
}

/* Layernorm and rmsnorm, forward and backward. */
static void test_norm(srt_dtype dt, int N, int C)
{
    size_t nc = (size_t)N * C;
    float *x = rnd_vec(nc, -2, 3, dt), *w = rnd_vec(C, 0.5f, 1.5f, dt), *b = rnd_vec(C, -1, 1, dt);
    float *out = malloc(nc * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
    srt_t dx = dev_f(x, nc, dt), dw = dev_f(w, C, dt), db = dev_f(b, C, dt), dout = dev_f(x, nc, dt);
    srt_t dmean = dev_f(x, N, SRT_F32), drstd = dev_f(x, N, SRT_F32);
    /* layernorm forward */
    kc_layernorm_forward(out, mean, rstd, x, w, b, N, C, 1e-5f);
    CK(kg_layernorm_forward(dout, dmean, drstd, dx, dw, db, N, C, 1e-5f, 0));
    float *g = host_f(dout), *gm = host_f(dmean), *gr = host_f(drstd);
    cmp("layernorm fwd out", dt, g, out, nc, 1e-4, 1e-5);
    cmp("layernorm fwd mean", SRT_F32, gm, mean, N, 1e-4, 1e-5);
    cmp("layernorm fwd rstd", SRT_F32, gr, rstd, N, 1e-4, 1e-5);
    free(g), free(gm), free(gr);
    /* layernorm backward with the CPU's saved statistics (as fp32 on both) */
    srt_t sm = dev_f(mean, N, SRT_F32), sr = dev_f(rstd, N, SRT_F32);
    float *dy = rnd_vec(nc, -1, 1, dt);
    float *gx0 = rnd_vec(nc, -1, 1, dt), *gw0 = rnd_vec(C, -1, 1, dt), *gb0 = rnd_vec(C, -1, 1, dt);
    float *gx = dup(gx0, nc), *gw = dup(gw0, C), *gb = dup(gb0, C);
    kc_layernorm_backward(gx, gw, gb, dy, x, w, mean, rstd, N, C);
    srt_t ddy = dev_f(dy, nc, dt), dgx = dev_f(gx0, nc, dt), dgw = dev_f(gw0, C, dt), dgb = dev_f(gb0, C, dt);
    CK(kg_layernorm_backward(dgx, dgw, dgb, ddy, dx, dw, sm, sr, N, C, 0));
    float *h1 = host_f(dgx), *h2 = host_f(dgw), *h3 = host_f(dgb);
    cmp("layernorm bwd dinp", dt, h1, gx, nc, 1e-4, 1e-5);
    cmp("layernorm bwd dweight", dt, h2, gw, C, 1e-4, 1e-5);
    cmp("layernorm bwd dbias", dt, h3, gb, C, 1e-4, 1e-5);
    free(h1), free(h2), free(h3);
    /* rmsnorm forward and backward */
    kc_rmsnorm_forward(out, rstd, x, w, N, C, 1e-6f);
    CK(kg_rmsnorm_forward(dout, drstd, dx, dw, N, C, 1e-6f, 0));
    g = host_f(dout), gr = host_f(drstd);
    cmp("rmsnorm fwd out", dt, g, out, nc, 1e-4, 1e-5);
    cmp("rmsnorm fwd rstd", SRT_F32, gr, rstd, N, 1e-4, 1e-5);
    free(g), free(gr);
    dev_free(sr);
    sr = dev_f(rstd, N, SRT_F32);
    memcpy(gx, gx0, nc * 4), memcpy(gw, gw0, C * 4);
    kc_rmsnorm_backward(gx, gw, dy, x, w, rstd, N, C);
    dev_free(dgx), dev_free(dgw);
    dgx = dev_f(gx0, nc, dt), dgw = dev_f(gw0, C, dt);
    CK(kg_rmsnorm_backward(dgx, dgw, ddy, dx, dw, sr, N, C, 0));
    h1 = host_f(dgx), h2 = host_f(dgw);
    cmp("rmsnorm bwd dinp", dt, h1, gx, nc, 1e-4, 1e-5);
    cmp("rmsnorm bwd dweight", dt, h2, gw, C, 1e-4, 1e-5);
    free(h1), free(h2);
    dev_free(dx), dev_free(dw), dev_free(db), dev_free(dout), dev_free(dmean), dev_free(drstd);
    dev_free(sm), dev_free(sr), dev_free(ddy), dev_free(dgx), dev_free(dgw), dev_free(dgb);
    free(x), free(w), free(b), free(out), free(mean), free(rstd), free(dy);
    free(gx0), free(gw0), free(gb0), free(gx), free(gw), free(gb);
}

/* GELU, SwiGLU (the halves of one [gate | up] row), residual. */
static void test_pointwise(srt_dtype dt)
{
    enum { N = 10007 };
    float *x = rnd_vec(N, -6, 6, dt), *dy = rnd_vec(N, -1, 1, dt), *g0 = rnd_vec(N, -1, 1, dt);
    float *out = malloc(N * 4), *gx = dup(g0, N);
    srt_t dx = dev_f(x, N, dt), dout = dev_f(x, N, dt), ddy = dev_f(dy, N, dt), dg = dev_f(g0, N, dt);
    kc_gelu_forward(out, x, N);
    CK(kg_gelu_forward(dout, dx, 0));
    float *h = host_f(dout);
    cmp("gelu fwd", dt, h, out, N, 1e-5, 1e-6);
    free(h);
    kc_gelu_backward(gx, x, dy, N);
    CK(kg_gelu_backward(dg, dx, ddy, 0));
    h = host_f(dg);
    cmp("gelu bwd", dt, h, gx, N, 1e-5, 1e-6);
    free(h);
    /* residual: out = a + b in place over a; backward into two gradients */
    float *sum = malloc(N * 4);
    kc_residual_forward(sum, x, dy, N);
    CK(kg_residual_forward(dx, dx, ddy, 0));
    h = host_f(dx);
    cmp("residual fwd (in place)", dt, h, sum, N, 1e-6, 0);
    free(h);
    float *ga = dup(g0, N), *gb = dup(x, N);
    kc_residual_backward(ga, gb, dy, N);
    srt_t dga = dev_f(g0, N, dt), dgb = dev_f(x, N, dt);
    CK(kg_residual_backward(dga, dgb, ddy, 0));
    float *h1 = host_f(dga), *h2 = host_f(dgb);
    cmp("residual bwd da", dt, h1, ga, N, 1e-6, 0);
    cmp("residual bwd db", dt, h2, gb, N, 1e-6, 0);
    free(h1), free(h2);
    /* swiglu on (NR, 2H) rows [gate | up] */
    int NR = 13, H = 70, ld = 2 * H;
    size_t nab = (size_t)NR * ld, no = (size_t)NR * H;
    float *ab = rnd_vec(nab, -5, 5, dt), *so = malloc(no * 4), *sdy = rnd_vec(no, -1, 1, dt);
    float *gab0 = rnd_vec(nab, -1, 1, dt), *gab = dup(gab0, nab);
    kc_swiglu_forward(so, ab, ab + H, NR, H, ld);
    srt_t dab = dev_f(ab, nab, dt), dso = dev_f(so, no, dt), dsdy = dev_f(sdy, no, dt);
    srt_t dgab = dev_f(gab0, nab, dt);
    CK(kg_swiglu_forward(dso, dab, sub(dab, H, nab - H), NR, H, ld, 0));
    h = host_f(dso);
    cmp("swiglu fwd", dt, h, so, no, 1e-5, 1e-6);
    free(h);
    kc_swiglu_backward(gab, gab + H, sdy, ab, ab + H, NR, H, ld);
    CK(kg_swiglu_backward(dgab, sub(dgab, H, nab - H), dsdy, dab, sub(dab, H, nab - H), NR, H, ld, 0));
    h = host_f(dgab);
    cmp("swiglu bwd (da | db)", dt, h, gab, nab, 1e-5, 1e-6);
    free(h);
    dev_free(dx), dev_free(dout), dev_free(ddy), dev_free(dg), dev_free(dga), dev_free(dgb);
    dev_free(dab), dev_free(dso), dev_free(dsdy), dev_free(dgab);
    free(x), free(dy), free(g0), free(out), free(gx), free(sum), free(ga), free(gb);
    free(ab), free(so), free(sdy), free(gab0), free(gab);
}

/* RoPE in place on the q heads of a fused row, and its backward. */
static void test_rope(srt_dtype dt)
{
    int B = 2, T = 9, NH = 3, HS = 16, ld = 80, pos0 = 7;
    float theta = 10000.0f;
    size_t n = (size_t)B * T * ld;
    float *x = rnd_vec(n, -2, 2, dt), *want = dup(x, n);
    kc_rope_forward(want, want, B, T, NH, HS, ld, pos0, theta);
    srt_t d = dev_f(x, n, dt);
    CK(kg_rope_forward(d, d, B, T, NH, HS, ld, pos0, theta, 0));
    float *h = host_f(d);
    cmp("rope fwd (in place, strided)", dt, h, want, n, 1e-5, 1e-5);
    free(h);
    float *dy = rnd_vec(n, -1, 1, dt), *g0 = rnd_vec(n, -1, 1, dt), *g = dup(g0, n);
    kc_rope_backward(g, dy, B, T, NH, HS, ld, pos0, theta);
    srt_t ddy = dev_f(dy, n, dt), dg = dev_f(g0, n, dt);
    CK(kg_rope_backward(dg, ddy, B, T, NH, HS, ld, pos0, theta, 0));
    h = host_f(dg);
    cmp("rope bwd", dt, h, g, n, 1e-5, 1e-5);
    free(h);
    /* the inverse in place: what srt_rope_bwd does to dx (the CPU backend:
     * copy, zero the rotated columns, accumulate) */
    float *inv = dup(dy, n);
    for (int r = 0; r < B * T; r++) memset(inv + (size_t)r * ld, 0, sizeof(float) * NH * HS);
    kc_rope_backward(inv, dy, B, T, NH, HS, ld, pos0, theta);
    CK(kg_rope_inverse(ddy, ddy, B, T, NH, HS, ld, pos0, theta, 0));
    h = host_f(ddy);
    cmp("rope inverse (in place)", dt, h, inv, n, 1e-5, 1e-5);
    free(h), free(inv);
    dev_free(d), dev_free(ddy), dev_free(dg);
    free(x), free(want), free(dy), free(g0), free(g);
}

/* Causal GQA attention on a fused qkv buffer (B,T,(NH+2NKV)*HS). */
static void test_attention(srt_dtype dt, int B, int T, int NH, int NKV, int HS)
{
    int ld = (NH + 2 * NKV) * HS;
    size_t nqkv = (size_t)B * T * ld, no = (size_t)B * T * NH * HS, nl = (size_t)B * NH * T;
    float *qkv = rnd_vec(nqkv, -1.5f, 1.5f, dt), *out = malloc(no * 4), *lse = malloc(nl * 4);
    KcAttnShape s = { B, T, NH, NKV, HS, ld, ld };
    const float *q = qkv, *k = qkv + NH * HS, *v = qkv + (NH + NKV) * HS;
    kc_attention_forward(out, lse, q, k, v, s);
    srt_t dqkv = dev_f(qkv, nqkv, dt), dout = dev_f(out, no, dt), dlse = dev_f(lse, nl, SRT_F32);
    srt_t dq = sub(dqkv, 0, nqkv), dk = sub(dqkv, NH * HS, nqkv - NH * HS);
    srt_t dv = sub(dqkv, (NH + NKV) * HS, nqkv - (NH + NKV) * HS);
    CK(kg_attention_forward(dout, dlse, dq, dk, dv, B, T, NH, NKV, HS, ld, ld, 0));
    float *h1 = host_f(dout), *h2 = host_f(dlse);
    char name[64];
    snprintf(name, sizeof name, "attention fwd out HS=%d NKV=%d", HS, NKV);
    cmp(name, dt, h1, out, no, 1e-4, 1e-5);
    cmp("attention fwd lse", SRT_F32, h2, lse, nl, 1e-5, 1e-6);
    free(h1), free(h2);
    /* backward from the CPU's out and lse, into one dqkv with random contents */
    if (dt != SRT_F32) kc_round_bf16(out, no);
    srt_t sout = dev_f(out, no, dt), slse = dev_f(lse, nl, SRT_F32);
    float *dy = rnd_vec(no, -1, 1, dt), *g0 = rnd_vec(nqkv, -1, 1, dt), *g = dup(g0, nqkv);
    kc_attention_backward(g, g + NH * HS, g + (NH + NKV) * HS, dy, out, lse, q, k, v, s);
    srt_t ddy = dev_f(dy, no, dt), dg = dev_f(g0, nqkv, dt);
    CK(kg_attention_backward(sub(dg, 0, nqkv), sub(dg, NH * HS, nqkv - NH * HS),
                             sub(dg, (NH + NKV) * HS, nqkv - (NH + NKV) * HS), ddy, sout, slse, dq, dk,
                             dv, B, T, NH, NKV, HS, ld, ld, 0));
    h1 = host_f(dg);
    snprintf(name, sizeof name, "attention bwd dqkv HS=%d NKV=%d", HS, NKV);
    cmp(name, dt, h1, g, nqkv, 1e-4, 1e-5);
    free(h1);
    dev_free(dqkv), dev_free(dout), dev_free(dlse), dev_free(sout), dev_free(slse), dev_free(ddy);
    dev_free(dg);
    free(qkv), free(out), free(lse), free(dy), free(g0), free(g);
}

/* Cross-entropy over a vocabulary split in R = 2 padded slices, and R = 1. */
static void test_xent(srt_dtype dt)
{
    int N = 11, V = 103, R = 2, Vl = 56;   /* 2 * 56 = 112: 9 padded columns */
    int32_t tg[11] = { 0, 55, 56, 102, -1, 7, 60, 101, 3, 99, 56 };
    float *lg = rnd_vec((size_t)R * N * Vl, -4, 4, dt);   /* [R][N][Vl] */
    float *pmax = malloc(R * N * 4), *psum = malloc(R * N * 4), *ptl = malloc(R * N * 4);
    float gmax[11], gsum[11], gtl[11], loss[11];
    for (int r = 0; r < R; r++)
        kc_xent_partial(pmax + r * N, psum + r * N, ptl + r * N, lg + (size_t)r * N * Vl, tg, N, Vl,
                        r * Vl, V);
    kc_xent_combine(gmax, gsum, gtl, pmax, psum, ptl, R, N);
    kc_xent_loss(loss, tg, gmax, gsum, gtl, N);
    float *want = dup(lg, (size_t)R * N * Vl);
    for (int r = 0; r < R; r++)
        kc_xent_backward(want + (size_t)r * N * Vl, tg, gmax, gsum, 0.25f, N, Vl, r * Vl, V);
    float z[2 * 11] = { 0 };
    srt_t dlg = dev_f(lg, (size_t)R * N * Vl, dt), dtg = dev_i(tg, N);
    srt_t dpm = dev_f(z, R * N, SRT_F32), dps = dev_f(z, R * N, SRT_F32), dpt = dev_f(z, R * N, SRT_F32);
    srt_t dgm = dev_f(z, N, SRT_F32), dgs = dev_f(z, N, SRT_F32), dgt = dev_f(z, N, SRT_F32);
    srt_t dloss = dev_f(z, N, SRT_F32);
    for (int r = 0; r < R; r++)
        CK(kg_xent_partial(sub(dpm, r * N, N), sub(dps, r * N, N), sub(dpt, r * N, N),
                           sub(dlg, (int64_t)r * N * Vl, (int64_t)N * Vl), dtg, N, Vl, r * Vl, V, 0));
    float *h = host_f(dpm);
    cmp("xent partial rowmax", SRT_F32, h, pmax, R * N, 0, 0);
    free(h);
    h = host_f(dps);
    cmp("xent partial rowsum", SRT_F32, h, psum, R * N, 1e-5, 1e-6);
    free(h);
    h = host_f(dpt);
    cmp("xent partial tlogit", SRT_F32, h, ptl, R * N, 0, 0);
    free(h);
    CK(kg_xent_combine(dgm, dgs, dgt, dpm, dps, dpt, R, N, 0));
    CK(kg_xent_loss(dloss, dtg, dgm, dgs, dgt, N, 0));
    h = host_f(dloss);
    cmp("xent loss (vocab split in 2)", SRT_F32, h, loss, N, 1e-5, 1e-6);
    free(h);
    for (int r = 0; r < R; r++)
        CK(kg_xent_backward(sub(dlg, (int64_t)r * N * Vl, (int64_t)N * Vl), dtg, dgm, dgs, 0.25f, N,
                            Vl, r * Vl, V, 0));
    h = host_f(dlg);
    cmp("xent backward dlogits (in place)", dt, h, want, (size_t)R * N * Vl, 1e-5, 1e-6);
    free(h);
    /* the tp path: rescale each rank's sum on the global max */
    float rs[2 * 11];
    memcpy(rs, psum, sizeof rs);
    for (int r = 0; r < R; r++) kc_xent_rescale(rs + r * N, pmax + r * N, gmax, N);
    for (int r = 0; r < R; r++) CK(kg_xent_rescale(sub(dps, r * N, N), sub(dpm, r * N, N), dgm, N, 0));
    h = host_f(dps);
    cmp("xent rescale", SRT_F32, h, rs, R * N, 1e-5, 1e-6);
    free(h);
    /* R = 1, the combine in place over the partials */
    int32_t tg1[11];
    for (int i = 0; i < N; i++) tg1[i] = tg[i] < 56 ? tg[i] : -1;
    float m1[11], s1[11], t1[11], l1[11];
    kc_xent_partial(m1, s1, t1, lg, tg1, N, Vl, 0, Vl);
    kc_xent_combine(m1, s1, t1, m1, s1, t1, 1, N);
    kc_xent_loss(l1, tg1, m1, s1, t1, N);
    srt_t dlg1 = dev_f(lg, (size_t)N * Vl, dt), dtg1 = dev_i(tg1, N);
    CK(kg_xent_partial(dgm, dgs, dgt, dlg1, dtg1, N, Vl, 0, Vl, 0));
    CK(kg_xent_combine(dgm, dgs, dgt, dgm, dgs, dgt, 1, N, 0));
    CK(kg_xent_loss(dloss, dtg1, dgm, dgs, dgt, N, 0));
    h = host_f(dloss);
    cmp("xent loss (one rank, in place)", SRT_F32, h, l1, N, 1e-5, 1e-6);
    free(h);
    dev_free(dlg), dev_free(dtg), dev_free(dpm), dev_free(dps), dev_free(dpt), dev_free(dgm);
    dev_free(dgs), dev_free(dgt), dev_free(dloss), dev_free(dlg1), dev_free(dtg1);
    free(lg), free(pmax), free(psum), free(ptl), free(want);
}

/* AdamW, Adam (L2) and SGD on fp32 masters: the CPU's bits. */
static void test_optim(srt_dtype gdt)
{
    enum { N = 10001 };
    float *p0 = rnd_vec(N, -1, 1, SRT_F32), *gr = rnd_vec(N, -0.1f, 0.1f, gdt);
    float *m0 = rnd_vec(N, -0.01f, 0.01f, SRT_F32), *v0 = rnd_vec(N, 0, 0.001f, SRT_F32);
    float clip = 0.75f, ls = 2.0f, gs = clip / ls;
    float *dclip;
    int *dskip, one = 1;
    CK(cudaMalloc((void **)&dclip, 4));
    CK(cudaMalloc((void **)&dskip, 4));
    CK(cudaMemcpy(dclip, &clip, 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dskip, &one, 4, cudaMemcpyHostToDevice));
    const char *gn = gdt == SRT_F32 ? "f32" : gdt == SRT_BF16 ? "bf16" : "f16";
    char name[80];
    for (int l2 = 0; l2 < 2; l2++) {
        float *p = dup(p0, N), *m = dup(m0, N), *v = dup(v0, N);
        KcAdamW kh = { 1e-3, 0.9, 0.95, 1e-8, 0.1, 3, gs };
        if (l2) {   /* the CPU backend's Adam: L2 decay in the gradient, no decoupled decay */
            float *g2 = malloc(N * 4);
            for (int i = 0; i < N; i++) g2[i] = gr[i] * gs + 0.1f * p[i];
            kh.weight_decay = 0.0, kh.grad_scale = 1.0f;
            kc_adamw_step(p, NULL, g2, m, v, N, kh);
            free(g2);
        } else {
            kc_adamw_step(p, NULL, gr, m, v, N, kh);
        }
        uint16_t *pb = malloc(N * 2);
        kc_cast_f32_to_bf16(pb, p, N);
        srt_t dp = dev_f(p0, N, SRT_F32), dm = dev_f(m0, N, SRT_F32), dv = dev_f(v0, N, SRT_F32);
        srt_t dg = dev_f(gr, N, gdt), dw = dev_f(p0, N, SRT_BF16);
        KgAdamW h = { 1e-3, 0.9, 0.95, 1e-8, 0.1, 3, l2, ls };
        /* skipped first: nothing may change */
        CK(kg_adamw_step(dw, dp, dg, dm, dv, h, dclip, dskip, 0));
        float *hp = host_raw(dp, N * 4);
        snprintf(name, sizeof name, "%s step skipped on overflow", l2 ? "adam" : "adamw");
        same_bits(name, hp, p0, N * 4);
        free(hp);
        CK(kg_adamw_step(dw, dp, dg, dm, dv, h, dclip, NULL, 0));
        hp = host_raw(dp, N * 4);
        float *hm = host_raw(dm, N * 4), *hv = host_raw(dv, N * 4);
        uint16_t *hw = host_raw(dw, N * 2);
        snprintf(name, sizeof name, "%s master == CPU (grads %s)", l2 ? "adam" : "adamw", gn);
        same_bits(name, hp, p, N * 4);
        snprintf(name, sizeof name, "%s moments == CPU", l2 ? "adam" : "adamw");
        same_bits(name, hm, m, N * 4);
        same_bits(name, hv, v, N * 4);
        snprintf(name, sizeof name, "%s bf16 params == CPU cast", l2 ? "adam" : "adamw");
        same_bits(name, hw, pb, N * 2);
        free(hp), free(hm), free(hv), free(hw), free(pb);
        dev_free(dp), dev_free(dm), dev_free(dv), dev_free(dg), dev_free(dw);
        free(p), free(m), free(v);
    }
    /* SGD: nesterov momentum over two steps (the first sets the buffer) */
    float *p = dup(p0, N), *buf = malloc(N * 4);
    KcSGD ks = { 0.05, 0.9, 0.0, 0.01, 1, 1, gs };
    kc_sgd_step(p, gr, buf, N, ks);
    ks.first_step = 0;
    kc_sgd_step(p, gr, buf, N, ks);
    srt_t dp = dev_f(p0, N, SRT_F32), dbuf = dev_f(m0, N, SRT_F32), dg = dev_f(gr, N, gdt);
    KgSGD hs = { 0.05, 0.9, 0.0, 0.01, 1, 1, ls };
    CK(kg_sgd_step(dp, dp, dg, dbuf, hs, dclip, NULL, 0));
    hs.first_step = 0;
    CK(kg_sgd_step(dp, dp, dg, dbuf, hs, dclip, NULL, 0));
    float *hp = host_raw(dp, N * 4), *hb = host_raw(dbuf, N * 4);
    snprintf(name, sizeof name, "sgd nesterov master == CPU (%s)", gn);
    same_bits(name, hp, p, N * 4);
    same_bits("sgd momentum buffer == CPU", hb, buf, N * 4);
    free(hp), free(hb), free(p), free(buf);
    dev_free(dp), dev_free(dbuf), dev_free(dg);
    CK(cudaFree(dclip));
    CK(cudaFree(dskip));
    free(p0), free(gr), free(m0), free(v0);
}

/* The exact sum of squares: the CPU's bins, twice the same, and the finish. */
static void test_sumsq(void)
{
    enum { N = 200003 };
    float *x = malloc(N * 4);
    for (int i = 0; i < N; i++) x[i] = ldexpf(rnd_f(-1, 1), (int)(rnd_u32() % 55) - 40);   /* < 2^15: finite in f16 */
    for (int i = 0; i < 64; i++) x[i * 7] = i % 2 ? 1e-41f : 0.0f;   /* subnormals, zeros */
    KcSumsq want;
    kc_sumsq_zero(&want);
    kc_sumsq_add(&want, x, N);
    float *xb = dup(x, N);
    kc_round_bf16(xb, N);
    kc_sumsq_add(&want, xb, N);   /* bf16 values: their fp32 value, same bits << 16 */
    float *xh = malloc(N * 4);
    for (int i = 0; i < N; i++) xh[i] = kc_f32_from_fp16(kc_fp16_from_f32(x[i]));
    kc_sumsq_add(&want, xh, N);
    srt_t d32 = dev_f(x, N, SRT_F32), d16 = dev_f(x, N, SRT_BF16), dh = dev_f(x, N, SRT_F16);
    KgSumsq *acc[2];
    void *got[2];
    for (int run = 0; run < 2; run++) {
        CK(cudaMalloc((void **)&acc[run], sizeof(KgSumsq)));
        CK(kg_sumsq_zero(acc[run], 0));
        CK(kg_sumsq_add(acc[run], d32, 0));
        CK(kg_sumsq_add(acc[run], d16, 0));
        CK(kg_sumsq_add(acc[run], dh, 0));
        srt_t view = { acc[run], 512, SRT_F32 };
        got[run] = host_raw(view, sizeof(KgSumsq));
    }
    same_bits("sumsq bins == CPU bins (f32+bf16+f16)", got[0], &want, sizeof want);
    same_bits("sumsq deterministic", got[0], got[1], sizeof want);
    /* the finish: norm, clipping scale, overflow; as the CPU backend computes them */
    double *dn;
    float *dc;
    int *dov;
    CK(cudaMalloc((void **)&dn, 8));
    CK(cudaMalloc((void **)&dc, 4));
    CK(cudaMalloc((void **)&dov, 4));
    CK(kg_norm_finish(dn, dc, dov, acc[0], 1.0, 4.0f, 0));
    double norm;
    float clip;
    int ov;
    CK(cudaMemcpy(&norm, dn, 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&clip, dc, 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&ov, dov, 4, cudaMemcpyDeviceToHost));
    double wn = sqrt(kc_sumsq_value(&want)) / 4.0;
    float wc = 1.0f, coef = (float)(1.0 / (wn + 1e-6));
    if (coef < 1.0f) wc = coef;
    expect("norm_finish norm == CPU (finite)", norm == wn && isfinite(wn));
    printf("     norm %.17g clip %.9g (CPU %.9g) overflow %d\n", norm, clip, wc, ov);
    expect("norm_finish clip scale == CPU", clip == wc && !ov);
    float bad[2] = { 1.0f, INFINITY };
    srt_t dbad = dev_f(bad, 2, SRT_F32);
    CK(kg_sumsq_add(acc[1], dbad, 0));
    CK(kg_norm_finish(dn, dc, dov, acc[1], 1.0, 4.0f, 0));
    CK(cudaMemcpy(&clip, dc, 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&ov, dov, 4, cudaMemcpyDeviceToHost));
    expect("norm_finish flags an inf as overflow", ov == 1 && clip == 1.0f);
    dev_free(d32), dev_free(d16), dev_free(dh), dev_free(dbad);
    CK(cudaFree(acc[0]));
    CK(cudaFree(acc[1]));
    CK(cudaFree(dn));
    CK(cudaFree(dc));
    CK(cudaFree(dov));
    free(got[0]), free(got[1]), free(x), free(xb), free(xh);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);   /* the last line before a crash shows */
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("skipped: no CUDA device (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
        return 77;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    kc_init();
    test_flat();
    srt_dtype dts[2] = { SRT_F32, SRT_BF16 };
    for (int i = 0; i < 2; i++) {
        srt_dtype dt = dts[i];
        test_embedding(dt);
        test_norm(dt, 37, 300);
        test_norm(dt, 5, 2050);
        test_norm(dt, 300, 96);   /* rows enough for dweight's unrolled loop and its tail */
        test_pointwise(dt);
        test_rope(dt);
        test_attention(dt, 2, 37, 4, 2, 24);
        test_attention(dt, 1, 70, 2, 2, 64);
        test_attention(dt, 1, 9, 4, 1, 256);
        test_xent(dt);
    }
    test_optim(SRT_F32);
    test_optim(SRT_BF16);
    test_optim(SRT_F16);
    test_sumsq();
    CK(cudaDeviceSynchronize());
    printf("%d of %d checks passed\n", g_checks - g_failures, g_checks);
    return g_failures ? 1 : 0;
}
