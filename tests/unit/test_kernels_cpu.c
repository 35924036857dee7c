/* test_kernels_cpu.c — unit tests of the CPU reference kernels (kernels.h).
 *
 *   test_kernels_cpu            every check below; exit 0 when all pass
 *   test_kernels_cpu --dump DIR write inputs, outputs and gradients of every
 *                               kernel as raw little-endian arrays plus
 *                               DIR/manifest.txt, for tests/unit/kernels_ref.py
 *
 * The checks: every backward against central finite differences of a loss
 * L = sum(out * w) accumulated in double; backward accumulates (a second call
 * doubles every gradient exactly); the vocab-parallel embedding and
 * cross-entropy equal the unsplit ones; AdamW and SGD against scalar
 * references; casts against known bit patterns and exhaustively; the exact
 * norm against a long-double sum and across shardings; kc_vexp's error in
 * ulps; every kernel bit-identical with 1, 2 and 3 OpenMP threads.
 */
#include "kernels.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_checks, g_failed;

/* Records one check; prints the failures and, with -v, the passes. */
static int g_verbose;
static void check(int ok, const char *what, double got, double limit)
{
    g_checks++;
    if (!ok) g_failed++;
    if (!ok || g_verbose)
        printf("%s %-48s %.3g (limit %.3g)\n", ok ? "ok  " : "FAIL", what, got, limit);
}

/* ---- random inputs ------------------------------------------------------ */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

/* Restarts the random sequence (the dump and the determinism runs). */
static void rng_seed(uint64_t s) { g_rng = s * 0x9E3779B97F4A7C15ull + 1; }

/* splitmix64: a fixed sequence on every platform. */
static uint64_t rng_next(void)
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float frand(void) { return (float)((rng_next() >> 40) * 0x1p-23 - 1.0); }

/* Every test allocation, freed together at exit (LeakSanitizer stays quiet). */
static void *g_allocs[4096];
static int g_nallocs;

/* calloc that remembers the block for talloc_free_all. */
static void *talloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p || g_nallocs == (int)(sizeof g_allocs / sizeof g_allocs[0])) {
        fprintf(stderr, "test_kernels_cpu: out of memory\n");
        exit(3);
    }
    return g_allocs[g_nallocs++] = p;
}

/* Frees every talloc block. */
static void talloc_free_all(void)
{
    while (g_nallocs) free(g_allocs[--g_nallocs]);
}

/* A new array of n uniform values times scale. */
static float *rand_array(size_t n, float scale)
{
    float *x = talloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = frand() * scale;
    return x;
}

/* A new array of n zeros. */
static float *zeros(size_t n) { return talloc(n * sizeof(float)); }

/* A new copy of x(n). */
static float *copy_of(const float *x, size_t n)
{
    float *y = talloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* sum(out * w) in double: the scalar every finite difference is taken of. */
static double dot_loss(const float *out, const float *w, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)out[i] * w[i];
    return s;
}

/* ---- finite differences ------------------------------------------------- */
typedef double (*LossFn)(void *ctx);   /* runs the forward, returns sum(out*w) */
typedef struct Wrt { const char *name; float *x; const float *grad; size_t n; } Wrt;

/* Central differences of f for (up to max_samples) elements of each tensor
 * against the analytic gradient: max |fd - grad| <= tol * max |grad|. */
static void fd_check(const char *kernel, LossFn f, void *ctx, const Wrt *wrt, int nwrt,
                     float h, double tol, size_t max_samples)
{
    for (int w = 0; w < nwrt; w++) {
        double maxerr = 0.0, maxg = 0.0;
        size_t count = wrt[w].n < max_samples ? wrt[w].n : max_samples;
        for (size_t s = 0; s < count; s++) {
            size_t i = count == wrt[w].n ? s : rng_next() % wrt[w].n;
            float save = wrt[w].x[i];
            wrt[w].x[i] = save + h;
            double lp = f(ctx);
            wrt[w].x[i] = save - h;
            double lm = f(ctx);
            wrt[w].x[i] = save;
            double fd = (lp - lm) / (2.0 * h);
            double err = fabs(fd - wrt[w].grad[i]);
            if (!(err <= maxerr)) maxerr = err;     /* a NaN sticks, and fails the check */
            if (fabs(wrt[w].grad[i]) > maxg) maxg = fabs(wrt[w].grad[i]);
        }
        f(ctx);   /* leave the outputs of the unperturbed inputs behind */
        char what[128];
        snprintf(what, sizeof what, "%s: d%s vs finite differences", kernel, wrt[w].name);
        double rel = maxerr / (maxg > 1e-6 ? maxg : 1e-6);
        check(rel <= tol && maxg > 0.0, what, rel, tol);
    }
}

/* Runs a backward a second time and checks every gradient doubled exactly:
 * the kernels accumulate, and the first call started from zero. */
static void check_doubled(const char *what, const float *once, const float *twice, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += twice[i] != 2.0f * once[i];
    char msg[128];
    snprintf(msg, sizeof msg, "%s accumulates (+=)", what);
    check(bad == 0, msg, (double)bad, 0);
}

/* ---- matmul ------------------------------------------------------------- */
typedef struct MatmulCtx { int N, C, OC; float *inp, *weight, *bias, *out, *w; } MatmulCtx;

/* The finite-difference losses: run the forward, return sum(out * w). */
static double matmul_loss(void *p)
{
    MatmulCtx *c = p;
    kc_matmul_forward(c->out, c->inp, c->weight, c->bias, c->N, c->C, c->OC);
    return dot_loss(c->out, c->w, (size_t)c->N * c->OC);
}

/* matmul: forward against a naive loop, backward against differences. */
static void test_matmul(void)
{
    MatmulCtx c = {.N = 7, .C = 9, .OC = 5};
    size_t ni = (size_t)c.N * c.C, nw = (size_t)c.OC * c.C, no = (size_t)c.N * c.OC;
    c.inp = rand_array(ni, 1), c.weight = rand_array(nw, 1), c.bias = rand_array(c.OC, 1);
    c.out = zeros(no), c.w = rand_array(no, 1);
    matmul_loss(&c);
    double maxerr = 0.0;
    for (int n = 0; n < c.N; n++)
        for (int o = 0; o < c.OC; o++) {
            double s = c.bias[o];
            for (int i = 0; i < c.C; i++) s += (double)c.inp[n * c.C + i] * c.weight[o * c.C + i];
            maxerr = fmax(maxerr, fabs(s - c.out[n * c.OC + o]));
        }
    check(maxerr < 1e-5, "matmul: forward vs naive loop", maxerr, 1e-5);

    float *dinp = zeros(ni), *dw = zeros(nw), *db = zeros(c.OC);
    kc_matmul_backward(dinp, dw, db, c.w, c.inp, c.weight, c.N, c.C, c.OC);
    Wrt wrt[] = {{"inp", c.inp, dinp, ni}, {"weight", c.weight, dw, nw}, {"bias", c.bias, db, c.OC}};
    fd_check("matmul", matmul_loss, &c, wrt, 3, 1e-2f, 1e-3, 1000);

    float *dinp2 = copy_of(dinp, ni), *dw2 = copy_of(dw, nw), *db2 = copy_of(db, c.OC);
    kc_matmul_backward(dinp2, dw2, db2, c.w, c.inp, c.weight, c.N, c.C, c.OC);
    check_doubled("matmul dinp", dinp, dinp2, ni);
    check_doubled("matmul dweight", dw, dw2, nw);
    check_doubled("matmul dbias", db, db2, c.OC);

    /* no bias: out is exactly the product */
    float *out2 = zeros(no);
    kc_matmul_forward(out2, c.inp, c.weight, NULL, c.N, c.C, c.OC);
    double e = 0.0;
    for (size_t i = 0; i < no; i++) e = fmax(e, fabs(out2[i] + c.bias[i % c.OC] - c.out[i]));
    check(e < 1e-5, "matmul: bias = NULL", e, 1e-5);
}

/* ---- layernorm and rmsnorm ---------------------------------------------- */
typedef struct NormCtx { int N, C, rms; float *inp, *weight, *bias, *out, *mean, *rstd, *w; } NormCtx;

static double norm_loss(void *p)
{
    NormCtx *c = p;
    if (c->rms) kc_rmsnorm_forward(c->out, c->rstd, c->inp, c->weight, c->N, c->C, 1e-5f);
    else kc_layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->weight, c->bias, c->N, c->C, 1e-5f);
    return dot_loss(c->out, c->w, (size_t)c->N * c->C);
}

/* layernorm / rmsnorm: statistics against double, gradients against differences. */
static void test_norm(int rms)
{
    const char *name = rms ? "rmsnorm" : "layernorm";
    NormCtx c = {.N = 5, .C = 80, .rms = rms};   /* C > one 64-column block */
    size_t n = (size_t)c.N * c.C;
    c.inp = rand_array(n, 2), c.weight = rand_array(c.C, 1), c.bias = rand_array(c.C, 1);
    for (size_t i = 0; i < n; i++) c.inp[i] += 0.5f;   /* a non-zero mean */
    c.out = zeros(n), c.mean = zeros(c.N), c.rstd = zeros(c.N), c.w = rand_array(n, 1);
    norm_loss(&c);
    double e = 0.0;
    for (int r = 0; r < c.N; r++) {
        double m = 0, v = 0;
        for (int i = 0; i < c.C; i++) m += c.inp[r * c.C + i];
        m = rms ? 0.0 : m / c.C;
        for (int i = 0; i < c.C; i++) v += (c.inp[r * c.C + i] - m) * (c.inp[r * c.C + i] - m);
        double rstd = 1.0 / sqrt(v / c.C + 1e-5);
        e = fmax(e, fabs(rstd - c.rstd[r]) / rstd);
        if (!rms) e = fmax(e, fabs(m - c.mean[r]));
    }
    char what[96];
    snprintf(what, sizeof what, "%s: saved statistics vs double", name);
    check(e < 1e-6, what, e, 1e-6);

    float *dinp = zeros(n), *dw = zeros(c.C), *db = zeros(c.C);
    if (rms) kc_rmsnorm_backward(dinp, dw, c.w, c.inp, c.weight, c.rstd, c.N, c.C);
    else kc_layernorm_backward(dinp, dw, db, c.w, c.inp, c.weight, c.mean, c.rstd, c.N, c.C);
    Wrt wrt[] = {{"inp", c.inp, dinp, n}, {"weight", c.weight, dw, c.C}, {"bias", c.bias, db, c.C}};
    fd_check(name, norm_loss, &c, wrt, rms ? 2 : 3, 1e-2f, 2e-3, 1000);

    float *dinp2 = copy_of(dinp, n), *dw2 = copy_of(dw, c.C), *db2 = copy_of(db, c.C);
    if (rms) kc_rmsnorm_backward(dinp2, dw2, c.w, c.inp, c.weight, c.rstd, c.N, c.C);
    else kc_layernorm_backward(dinp2, dw2, db2, c.w, c.inp, c.weight, c.mean, c.rstd, c.N, c.C);
    snprintf(what, sizeof what, "%s dinp", name);
    check_doubled(what, dinp, dinp2, n);
    snprintf(what, sizeof what, "%s dweight", name);
    check_doubled(what, dw, dw2, c.C);
}

/* The norms' row statistics sum 16 lanes in double (norm.c); every summand
 * is a float or a product of two floats, exact in double, and these rows'
 * sums are exact too, so the lanes must give the bits of the index-order
 * double sums the kernels used before: forward outputs and statistics, and
 * the backward's dinp, bit for bit against that reference, at widths with
 * and without a tail (C mod 16), one and several 64-column blocks. */
static void norm_reference(int rms, float *out, float *mean, float *rstd, float *dinp, const float *inp,
                           const float *weight, const float *bias, const float *dout, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        float *o = out + (size_t)n * C, *dx = dinp + (size_t)n * C;
        if (rms) {
            double ss = 0.0;
            for (int i = 0; i < C; i++) ss += (double)x[i] * x[i];
            float r = (float)(1.0 / sqrt(ss / C + 1e-5f));
            for (int i = 0; i < C; i++) o[i] = weight[i] * (x[i] * r);
            double s = 0.0;
            for (int i = 0; i < C; i++) s += (double)(weight[i] * d[i]) * x[i];
            float k = (float)(s / C) * r * r;
            for (int i = 0; i < C; i++) dx[i] += r * (weight[i] * d[i] - x[i] * k);
            rstd[n] = r;
            continue;
        }
        double s = 0.0;
        for (int i = 0; i < C; i++) s += x[i];
        float m = (float)(s / C);
        double v = 0.0;
        for (int i = 0; i < C; i++) {
            double t = x[i] - m;
            v += t * t;
        }
        float r = (float)(1.0 / sqrt(v / C + 1e-5f));
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * r * weight[i] + bias[i];
        double sg = 0.0, sgn = 0.0;
        for (int i = 0; i < C; i++) {
            float g = weight[i] * d[i];
            sg += g;
            sgn += g * ((x[i] - m) * r);
        }
        float mg = (float)(sg / C), mgn = (float)(sgn / C);
        for (int i = 0; i < C; i++) dx[i] += (weight[i] * d[i] - mg - (x[i] - m) * r * mgn) * r;
        mean[n] = m, rstd[n] = r;
    }
}

static void test_norm_lanes(void)
{
    static const int widths[] = {7, 16, 80, 128, 200, 768};
    for (int rms = 0; rms < 2; rms++)
        for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
            int N = 9, C = widths[k];
            size_t n = (size_t)N * C, bad = 0;
            float *x = rand_array(n, 3), *w = rand_array(C, 1), *b = rand_array(C, 1), *d = rand_array(n, 1);
            for (size_t i = 0; i < n; i++) x[i] += 0.25f;
            float *o = zeros(n), *m = zeros(N), *r = zeros(N), *dx = zeros(n);
            float *o2 = zeros(n), *m2 = zeros(N), *r2 = zeros(N), *dx2 = zeros(n);
            if (rms) kc_rmsnorm_forward(o, r, x, w, N, C, 1e-5f);
            else kc_layernorm_forward(o, m, r, x, w, b, N, C, 1e-5f);
            if (rms) kc_rmsnorm_backward(dx, NULL, d, x, w, r, N, C);
            else kc_layernorm_backward(dx, NULL, NULL, d, x, w, m, r, N, C);
            norm_reference(rms, o2, m2, r2, dx2, x, w, b, d, N, C);
            bad += memcmp(o, o2, n * sizeof *o) != 0;
            bad += memcmp(r, r2, (size_t)N * sizeof *r) != 0;
            bad += memcmp(m, m2, (size_t)N * sizeof *m) != 0;
            bad += memcmp(dx, dx2, n * sizeof *dx) != 0;
            char what[96];
            snprintf(what, sizeof what, "%s C=%d: lane sums give the index-order bits", rms ? "rmsnorm" : "layernorm", C);
            check(bad == 0, what, (double)bad, 0);
        }
}

/* ---- pointwise ---------------------------------------------------------- */
typedef struct PointCtx { int which, N, H; float *x, *out, *w; } PointCtx;
enum { P_GELU, P_RELU, P_SWIGLU };

static double point_loss(void *p)
{
    PointCtx *c = p;
    size_t n = (size_t)c->N * c->H;
    if (c->which == P_GELU) kc_gelu_forward(c->out, c->x, n);
    if (c->which == P_RELU) kc_relu_forward(c->out, c->x, n);
    if (c->which == P_SWIGLU) kc_swiglu_forward(c->out, c->x, c->x + c->H, c->N, c->H, 2 * c->H);
    return dot_loss(c->out, c->w, n);
}

/* gelu, relu, swiglu (on the two halves of one fused row), residual. */
static void test_pointwise(void)
{
    const char *names[] = {"gelu", "relu", "swiglu"};
    for (int which = 0; which < 3; which++) {
        PointCtx c = {.which = which, .N = 6, .H = 50};
        size_t n = (size_t)c.N * c.H, nx = which == P_SWIGLU ? 2 * n : n;
        c.x = rand_array(nx, 3), c.out = zeros(n), c.w = rand_array(n, 1);
        if (which == P_RELU)   /* keep away from the kink */
            for (size_t i = 0; i < nx; i++) c.x[i] += c.x[i] >= 0 ? 0.05f : -0.05f;
        point_loss(&c);
        float *dx = zeros(nx), *dx2 = NULL;
        for (int rep = 0; rep < 2; rep++) {
            float *g = rep ? dx2 : dx;
            if (which == P_GELU) kc_gelu_backward(g, c.x, c.w, n);
            if (which == P_RELU) kc_relu_backward(g, c.x, c.w, n);
            if (which == P_SWIGLU) kc_swiglu_backward(g, g + c.H, c.w, c.x, c.x + c.H, c.N, c.H, 2 * c.H);
            if (rep == 0) dx2 = copy_of(dx, nx);
        }
        Wrt wrt[] = {{"inp", c.x, dx, nx}};
        fd_check(names[which], point_loss, &c, wrt, 1, 1e-2f, 2e-3, 1000);
        char what[64];
        snprintf(what, sizeof what, "%s dinp", names[which]);
        check_doubled(what, dx, dx2, nx);
    }
    /* gelu at known points (GPT-2's tanh formula evaluated in double) */
    float xs[] = {-3.0f, -1.0f, 0.0f, 0.5f, 2.0f}, ys[5];
    kc_gelu_forward(ys, xs, 5);
    double e = 0.0;
    for (int i = 0; i < 5; i++) {
        double x = xs[i], y = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        e = fmax(e, fabs(y - ys[i]));
    }
    check(e < 1e-6, "gelu: values vs double formula", e, 1e-6);

    float a[] = {1, 2}, b[] = {10, 20}, r[2], da[2] = {0}, db[2] = {1, 1}, d[2] = {3, 4};
    kc_residual_forward(r, a, b, 2);
    kc_residual_backward(da, db, d, 2);
    check(r[0] == 11 && r[1] == 22 && da[0] == 3 && da[1] == 4 && db[0] == 4 && db[1] == 5,
          "residual: forward and backward", 0, 0);
}

/* ---- attention ---------------------------------------------------------- */
typedef struct AttnCtx { KcAttnShape s; float *qkv, *out, *lse, *w; } AttnCtx;

static double attn_loss(void *p)
{
    AttnCtx *c = p;
    int qs = c->s.NH * c->s.HS, ks = c->s.NKV * c->s.HS;
    kc_attention_forward(c->out, c->lse, c->qkv, c->qkv + qs, c->qkv + qs + ks, c->s);
    return dot_loss(c->out, c->w, (size_t)c->s.B * c->s.T * qs);
}

/* Naive causal GQA attention in double for one (b, h, i): out row and lse. */
static double attn_naive_row(const AttnCtx *c, int b, int h, int i, double *o)
{
    KcAttnShape s = c->s;
    int g = h / (s.NH / s.NKV), qs = s.NH * s.HS, ks = s.NKV * s.HS;
    const float *q = c->qkv + ((size_t)b * s.T + i) * s.ld_q + h * s.HS;
    double sc[512], mx = -INFINITY, sum = 0;
    for (int j = 0; j <= i; j++) {
        const float *k = c->qkv + ((size_t)b * s.T + j) * s.ld_kv + qs + g * s.HS;
        double d = 0;
        for (int x = 0; x < s.HS; x++) d += (double)q[x] * k[x];
        sc[j] = d / sqrt((double)s.HS);
        mx = fmax(mx, sc[j]);
    }
    for (int x = 0; x < s.HS; x++) o[x] = 0;
    for (int j = 0; j <= i; j++) {
        double p = exp(sc[j] - mx);
        sum += p;
        const float *v = c->qkv + ((size_t)b * s.T + j) * s.ld_kv + qs + ks + g * s.HS;
        for (int x = 0; x < s.HS; x++) o[x] += p * v[x];
    }
    for (int x = 0; x < s.HS; x++) o[x] /= sum;
    return mx + log(sum);
}

/* Causal attention with GQA in a fused qkv layout: forward against a naive
 * double version, backward against differences; T spans several tiles. */
static void test_attention(int B, int T, int NH, int NKV, int HS)
{
    int width = (NH + 2 * NKV) * HS;
    AttnCtx c = {.s = {B, T, NH, NKV, HS, width, width}};
    size_t nqkv = (size_t)B * T * width, nout = (size_t)B * T * NH * HS;
    c.qkv = rand_array(nqkv, 1.5f), c.out = zeros(nout), c.lse = zeros((size_t)B * NH * T);
    c.w = rand_array(nout, 1);
    attn_loss(&c);
    double eo = 0, el = 0, o[256];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                double lse = attn_naive_row(&c, b, h, i, o);
                el = fmax(el, fabs(lse - c.lse[((size_t)b * NH + h) * T + i]));
                for (int x = 0; x < HS; x++)
                    eo = fmax(eo, fabs(o[x] - c.out[(((size_t)b * T + i) * NH + h) * HS + x]));
            }
    char what[128];
    snprintf(what, sizeof what, "attention T=%d NH=%d NKV=%d: out vs naive", T, NH, NKV);
    check(eo < 2e-6, what, eo, 2e-6);
    snprintf(what, sizeof what, "attention T=%d NH=%d NKV=%d: lse vs naive", T, NH, NKV);
    check(el < 2e-6, what, el, 2e-6);

    float *dqkv = zeros(nqkv);
    int qs = NH * HS, ks = NKV * HS;
    kc_attention_backward(dqkv, dqkv + qs, dqkv + qs + ks, c.w, c.out, c.lse, c.qkv, c.qkv + qs,
                          c.qkv + qs + ks, c.s);
    snprintf(what, sizeof what, "attention T=%d NH=%d NKV=%d", T, NH, NKV);
    Wrt wrt[] = {{"qkv", c.qkv, dqkv, nqkv}};
    fd_check(what, attn_loss, &c, wrt, 1, 1e-2f, 2e-3, 400);

    float *dqkv2 = copy_of(dqkv, nqkv);
    kc_attention_backward(dqkv2, dqkv2 + qs, dqkv2 + qs + ks, c.w, c.out, c.lse, c.qkv,
                          c.qkv + qs, c.qkv + qs + ks, c.s);
    check_doubled(what, dqkv, dqkv2, nqkv);
}

/* ---- rope --------------------------------------------------------------- */
typedef struct RopeCtx { int B, T, NH, HS, pos0; float *x, *out, *w; } RopeCtx;

static double rope_loss(void *p)
{
    RopeCtx *c = p;
    kc_rope_forward(c->out, c->x, c->B, c->T, c->NH, c->HS, c->NH * c->HS, c->pos0, 10000.0f);
    return dot_loss(c->out, c->w, (size_t)c->B * c->T * c->NH * c->HS);
}

/* rope: a rotation (norms kept), position 0 is the identity, in place works,
 * backward against differences. */
static void test_rope(void)
{
    RopeCtx c = {.B = 2, .T = 6, .NH = 3, .HS = 8, .pos0 = 3};
    size_t n = (size_t)c.B * c.T * c.NH * c.HS;
    c.x = rand_array(n, 1), c.out = zeros(n), c.w = rand_array(n, 1);
    rope_loss(&c);
    double e = 0;
    for (size_t r = 0; r < n / c.HS; r++) {
        double a = 0, b = 0;
        for (int i = 0; i < c.HS / 2; i++) {
            /* each (i, i + HS/2) pair is rotated: its norm is kept */
            const float *x = c.x + r * c.HS, *y = c.out + r * c.HS;
            a = hypot(x[i], x[i + c.HS / 2]);
            b = hypot(y[i], y[i + c.HS / 2]);
            e = fmax(e, fabs(a - b));
        }
    }
    check(e < 1e-6, "rope: pairs keep their norm", e, 1e-6);
    float *y0 = zeros(n);
    kc_rope_forward(y0, c.x, c.B, c.T, c.NH, c.HS, c.NH * c.HS, 0, 10000.0f);
    check(memcmp(y0, c.x, (size_t)c.NH * c.HS * sizeof(float)) == 0, "rope: position 0 is the identity", 0, 0);
    float *inplace = copy_of(c.x, n);
    kc_rope_forward(inplace, inplace, c.B, c.T, c.NH, c.HS, c.NH * c.HS, c.pos0, 10000.0f);
    check(memcmp(inplace, c.out, n * sizeof(float)) == 0, "rope: in place", 0, 0);

    float *dx = zeros(n);
    kc_rope_backward(dx, c.w, c.B, c.T, c.NH, c.HS, c.NH * c.HS, c.pos0, 10000.0f);
    Wrt wrt[] = {{"inp", c.x, dx, n}};
    fd_check("rope", rope_loss, &c, wrt, 1, 1e-2f, 1e-3, 1000);
    float *dx2 = copy_of(dx, n);
    kc_rope_backward(dx2, c.w, c.B, c.T, c.NH, c.HS, c.NH * c.HS, c.pos0, 10000.0f);
    check_doubled("rope dinp", dx, dx2, n);

    /* from the angle tables (the CPU backend's, computed once): the same bits,
       from the table's row pos0 on */
    int npos = c.pos0 + c.T + 2;
    float *cs = zeros((size_t)npos * c.HS / 2), *sn = zeros((size_t)npos * c.HS / 2);
    kc_rope_table(cs, sn, npos, c.HS, 10000.0f);
    float *yt = zeros(n), *dxt = zeros(n), *dx1 = zeros(n);
    size_t at = (size_t)c.pos0 * c.HS / 2;
    kc_rope_forward_tab(yt, c.x, c.B, c.T, c.NH, c.HS, c.NH * c.HS, cs + at, sn + at);
    check(memcmp(yt, c.out, n * sizeof(float)) == 0, "rope: from the tables, forward", 0, 0);
    kc_rope_backward(dx1, c.w, c.B, c.T, c.NH, c.HS, c.NH * c.HS, c.pos0, 10000.0f);
    kc_rope_backward_tab(dxt, c.w, c.B, c.T, c.NH, c.HS, c.NH * c.HS, cs + at, sn + at);
    check(memcmp(dxt, dx1, n * sizeof(float)) == 0, "rope: from the tables, backward", 0, 0);
    float *inv = copy_of(c.w, n);   /* in place: the same values */
    kc_rope_inverse_tab(inv, c.B, c.T, c.NH, c.HS, c.NH * c.HS, cs + at, sn + at);
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)inv[i] - (double)dx1[i]));
    check(d == 0, "rope: from the tables, backward in place", d, 0);
}

/* ---- embedding ---------------------------------------------------------- */
typedef struct EmbCtx { int B, T, C, V; int32_t *tok; float *wte, *wpe, *out, *w; } EmbCtx;

static double emb_loss(void *p)
{
    EmbCtx *c = p;
    kc_embedding_forward(c->out, c->tok, c->wte, c->wpe, c->B, c->T, c->C, 0, c->V);
    return dot_loss(c->out, c->w, (size_t)c->B * c->T * c->C);
}

/* embedding: gradients against differences (repeated tokens); two vocab
 * shards sum to the full output and own disjoint rows of the gradient. */
static void test_embedding(void)
{
    EmbCtx c = {.B = 2, .T = 5, .C = 70, .V = 7};
    size_t nbt = (size_t)c.B * c.T, no = nbt * c.C;
    int32_t tok[10] = {1, 3, 3, 0, 6, 5, 3, 1, 2, 6};
    c.tok = tok, c.wte = rand_array((size_t)c.V * c.C, 1), c.wpe = rand_array((size_t)c.T * c.C, 1);
    c.out = zeros(no), c.w = rand_array(no, 1);
    emb_loss(&c);
    float *dwte = zeros((size_t)c.V * c.C), *dwpe = zeros((size_t)c.T * c.C);
    kc_embedding_backward(dwte, dwpe, c.w, c.tok, c.B, c.T, c.C, 0, c.V);
    Wrt wrt[] = {{"wte", c.wte, dwte, (size_t)c.V * c.C}, {"wpe", c.wpe, dwpe, (size_t)c.T * c.C}};
    fd_check("embedding", emb_loss, &c, wrt, 2, 1e-2f, 1e-3, 1000);

    /* shard 0 holds rows [0,4), shard 1 rows [4,7) and passes wpe = NULL */
    float *o0 = zeros(no), *o1 = zeros(no);
    kc_embedding_forward(o0, c.tok, c.wte, c.wpe, c.B, c.T, c.C, 0, 4);
    kc_embedding_forward(o1, c.tok, c.wte + 4 * c.C, NULL, c.B, c.T, c.C, 4, 7);
    double e = 0;
    for (size_t i = 0; i < no; i++) e = fmax(e, fabs(o0[i] + o1[i] - c.out[i]));
    check(e == 0, "embedding: vocab shards sum to the full output", e, 0);
    float *g0 = zeros(4 * (size_t)c.C), *g1 = zeros(3 * (size_t)c.C);
    kc_embedding_backward(g0, NULL, c.w, c.tok, c.B, c.T, c.C, 0, 4);
    kc_embedding_backward(g1, NULL, c.w, c.tok, c.B, c.T, c.C, 4, 7);
    int same = !memcmp(g0, dwte, 4 * c.C * sizeof(float)) &&
               !memcmp(g1, dwte + 4 * c.C, 3 * c.C * sizeof(float));
    check(same, "embedding: vocab shards own their gradient rows", 0, 0);
}

/* ---- cross-entropy ------------------------------------------------------ */
typedef struct XentCtx { int N, V, Vp; int32_t *tgt; float *logits, *loss; } XentCtx;

/* Single-rank loss for every row; returns mean over non-ignored rows. */
static double xent_loss(void *p)
{
    XentCtx *c = p;
    float mx[64], sm[64], tl[64], gm[64], gs[64], gt[64];
    kc_xent_partial(mx, sm, tl, c->logits, c->tgt, c->N, c->Vp, 0, c->V);
    kc_xent_combine(gm, gs, gt, mx, sm, tl, 1, c->N);
    kc_xent_loss(c->loss, c->tgt, gm, gs, gt, c->N);
    double s = 0;
    int count = 0;
    for (int n = 0; n < c->N; n++) s += c->loss[n], count += c->tgt[n] >= 0;
    return s / count;
}

/* Cross-entropy: loss against log-softmax in double, gradient against
 * differences, padding and ignored rows get zero, two vocab shards (with the
 * allreduce protocol) equal one. */
static void test_xent(void)
{
    XentCtx c = {.N = 6, .V = 45, .Vp = 64};
    int32_t tgt[6] = {3, 44, 0, -1, 20, 44};
    c.tgt = tgt, c.logits = rand_array((size_t)c.N * c.Vp, 4), c.loss = zeros(c.N);
    c.logits[1 * c.Vp + 50] = 1e4f;   /* padding never counts, however large */
    xent_loss(&c);
    double e = 0;
    for (int n = 0; n < c.N; n++) {
        if (tgt[n] < 0) continue;
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < c.V; j++) mx = fmax(mx, c.logits[n * c.Vp + j]);
        for (int j = 0; j < c.V; j++) s += exp(c.logits[n * c.Vp + j] - mx);
        e = fmax(e, fabs(log(s) + mx - c.logits[n * c.Vp + tgt[n]] - c.loss[n]));
    }
    check(e < 1e-5 && c.loss[3] == 0.0f, "xent: loss vs double log-softmax", e, 1e-5);

    float dloss = 1.0f / 5;
    float *grad = copy_of(c.logits, (size_t)c.N * c.Vp);
    float mx[6], sm[6], tl[6], gm[6], gs[6], gt[6];
    kc_xent_partial(mx, sm, tl, grad, c.tgt, c.N, c.Vp, 0, c.V);
    kc_xent_combine(gm, gs, gt, mx, sm, tl, 1, c.N);
    kc_xent_backward(grad, c.tgt, gm, gs, dloss, c.N, c.Vp, 0, c.V);
    int zero = 1;
    for (int n = 0; n < c.N; n++)
        for (int j = 0; j < c.Vp; j++)
            if ((j >= c.V || tgt[n] < 0) && grad[n * c.Vp + j] != 0.0f) zero = 0;
    check(zero, "xent: padding columns and ignored rows get 0", 0, 0);
    Wrt wrt[] = {{"logits", c.logits, grad, (size_t)c.N * c.Vp}};
    fd_check("xent", xent_loss, &c, wrt, 1, 1e-2f, 2e-3, 1000);

    /* two shards, columns [0,32) and [32,64), combined as the runtime will */
    float *s0 = zeros(c.N * 32), *s1 = zeros(c.N * 32);
    for (int n = 0; n < c.N; n++) {
        memcpy(s0 + n * 32, c.logits + n * c.Vp, 32 * sizeof(float));
        memcpy(s1 + n * 32, c.logits + n * c.Vp + 32, 32 * sizeof(float));
    }
    float pm[12], ps[12], pt[12], gmax[6], loss2[6];
    kc_xent_partial(pm, ps, pt, s0, c.tgt, c.N, 32, 0, c.V);
    kc_xent_partial(pm + 6, ps + 6, pt + 6, s1, c.tgt, c.N, 32, 32, c.V);
    for (int n = 0; n < c.N; n++) gmax[n] = fmaxf(pm[n], pm[6 + n]);   /* max-allreduce */
    kc_xent_rescale(ps, pm, gmax, c.N);
    kc_xent_rescale(ps + 6, pm + 6, gmax, c.N);
    float gsum[6], gtl[6];
    for (int n = 0; n < c.N; n++) gsum[n] = ps[n] + ps[6 + n], gtl[n] = pt[n] + pt[6 + n];   /* sum-allreduce */
    kc_xent_loss(loss2, c.tgt, gmax, gsum, gtl, c.N);
    kc_xent_backward(s0, c.tgt, gmax, gsum, dloss, c.N, 32, 0, c.V);
    kc_xent_backward(s1, c.tgt, gmax, gsum, dloss, c.N, 32, 32, c.V);
    double el = 0, eg = 0;
    for (int n = 0; n < c.N; n++) {
        el = fmax(el, fabs(loss2[n] - c.loss[n]) / fmax(1.0, fabs(c.loss[n])));
        for (int j = 0; j < 32; j++) {
            eg = fmax(eg, fabs(s0[n * 32 + j] - grad[n * c.Vp + j]));
            eg = fmax(eg, fabs(s1[n * 32 + j] - grad[n * c.Vp + 32 + j]));
        }
    }
    check(el < 1e-6, "xent: two vocab shards, loss = unsplit", el, 1e-6);
    check(eg < 1e-8, "xent: two vocab shards, dlogits = unsplit", eg, 1e-8);
    /* the in-process combine of the same two partials agrees */
    float cm[6], cs[6], ct[6];
    kc_xent_partial(pm, ps, pt, c.logits, c.tgt, c.N, c.Vp, 0, c.V);   /* unsplit again */
    kc_xent_combine(cm, cs, ct, pm, ps, pt, 1, c.N);
    check(!memcmp(cm, gm, sizeof cm) && !memcmp(cs, gs, sizeof cs), "xent: combine is deterministic", 0, 0);

    /* three shards [0,32) [32,64) [64,96) of a 96-column padded row: the last
     * holds padding only (max -inf, sum 0) and must change nothing */
    float *p3 = zeros(c.N * 96), m3[18], s3[18], t3[18], g3[6], q3[6], l3[6], loss3[6];
    for (int n = 0; n < c.N; n++) memcpy(p3 + n * 96, c.logits + n * c.Vp, c.Vp * sizeof(float));
    float *sh = zeros(c.N * 32);
    for (int r = 0; r < 3; r++) {
        for (int n = 0; n < c.N; n++) memcpy(sh + n * 32, p3 + n * 96 + r * 32, 32 * sizeof(float));
        kc_xent_partial(m3 + 6 * r, s3 + 6 * r, t3 + 6 * r, sh, c.tgt, c.N, 32, 32 * r, c.V);
    }
    kc_xent_combine(g3, q3, l3, m3, s3, t3, 3, c.N);
    kc_xent_loss(loss3, c.tgt, g3, q3, l3, c.N);
    double e3 = 0;
    for (int n = 0; n < c.N; n++) e3 = fmax(e3, fabs(loss3[n] - c.loss[n]) / fmax(1.0, fabs(c.loss[n])));
    check(e3 < 1e-6 && isinf(m3[12]) && s3[12] == 0.0f, "xent: a shard of padding only", e3, 1e-6);
}

/* ---- the fused head ------------------------------------------------------ */
/* The unfused head of the same shard: matmul, cross-entropy phases with the
 * tp protocol left to the caller (gmax, gsum given), matmul backward. */
typedef struct HeadRun { float *logits, *rowmax, *rowsum, *tlogit, *scratch, *dinp, *dw; } HeadRun;

/* A HeadRun's buffers for shape s, dinp and dw holding `init` (N,C) / (Vl,C). */
static HeadRun head_alloc(KcHeadShape s, const float *dinp0, const float *dw0)
{
    HeadRun h = {zeros((size_t)s.N * s.Vl), zeros(s.N), zeros(s.N), zeros(s.N),
                 zeros(kc_head_scratch_floats(s)), copy_of(dinp0, (size_t)s.N * s.C),
                 copy_of(dw0, (size_t)s.Vl * s.C)};
    return h;
}

/* max |a - b| / max(max |b|, floor). */
static double rel_err(const float *a, const float *b, size_t n, double floor)
{
    double e = 0, m = floor;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - b[i])), m = fmax(m, fabs(b[i]));
    return e / m;
}

/* One unsplit fused head against the unfused kernels, its gradients added
 * to random initial values (they accumulate). */
static void head_vs_unfused(const char *label, int N, int C, int V, int Vl)
{
    KcHeadShape s = {N, C, Vl, 0, V};
    float *inp = rand_array((size_t)N * C, 1), *w = rand_array((size_t)Vl * C, 0.5f);
    for (size_t i = (size_t)V * C; i < (size_t)Vl * C; i++) w[i] = 0.0f;   /* padding rows are zero */
    int32_t *tgt = talloc((size_t)N * sizeof(int32_t));
    int count = 0;
    for (int n = 0; n < N; n++) tgt[n] = (int32_t)(rng_next() % V);
    tgt[1] = -1, tgt[2] = V - 1, tgt[3] = 0;
    for (int n = 0; n < N; n++) count += tgt[n] >= 0;
    float dloss = 1.0f / count;
    /* initial gradients of the size of the new ones, so the sums keep their bits */
    float *dinp0 = rand_array((size_t)N * C, dloss), *dw0 = rand_array((size_t)Vl * C, dloss);

    /* unfused */
    float *lg = zeros((size_t)N * Vl), *mx = zeros(N), *sm = zeros(N), *tl = zeros(N);
    float *gm = zeros(N), *gs = zeros(N), *gt = zeros(N), *loss = zeros(N);
    float *dinp = copy_of(dinp0, (size_t)N * C), *dw = copy_of(dw0, (size_t)Vl * C);
    kc_matmul_forward(lg, inp, w, NULL, N, C, Vl);
    kc_xent_partial(mx, sm, tl, lg, tgt, N, Vl, 0, V);
    kc_xent_combine(gm, gs, gt, mx, sm, tl, 1, N);
    kc_xent_loss(loss, tgt, gm, gs, gt, N);
    kc_xent_backward(lg, tgt, gm, gs, dloss, N, Vl, 0, V);
    kc_matmul_backward(dinp, dw, NULL, lg, inp, w, N, C, Vl);

    /* fused */
    HeadRun h = head_alloc(s, dinp0, dw0);
    float *fm = zeros(N), *fs = zeros(N), *ft = zeros(N), *floss = zeros(N);
    kc_head_forward(h.logits, h.rowmax, h.rowsum, h.tlogit, h.scratch, inp, w, tgt, s);
    kc_xent_combine(fm, fs, ft, h.rowmax, h.rowsum, h.tlogit, 1, N);
    kc_xent_loss(floss, tgt, fm, fs, ft, N);
    kc_head_backward(h.dinp, h.dw, h.logits, h.scratch, inp, w, tgt, fm, fs, dloss, s);

    char what[128];
    double el = rel_err(floss, loss, N, 1.0);
    snprintf(what, sizeof what, "head %s: loss = unfused", label);
    check(el < 1e-6 && floss[1] == 0.0f, what, el, 1e-6);
    double ed = rel_err(h.logits, lg, (size_t)N * Vl, 1e-3);
    snprintf(what, sizeof what, "head %s: dlogits = unfused (padding 0)", label);
    check(ed < 1e-5, what, ed, 1e-5);
    for (int i = 0; i < N * C; i++) h.dinp[i] -= dinp0[i], dinp[i] -= dinp0[i];
    for (int i = 0; i < Vl * C; i++) h.dw[i] -= dw0[i], dw[i] -= dw0[i];
    double ei = rel_err(h.dinp, dinp, (size_t)N * C, 0), ew = rel_err(h.dw, dw, (size_t)Vl * C, 0);
    snprintf(what, sizeof what, "head %s: dinp += as unfused", label);
    check(ei < 1e-5, what, ei, 1e-5);
    snprintf(what, sizeof what, "head %s: dw += as unfused", label);
    check(ew < 1e-5, what, ew, 1e-5);
}

/* Shards of the vocabulary combined with the tp protocol (max, rescale,
 * sum) give the unsplit fused head; a shard of padding only adds nothing. */
static void head_shards(void)
{
    int N = 30, C = 16, V = 2000, Vp = 3072, Vl = 1024;
    float *inp = rand_array((size_t)N * C, 1), *w = rand_array((size_t)Vp * C, 0.5f);
    for (size_t i = (size_t)V * C; i < (size_t)Vp * C; i++) w[i] = 0.0f;
    int32_t tgt[30];
    for (int n = 0; n < N; n++) tgt[n] = (int32_t)(rng_next() % V);
    tgt[0] = -1, tgt[5] = 1023, tgt[6] = 1024;
    float dloss = 1.0f / (N - 1);
    float *zi = zeros((size_t)N * C), *zw = zeros((size_t)Vp * C);
    /* unsplit */
    KcHeadShape s = {N, C, Vp, 0, V};
    HeadRun u = head_alloc(s, zi, zw);
    float gm[30], gs[30], gt[30], loss[30];
    kc_head_forward(u.logits, u.rowmax, u.rowsum, u.tlogit, u.scratch, inp, w, tgt, s);
    kc_xent_combine(gm, gs, gt, u.rowmax, u.rowsum, u.tlogit, 1, N);
    kc_xent_loss(loss, tgt, gm, gs, gt, N);
    kc_head_backward(u.dinp, u.dw, u.logits, u.scratch, inp, w, tgt, gm, gs, dloss, s);
    /* three shards of 1024 columns; the third is padding only */
    HeadRun r[3];
    float pm[90], ps[90], pt[90], gmax[30], gsum[30], gtl[30], loss3[30];
    for (int k = 0; k < 3; k++) {
        KcHeadShape sk = {N, C, Vl, k * Vl, V};
        r[k] = head_alloc(sk, zi, zw);
        kc_head_forward(r[k].logits, pm + k * N, ps + k * N, pt + k * N, r[k].scratch, inp,
                        w + (size_t)k * Vl * C, tgt, sk);
    }
    for (int n = 0; n < N; n++) gmax[n] = fmaxf(fmaxf(pm[n], pm[N + n]), pm[2 * N + n]);   /* max-allreduce */
    for (int k = 0; k < 3; k++) kc_xent_rescale(ps + k * N, pm + k * N, gmax, N);
    for (int n = 0; n < N; n++)                                                           /* sum-allreduce */
        gsum[n] = ps[n] + ps[N + n] + ps[2 * N + n], gtl[n] = pt[n] + pt[N + n] + pt[2 * N + n];
    kc_xent_loss(loss3, tgt, gmax, gsum, gtl, N);
    float *dinp3 = zeros((size_t)N * C);
    for (int k = 0; k < 3; k++) {
        KcHeadShape sk = {N, C, Vl, k * Vl, V};
        kc_head_backward(r[k].dinp, r[k].dw, r[k].logits, r[k].scratch, inp, w + (size_t)k * Vl * C, tgt,
                         gmax, gsum, dloss, sk);
        for (int i = 0; i < N * C; i++) dinp3[i] += r[k].dinp[i];
    }
    double el = rel_err(loss3, loss, N, 1.0), ei = rel_err(dinp3, u.dinp, (size_t)N * C, 0);
    double ew = 0;
    for (int k = 0; k < 2; k++) ew = fmax(ew, rel_err(r[k].dw, u.dw + (size_t)k * Vl * C, (size_t)Vl * C, 1e-3));
    int pad = isinf(pm[2 * N]) && ps[2 * N] == 0.0f;
    for (int i = 0; i < N * C; i++) pad &= r[2].dinp[i] == 0.0f;
    for (int i = 0; i < N * Vl; i++) pad &= r[2].logits[i] == 0.0f && r[2].dw[i % (Vl * C)] == 0.0f;
    check(el < 1e-6, "head: three vocab shards, loss = unsplit", el, 1e-6);
    check(ei < 1e-5 && ew < 1e-5, "head: three vocab shards, dinp and dw = unsplit", fmax(ei, ew), 1e-5);
    check(pad, "head: a shard of padding only adds nothing", 0, 0);
}

/* The fused head: several chunks, groups and row blocks, padding, ignored
 * rows, targets at both ends; shards. */
static void test_head(void)
{
    head_vs_unfused("40 rows, 3 chunks", 40, 24, 2500, 2560);
    head_vs_unfused("1100 rows, 2 row blocks", 1100, 8, 1100, 1152);
    /* one chunk: rows in 4 splits, dw in column splits (one of them empty) */
    head_vs_unfused("128 rows, 1 chunk, 4 row splits", 128, 40, 250, 256);
    head_shards();
}

/* ---- vectorised exp ----------------------------------------------------- */
/* The float's position on the number line, for distances in ulps. */
static int64_t ulp_index(float f)
{
    int32_t i;
    memcpy(&i, &f, 4);
    return i < 0 ? -(int64_t)(i & 0x7fffffff) : i;
}

/* kc_vexp within 2 ulp of exp wherever the result is normal; its limits. */
static void test_vexp(void)
{
    enum { N = 1 << 20 };
    float *x = zeros(N), *y = zeros(N);
    for (int i = 0; i < N; i++) x[i] = -87.0f + 175.7f * (float)i / N;
    kc_vexp(y, x, N);
    int64_t worst = 0;
    for (int i = 0; i < N; i++) {
        float ref = (float)exp((double)x[i]);
        int64_t d = llabs(ulp_index(ref) - ulp_index(y[i]));
        if (d > worst) worst = d;
    }
    check(worst <= 2, "vexp: ulps from exp on [-87, 88.7]", (double)worst, 2);
    float sp[] = {0.0f, -INFINITY, INFINITY, NAN, -200.0f, 89.0f, -100.0f};
    float so[7];
    kc_vexp(so, sp, 7);
    int ok = so[0] == 1.0f && so[1] == 0.0f && isinf(so[2]) && isnan(so[3]) && so[4] == 0.0f &&
             isinf(so[5]) && so[6] > 0.0f && so[6] < 1e-43f;
    check(ok, "vexp: 0, -inf, inf, NaN, underflow, overflow, subnormal", 0, 0);
}

/* ---- optimizers --------------------------------------------------------- */
/* AdamW for 3 steps against a scalar double transcription of torch's code,
 * with decay on one range and not on the other, and the bf16 copy. */
static void test_adamw(void)
{
    enum { N = 300 };
    float *p = rand_array(N, 1), *m = zeros(N), *v = zeros(N), *g = zeros(N);
    double rp[N], rm[N] = {0}, rv[N] = {0};
    uint16_t pb[N];
    for (int i = 0; i < N; i++) rp[i] = p[i];
    double e = 0;
    for (int t = 1; t <= 3; t++) {
        for (int i = 0; i < N; i++) g[i] = frand() * 0.1f;
        for (int part = 0; part < 2; part++) {
            KcAdamW h = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                         .weight_decay = part ? 0.0 : 0.1, .t = t, .grad_scale = 0.5f};
            int lo = part ? 200 : 0, hi = part ? N : 200;
            kc_adamw_step(p + lo, pb + lo, g + lo, m + lo, v + lo, hi - lo, h);
            for (int i = lo; i < hi; i++) {
                double gi = g[i] * 0.5;
                rp[i] *= 1 - h.lr * h.weight_decay;
                rm[i] = h.beta1 * rm[i] + (1 - h.beta1) * gi;
                rv[i] = h.beta2 * rv[i] + (1 - h.beta2) * gi * gi;
                double denom = sqrt(rv[i]) / sqrt(1 - pow(h.beta2, t)) + h.eps;
                rp[i] -= h.lr / (1 - pow(h.beta1, t)) * rm[i] / denom;
            }
        }
        for (int i = 0; i < N; i++) e = fmax(e, fabs(p[i] - rp[i]));
    }
    check(e < 1e-6, "adamw: 3 steps vs scalar double reference", e, 1e-6);
    int bf = 1;
    for (int i = 0; i < N; i++) bf &= pb[i] == kc_bf16_from_f32(p[i]);
    check(bf, "adamw: bf16 copy of the params", 0, 0);
}

/* SGD with momentum, dampening, nesterov and weight decay vs double. */
static void test_sgd(void)
{
    enum { N = 100 };
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        float *p = rand_array(N, 1), *buf = zeros(N), *g = zeros(N);
        double rp[N], rb[N];
        for (int i = 0; i < N; i++) rp[i] = p[i];
        KcSGD h = {.lr = 0.1, .momentum = 0.9, .dampening = nesterov ? 0.0 : 0.2,
                   .weight_decay = 0.01, .nesterov = nesterov, .grad_scale = 1.0f};
        double e = 0;
        for (int t = 0; t < 3; t++) {
            for (int i = 0; i < N; i++) g[i] = frand();
            h.first_step = t == 0;
            kc_sgd_step(p, g, buf, N, h);
            for (int i = 0; i < N; i++) {
                double d = g[i] + h.weight_decay * rp[i];
                rb[i] = t == 0 ? d : h.momentum * rb[i] + (1 - h.dampening) * d;
                d = nesterov ? d + h.momentum * rb[i] : rb[i];
                rp[i] -= h.lr * d;
                e = fmax(e, fabs(rp[i] - p[i]));
            }
        }
        check(e < 1e-6, nesterov ? "sgd nesterov: 3 steps vs double" : "sgd momentum+dampening: 3 steps vs double", e, 1e-6);
    }
}

/* The exact norm: against a long-double sum, identical for every sharding
 * and thread count, and for bf16 inputs; inf and NaN propagate. */
static void test_norm_exact(void)
{
    enum { N = 100003 };
    float *x = rand_array(N, 1);
    x[5] = 3e-39f;      /* subnormal */
    x[6] = 1e30f;       /* huge: its square needs double's range */
    x[7] = -1e-30f;
    long double ref = 0;
    for (int i = 0; i < N; i++) ref += (long double)x[i] * x[i];
    double n2 = kc_global_norm(x, N);
    double rel = fabs(n2 * n2 - (double)ref) / (double)ref;
    check(rel < 1e-15, "norm: sum of squares vs long double", rel, 1e-15);

    KcSumsq whole, parts, tmp;
    kc_sumsq_zero(&whole);
    kc_sumsq_add(&whole, x, N);
    double v = kc_sumsq_value(&whole);
    int same = 1;
    size_t cuts[][4] = {{0, 1, 50000, N}, {0, 33333, 66666, N}, {0, 99999, 100000, N}};
    for (int c = 0; c < 3; c++) {
        kc_sumsq_zero(&parts);
        for (int s = 2; s >= 0; s--) {   /* shards merged in reverse order */
            kc_sumsq_zero(&tmp);
            kc_sumsq_add(&tmp, x + cuts[c][s], cuts[c][s + 1] - cuts[c][s]);
            kc_sumsq_merge(&parts, &tmp);
        }
        same &= kc_sumsq_value(&parts) == v && !memcmp(&parts, &whole, sizeof parts);
    }
    check(same, "norm: every sharding gives the same bits", 0, 0);
    for (int th = 1; th <= 3; th++) {
        omp_set_num_threads(th);
        same &= kc_global_norm(x, N) == n2;
    }
    omp_set_num_threads(2);
    check(same, "norm: 1, 2, 3 threads give the same bits", 0, 0);

    uint16_t *xb = talloc(N * sizeof(uint16_t));
    kc_cast_f32_to_bf16(xb, x, N);
    float *xr = zeros(N);
    kc_cast_bf16_to_f32(xr, xb, N);
    KcSumsq a, b;
    kc_sumsq_zero(&a);
    kc_sumsq_zero(&b);
    kc_sumsq_add_bf16(&a, xb, N);
    kc_sumsq_add(&b, xr, N);
    check(kc_sumsq_value(&a) == kc_sumsq_value(&b), "norm: bf16 input = its fp32 value", 0, 0);

    x[9] = INFINITY;
    check(isinf(kc_global_norm(x, N)) && !kc_all_finite(x, N), "norm: inf propagates", 0, 0);
    x[10] = NAN;
    check(isnan(kc_global_norm(x, N)), "norm: NaN propagates", 0, 0);
    x[9] = x[10] = 0;
    check(kc_all_finite(x, N), "all_finite on finite data", 0, 0);
    kc_scale(x, N, 0.5f);
    check(kc_global_norm(x, N) == n2 * 0.5, "scale by 1/2 halves the norm exactly", 0, 0);
}

/* ---- casts -------------------------------------------------------------- */
/* A float from its bits. */
static float fbits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Known bit patterns, round trips of all 65536 16-bit values, and fp16
 * against the compiler's _Float16 on random bit patterns. */
static void test_casts(void)
{
    struct { uint32_t f; uint16_t bf, h; } known[] = {
        {0x3F800000, 0x3F80, 0x3C00},   /* 1 */
        {0xC0000000, 0xC000, 0xC000},   /* -2 */
        {0x80000000, 0x8000, 0x8000},   /* -0 */
        {0x3F808000, 0x3F80, 0x3C04},   /* 1 + 2^-8: bf16 tie to even (down) */
        {0x3F818000, 0x3F82, 0x3C0C},   /* bf16 tie to even (up) */
        {0x3F808001, 0x3F81, 0x3C04},   /* just above the tie */
        {0x477FE000, 0x4780, 0x7BFF},   /* 65504, the largest fp16 */
        {0x477FF000, 0x4780, 0x7C00},   /* 65520: fp16 tie rounds to inf */
        {0x477FEFFF, 0x4780, 0x7BFF},   /* just below it */
        {0x38800000, 0x3880, 0x0400},   /* 2^-14, smallest normal fp16 */
        {0x33800000, 0x3380, 0x0001},   /* 2^-24, smallest subnormal */
        {0x33000000, 0x3300, 0x0000},   /* 2^-25: tie to even, 0 */
        {0x33000001, 0x3300, 0x0001},   /* just above */
        {0x33C00000, 0x33C0, 0x0002},   /* 1.5 * 2^-24: tie to even, 2 */
        {0x7F7FFFFF, 0x7F80, 0x7C00},   /* FLT_MAX: bf16 rounds to inf */
        {0x7F800000, 0x7F80, 0x7C00},   /* inf */
        {0xFF800000, 0xFF80, 0xFC00},   /* -inf */
        {0x7FC00000, 0x7FC0, 0x7E00},   /* quiet NaN */
        {0x7F800001, 0x7FC0, 0x7E00},   /* signalling NaN stays NaN */
        {0xFFC00000, 0xFFC0, 0xFE00},   /* -NaN */
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        float f = fbits(known[i].f);
        uint16_t bf = kc_bf16_from_f32(f), h = kc_fp16_from_f32(f);
        if (bf != known[i].bf || h != known[i].h) {
            printf("  cast %08X: bf16 %04X (want %04X) fp16 %04X (want %04X)\n", known[i].f, bf,
                   known[i].bf, h, known[i].h);
            bad++;
        }
    }
    check(bad == 0, "casts: known bit patterns", bad, 0);

    int rt = 0;
    for (uint32_t u = 0; u < 65536; u++) {
        uint16_t b = (uint16_t)u;
        float fb = kc_f32_from_bf16(b), fh = kc_f32_from_fp16(b);
        if (isnan(fb) ? !isnan(kc_f32_from_bf16(kc_bf16_from_f32(fb))) : kc_bf16_from_f32(fb) != b) rt++;
        if (isnan(fh) ? !isnan(kc_f32_from_fp16(kc_fp16_from_f32(fh))) : kc_fp16_from_f32(fh) != b) rt++;
    }
    check(rt == 0, "casts: all 65536 bf16 and fp16 values round-trip", rt, 0);
#ifdef __FLT16_MAX__
    int diff = 0;
    for (int i = 0; i < 2000000; i++) {
        float f = fbits((uint32_t)rng_next());
        _Float16 ref = (_Float16)f;
        uint16_t rb;
        memcpy(&rb, &ref, 2);
        uint16_t h = kc_fp16_from_f32(f);
        if (isnan(f) ? !isnan(kc_f32_from_fp16(h)) : h != rb) diff++;
    }
    check(diff == 0, "casts: fp16 = _Float16 on 2M random floats", diff, 0);
#endif
    float xs[4] = {1.00390625f, -3.3f, 1e-3f, 65536.5f};
    float ys[4];
    memcpy(ys, xs, sizeof xs);
    kc_round_bf16(ys, 4);
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= ys[i] == kc_f32_from_bf16(kc_bf16_from_f32(xs[i]));
    check(ok && ys[0] == 1.0f, "casts: round_bf16 in place", 0, 0);
}

/* ---- determinism across thread counts ------------------------------------ */
/* Runs every kernel at sizes that span several tiles and chunks and appends
 * all outputs and gradients to out; returns the number of floats written. */
static size_t run_everything(float *out)
{
    size_t pos = 0;
#define TAKE(ptr, n) (memcpy(out + pos, (ptr), (n) * sizeof(float)), pos += (n))
    rng_seed(42);
    {   /* matmul: N and OC large enough for several row chunks */
        int N = 1100, C = 64, OC = 200;
        float *x = rand_array((size_t)N * C, 1), *w = rand_array((size_t)OC * C, 1), *b = rand_array(OC, 1);
        float *y = zeros((size_t)N * OC), *dy = rand_array((size_t)N * OC, 1);
        float *dx = zeros((size_t)N * C), *dw = zeros((size_t)OC * C), *db = zeros(OC);
        kc_matmul_forward(y, x, w, b, N, C, OC);
        kc_matmul_backward(dx, dw, db, dy, x, w, N, C, OC);
        TAKE(y, (size_t)N * OC), TAKE(dx, (size_t)N * C), TAKE(dw, (size_t)OC * C), TAKE(db, OC);
    }
    {   /* norms */
        int N = 300, C = 200;
        float *x = rand_array((size_t)N * C, 2), *w = rand_array(C, 1), *b = rand_array(C, 1);
        float *y = zeros((size_t)N * C), *m = zeros(N), *r = zeros(N), *dy = rand_array((size_t)N * C, 1);
        float *dx = zeros((size_t)N * C), *dw = zeros(C), *db = zeros(C);
        kc_layernorm_forward(y, m, r, x, w, b, N, C, 1e-5f);
        kc_layernorm_backward(dx, dw, db, dy, x, w, m, r, N, C);
        TAKE(y, (size_t)N * C), TAKE(dx, (size_t)N * C), TAKE(dw, C), TAKE(db, C);
        kc_rmsnorm_forward(y, r, x, w, N, C, 1e-5f);
        kc_rmsnorm_backward(dx, dw, dy, x, w, r, N, C);
        TAKE(y, (size_t)N * C), TAKE(dx, (size_t)N * C), TAKE(dw, C);
    }
    {   /* attention, GQA, fused qkv */
        KcAttnShape s = {2, 150, 4, 2, 16, 128, 128};
        size_t nqkv = (size_t)2 * 150 * 128, no = (size_t)2 * 150 * 64;
        float *qkv = rand_array(nqkv, 1.5f), *o = zeros(no), *lse = zeros(2 * 4 * 150);
        float *dqkv = zeros(nqkv), *dout = rand_array(no, 1);
        kc_attention_forward(o, lse, qkv, qkv + 64, qkv + 96, s);
        kc_attention_backward(dqkv, dqkv + 64, dqkv + 96, dout, o, lse, qkv, qkv + 64, qkv + 96, s);
        TAKE(o, no), TAKE(lse, 2 * 4 * 150), TAKE(dqkv, nqkv);
    }
    {   /* pointwise, rope, embedding */
        size_t n = 40000;
        float *x = rand_array(2 * n, 3), *y = zeros(2 * n), *dy = rand_array(2 * n, 1), *dx = zeros(2 * n);
        kc_gelu_forward(y, x, n);
        kc_gelu_backward(dx, x, dy, n);
        kc_swiglu_forward(y + n, x, x + 100, 200, 100, 200);
        kc_swiglu_backward(dx, dx + 100, dy, x, x + 100, 200, 100, 200);
        TAKE(y, 2 * n), TAKE(dx, 2 * n);
        kc_rope_forward(y, x, 4, 50, 5, 32, 160, 7, 10000.0f);
        kc_rope_backward(dx, dy, 4, 50, 5, 32, 160, 7, 10000.0f);
        TAKE(y, 4 * 50 * 160), TAKE(dx, 4 * 50 * 160);
        int32_t tok[400];
        for (int i = 0; i < 400; i++) tok[i] = (int32_t)(rng_next() % 97);
        float *wte = rand_array(97 * 130, 1), *wpe = rand_array(100 * 130, 1);
        float *e = zeros(400 * 130), *dwte = zeros(97 * 130), *dwpe = zeros(100 * 130);
        kc_embedding_forward(e, tok, wte, wpe, 4, 100, 130, 0, 97);
        kc_embedding_backward(dwte, dwpe, dy, tok, 4, 100, 130, 0, 97);
        TAKE(e, 400 * 130), TAKE(dwte, 97 * 130), TAKE(dwpe, 100 * 130);
    }
    {   /* cross-entropy, optimizers, norm */
        int N = 64, V = 1000, Vp = 1024;
        int32_t tgt[64];
        for (int i = 0; i < N; i++) tgt[i] = (int32_t)(rng_next() % V);
        float *lg = rand_array((size_t)N * Vp, 5), mx[64], sm[64], tl[64], gm[64], gs[64], gt[64], loss[64];
        kc_xent_partial(mx, sm, tl, lg, tgt, N, Vp, 0, V);
        kc_xent_combine(gm, gs, gt, mx, sm, tl, 1, N);
        kc_xent_loss(loss, tgt, gm, gs, gt, N);
        kc_xent_backward(lg, tgt, gm, gs, 1.0f / N, N, Vp, 0, V);
        TAKE(loss, N), TAKE(lg, (size_t)N * Vp);
        size_t n = 100000;
        float *p = rand_array(n, 1), *g = rand_array(n, 1), *m = zeros(n), *v = zeros(n);
        KcAdamW h = {1e-3, 0.9, 0.95, 1e-8, 0.1, 1, 1.0f};
        kc_adamw_step(p, NULL, g, m, v, n, h);
        TAKE(p, n), TAKE(m, n), TAKE(v, n);
        float nrm = (float)kc_global_norm(g, n);
        TAKE(&nrm, 1);
    }
    {   /* the fused head: 3 chunks and 2 row blocks, so several units of each kind */
        KcHeadShape s = {1100, 24, 2560, 0, 2500};
        int32_t *tgt = talloc((size_t)s.N * sizeof(int32_t));
        for (int i = 0; i < s.N; i++) tgt[i] = (int32_t)(rng_next() % s.V);
        float *x = rand_array((size_t)s.N * s.C, 1), *w = rand_array((size_t)s.Vl * s.C, 0.5f);
        float *lg = zeros((size_t)s.N * s.Vl), *sc = zeros(kc_head_scratch_floats(s));
        float *mx = zeros(s.N), *sm = zeros(s.N), *tl = zeros(s.N), *gm = zeros(s.N), *gs = zeros(s.N);
        float *gt = zeros(s.N), *dx = zeros((size_t)s.N * s.C), *dw = zeros((size_t)s.Vl * s.C);
        kc_head_forward(lg, mx, sm, tl, sc, x, w, tgt, s);
        kc_xent_combine(gm, gs, gt, mx, sm, tl, 1, s.N);
        kc_head_backward(dx, dw, lg, sc, x, w, tgt, gm, gs, 1.0f / s.N, s);
        TAKE(mx, s.N), TAKE(sm, s.N), TAKE(dx, (size_t)s.N * s.C), TAKE(dw, (size_t)s.Vl * s.C);
    }
    {   /* the fused head of a small vocabulary: one chunk, rows and dw's columns split */
        KcHeadShape s = {200, 40, 256, 0, 250};
        int32_t *tgt = talloc((size_t)s.N * sizeof(int32_t));
        for (int i = 0; i < s.N; i++) tgt[i] = (int32_t)(rng_next() % s.V);
        float *x = rand_array((size_t)s.N * s.C, 1), *w = rand_array((size_t)s.Vl * s.C, 0.5f);
        float *lg = zeros((size_t)s.N * s.Vl), *sc = zeros(kc_head_scratch_floats(s));
        float *mx = zeros(s.N), *sm = zeros(s.N), *tl = zeros(s.N), *gm = zeros(s.N), *gs = zeros(s.N);
        float *gt = zeros(s.N), *dx = zeros((size_t)s.N * s.C), *dw = zeros((size_t)s.Vl * s.C);
        kc_head_forward(lg, mx, sm, tl, sc, x, w, tgt, s);
        kc_xent_combine(gm, gs, gt, mx, sm, tl, 1, s.N);
        kc_head_backward(dx, dw, lg, sc, x, w, tgt, gm, gs, 1.0f / s.N, s);
        TAKE(mx, s.N), TAKE(sm, s.N), TAKE(dx, (size_t)s.N * s.C), TAKE(dw, (size_t)s.Vl * s.C);
    }
#undef TAKE
    return pos;
}

/* Every kernel gives the same bits with 1, 2 and 3 threads; and whether
 * OpenBLAS itself does (it is not relied on: kc_ runs it single-threaded). */
static void test_determinism(void)
{
    size_t cap = 4u << 20;
    float *ref = zeros(cap), *got = zeros(cap);
    omp_set_num_threads(1);
    size_t n = run_everything(ref);
    int same = 1;
    for (int th = 2; th <= 3; th++) {
        omp_set_num_threads(th);
        size_t n2 = run_everything(got);
        same &= n2 == n && !memcmp(ref, got, n * sizeof(float));
    }
    omp_set_num_threads(2);
    check(same && n < cap, "every kernel: 1, 2, 3 threads bit-identical", 0, 0);

    int M = 700, K = 300, N = 500;
    float *a = rand_array((size_t)M * K, 1), *b = rand_array((size_t)K * N, 1);
    float *c1 = zeros((size_t)M * N), *c2 = zeros((size_t)M * N);
    openblas_set_num_threads(1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1, a, K, b, N, 0, c1, N);
    openblas_set_num_threads(2);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1, a, K, b, N, 0, c2, N);
    openblas_set_num_threads(1);
    printf("note: OpenBLAS sgemm %dx%dx%d with 1 vs 2 of its own threads: %s\n", M, N, K,
           memcmp(c1, c2, (size_t)M * N * sizeof(float)) ? "different bits" : "same bits");
}

/* ---- the dump for the PyTorch check -------------------------------------- */
static const char *g_dir;
static FILE *g_manifest;

/* Writes DIR/CASE.NAME.bin: n elements of size bytes each. */
static void dump(const char *cs, const char *name, const void *p, size_t n, size_t size)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.%s.bin", g_dir, cs, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, size, n, f) != n || fclose(f)) {
        fprintf(stderr, "test_kernels_cpu: cannot write %s\n", path);
        exit(1);
    }
}
#define DUMPF(cs, name, p, n) dump(cs, name, p, n, sizeof(float))

/* One run of every kernel at small shapes, inputs and results to g_dir. */
static void dump_all(void)
{
    rng_seed(7);
    {
        int N = 37, C = 48, OC = 40;
        float *x = rand_array(N * C, 1), *w = rand_array(OC * C, 1), *b = rand_array(OC, 1);
        float *dy = rand_array(N * OC, 1), *y = zeros(N * OC), *dx = zeros(N * C), *dw = zeros(OC * C), *db = zeros(OC);
        kc_matmul_forward(y, x, w, b, N, C, OC);
        kc_matmul_backward(dx, dw, db, dy, x, w, N, C, OC);
        fprintf(g_manifest, "matmul N=%d C=%d OC=%d\n", N, C, OC);
        DUMPF("matmul", "inp", x, N * C), DUMPF("matmul", "weight", w, OC * C), DUMPF("matmul", "bias", b, OC);
        DUMPF("matmul", "dout", dy, N * OC), DUMPF("matmul", "out", y, N * OC);
        DUMPF("matmul", "dinp", dx, N * C), DUMPF("matmul", "dweight", dw, OC * C), DUMPF("matmul", "dbias", db, OC);
    }
    {
        int N = 24, C = 96;
        float *x = rand_array(N * C, 2), *w = rand_array(C, 1), *b = rand_array(C, 1), *dy = rand_array(N * C, 1);
        float *y = zeros(N * C), *m = zeros(N), *r = zeros(N), *dx = zeros(N * C), *dw = zeros(C), *db = zeros(C);
        for (int i = 0; i < N * C; i++) x[i] += 0.3f;
        kc_layernorm_forward(y, m, r, x, w, b, N, C, 1e-5f);
        kc_layernorm_backward(dx, dw, db, dy, x, w, m, r, N, C);
        fprintf(g_manifest, "layernorm N=%d C=%d eps=1e-5\n", N, C);
        DUMPF("layernorm", "inp", x, N * C), DUMPF("layernorm", "weight", w, C), DUMPF("layernorm", "bias", b, C);
        DUMPF("layernorm", "dout", dy, N * C), DUMPF("layernorm", "out", y, N * C), DUMPF("layernorm", "mean", m, N);
        DUMPF("layernorm", "rstd", r, N), DUMPF("layernorm", "dinp", dx, N * C);
        DUMPF("layernorm", "dweight", dw, C), DUMPF("layernorm", "dbias", db, C);
        memset(dx, 0, N * C * sizeof(float)), memset(dw, 0, C * sizeof(float));
        kc_rmsnorm_forward(y, r, x, w, N, C, 1e-6f);
        kc_rmsnorm_backward(dx, dw, dy, x, w, r, N, C);
        fprintf(g_manifest, "rmsnorm N=%d C=%d eps=1e-6\n", N, C);
        DUMPF("rmsnorm", "inp", x, N * C), DUMPF("rmsnorm", "weight", w, C), DUMPF("rmsnorm", "dout", dy, N * C);
        DUMPF("rmsnorm", "out", y, N * C), DUMPF("rmsnorm", "rstd", r, N);
        DUMPF("rmsnorm", "dinp", dx, N * C), DUMPF("rmsnorm", "dweight", dw, C);
    }
    {
        int n = 1000, N = 16, H = 40;
        float *x = rand_array(n, 4), *dy = rand_array(n, 1), *y = zeros(n), *dx = zeros(n);
        kc_gelu_forward(y, x, n);
        kc_gelu_backward(dx, x, dy, n);
        fprintf(g_manifest, "gelu n=%d\n", n);
        DUMPF("gelu", "inp", x, n), DUMPF("gelu", "dout", dy, n), DUMPF("gelu", "out", y, n), DUMPF("gelu", "dinp", dx, n);
        memset(dx, 0, n * sizeof(float));
        kc_relu_forward(y, x, n);
        kc_relu_backward(dx, x, dy, n);
        fprintf(g_manifest, "relu n=%d\n", n);
        DUMPF("relu", "inp", x, n), DUMPF("relu", "dout", dy, n), DUMPF("relu", "out", y, n), DUMPF("relu", "dinp", dx, n);
        float *xs = rand_array(N * 2 * H, 4), *ys = zeros(N * H), *dxs = zeros(N * 2 * H);
        kc_swiglu_forward(ys, xs, xs + H, N, H, 2 * H);
        kc_swiglu_backward(dxs, dxs + H, dy, xs, xs + H, N, H, 2 * H);
        fprintf(g_manifest, "swiglu N=%d H=%d\n", N, H);
        DUMPF("swiglu", "inp", xs, N * 2 * H), DUMPF("swiglu", "dout", dy, N * H);
        DUMPF("swiglu", "out", ys, N * H), DUMPF("swiglu", "dinp", dxs, N * 2 * H);
    }
    int shapes[2][5] = {{2, 80, 4, 2, 16}, {1, 70, 3, 3, 8}};
    for (int k = 0; k < 2; k++) {
        int B = shapes[k][0], T = shapes[k][1], NH = shapes[k][2], NKV = shapes[k][3], HS = shapes[k][4];
        int W = (NH + 2 * NKV) * HS;
        KcAttnShape s = {B, T, NH, NKV, HS, W, W};
        size_t nqkv = (size_t)B * T * W, no = (size_t)B * T * NH * HS;
        float *qkv = rand_array(nqkv, 1.5f), *o = zeros(no), *lse = zeros((size_t)B * NH * T);
        float *dqkv = zeros(nqkv), *dout = rand_array(no, 1);
        kc_attention_forward(o, lse, qkv, qkv + NH * HS, qkv + (NH + NKV) * HS, s);
        kc_attention_backward(dqkv, dqkv + NH * HS, dqkv + (NH + NKV) * HS, dout, o, lse, qkv,
                              qkv + NH * HS, qkv + (NH + NKV) * HS, s);
        const char *cs = k ? "attention_mha" : "attention_gqa";
        fprintf(g_manifest, "%s B=%d T=%d NH=%d NKV=%d HS=%d\n", cs, B, T, NH, NKV, HS);
        DUMPF(cs, "qkv", qkv, nqkv), DUMPF(cs, "dout", dout, no), DUMPF(cs, "out", o, no);
        DUMPF(cs, "lse", lse, (size_t)B * NH * T), DUMPF(cs, "dqkv", dqkv, nqkv);
    }
    {
        int B = 2, T = 12, NH = 3, HS = 16, pos0 = 5;
        size_t n = (size_t)B * T * NH * HS;
        float *x = rand_array(n, 1), *dy = rand_array(n, 1), *y = zeros(n), *dx = zeros(n);
        kc_rope_forward(y, x, B, T, NH, HS, NH * HS, pos0, 10000.0f);
        kc_rope_backward(dx, dy, B, T, NH, HS, NH * HS, pos0, 10000.0f);
        fprintf(g_manifest, "rope B=%d T=%d NH=%d HS=%d pos0=%d theta=10000\n", B, T, NH, HS, pos0);
        DUMPF("rope", "inp", x, n), DUMPF("rope", "dout", dy, n), DUMPF("rope", "out", y, n), DUMPF("rope", "dinp", dx, n);
    }
    {
        int B = 2, T = 10, C = 16, V = 50, v0 = 20, v1 = 45;
        int32_t tok[20];
        for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(rng_next() % V);
        tok[3] = tok[7] = 30;   /* a repeated local token */
        float *wte = rand_array((v1 - v0) * C, 1), *wpe = rand_array(T * C, 1), *dy = rand_array(B * T * C, 1);
        float *y = zeros(B * T * C), *dwte = zeros((v1 - v0) * C), *dwpe = zeros(T * C);
        kc_embedding_forward(y, tok, wte, wpe, B, T, C, v0, v1);
        kc_embedding_backward(dwte, dwpe, dy, tok, B, T, C, v0, v1);
        fprintf(g_manifest, "embedding B=%d T=%d C=%d v0=%d v1=%d\n", B, T, C, v0, v1);
        dump("embedding", "tokens", tok, B * T, sizeof(int32_t));
        DUMPF("embedding", "wte", wte, (v1 - v0) * C), DUMPF("embedding", "wpe", wpe, T * C);
        DUMPF("embedding", "dout", dy, B * T * C), DUMPF("embedding", "out", y, B * T * C);
        DUMPF("embedding", "dwte", dwte, (v1 - v0) * C), DUMPF("embedding", "dwpe", dwpe, T * C);
    }
    {
        int N = 12, V = 50, Vp = 64, count = 0;
        int32_t tgt[12];
        for (int i = 0; i < N; i++) tgt[i] = (int32_t)(rng_next() % V);
        tgt[4] = -1, tgt[5] = V - 1;
        for (int i = 0; i < N; i++) count += tgt[i] >= 0;
        float *lg = rand_array(N * Vp, 5), mx[12], sm[12], tl[12], gm[12], gs[12], gt[12], loss[12];
        float *g = copy_of(lg, N * Vp);
        kc_xent_partial(mx, sm, tl, g, tgt, N, Vp, 0, V);
        kc_xent_combine(gm, gs, gt, mx, sm, tl, 1, N);
        kc_xent_loss(loss, tgt, gm, gs, gt, N);
        kc_xent_backward(g, tgt, gm, gs, 1.0f / count, N, Vp, 0, V);
        fprintf(g_manifest, "xent N=%d V=%d Vp=%d\n", N, V, Vp);
        dump("xent", "targets", tgt, N, sizeof(int32_t));
        DUMPF("xent", "logits", lg, N * Vp), DUMPF("xent", "loss", loss, N), DUMPF("xent", "dlogits", g, N * Vp);
    }
    {   /* the fused head: 2 chunks, padding, an ignored row */
        KcHeadShape hs = {20, 16, 1152, 0, 1100};
        int32_t tgt[20];
        int count = 0;
        for (int i = 0; i < hs.N; i++) tgt[i] = (int32_t)(rng_next() % hs.V);
        tgt[3] = -1, tgt[4] = hs.V - 1, tgt[5] = 1024;
        for (int i = 0; i < hs.N; i++) count += tgt[i] >= 0;
        float *x = rand_array(hs.N * hs.C, 1), *w = rand_array(hs.Vl * hs.C, 1);
        for (int i = hs.V * hs.C; i < hs.Vl * hs.C; i++) w[i] = 0.0f;
        float *lg = zeros(hs.N * hs.Vl), *sc = zeros(kc_head_scratch_floats(hs)), mx[20], sm[20], tl[20];
        float gm[20], gs[20], gt[20], loss[20], *dx = zeros(hs.N * hs.C), *dw = zeros(hs.Vl * hs.C);
        kc_head_forward(lg, mx, sm, tl, sc, x, w, tgt, hs);
        kc_xent_combine(gm, gs, gt, mx, sm, tl, 1, hs.N);
        kc_xent_loss(loss, tgt, gm, gs, gt, hs.N);
        kc_head_backward(dx, dw, lg, sc, x, w, tgt, gm, gs, 1.0f / count, hs);
        fprintf(g_manifest, "head N=%d C=%d V=%d Vp=%d\n", hs.N, hs.C, hs.V, hs.Vl);
        dump("head", "targets", tgt, hs.N, sizeof(int32_t));
        DUMPF("head", "inp", x, hs.N * hs.C), DUMPF("head", "w", w, hs.Vl * hs.C), DUMPF("head", "loss", loss, hs.N);
        DUMPF("head", "dinp", dx, hs.N * hs.C), DUMPF("head", "dw", dw, hs.Vl * hs.C);
    }
    {
        int n = 1000, split = 600, steps = 3;
        float *p = rand_array(n, 1), *p0 = copy_of(p, n), *m = zeros(n), *v = zeros(n);
        float *g = rand_array((size_t)steps * n, 0.1f);
        for (int t = 1; t <= steps; t++) {
            KcAdamW h = {1e-2, 0.9, 0.95, 1e-8, 0.1, t, 1.0f};
            kc_adamw_step(p, NULL, g + (size_t)(t - 1) * n, m, v, split, h);
            h.weight_decay = 0.0;
            kc_adamw_step(p + split, NULL, g + (size_t)(t - 1) * n + split, m + split, v + split, n - split, h);
        }
        fprintf(g_manifest, "adamw n=%d split=%d steps=%d lr=1e-2 beta1=0.9 beta2=0.95 eps=1e-8 wd=0.1\n",
                n, split, steps);
        DUMPF("adamw", "params0", p0, n), DUMPF("adamw", "grads", g, (size_t)steps * n);
        DUMPF("adamw", "params", p, n), DUMPF("adamw", "m", m, n), DUMPF("adamw", "v", v, n);
    }
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        int n = 500, steps = 3;
        float *p = rand_array(n, 1), *p0 = copy_of(p, n), *buf = zeros(n), *g = rand_array((size_t)steps * n, 1);
        double damp = nesterov ? 0.0 : 0.2;
        for (int t = 0; t < steps; t++) {
            KcSGD h = {0.1, 0.9, damp, 0.01, nesterov, t == 0, 1.0f};
            kc_sgd_step(p, g + (size_t)t * n, buf, n, h);
        }
        const char *cs = nesterov ? "sgd_nesterov" : "sgd";
        fprintf(g_manifest, "%s n=%d steps=%d lr=0.1 momentum=0.9 dampening=%g wd=0.01 nesterov=%d\n",
                cs, n, steps, damp, nesterov);
        DUMPF(cs, "params0", p0, n), DUMPF(cs, "grads", g, (size_t)steps * n), DUMPF(cs, "params", p, n);
    }
    {
        int n = 100000;
        float *x = rand_array(n, 1);
        double nrm = kc_global_norm(x, n);
        fprintf(g_manifest, "norm n=%d\n", n);
        DUMPF("norm", "x", x, n);
        dump("norm", "norm", &nrm, 1, sizeof(double));
    }
    {
        int n = 4096;
        float *x = zeros(n);
        uint32_t special[] = {0x7F800000, 0xFF800000, 0x7FC00000, 0x7F7FFFFF, 0x477FF000, 0x477FE000,
                              0x33000000, 0x33C00000, 0x38800000, 0x3F808000, 0x3F818000, 0x00000001,
                              0x80000000, 0x00800000, 0x387FFFFF, 0x477FEFFF};
        for (int i = 0; i < n; i++) {
            uint32_t u = (uint32_t)rng_next();
            /* mostly values in fp16 range: exponents around 2^-30 .. 2^20 */
            if (i % 4) u = (u & 0x807FFFFF) | ((uint32_t)(97 + rng_next() % 50) << 23);
            if (i < (int)(sizeof special / 4)) u = special[i];
            memcpy(&x[i], &u, 4);
        }
        uint16_t *bf = talloc(n * 2), *h = talloc(n * 2);
        kc_cast_f32_to_bf16(bf, x, n);
        kc_cast_f32_to_fp16(h, x, n);
        fprintf(g_manifest, "casts n=%d\n", n);
        DUMPF("casts", "x", x, n);
        dump("casts", "bf16", bf, n, 2), dump("casts", "fp16", h, n, 2);
    }
}

/* Runs the tests, or writes the dump with --dump DIR. */
int main(int argc, char **argv)
{
    kc_init();
    if (argc == 3 && !strcmp(argv[1], "--dump")) {
        g_dir = argv[2];
        char path[1024];
        snprintf(path, sizeof path, "%s/manifest.txt", g_dir);
        g_manifest = fopen(path, "w");
        if (!g_manifest) {
            fprintf(stderr, "test_kernels_cpu: cannot write %s\n", path);
            return 1;
        }
        dump_all();
        fclose(g_manifest);
        talloc_free_all();
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "-v")) g_verbose = 1;
    else if (argc != 1) {
        fprintf(stderr, "usage: test_kernels_cpu [-v | --dump DIR]\n");
        return 2;
    }
    omp_set_num_threads(2);
    test_matmul();
    test_norm(0);
    test_norm(1);
    test_norm_lanes();
    test_pointwise();
    test_attention(2, 70, 4, 2, 8);    /* GQA, T over one key tile */
    test_attention(1, 40, 3, 3, 16);   /* plain multi-head */
    test_attention(1, 9, 4, 1, 4);     /* multi-query */
    test_rope();
    test_embedding();
    test_xent();
    test_head();
    test_vexp();
    test_adamw();
    test_sgd();
    test_norm_exact();
    test_casts();
    test_determinism();
    talloc_free_all();
    printf("%d checks, %d failed\n", g_checks, g_failed);
    return g_failed ? 1 : 0;
}
