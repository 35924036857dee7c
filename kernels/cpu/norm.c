/* norm.c — layernorm (GPT) and rmsnorm (Llama) over the last axis.
 *
 * Row statistics are sums in double over 16 lanes: element i goes to lane
 * i mod 16, the lanes are added in a fixed tree at the end (kc_norm_total).
 * The order depends on C only, never on the thread count or the rows a
 * thread gets, and the lanes are independent, so the compiler vectorises the
 * sums (a sum in index order is one chain of
 * dependent double adds: the norms ran at 6-7 GB/s on one thread, a tenth of
 * the machine's bandwidth).  Each summand is what the index-order sums added
 * (a float, or a product of two floats, exact in double), so the statistics
 * differ from those sums only where a double sum rounds.  The row helpers are
 * compiled per x86-64 level (KC_MULTIVERSION): every product they sum is exact
 * in double, so FMA contraction changes nothing there; the elementwise loops
 * that write outputs stay in the callers, compiled once, as before.
 *
 * Backward runs in two passes so that nothing is shared between threads:
 * dinp in parallel over rows, then dweight/dbias in parallel over column
 * blocks, each column summing its rows in row order (in double).
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

enum { KC_NORM_COLS = 64 };   /* columns per block of the dweight pass        */

/* A row sum's lanes: KC_NORM_LANES doubles as KC_NORM_VECS vectors of 8
 * (GCC's vector extensions: one AVX-512 register in the x86-64-v4 clone, two
 * AVX ones in the v3 clone, four SSE2 ones in the default; element i goes to
 * lane i mod 16 in every clone). */
#define KC_NORM_LANES 16
#define KC_NORM_VECS (KC_NORM_LANES / 8)
typedef float kc_v8f __attribute__((vector_size(32)));
typedef double kc_v8d __attribute__((vector_size(64)));

/* 8 floats from p (unaligned), and a vector of them widened to double
 * (macros: a function returning a vector wider than the default ABI's
 * registers would be one more ABI to keep apart per clone) */
#define kc_ld8(p) ({ kc_v8f v_; memcpy(&v_, (p), sizeof v_); v_; })
#define kc_wide8(v) __builtin_convertvector((v), kc_v8d)

/* The lanes' total, in a fixed tree; lanes [0, tail) also take the row's
 * last C mod 16 elements, added after the vectors. */
static inline double kc_norm_total(const kc_v8d v[KC_NORM_VECS], const double tail[KC_NORM_LANES])
{
    double a[KC_NORM_LANES];
    memcpy(a, v, sizeof a);
    for (int j = 0; j < KC_NORM_LANES; j++) a[j] += tail[j];
    return (((a[0] + a[8]) + (a[4] + a[12])) + ((a[2] + a[10]) + (a[6] + a[14]))) +
           (((a[1] + a[9]) + (a[5] + a[13])) + ((a[3] + a[11]) + (a[7] + a[15])));
}

/* sum x[i], for layernorm's mean. */
KC_MULTIVERSION
static double kc_norm_sum(const float *x, int C)
{
    kc_v8d v[KC_NORM_VECS] = {0};
    double t[KC_NORM_LANES] = {0};
    int i = 0;
    for (; i + KC_NORM_LANES <= C; i += KC_NORM_LANES)
        for (int k = 0; k < KC_NORM_VECS; k++) v[k] += kc_wide8(kc_ld8(x + i + 8 * k));
    for (int j = 0; i < C; i++, j++) t[j] = x[i];
    return kc_norm_total(v, t);
}

/* sum (x[i] - m)^2, the difference in float as the output's: layernorm's
 * variance, and with m = 0 (x - 0 is x) rmsnorm's sum of squares. */
KC_MULTIVERSION
static double kc_norm_sqdev(const float *x, float m, int C)
{
    kc_v8d v[KC_NORM_VECS] = {0};
    double t[KC_NORM_LANES] = {0};
    int i = 0;
    for (; i + KC_NORM_LANES <= C; i += KC_NORM_LANES)
        for (int k = 0; k < KC_NORM_VECS; k++) {
            kc_v8d d = kc_wide8(kc_ld8(x + i + 8 * k) - m);
            v[k] += d * d;
        }
    for (int j = 0; i < C; i++, j++) {
        double d = x[i] - m;
        t[j] = d * d;
    }
    return kc_norm_total(v, t);
}

/* layernorm's backward row sums: sum g and sum g·n̂, with g = weight·dout
 * and n̂ = (x - m)·r, both in float. */
KC_MULTIVERSION
static void kc_norm_ln_dsums(const float *x, const float *d, const float *w, float m, float r, int C,
                             double *sum_g, double *sum_gn)
{
    kc_v8d a[KC_NORM_VECS] = {0}, b[KC_NORM_VECS] = {0};
    double ta[KC_NORM_LANES] = {0}, tb[KC_NORM_LANES] = {0};
    int i = 0;
    for (; i + KC_NORM_LANES <= C; i += KC_NORM_LANES)
        for (int k = 0; k < KC_NORM_VECS; k++) {
            int o = i + 8 * k;
            kc_v8f g = kc_ld8(w + o) * kc_ld8(d + o);
            a[k] += kc_wide8(g);
            b[k] += kc_wide8(g * ((kc_ld8(x + o) - m) * r));
        }
    for (int j = 0; i < C; i++, j++) {
        float g = w[i] * d[i];
        ta[j] = g;
        tb[j] = g * ((x[i] - m) * r);
    }
    *sum_g = kc_norm_total(a, ta);
    *sum_gn = kc_norm_total(b, tb);
}

/* rmsnorm's backward row sum: sum (weight·dout)·x, the product in float. */
KC_MULTIVERSION
static double kc_norm_rms_dsum(const float *x, const float *d, const float *w, int C)
{
    kc_v8d v[KC_NORM_VECS] = {0};
    double t[KC_NORM_LANES] = {0};
    int i = 0;
    for (; i + KC_NORM_LANES <= C; i += KC_NORM_LANES)
        for (int k = 0; k < KC_NORM_VECS; k++) {
            int o = i + 8 * k;
            v[k] += kc_wide8(kc_ld8(w + o) * kc_ld8(d + o)) * kc_wide8(kc_ld8(x + o));
        }
    for (int j = 0; i < C; i++, j++) t[j] = (double)(w[i] * d[i]) * x[i];
    return kc_norm_total(v, t);
}

/* out(N,C) = (inp - mean) * rstd * weight + bias; saves mean(N), rstd(N). */
void kc_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int N, int C, float eps)
{
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;   /* (C) */
        float *o = out + (size_t)n * C;         /* (C) */
        float m = (float)(kc_norm_sum(x, C) / C);
        float r = (float)(1.0 / sqrt(kc_norm_sqdev(x, m, C) / C + eps));
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * r * weight[i] + bias[i];
        mean[n] = m;
        rstd[n] = r;
    }
}

/* dweight(C) += sum_n dout*norm, dbias(C) += sum_n dout, where
 * norm = (inp - mean)*rstd, or inp*rstd when mean is NULL (rmsnorm): one
 * block of nc <= KC_NORM_COLS columns, its rows in order. */
KC_MULTIVERSION
static void kc_norm_param_block(float *dweight, float *dbias, const float *dout, const float *inp,
                                const float *mean, const float *rstd, int N, int C, int c0, int nc)
{
    double dw[KC_NORM_COLS] = {0}, db[KC_NORM_COLS] = {0};
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C + c0;   /* (nc) */
        const float *d = dout + (size_t)n * C + c0;  /* (nc) */
        float m = mean ? mean[n] : 0.0f;
        float r = rstd[n];
        for (int j = 0; j < nc; j++) {
            dw[j] += d[j] * ((x[j] - m) * r);
            db[j] += d[j];
        }
    }
    if (dweight)
        for (int j = 0; j < nc; j++) dweight[c0 + j] += (float)dw[j];
    if (dbias)
        for (int j = 0; j < nc; j++) dbias[c0 + j] += (float)db[j];
}

static void kc_norm_param_backward(float *dweight, float *dbias, const float *dout,
                                   const float *inp, const float *mean, const float *rstd,
                                   int N, int C)
{
    int nblocks = (C + KC_NORM_COLS - 1) / KC_NORM_COLS;
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * KC_NORM_COLS;
        kc_norm_param_block(dweight, dbias, dout, inp, mean, rstd, N, C, c0,
                            C - c0 < KC_NORM_COLS ? C - c0 : KC_NORM_COLS);
    }
}

/* Accumulates the gradients of kc_layernorm_forward (llm.c's formulation). */
void kc_layernorm_backward(float *dinp, float *dweight, float *dbias,
                           const float *dout, const float *inp, const float *weight,
                           const float *mean, const float *rstd, int N, int C)
{
    if (dinp) {
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C;    /* (C) */
            const float *d = dout + (size_t)n * C;   /* (C) */
            float *dx = dinp + (size_t)n * C;        /* (C) */
            float m = mean[n], r = rstd[n];
            /* the two row means of the projection that normalisation removes */
            double sum_dn, sum_dn_norm;
            kc_norm_ln_dsums(x, d, weight, m, r, C, &sum_dn, &sum_dn_norm);
            float mean_dn = (float)(sum_dn / C), mean_dn_norm = (float)(sum_dn_norm / C);
            for (int i = 0; i < C; i++) {
                float norm = (x[i] - m) * r;
                float dnorm = weight[i] * d[i];
                dx[i] += (dnorm - mean_dn - norm * mean_dn_norm) * r;
            }
        }
    }
    if (dweight || dbias) kc_norm_param_backward(dweight, dbias, dout, inp, mean, rstd, N, C);
}

/* out(N,C) = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps). */
void kc_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                        int N, int C, float eps)
{
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;   /* (C) */
        float *o = out + (size_t)n * C;         /* (C) */
        float r = (float)(1.0 / sqrt(kc_norm_sqdev(x, 0.0f, C) / C + eps));
        /* Hugging Face order: weight * (x * rstd) */
        for (int i = 0; i < C; i++) o[i] = weight[i] * (x[i] * r);
        rstd[n] = r;
    }
}

/* Accumulates the gradients of kc_rmsnorm_forward:
 * dx = rstd * (w*dy - x * rstd^2 * mean(w*dy*x)), dw += dy * x * rstd. */
void kc_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                         const float *weight, const float *rstd, int N, int C)
{
    if (dinp) {
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C;    /* (C) */
            const float *d = dout + (size_t)n * C;   /* (C) */
            float *dx = dinp + (size_t)n * C;        /* (C) */
            float r = rstd[n];
            float k = (float)(kc_norm_rms_dsum(x, d, weight, C) / C) * r * r;
            for (int i = 0; i < C; i++) dx[i] += r * (weight[i] * d[i] - x[i] * k);
        }
    }
    if (dweight) kc_norm_param_backward(dweight, NULL, dout, inp, NULL, rstd, N, C);
}
