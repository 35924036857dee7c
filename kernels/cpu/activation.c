/* activation.c — pointwise ops: gelu, relu, swiglu, the residual add.
 * Each element is computed on its own, so any thread split gives the same bits.
 */
#include "kernels.h"
#include "vmath.h"

#define KC_GELU_K 0.7978845608028654f   /* sqrt(2/pi) */

enum { KC_ACT_BLOCK = 4096 };   /* elements per OpenMP work unit */

/* s = sigmoid(2 u(x)) = 0.5 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). */
KC_INLINE float kc_gelu_s(float x)
{
    float u = KC_GELU_K * (x + 0.044715f * x * x * x);
    return 1.0f / (1.0f + kc_exp1(-2.0f * u));
}

/* gelu'(x) = s + x * 2 s (1 - s) * du/dx, where s = sigmoid(2u) (so that
 * 1 - tanh(u)^2 = 4 s (1 - s)). */
KC_INLINE float kc_gelu_grad(float x)
{
    float s = kc_gelu_s(x);
    float du = KC_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    return s + x * 2.0f * s * (1.0f - s) * du;
}

/* The loops over one block, compiled per x86-64 level with the exp inlined,
 * so each vectorises at the machine's width. */
KC_MULTIVERSION
static void kc_gelu_fwd_block(float *out, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = x[i] * kc_gelu_s(x[i]);
}

KC_MULTIVERSION
static void kc_gelu_bwd_block(float *dinp, const float *x, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) dinp[i] += kc_gelu_grad(x[i]) * dout[i];
}

KC_MULTIVERSION
static void kc_gelu_scale_block(float *d, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = kc_gelu_grad(x[i]) * d[i];
}

enum { KC_GELU_FWD, KC_GELU_BWD, KC_GELU_INPLACE };

/* One of the block loops above over n elements, KC_ACT_BLOCK at a time
 * across the threads. */
static void kc_gelu_blocks(int kind, float *y, const float *x, const float *dout, size_t n)
{
    size_t nblocks = (n + KC_ACT_BLOCK - 1) / KC_ACT_BLOCK;
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nblocks; c++) {
        size_t i0 = c * KC_ACT_BLOCK, len = n - i0 < KC_ACT_BLOCK ? n - i0 : KC_ACT_BLOCK;
        if (kind == KC_GELU_FWD) kc_gelu_fwd_block(y + i0, x + i0, len);
        else if (kind == KC_GELU_BWD) kc_gelu_bwd_block(y + i0, x + i0, dout + i0, len);
        else kc_gelu_scale_block(y + i0, x + i0, len);
    }
}

/* out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's gelu,
 * computed as x * sigmoid(2u): the same function without the cancellation
 * of 1 + tanh(u) for negative x. */
void kc_gelu_forward(float *out, const float *inp, size_t n)
{
    kc_gelu_blocks(KC_GELU_FWD, out, inp, NULL, n);
}

/* dinp += gelu'(inp) * dout. */
void kc_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    kc_gelu_blocks(KC_GELU_BWD, dinp, inp, dout, n);
}

/* d := gelu'(inp) * d in place: the fused MLP backward's derivative applied
 * to the data gradient it has just computed into d. */
void kc_gelu_backward_inplace(float *d, const float *inp, size_t n)
{
    kc_gelu_blocks(KC_GELU_INPLACE, d, inp, NULL, n);
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

/* sigmoid(a) = 1 / (1 + exp(-a)); exp overflowing to inf gives 0. */
KC_INLINE float kc_sigmoid(float a)
{
    return 1.0f / (1.0f + kc_exp1(-a));
}

/* One row of the swiglu forward, per x86-64 level. */
KC_MULTIVERSION
static void kc_swiglu_fwd_row(float *o, const float *a, const float *b, int H)
{
    for (int i = 0; i < H; i++) o[i] = a[i] * kc_sigmoid(a[i]) * b[i];
}

/* One row of the swiglu backward, per x86-64 level; da or db may be NULL. */
KC_MULTIVERSION
static void kc_swiglu_bwd_row(float *da, float *db, const float *d, const float *a, const float *b, int H)
{
    if (da)
        for (int i = 0; i < H; i++) {
            float s = kc_sigmoid(a[i]);
            da[i] += d[i] * b[i] * s * (1.0f + a[i] * (1.0f - s));
        }
    if (db)
        for (int i = 0; i < H; i++) db[i] += d[i] * a[i] * kc_sigmoid(a[i]);
}

/* out(N,H) = silu(a) * b with a, b of row stride ld. */
void kc_swiglu_forward(float *out, const float *a, const float *b, int N, int H, int ld)
{
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        kc_swiglu_fwd_row(out + (size_t)n * H, a + (size_t)n * ld, b + (size_t)n * ld, H);
}

/* da += dout * b * silu'(a), db += dout * silu(a);
 * silu'(a) = s (1 + a (1 - s)) with s = sigmoid(a). */
void kc_swiglu_backward(float *da, float *db, const float *dout, const float *a,
                        const float *b, int N, int H, int ld)
{
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        kc_swiglu_bwd_row(da ? da + (size_t)n * ld : NULL, db ? db + (size_t)n * ld : NULL,
                          dout + (size_t)n * H, a + (size_t)n * ld, b + (size_t)n * ld, H);
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
