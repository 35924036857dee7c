/* attention.c — causal self-attention with grouped-query heads, flash-style.
 *
 * Forward keeps a running max and sum per query row over key tiles (online
 * softmax) and saves only the log-sum-exp of each row; backward recomputes
 * the probabilities from it, never storing a (T,T) matrix.
 *
 * Work is cut into units whose results do not depend on who computes them:
 * forward and dq by (b, h, block of TQ query rows); dk and dv by (b, kv head,
 * block of TK keys), which loops over the heads of its group and all later
 * query blocks in a fixed order.  No two units write the same element, so no
 * atomics and bit-identical results for any thread count.  The price is that
 * backward computes the scores twice (once per pass).
 *
 * Within a unit every product of a query block and a key tile is one
 * single-threaded sgemm on the rows where they lie (q, k, v read in place,
 * rows ld apart: no packing of ours): S = Q·Kᵀ, O += P·V, dP = dO·Vᵀ,
 * dQ += dS·K, dV += Pᵀ·dO, dK += dSᵀ·Q, 64 x 64 x HS each, which OpenBLAS
 * runs at several times the speed of the row-at-a-time loops this replaces
 * (issue 16).  The elementwise work between them (masks, exps, the online
 * softmax) is compiled per x86-64 level (KC_MULTIVERSION) with the exp
 * (vmath.h) inlined.
 */
#include "kernels.h"
#include "vmath.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

enum { TQ = 64, TK = 64 };   /* query rows per block, keys per tile */

/* Pointers to token t of batch b, head h, for the strided layouts. */
#define QROW(base, b, t, h) ((base) + ((size_t)(b) * s.T + (t)) * s.ld_q + (size_t)(h) * s.HS)
#define KVROW(base, b, t, g) ((base) + ((size_t)(b) * s.T + (t)) * s.ld_kv + (size_t)(g) * s.HS)
#define OROW(base, b, t, h) ((base) + (((size_t)(b) * s.T + (t)) * s.NH + (h)) * s.HS)

/* C(m,n) = alpha·op(A)·op(B) + beta·C, row-major, single-threaded (kc_init). */
static void kc_attn_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
                         const float *B, int ldb, float beta, float *C, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
                alpha, A, lda, B, ldb, beta, C, ldc);
}

/* Xt(HS, nk; rows TK apart) = the rows j0.. of kv head g transposed:
 * OpenBLAS's small-matrix kernels (no packing: what makes 64 x 64 products
 * fast) take B transposed only when the product is tiny. */
KC_MULTIVERSION
static void kc_attn_kv_t(float *Xt, const float *x, KcAttnShape s, int b, int g, int j0, int nk)
{
    enum { BLK = 8 };   /* 8 x 8 blocks: a block's rows and columns stay in registers and L1 */
    for (int c0 = 0; c0 < nk; c0 += BLK) {
        int nc = nk - c0 < BLK ? nk - c0 : BLK;
        const float *rows[BLK];
        for (int c = 0; c < nc; c++) rows[c] = KVROW(x, b, j0 + c0 + c, g);
        for (int d0 = 0; d0 < s.HS; d0 += BLK) {
            int nd = s.HS - d0 < BLK ? s.HS - d0 : BLK;
            for (int d = 0; d < nd; d++)
                for (int c = 0; c < nc; c++) Xt[(size_t)(d0 + d) * TK + c0 + c] = rows[c][d0 + d];
        }
    }
}

/* S (nq, nk; rows TK apart) = scale·Q·Kᵀ for query rows i0.. of head h, Kt
 * the key tile transposed (kc_attn_kv_t). */
static void kc_attn_scores(float *S, const float *q, const float *Kt, KcAttnShape s, int b, int h, int i0,
                           int nq, int nk, float scale)
{
    kc_attn_gemm(0, 0, nq, nk, s.HS, scale, QROW(q, b, i0, h), s.ld_q, Kt, TK, 0.0f, S, TK);
}

/* One tile of the online softmax: per row r of S (key j0 + c against query
 * i0 + r, keys after the query masked), the new running max, the rescaling
 * corr[r] of the earlier sum and output, S := exp(S - max) in place. */
KC_MULTIVERSION
static void kc_attn_softmax_tile(float *S, float *m, float *l, float *corr, int i0, int nq, int j0, int nk)
{
    for (int r = 0; r < nq; r++) {
        float *x = S + (size_t)r * TK;
        int jn = i0 + r - j0 + 1 < nk ? i0 + r - j0 + 1 : nk;   /* keys j0 .. i (causal) */
        if (jn <= 0) {   /* a tile wholly after the query: nothing to add */
            corr[r] = 1.0f;
            for (int c = 0; c < nk; c++) x[c] = 0.0f;
            continue;
        }
        float mx = kc_max_lanes(x, jn);
        float mnew = mx > m[r] ? mx : m[r];
        corr[r] = kc_exp1(m[r] - mnew);   /* 0 on the first tile */
        for (int c = 0; c < jn; c++) x[c] = kc_exp1(x[c] - mnew);
        for (int c = jn; c < nk; c++) x[c] = 0.0f;
        l[r] = l[r] * corr[r] + kc_sum_lanes(x, jn);
        m[r] = mnew;
    }
}

/* acc(nq, HS) rows *= corr. */
KC_MULTIVERSION
static void kc_attn_rescale(float *acc, const float *corr, int nq, int HS)
{
    for (int r = 0; r < nq; r++)
        for (int d = 0; d < HS; d++) acc[(size_t)r * HS + d] *= corr[r];
}

/* Forward for query rows [i0, i0+nq) of head h in batch b. */
static void kc_attn_forward_unit(float *out, float *lse, const float *q, const float *k, const float *v,
                                 KcAttnShape s, int b, int h, int i0, int nq)
{
    const int HS = s.HS, g = h / (s.NH / s.NKV);
    const float scale = 1.0f / sqrtf((float)HS);
    float acc[TQ * HS];   /* (nq,HS) unnormalised outputs */
    float S[TQ * TK];     /* (nq,TK) scores, then probabilities */
    float Kt[HS * TK];    /* (HS,TK) the key tile, transposed */
    float m[TQ], l[TQ], corr[TQ];
    memset(acc, 0, sizeof(float) * (size_t)nq * HS);
    for (int r = 0; r < nq; r++) m[r] = -INFINITY, l[r] = 0.0f;
    for (int j0 = 0; j0 < i0 + nq; j0 += TK) {
        int nk = i0 + nq - j0 < TK ? i0 + nq - j0 : TK;
        kc_attn_kv_t(Kt, k, s, b, g, j0, nk);
        kc_attn_scores(S, q, Kt, s, b, h, i0, nq, nk, scale);
        kc_attn_softmax_tile(S, m, l, corr, i0, nq, j0, nk);
        if (j0) kc_attn_rescale(acc, corr, nq, HS);
        kc_attn_gemm(0, 0, nq, HS, nk, 1.0f, S, TK, KVROW(v, b, j0, g), s.ld_kv, 1.0f, acc, HS);
    }
    for (int r = 0; r < nq; r++) {
        float *o = OROW(out, b, i0 + r, h);   /* (HS) */
        float inv = 1.0f / l[r];
        for (int d = 0; d < HS; d++) o[d] = acc[(size_t)r * HS + d] * inv;
        lse[((size_t)b * s.NH + h) * s.T + i0 + r] = m[r] + logf(l[r]);
    }
}

/* out (B,T,NH,HS), lse (B,NH,T) from q, k, v; see kernels.h for layouts. */
void kc_attention_forward(float *out, float *lse, const float *q, const float *k,
                          const float *v, KcAttnShape s)
{
    kc_init();
    int nqb = (s.T + TQ - 1) / TQ;
    int units = s.B * s.NH * nqb;
    /* dynamic: causal rows near the end cost more; placement changes no bits */
    #pragma omp parallel for schedule(dynamic, 1)
    for (int u = 0; u < units; u++) {
        int qb = u % nqb, h = (u / nqb) % s.NH, b = u / (nqb * s.NH);
        int i0 = qb * TQ, nq = s.T - i0 < TQ ? s.T - i0 : TQ;
        kc_attn_forward_unit(out, lse, q, k, v, s, b, h, i0, nq);
    }
}

/* D_i = dout_i · out_i, the row term of the softmax backward, for nq rows. */
KC_MULTIVERSION
static void kc_attn_rowdots(float *D, const float *dout, const float *out, KcAttnShape s, int b, int h, int i0,
                            int nq)
{
    for (int r = 0; r < nq; r++) {
        D[r] = kc_dot_lanes(OROW(dout, b, i0 + r, h), OROW(out, b, i0 + r, h), s.HS);
    }
}

/* From the scores S of a tile (query rows i0.., keys j0..) and dP = dO·Vᵀ:
 * P = exp(S - lse) (masked after the query: 0) in S, dS = P·(dP - D) in dP. */
KC_MULTIVERSION
static void kc_attn_grad_tile(float *S, float *dP, const float *lse, const float *D, int i0, int nq, int j0,
                              int nk)
{
    for (int r = 0; r < nq; r++) {
        float *p = S + (size_t)r * TK, *ds = dP + (size_t)r * TK;
        int jn = i0 + r - j0 + 1 < nk ? i0 + r - j0 + 1 : nk;
        if (jn < 0) jn = 0;
        for (int c = 0; c < jn; c++) {
            p[c] = kc_exp1(p[c] - lse[r]);
            ds[c] = p[c] * (ds[c] - D[r]);
        }
        for (int c = jn; c < nk; c++) p[c] = 0.0f, ds[c] = 0.0f;
    }
}

/* P and dS of the tile of query rows [i0, i0+nq) of head h against keys
 * [j0, j0+nk) (see kc_attn_grad_tile), Kt and Vt their k and v transposed;
 * D and the row lse given. */
static void kc_attn_tile_grads(float *S, float *dP, const float *dout, const float *q, const float *Kt,
                               const float *Vt, const float *lse, const float *D, KcAttnShape s, int b, int h,
                               int i0, int nq, int j0, int nk, float scale)
{
    kc_attn_scores(S, q, Kt, s, b, h, i0, nq, nk, scale);
    kc_attn_gemm(0, 0, nq, nk, s.HS, 1.0f, OROW(dout, b, i0, h), s.NH * s.HS, Vt, TK, 0.0f, dP, TK);
    kc_attn_grad_tile(S, dP, lse + ((size_t)b * s.NH + h) * s.T + i0, D, i0, nq, j0, nk);
}

/* Backward pass A: dq for query rows [i0, i0+nq) of head h in batch b. */
static void kc_attn_dq_unit(float *dq, const float *dout, const float *out, const float *lse,
                            const float *q, const float *k, const float *v, KcAttnShape s,
                            int b, int h, int i0, int nq)
{
    const int HS = s.HS, g = h / (s.NH / s.NKV);
    const float scale = 1.0f / sqrtf((float)HS);
    float acc[TQ * HS];   /* (nq,HS) dq of the block, before the scale */
    float S[TQ * TK], dP[TQ * TK], D[TQ], Kt[HS * TK], Vt[HS * TK];
    kc_attn_rowdots(D, dout, out, s, b, h, i0, nq);
    for (int j0 = 0; j0 < i0 + nq; j0 += TK) {
        int nk = i0 + nq - j0 < TK ? i0 + nq - j0 : TK;
        kc_attn_kv_t(Kt, k, s, b, g, j0, nk);
        kc_attn_kv_t(Vt, v, s, b, g, j0, nk);
        kc_attn_tile_grads(S, dP, dout, q, Kt, Vt, lse, D, s, b, h, i0, nq, j0, nk, scale);
        kc_attn_gemm(0, 0, nq, HS, nk, 1.0f, dP, TK, KVROW(k, b, j0, g), s.ld_kv, j0 ? 1.0f : 0.0f, acc, HS);
    }
    for (int r = 0; r < nq; r++) {
        float *d = QROW(dq, b, i0 + r, h);
        for (int i = 0; i < HS; i++) d[i] += acc[(size_t)r * HS + i] * scale;
    }
}

/* T(nk, nq; rows TQ apart) = X(nq, nk; rows TK apart)ᵀ, for the products
 * with a transposed tile (kc_attn_kv_t says why). */
KC_MULTIVERSION
static void kc_attn_transpose(float *T, const float *X, int nq, int nk)
{
    for (int c = 0; c < nk; c++)
        for (int r = 0; r < nq; r++) T[(size_t)c * TQ + r] = X[(size_t)r * TK + c];
}

/* Backward pass B: dk, dv for keys [j0, j0+nk) of kv head g in batch b, summed
 * over the group's heads and the query blocks that see them, in that order. */
static void kc_attn_dkv_unit(float *dk, float *dv, const float *dout, const float *out,
                             const float *lse, const float *q, const float *k, const float *v,
                             KcAttnShape s, int b, int g, int j0, int nk)
{
    const int HS = s.HS, rep = s.NH / s.NKV;
    const float scale = 1.0f / sqrtf((float)HS);
    float dkacc[TK * HS], dvacc[TK * HS];   /* (nk,HS) each, dk before the scale */
    float S[TQ * TK], dP[TQ * TK], D[TQ], St[TK * TQ], Kt[HS * TK], Vt[HS * TK];
    int first = 1;
    kc_attn_kv_t(Kt, k, s, b, g, j0, nk);
    kc_attn_kv_t(Vt, v, s, b, g, j0, nk);
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        for (int i0 = j0 / TQ * TQ; i0 < s.T; i0 += TQ) {
            int nq = s.T - i0 < TQ ? s.T - i0 : TQ;
            kc_attn_rowdots(D, dout, out, s, b, h, i0, nq);
            kc_attn_tile_grads(S, dP, dout, q, Kt, Vt, lse, D, s, b, h, i0, nq, j0, nk, scale);
            float beta = first ? 0.0f : 1.0f;
            kc_attn_transpose(St, S, nq, nk);
            kc_attn_gemm(0, 0, nk, HS, nq, 1.0f, St, TQ, OROW(dout, b, i0, h), s.NH * HS, beta, dvacc, HS);
            kc_attn_transpose(St, dP, nq, nk);
            kc_attn_gemm(0, 0, nk, HS, nq, 1.0f, St, TQ, QROW(q, b, i0, h), s.ld_q, beta, dkacc, HS);
            first = 0;
        }
    }
    for (int c = 0; c < nk; c++) {
        float *kk = dk ? KVROW(dk, b, j0 + c, g) : NULL, *vv = dv ? KVROW(dv, b, j0 + c, g) : NULL;
        for (int i = 0; i < HS; i++) {
            if (kk) kk[i] += dkacc[(size_t)c * HS + i] * scale;
            if (vv) vv[i] += dvacc[(size_t)c * HS + i];
        }
    }
}

/* Accumulates dq, dk, dv of kc_attention_forward. */
void kc_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                           const float *out, const float *lse, const float *q,
                           const float *k, const float *v, KcAttnShape s)
{
    kc_init();
    if (dq) {
        int nqb = (s.T + TQ - 1) / TQ;
        int units = s.B * s.NH * nqb;
        #pragma omp parallel for schedule(dynamic, 1)
        for (int u = 0; u < units; u++) {
            int qb = u % nqb, h = (u / nqb) % s.NH, b = u / (nqb * s.NH);
            int i0 = qb * TQ, nq = s.T - i0 < TQ ? s.T - i0 : TQ;
            kc_attn_dq_unit(dq, dout, out, lse, q, k, v, s, b, h, i0, nq);
        }
    }
    if (dk || dv) {
        int nkb = (s.T + TK - 1) / TK;
        int units = s.B * s.NKV * nkb;
        #pragma omp parallel for schedule(dynamic, 1)
        for (int u = 0; u < units; u++) {
            int kb = u % nkb, g = (u / nkb) % s.NKV, b = u / (nkb * s.NKV);
            int j0 = kb * TK, nk = s.T - j0 < TK ? s.T - j0 : TK;
            kc_attn_dkv_unit(dk, dv, dout, out, lse, q, k, v, s, b, g, j0, nk);
        }
    }
}
