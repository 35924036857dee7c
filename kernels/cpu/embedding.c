/* embedding.c — token (+ learned position) embedding, vocab-parallel.
 *
 * A tensor-parallel rank holds rows [v0, v1) of wte and emits zeros for the
 * other tokens; the tp all-reduce of the outputs assembles the full rows
 * (so exactly one rank of the group passes wpe, the others NULL).
 * Backward needs no atomics: threads split the channels, and every channel
 * walks the tokens in (b, t) order, so each dwte element sums its
 * contributions in the same order whatever the thread count.
 */
#include "kernels.h"

#include <string.h>

enum { KC_EMB_COLS = 64 };   /* channels per block in backward */

/* out(B,T,C) = wte[tok - v0] (0 outside [v0,v1)) + wpe[t]. */
void kc_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                          const float *wpe, int B, int T, int C, int v0, int v1)
{
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T, tok = tokens[bt];
        float *o = out + (size_t)bt * C;   /* (C) */
        if (tok >= v0 && tok < v1) memcpy(o, wte + (size_t)(tok - v0) * C, sizeof(float) * C);
        else memset(o, 0, sizeof(float) * C);
        if (wpe) {
            const float *p = wpe + (size_t)t * C;   /* (C) */
            for (int i = 0; i < C; i++) o[i] += p[i];
        }
    }
}

/* dwte[tok - v0] += dout[b,t] for local tokens; dwpe[t] += sum_b dout[b,t]. */
void kc_embedding_backward(float *dwte, float *dwpe, const float *dout,
                           const int32_t *tokens, int B, int T, int C, int v0, int v1)
{
    int nblocks = (C + KC_EMB_COLS - 1) / KC_EMB_COLS;
    if (dwte) {
        #pragma omp parallel for schedule(static)
        for (int blk = 0; blk < nblocks; blk++) {
            int c0 = blk * KC_EMB_COLS;
            int nc = C - c0 < KC_EMB_COLS ? C - c0 : KC_EMB_COLS;
            for (int bt = 0; bt < B * T; bt++) {
                int tok = tokens[bt];
                if (tok < v0 || tok >= v1) continue;
                float *w = dwte + (size_t)(tok - v0) * C + c0;   /* (nc) */
                const float *d = dout + (size_t)bt * C + c0;     /* (nc) */
                for (int j = 0; j < nc; j++) w[j] += d[j];
            }
        }
    }
    if (dwpe) {
        #pragma omp parallel for schedule(static)
        for (int t = 0; t < T; t++) {
            float *w = dwpe + (size_t)t * C;   /* (C) */
            for (int b = 0; b < B; b++) {
                const float *d = dout + ((size_t)b * T + t) * C;
                for (int i = 0; i < C; i++) w[i] += d[i];
            }
        }
    }
}
