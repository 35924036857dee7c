/* crossentropy.c — fused softmax cross-entropy, ready for a vocab split.
 *
 * The logits of a row may be spread over tp ranks, each holding the vocab
 * columns [v0, v0+Vl).  Phase 1 reduces each local row to three numbers
 * (max, sum of exp relative to it, target logit if local); the caller
 * combines them across ranks; phase 2 turns the combined numbers into the
 * loss and overwrites the logits with their gradient.  The probabilities are
 * never stored, and no rank ever holds a full row.  Columns whose global
 * index is >= V (vocabulary padding) behave as logits of -inf.
 */
#include "kernels.h"

#include <math.h>

enum { KC_XENT_CHUNK = 512 };   /* exps per call of kc_vexp in phase 1 */

/* Number of real (unpadded) columns in a local slice [v0, v0+Vl). */
static int kc_xent_valid(int Vl, int v0, int V)
{
    int n = V - v0;
    if (n < 0) n = 0;
    return n < Vl ? n : Vl;
}

/* Phase 1: local max, local sum of exp(x - max) and the local target logit. */
void kc_xent_partial(float *rowmax, float *rowsum, float *tlogit, const float *logits,
                     const int32_t *targets, int N, int Vl, int v0, int V)
{
    int nv = kc_xent_valid(Vl, v0, V);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vl;   /* (Vl) */
        float mx = -INFINITY;
        for (int j = 0; j < nv; j++) mx = x[j] > mx ? x[j] : mx;
        double sum = 0.0;
        float e[KC_XENT_CHUNK];
        for (int j0 = 0; j0 < nv; j0 += KC_XENT_CHUNK) {
            int len = nv - j0 < KC_XENT_CHUNK ? nv - j0 : KC_XENT_CHUNK;
            for (int j = 0; j < len; j++) e[j] = x[j0 + j] - mx;
            kc_vexp(e, e, (size_t)len);
            for (int j = 0; j < len; j++) sum += e[j];
        }
        int tj = targets[n] - v0;
        rowmax[n] = mx;
        rowsum[n] = (float)sum;
        tlogit[n] = targets[n] >= 0 && tj >= 0 && tj < nv ? x[tj] : 0.0f;
    }
}

/* rowsum *= exp(rowmax - gmax): re-bases a local sum on the global max. */
void kc_xent_rescale(float *rowsum, const float *rowmax, const float *gmax, int N)
{
    for (int n = 0; n < N; n++)
        if (rowsum[n] != 0.0f) rowsum[n] *= expf(rowmax[n] - gmax[n]);
}

/* Combines R partials ([R][N] each) in rank order. */
void kc_xent_combine(float *gmax, float *gsum, float *gtlogit, const float *rowmax,
                     const float *rowsum, const float *tlogit, int R, int N)
{
    for (int n = 0; n < N; n++) {
        float mx = -INFINITY;
        for (int r = 0; r < R; r++) mx = rowmax[(size_t)r * N + n] > mx ? rowmax[(size_t)r * N + n] : mx;
        double sum = 0.0, tl = 0.0;
        for (int r = 0; r < R; r++) {
            float s = rowsum[(size_t)r * N + n];
            if (s != 0.0f) sum += s * expf(rowmax[(size_t)r * N + n] - mx);
            tl += tlogit[(size_t)r * N + n];
        }
        gmax[n] = mx;
        gsum[n] = (float)sum;
        gtlogit[n] = (float)tl;
    }
}

/* Phase 2: loss(N) = log(sum) + max - target logit; 0 for ignored rows. */
void kc_xent_loss(float *loss, const int32_t *targets, const float *gmax,
                  const float *gsum, const float *gtlogit, int N)
{
    for (int n = 0; n < N; n++)
        loss[n] = targets[n] < 0 ? 0.0f : logf(gsum[n]) + gmax[n] - gtlogit[n];
}

/* Phase 2: logits := (softmax - onehot) * dloss in place; 0 on padding. */
void kc_xent_backward(float *logits, const int32_t *targets, const float *gmax,
                      const float *gsum, float dloss, int N, int Vl, int v0, int V)
{
    int nv = kc_xent_valid(Vl, v0, V);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * Vl;   /* (Vl) in: logits, out: dlogits */
        if (targets[n] < 0) {
            for (int j = 0; j < Vl; j++) x[j] = 0.0f;
            continue;
        }
        float mx = gmax[n], inv = 1.0f / gsum[n];
        int tj = targets[n] - v0;
        for (int j = 0; j < nv; j++) x[j] -= mx;
        kc_vexp(x, x, (size_t)nv);
        for (int j = 0; j < nv; j++) x[j] = (x[j] * inv - (j == tj ? 1.0f : 0.0f)) * dloss;
        for (int j = nv; j < Vl; j++) x[j] = 0.0f;
    }
}
