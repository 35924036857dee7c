/* norm.c — layernorm (GPT) and rmsnorm (Llama) over the last axis.
 *
 * Row statistics are accumulated in double in index order.  Backward runs in
 * two passes so that nothing is shared between threads: dinp in parallel
 * over rows, then dweight/dbias in parallel over column blocks, each column
 * summing its rows in row order (in double).
 */
#include "kernels.h"

#include <math.h>

enum { KC_NORM_COLS = 64 };   /* columns per block of the dweight pass */

/* out(N,C) = (inp - mean) * rstd * weight + bias; saves mean(N), rstd(N). */
void kc_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int N, int C, float eps)
{
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;   /* (C) */
        float *o = out + (size_t)n * C;         /* (C) */
        double s = 0.0;
        for (int i = 0; i < C; i++) s += x[i];
        float m = (float)(s / C);
        double v = 0.0;
        for (int i = 0; i < C; i++) {
            double d = x[i] - m;
            v += d * d;
        }
        float r = (float)(1.0 / sqrt(v / C + eps));
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * r * weight[i] + bias[i];
        mean[n] = m;
        rstd[n] = r;
    }
}

/* dweight(C) += sum_n dout*norm, dbias(C) += sum_n dout, where
 * norm = (inp - mean)*rstd, or inp*rstd when mean is NULL (rmsnorm). */
static void kc_norm_param_backward(float *dweight, float *dbias, const float *dout,
                                   const float *inp, const float *mean, const float *rstd,
                                   int N, int C)
{
    int nblocks = (C + KC_NORM_COLS - 1) / KC_NORM_COLS;
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * KC_NORM_COLS;
        int nc = C - c0 < KC_NORM_COLS ? C - c0 : KC_NORM_COLS;
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
            double sum_dn = 0.0, sum_dn_norm = 0.0;
            for (int i = 0; i < C; i++) {
                float dnorm = weight[i] * d[i];
                sum_dn += dnorm;
                sum_dn_norm += dnorm * ((x[i] - m) * r);
            }
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
        double ss = 0.0;
        for (int i = 0; i < C; i++) ss += (double)x[i] * x[i];
        float r = (float)(1.0 / sqrt(ss / C + eps));
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
            double s = 0.0;
            for (int i = 0; i < C; i++) s += (double)(weight[i] * d[i]) * x[i];
            float k = (float)(s / C) * r * r;
            for (int i = 0; i < C; i++) dx[i] += r * (weight[i] * d[i] - x[i] * k);
        }
    }
    if (dweight) kc_norm_param_backward(dweight, NULL, dout, inp, NULL, rstd, N, C);
}
