/* attention.c — causal self-attention with grouped-query heads, flash-style.
 *
 * Forward keeps a running max and sum per query row over key tiles (online
 * softmax) and saves only the log-sum-exp of each row; backward recomputes
 * the probabilities from it, never storing a (T,T) matrix.
 *
 * Work is cut into units whose results do not depend on who computes them:
 * forward and dq by (b, h, block of BQ query rows); dk and dv by (b, kv head,
 * block of BK keys), which loops over the heads of its group and all later
 * queries in a fixed order.  No two units write the same element, so no
 * atomics and bit-identical results for any thread count.  The price is that
 * backward computes the scores twice (once per pass).
 *
 * Dot products q.k run over a key tile transposed into kt(HS,BK) so that the
 * inner loop is over keys and vectorises without reordering any sum.  The
 * three unit functions are compiled per x86-64 level (KC_MULTIVERSION) with
 * their helpers, the exp (vmath.h) included, inlined into each version.
 */
#include "kernels.h"
#include "vmath.h"

#include <math.h>
#include <string.h>

enum { BQ = 32, BK = 64 };   /* query rows per unit, keys per tile */

/* Pointers to token t of batch b, head h, for the strided layouts. */
#define QROW(base, b, t, h) ((base) + ((size_t)(b) * s.T + (t)) * s.ld_q + (size_t)(h) * s.HS)
#define KVROW(base, b, t, g) ((base) + ((size_t)(b) * s.T + (t)) * s.ld_kv + (size_t)(g) * s.HS)
#define OROW(base, b, t, h) ((base) + (((size_t)(b) * s.T + (t)) * s.NH + (h)) * s.HS)

/* Copies keys [j0, j0+nk) of kv head g transposed into tile(HS,BK), zero-padded. */
KC_INLINE void kc_attn_pack(float *tile, const float *src, int b, int g, int j0, int nk,
                            KcAttnShape s)
{
    for (int d = 0; d < s.HS; d++)
        for (int jj = nk; jj < BK; jj++) tile[d * BK + jj] = 0.0f;
    for (int jj = 0; jj < nk; jj++) {
        const float *row = KVROW(src, b, j0 + jj, g);   /* (HS) */
        for (int d = 0; d < s.HS; d++) tile[d * BK + jj] = row[d];
    }
}

/* dots(BK) = x(HS) . tile(HS,BK): one row against a whole key tile. */
KC_INLINE void kc_attn_dots(float *restrict dots, const float *restrict x,
                            const float *restrict tile, int HS)
{
    for (int jj = 0; jj < BK; jj++) dots[jj] = 0.0f;
    for (int d = 0; d < HS; d++) {
        float xd = x[d];
        const float *t = tile + (size_t)d * BK;
        for (int jj = 0; jj < BK; jj++) dots[jj] += xd * t[jj];
    }
}

/* y(n) += a * x(n). */
KC_INLINE void kc_axpy(float *restrict y, float a, const float *restrict x, int n)
{
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* Forward for query rows [i0, i1) of head h in batch b. */
KC_MULTIVERSION
static void kc_attn_forward_unit(float *out, float *lse, const float *q, const float *k,
                                 const float *v, KcAttnShape s, int b, int h, int i0, int i1)
{
    const int HS = s.HS, g = h / (s.NH / s.NKV);
    const float scale = 1.0f / sqrtf((float)HS);
    float acc[BQ * HS];   /* (BQ,HS) unnormalised outputs */
    float kt[HS * BK];    /* (HS,BK) key tile, transposed */
    float m[BQ], l[BQ], sc[BK];
    memset(acc, 0, sizeof acc);
    for (int r = 0; r < BQ; r++) m[r] = -INFINITY, l[r] = 0.0f;

    for (int j0 = 0; j0 < i1; j0 += BK) {
        int nk = i1 - j0 < BK ? i1 - j0 : BK;
        kc_attn_pack(kt, k, b, g, j0, nk, s);
        for (int i = j0 > i0 ? j0 : i0; i < i1; i++) {
            int r = i - i0;
            int jn = i - j0 + 1 < nk ? i - j0 + 1 : nk;   /* keys j0..i (causal) */
            kc_attn_dots(sc, QROW(q, b, i, h), kt, HS);
            float mx = -INFINITY;
            for (int jj = 0; jj < jn; jj++) {
                sc[jj] *= scale;
                mx = sc[jj] > mx ? sc[jj] : mx;
            }
            float mnew = mx > m[r] ? mx : m[r];
            float corr = expf(m[r] - mnew);   /* 0 on the first tile */
            for (int jj = 0; jj < jn; jj++) sc[jj] = kc_exp1(sc[jj] - mnew);
            float sum = 0.0f;
            for (int jj = 0; jj < jn; jj++) sum += sc[jj];
            l[r] = l[r] * corr + sum;
            m[r] = mnew;
            float *o = acc + (size_t)r * HS;
            for (int d = 0; d < HS; d++) o[d] *= corr;
            for (int jj = 0; jj < jn; jj++) kc_axpy(o, sc[jj], KVROW(v, b, j0 + jj, g), HS);
        }
    }
    for (int i = i0; i < i1; i++) {
        int r = i - i0;
        float *o = OROW(out, b, i, h);   /* (HS) */
        float inv = 1.0f / l[r];
        for (int d = 0; d < HS; d++) o[d] = acc[(size_t)r * HS + d] * inv;
        lse[((size_t)b * s.NH + h) * s.T + i] = m[r] + logf(l[r]);
    }
}

/* out (B,T,NH,HS), lse (B,NH,T) from q, k, v; see kernels.h for layouts. */
void kc_attention_forward(float *out, float *lse, const float *q, const float *k,
                          const float *v, KcAttnShape s)
{
    int nqb = (s.T + BQ - 1) / BQ;
    int units = s.B * s.NH * nqb;
    /* dynamic: causal rows near the end cost more; placement changes no bits */
    #pragma omp parallel for schedule(dynamic, 1)
    for (int u = 0; u < units; u++) {
        int qb = u % nqb, h = (u / nqb) % s.NH, b = u / (nqb * s.NH);
        int i0 = qb * BQ, i1 = i0 + BQ < s.T ? i0 + BQ : s.T;
        kc_attn_forward_unit(out, lse, q, k, v, s, b, h, i0, i1);
    }
}

/* D_i = dout_i . out_i, the row term of the softmax backward. */
KC_INLINE float kc_attn_rowdot(const float *dout, const float *out, int HS)
{
    float d = 0.0f;
    for (int i = 0; i < HS; i++) d += dout[i] * out[i];
    return d;
}

/* Probabilities p and score gradients ds (both (BK), first jn valid) of one
 * query row against a key tile, recomputed from the saved log-sum-exp. */
KC_INLINE void kc_attn_row_grads(float *p, float *ds, const float *qi, const float *doi,
                              const float *kt, const float *vt, float lse_i, float D_i,
                              float scale, int HS, int jn)
{
    kc_attn_dots(p, qi, kt, HS);    /* scores */
    kc_attn_dots(ds, doi, vt, HS);  /* dp = dout . v */
    for (int jj = 0; jj < jn; jj++) p[jj] = kc_exp1(p[jj] * scale - lse_i);
    for (int jj = 0; jj < jn; jj++) ds[jj] = p[jj] * (ds[jj] - D_i);
}

/* Backward pass A: dq for query rows [i0, i1) of head h in batch b. */
KC_MULTIVERSION
static void kc_attn_dq_unit(float *dq, const float *dout, const float *out, const float *lse,
                            const float *q, const float *k, const float *v, KcAttnShape s,
                            int b, int h, int i0, int i1)
{
    const int HS = s.HS, g = h / (s.NH / s.NKV);
    const float scale = 1.0f / sqrtf((float)HS);
    float acc[BQ * HS];           /* (BQ,HS) dq of the block */
    float kt[HS * BK], vt[HS * BK];
    float p[BK], ds[BK], D[BQ];
    memset(acc, 0, sizeof acc);
    for (int i = i0; i < i1; i++) D[i - i0] = kc_attn_rowdot(OROW(dout, b, i, h), OROW(out, b, i, h), HS);

    for (int j0 = 0; j0 < i1; j0 += BK) {
        int nk = i1 - j0 < BK ? i1 - j0 : BK;
        kc_attn_pack(kt, k, b, g, j0, nk, s);
        kc_attn_pack(vt, v, b, g, j0, nk, s);
        for (int i = j0 > i0 ? j0 : i0; i < i1; i++) {
            int r = i - i0;
            int jn = i - j0 + 1 < nk ? i - j0 + 1 : nk;
            float lse_i = lse[((size_t)b * s.NH + h) * s.T + i];
            kc_attn_row_grads(p, ds, QROW(q, b, i, h), OROW(dout, b, i, h), kt, vt, lse_i,
                              D[r], scale, HS, jn);
            float *a = acc + (size_t)r * HS;
            for (int jj = 0; jj < jn; jj++) kc_axpy(a, ds[jj] * scale, KVROW(k, b, j0 + jj, g), HS);
        }
    }
    for (int i = i0; i < i1; i++) kc_axpy(QROW(dq, b, i, h), 1.0f, acc + (size_t)(i - i0) * HS, HS);
}

/* Backward pass B: dk, dv for keys [j0, j1) of kv head g in batch b, summed
 * over the group's heads and every query that sees them, in that order. */
KC_MULTIVERSION
static void kc_attn_dkv_unit(float *dk, float *dv, const float *dout, const float *out,
                             const float *lse, const float *q, const float *k, const float *v,
                             KcAttnShape s, int b, int g, int j0, int j1)
{
    const int HS = s.HS, rep = s.NH / s.NKV, nk = j1 - j0;
    const float scale = 1.0f / sqrtf((float)HS);
    float dkacc[BK * HS], dvacc[BK * HS];   /* (BK,HS) each */
    float kt[HS * BK], vt[HS * BK];
    float p[BK], ds[BK];
    memset(dkacc, 0, sizeof dkacc);
    memset(dvacc, 0, sizeof dvacc);
    kc_attn_pack(kt, k, b, g, j0, nk, s);
    kc_attn_pack(vt, v, b, g, j0, nk, s);

    for (int h = g * rep; h < (g + 1) * rep; h++) {
        for (int i = j0; i < s.T; i++) {
            int jn = i - j0 + 1 < nk ? i - j0 + 1 : nk;
            const float *qi = QROW(q, b, i, h), *doi = OROW(dout, b, i, h);
            float D_i = kc_attn_rowdot(doi, OROW(out, b, i, h), HS);
            float lse_i = lse[((size_t)b * s.NH + h) * s.T + i];
            kc_attn_row_grads(p, ds, qi, doi, kt, vt, lse_i, D_i, scale, HS, jn);
            for (int jj = 0; jj < jn; jj++) {
                kc_axpy(dvacc + (size_t)jj * HS, p[jj], doi, HS);
                kc_axpy(dkacc + (size_t)jj * HS, ds[jj] * scale, qi, HS);
            }
        }
    }
    for (int jj = 0; jj < nk; jj++) {
        if (dk) kc_axpy(KVROW(dk, b, j0 + jj, g), 1.0f, dkacc + (size_t)jj * HS, HS);
        if (dv) kc_axpy(KVROW(dv, b, j0 + jj, g), 1.0f, dvacc + (size_t)jj * HS, HS);
    }
}

/* Accumulates dq, dk, dv of kc_attention_forward. */
void kc_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                           const float *out, const float *lse, const float *q,
                           const float *k, const float *v, KcAttnShape s)
{
    if (dq) {
        int nqb = (s.T + BQ - 1) / BQ;
        int units = s.B * s.NH * nqb;
        #pragma omp parallel for schedule(dynamic, 1)
        for (int u = 0; u < units; u++) {
            int qb = u % nqb, h = (u / nqb) % s.NH, b = u / (nqb * s.NH);
            int i0 = qb * BQ, i1 = i0 + BQ < s.T ? i0 + BQ : s.T;
            kc_attn_dq_unit(dq, dout, out, lse, q, k, v, s, b, h, i0, i1);
        }
    }
    if (dk || dv) {
        int nkb = (s.T + BK - 1) / BK;
        int units = s.B * s.NKV * nkb;
        #pragma omp parallel for schedule(dynamic, 1)
        for (int u = 0; u < units; u++) {
            int kb = u % nkb, g = (u / nkb) % s.NKV, b = u / (nkb * s.NKV);
            int j0 = kb * BK, j1 = j0 + BK < s.T ? j0 + BK : s.T;
            kc_attn_dkv_unit(dk, dv, dout, out, lse, q, k, v, s, b, g, j0, j1);
        }
    }
}
