/* rope.c — rotary position embedding, Hugging Face's rotate-half convention.
 *
 * For x of one head split into halves x1 = x[:HS/2], x2 = x[HS/2:] and
 * f_i = pos * theta^(-2i/HS):  out1 = x1 cos f - x2 sin f,
 * out2 = x2 cos f + x1 sin f.  The angles are computed in fp32 in the order
 * of LlamaRotaryEmbedding, so the tables match the ones a Llama was trained
 * with.  Backward applies the inverse rotation (the transpose).  The _tab
 * variants rotate from the angles of every position computed once
 * (kc_rope_table: the same expressions, the same bits), as the CPU backend
 * does for a Llama.
 */
#include "kernels.h"

#include <math.h>

/* The inverse frequencies theta^(-2i/HS), i < HS/2: the same for every
 * position, so computed once a call (a powf each took most of the kernel's
 * time when computed per position). */
static void kc_rope_inv_freq(float *inv, int HS, float theta)
{
    for (int i = 0; i < HS / 2; i++) inv[i] = 1.0f / powf(theta, (float)(2 * i) / (float)HS);
}

/* cos and sin of f_i = pos * inv[i] for position pos, i < HS/2. */
static void kc_rope_angles(float *cs, float *sn, int pos, int HS, const float *inv)
{
    for (int i = 0; i < HS / 2; i++) {
        float f = (float)pos * inv[i];
        cs[i] = cosf(f);
        sn[i] = sinf(f);
    }
}

/* Rotates every head of token row x by the angles (cs, sn); sign = +1
 * forward, -1 for the inverse.  Writes (accumulate = 0) or adds into y. */
static void kc_rope_row(float *y, const float *x, const float *cs, const float *sn, int NH,
                        int HS, float sign, int accumulate)
{
    int half = HS / 2;
    for (int h = 0; h < NH; h++) {
        const float *x1 = x + (size_t)h * HS, *x2 = x1 + half;   /* (HS/2) each */
        float *y1 = y + (size_t)h * HS, *y2 = y1 + half;
        for (int i = 0; i < half; i++) {
            float a = x1[i], b = x2[i], sgn = sign * sn[i];
            float o1 = a * cs[i] - b * sgn;
            float o2 = b * cs[i] + a * sgn;
            if (accumulate) y1[i] += o1, y2[i] += o2;
            else y1[i] = o1, y2[i] = o2;
        }
    }
}

/* out = rope(inp), in place allowed. */
void kc_rope_forward(float *out, const float *inp, int B, int T, int NH, int HS, int ld,
                     int pos0, float theta)
{
    float inv[HS / 2];
    kc_rope_inv_freq(inv, HS, theta);
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        float cs[HS / 2], sn[HS / 2];
        kc_rope_angles(cs, sn, pos0 + t, HS, inv);
        for (int b = 0; b < B; b++) {
            size_t row = ((size_t)b * T + t) * ld;
            kc_rope_row(out + row, inp + row, cs, sn, NH, HS, 1.0f, 0);
        }
    }
}

/* dinp += rope^T(dout). */
void kc_rope_backward(float *dinp, const float *dout, int B, int T, int NH, int HS, int ld,
                      int pos0, float theta)
{
    float inv[HS / 2];
    kc_rope_inv_freq(inv, HS, theta);
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        float cs[HS / 2], sn[HS / 2];
        kc_rope_angles(cs, sn, pos0 + t, HS, inv);
        for (int b = 0; b < B; b++) {
            size_t row = ((size_t)b * T + t) * ld;
            kc_rope_row(dinp + row, dout + row, cs, sn, NH, HS, -1.0f, 1);
        }
    }
}

void kc_rope_table(float *cs, float *sn, int npos, int HS, float theta)
{
    float inv[HS / 2];
    kc_rope_inv_freq(inv, HS, theta);
    #pragma omp parallel for schedule(static)
    for (int p = 0; p < npos; p++) kc_rope_angles(cs + (size_t)p * (HS / 2), sn + (size_t)p * (HS / 2), p, HS, inv);
}

/* Rotates every token row of x into y from the tables' rows (sign, accumulate
 * as kc_rope_row); y == x in place. */
static void kc_rope_tab(float *y, const float *x, int B, int T, int NH, int HS, int ld, const float *cs,
                        const float *sn, float sign, int accumulate)
{
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++)
        for (int b = 0; b < B; b++) {
            size_t row = ((size_t)b * T + t) * ld, at = (size_t)t * (HS / 2);
            kc_rope_row(y + row, x + row, cs + at, sn + at, NH, HS, sign, accumulate);
        }
}

void kc_rope_forward_tab(float *out, const float *inp, int B, int T, int NH, int HS, int ld,
                         const float *cs, const float *sn)
{
    kc_rope_tab(out, inp, B, T, NH, HS, ld, cs, sn, 1.0f, 0);
}

void kc_rope_backward_tab(float *dinp, const float *dout, int B, int T, int NH, int HS, int ld,
                          const float *cs, const float *sn)
{
    kc_rope_tab(dinp, dout, B, T, NH, HS, ld, cs, sn, -1.0f, 1);
}

void kc_rope_inverse_tab(float *x, int B, int T, int NH, int HS, int ld, const float *cs, const float *sn)
{
    kc_rope_tab(x, x, B, T, NH, HS, ld, cs, sn, -1.0f, 0);   /* each pair read before it is written */
}
