/* activation.c — pointwise ops: gelu, relu, swiglu, the residual add.
 * Each element is computed on its own, so any thread split gives the same bits.
 */
#include "kernels.h"


#define KC_GELU_K 0.7978845608028654f   /* sqrt(2/pi) */

enum { KC_ACT_CHUNK = 512 };   /* elements per call of kc_vexp */

/* The gelu's inner argument u = sqrt(2/pi) (x + 0.044715 x^3). */
static inline float kc_gelu_u(float x)
{
    return KC_GELU_K * (x + 0.044715f * x * x * x);
}

/* s(n) = sigmoid(2 u(x)) = 0.5 (1 + tanh(u)), through one vectorised exp. */
static void kc_gelu_sig(float *s, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) s[i] = -2.0f * kc_gelu_u(x[i]);
    kc_vexp(s, s, n);
    for (size_t i = 0; i < n; i++) s[i] = 1.0f / (1.0f + s[i]);
}

/* out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's gelu,
 * computed as x * sigmoid(2u): the same function without the cancellation
 * of 1 + tanh(u) for negative x. */
void kc_gelu_forward(float *out, const float *inp, size_t n)
{
    size_t nchunks = (n + KC_ACT_CHUNK - 1) / KC_ACT_CHUNK;
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        size_t i0 = c * KC_ACT_CHUNK, len = n - i0 < KC_ACT_CHUNK ? n - i0 : KC_ACT_CHUNK;
        float s[KC_ACT_CHUNK];
        kc_gelu_sig(s, inp + i0, len);
        for (size_t i = 0; i < len; i++) out[i0 + i] = inp[i0 + i] * s[i];
    }
}

/* dinp += gelu'(inp) * dout, gelu' = s + x * 2 s (1 - s) * du/dx, where
 * s = sigmoid(2u) (so 1 - tanh(u)^2 = 4 s (1 - s)). */
void kc_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    size_t nchunks = (n + KC_ACT_CHUNK - 1) / KC_ACT_CHUNK;
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        size_t i0 = c * KC_ACT_CHUNK, len = n - i0 < KC_ACT_CHUNK ? n - i0 : KC_ACT_CHUNK;
        float s[KC_ACT_CHUNK];
        kc_gelu_sig(s, inp + i0, len);
        for (size_t i = 0; i < len; i++) {
            float x = inp[i0 + i];
            float du = KC_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
            float local = s[i] + x * 2.0f * s[i] * (1.0f - s[i]) * du;
            dinp[i0 + i] += local * dout[i0 + i];
        }
    }
}

/* out = max(x, 0). */
void kc_relu_forward(float *out, const float *inp, size_t n)
{
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

/* dinp += dout where inp > 0. */
void kc_relu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
}

/* s(n) = sigmoid(a) = 1 / (1 + exp(-a)); exp overflowing to inf gives 0. */
static void kc_sigmoid(float *s, const float *a, int n)
{
    for (int i = 0; i < n; i++) s[i] = -a[i];
    kc_vexp(s, s, (size_t)n);
    for (int i = 0; i < n; i++) s[i] = 1.0f / (1.0f + s[i]);
}

/* out(N,H) = silu(a) * b with a, b of row stride ld. */
void kc_swiglu_forward(float *out, const float *a, const float *b, int N, int H, int ld)
{
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *ar = a + (size_t)n * ld;   /* (H) gate */
        const float *br = b + (size_t)n * ld;   /* (H) up   */
        float *o = out + (size_t)n * H;         /* (H)      */
        float s[KC_ACT_CHUNK];
        for (int i0 = 0; i0 < H; i0 += KC_ACT_CHUNK) {
            int len = H - i0 < KC_ACT_CHUNK ? H - i0 : KC_ACT_CHUNK;
            kc_sigmoid(s, ar + i0, len);
            for (int i = 0; i < len; i++) o[i0 + i] = ar[i0 + i] * s[i] * br[i0 + i];
        }
    }
}

/* da += dout * b * silu'(a), db += dout * silu(a);
 * silu'(a) = s (1 + a (1 - s)) with s = sigmoid(a). */
void kc_swiglu_backward(float *da, float *db, const float *dout, const float *a,
                        const float *b, int N, int H, int ld)
{
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *ar = a + (size_t)n * ld;    /* (H) */
        const float *br = b + (size_t)n * ld;    /* (H) */
        const float *d = dout + (size_t)n * H;   /* (H) */
        float s[KC_ACT_CHUNK];
        for (int i0 = 0; i0 < H; i0 += KC_ACT_CHUNK) {
            int len = H - i0 < KC_ACT_CHUNK ? H - i0 : KC_ACT_CHUNK;
            kc_sigmoid(s, ar + i0, len);
            for (int j = 0; j < len; j++) {
                int i = i0 + j;
                if (da) da[(size_t)n * ld + i] += d[i] * br[i] * s[j] * (1.0f + ar[i] * (1.0f - s[j]));
                if (db) db[(size_t)n * ld + i] += d[i] * ar[i] * s[j];
            }
        }
    }
}

/* out = a + b. */
void kc_residual_forward(float *out, const float *a, const float *b, size_t n)
{
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* da += dout, db += dout: the gradient flows into both branches unchanged. */
void kc_residual_backward(float *da, float *db, const float *dout, size_t n)
{
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        if (da) da[i] += dout[i];
        if (db) db[i] += dout[i];
    }
}
