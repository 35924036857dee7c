/* head.c — the output head fused with the softmax cross-entropy.
 *
 * logits(N,Vl) = inp(N,C) . w(Vl,C)^T over this rank's vocabulary columns
 * [v0, v0+Vl) of V, then the cross-entropy of crossentropy.c (the same
 * three row statistics, the same combine across ranks), then the backward
 * dinp(N,C) += dlogits . w and dw(Vl,C) += dlogits^T . inp with
 * dlogits = dloss (softmax - onehot).  Unfused, the (N,Vl) logits go
 * through memory about six times (the GEMM writes them, the cross-entropy
 * reads them twice and rewrites them, each backward GEMM reads them); for
 * GPT-2 at 1024 tokens that is 206 MB a pass.
 *
 * Here the vocabulary is cut into chunks of KC_HEAD_VC columns:
 * - forward: per chunk (an OpenMP work unit) and block of rows, the GEMM
 *   writes the tile, and while it is in cache each row's tile max and sum
 *   of exps relative to it are taken; rows then combine their chunks'
 *   (max, sum) in chunk order;
 * - backward: per group of consecutive chunks (a work unit), chunk by chunk
 *   and block by block, the tile's logits become dlogits in place (by
 *   kc_xent_backward's expression from the global max and sum, so every
 *   chunking and every tp split gives the same bits), then dw's rows of the
 *   chunk += tile^T . inp and the group's partial dinp += tile . w_chunk,
 *   both GEMMs on the tile just written; dinp then adds the groups'
 *   partials in group order.
 * The logits are written once and read once.
 *
 * A small vocabulary has fewer chunks than threads (GPT's 256 tokens: one),
 * and chunks alone would leave all but one thread idle.  With fewer than
 * KC_HEAD_GROUPS chunks the rows are also cut into splits (kc_head_splits:
 * enough for KC_HEAD_GROUPS work units, none under KC_HEAD_MIN_ROWS rows):
 * the forward's units are (chunk, row split); the backward's are (group,
 * row split) for the dlogits and the partial dinp, whose rows are disjoint,
 * and then, since each dw row sums over all the rows, (chunk, column split
 * of C) for dw, which reads the dlogits tile a second time (small: the
 * vocabulary is).
 *
 * Chunk, block, split and group bounds depend on the shape alone, every
 * GEMM is one single-threaded sgemm, and every sum has a fixed order: the
 * results are bit-identical for any thread count.
 */
#include "kernels.h"
#include "vmath.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

enum {
    KC_HEAD_VC = 1024,          /* vocabulary columns per chunk                    */
    KC_HEAD_TILE = 1 << 20,     /* floats per (rows x chunk) tile, at most         */
    KC_HEAD_GROUPS = 8,         /* backward work units, at most (partial dinps)    */
    KC_HEAD_MIN_ROWS = 32,      /* rows of a row split, at least                   */
};

/* Real (unpadded) columns of the local slice. */
static int kc_head_valid(KcHeadShape s)
{
    int n = s.V - s.v0;
    if (n < 0) n = 0;
    return n < s.Vl ? n : s.Vl;
}

/* Chunks over the real columns, rows per block, groups of chunks. */
static int kc_head_chunks(KcHeadShape s) { return (kc_head_valid(s) + KC_HEAD_VC - 1) / KC_HEAD_VC; }
static int kc_head_rows(KcHeadShape s)
{
    int r = KC_HEAD_TILE / KC_HEAD_VC / 16 * 16;
    return s.N < r ? s.N : r;
}
static int kc_head_groups(KcHeadShape s)
{
    int nc = kc_head_chunks(s);
    return nc < KC_HEAD_GROUPS ? nc : KC_HEAD_GROUPS;
}

/* Row splits (and the backward's dw column splits): 1 with KC_HEAD_GROUPS
 * chunks or more, else enough for KC_HEAD_GROUPS units with at least
 * KC_HEAD_MIN_ROWS rows each.  A function of the shape alone. */
static int kc_head_splits(KcHeadShape s)
{
    int nc = kc_head_chunks(s);
    if (nc == 0 || nc >= KC_HEAD_GROUPS) return 1;
    int want = (KC_HEAD_GROUPS + nc - 1) / nc, most = s.N / KC_HEAD_MIN_ROWS;
    return want < most ? want : most > 1 ? most : 1;
}

/* Split i of n over [0, len): [*a, *b), in whole micro-tiles of 16 (an
 * empty one when len runs out first). */
static void kc_head_split(int len, int n, int i, int *a, int *b)
{
    int each = ((len + n - 1) / n + 15) / 16 * 16;
    *a = i * each < len ? i * each : len;
    *b = *a + each < len ? *a + each : len;
}

/* The scratch's parts: per chunk and row the tile max (float) and sum
 * (double) of the forward, then the groups' partial dinps (N,C) each of the
 * backward. */
static float *kc_head_cmax(float *scratch) { return scratch; }
static double *kc_head_csum(float *scratch, KcHeadShape s)
{
    size_t off = ((size_t)kc_head_chunks(s) * s.N + 1) / 2 * 2;   /* 8-byte aligned */
    return (double *)(scratch + off);
}
static float *kc_head_part(float *scratch, KcHeadShape s)
{
    return (float *)(kc_head_csum(scratch, s) + (size_t)kc_head_chunks(s) * s.N);
}

size_t kc_head_scratch_floats(KcHeadShape s)
{
    size_t nc = (size_t)kc_head_chunks(s), n = (size_t)s.N;
    return (nc * n + 1) / 2 * 2 + 2 * nc * n + (size_t)kc_head_groups(s) * n * (size_t)s.C;
}

/* One row of a tile: its max and the sum of exp(x - max) (double, in
 * vmath.h's fixed lane order); the logits stay.  Per x86-64 level, exp
 * inlined. */
KC_MULTIVERSION
static void kc_head_stats(const float *x, int n, float *mx_out, double *sum_out)
{
    float mx = kc_max_lanes(x, n);
    double acc[KC_LANES] = {0};
    int i = 0;
    for (; i + KC_LANES <= n; i += KC_LANES)
        for (int l = 0; l < KC_LANES; l++) acc[l] += kc_exp1(x[i + l] - mx);
    for (int l = 0; i < n; i++, l++) acc[l] += kc_exp1(x[i] - mx);
    double sum = 0.0;
    for (int l = 0; l < KC_LANES; l++) sum += acc[l];
    *mx_out = mx;
    *sum_out = sum;
}

/* One row of a tile: x := (exp(x - gmax) / gsum - onehot) * dloss, the
 * expression of kc_xent_backward (so the same bits from the same logits and
 * statistics, whatever the chunking: every layout gets the same dlogits);
 * tj: the target's column in the tile, or outside [0, n). */
KC_MULTIVERSION
static void kc_head_grad_row(float *x, int n, float gmax, float inv, float dloss, int tj)
{
    for (int j = 0; j < n; j++) x[j] = (kc_exp1(x[j] - gmax) * inv - (j == tj ? 1.0f : 0.0f)) * dloss;
}

void kc_head_forward(float *logits, float *rowmax, float *rowsum, float *tlogit, float *scratch,
                     const float *inp, const float *w, const int32_t *targets, KcHeadShape s)
{
    kc_init();
    const int nv = kc_head_valid(s), nc = kc_head_chunks(s), R = kc_head_rows(s), ns = kc_head_splits(s);
    float *cmax = kc_head_cmax(scratch);                 /* [nc][N] */
    double *csum = kc_head_csum(scratch, s);             /* [nc][N] */
    #pragma omp parallel for schedule(dynamic, 1)
    for (int u = 0; u < nc * ns; u++) {                  /* (chunk, row split) */
        int ch = u / ns, ra, rb;
        kc_head_split(s.N, ns, u % ns, &ra, &rb);
        int j0 = ch * KC_HEAD_VC, wd = nv - j0 < KC_HEAD_VC ? nv - j0 : KC_HEAD_VC;
        for (int r0 = ra; r0 < rb; r0 += R) {
            int nr = rb - r0 < R ? rb - r0 : R;
            float *tile = logits + (size_t)r0 * s.Vl + j0;   /* (nr, wd), rows Vl apart */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, wd, s.C, 1.0f,
                        inp + (size_t)r0 * s.C, s.C, w + (size_t)j0 * s.C, s.C, 0.0f, tile, s.Vl);
            for (int r = 0; r < nr; r++) {
                int n = r0 + r, tj = targets[n] - s.v0 - j0;
                float *x = tile + (size_t)r * s.Vl;
                if (targets[n] >= 0 && tj >= 0 && tj < wd) tlogit[n] = x[tj];   /* its one chunk */
                kc_head_stats(x, wd, &cmax[(size_t)ch * s.N + n], &csum[(size_t)ch * s.N + n]);
            }
        }
    }
    /* each row: its chunks' statistics rebased on the row max, in chunk order */
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < s.N; n++) {
        float mx = -INFINITY;
        for (int ch = 0; ch < nc; ch++) mx = cmax[(size_t)ch * s.N + n] > mx ? cmax[(size_t)ch * s.N + n] : mx;
        double sum = 0.0;
        for (int ch = 0; ch < nc; ch++)
            sum += csum[(size_t)ch * s.N + n] * exp((double)cmax[(size_t)ch * s.N + n] - mx);
        int tj = targets[n] - s.v0;
        if (!(targets[n] >= 0 && tj >= 0 && tj < nv)) tlogit[n] = 0.0f;
        rowmax[n] = mx;
        rowsum[n] = (float)sum;
    }
}

void kc_head_backward(float *dinp, float *dw, float *logits, float *scratch, const float *inp,
                      const float *w, const int32_t *targets, const float *gmax, const float *gsum,
                      float dloss, KcHeadShape s)
{
    kc_init();
    const int nv = kc_head_valid(s), nc = kc_head_chunks(s), R = kc_head_rows(s), ns = kc_head_splits(s);
    const int G = kc_head_groups(s);
    float *part = kc_head_part(scratch, s);              /* [G][N][C] */
    #pragma omp parallel for schedule(dynamic, 1)
    for (int u = 0; u < G * ns; u++) {                   /* (group, row split) */
        int g = u / ns, ra, rb;
        kc_head_split(s.N, ns, u % ns, &ra, &rb);
        int c0 = (int)((int64_t)nc * g / G), c1 = (int)((int64_t)nc * (g + 1) / G);
        float *pg = part + (size_t)g * s.N * s.C;        /* (N,C) */
        for (int ch = c0; ch < c1; ch++) {
            int j0 = ch * KC_HEAD_VC, wd = nv - j0 < KC_HEAD_VC ? nv - j0 : KC_HEAD_VC;
            for (int r0 = ra; r0 < rb; r0 += R) {
                int nr = rb - r0 < R ? rb - r0 : R;
                float *tile = logits + (size_t)r0 * s.Vl + j0;   /* logits in, dlogits out */
                for (int r = 0; r < nr; r++) {
                    int n = r0 + r, tj = targets[n] - s.v0 - j0;
                    float *x = tile + (size_t)r * s.Vl;
                    if (targets[n] < 0) memset(x, 0, (size_t)wd * 4);   /* an ignored row */
                    else kc_head_grad_row(x, wd, gmax[n], 1.0f / gsum[n], dloss, tj);
                }
                if (dw && ns == 1)   /* split rows: dw below, once every row's dlogits are in */
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, wd, s.C, nr, 1.0f, tile, s.Vl,
                                inp + (size_t)r0 * s.C, s.C, 1.0f, dw + (size_t)j0 * s.C, s.C);
                if (dinp)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, s.C, wd, 1.0f, tile, s.Vl,
                                w + (size_t)j0 * s.C, s.C, ch == c0 ? 0.0f : 1.0f, pg + (size_t)r0 * s.C, s.C);
            }
        }
    }
    /* split rows: dw(chunk rows, columns of a split) += dlogits^T . inp, the
     * rows in blocks of R, in order */
    if (dw && ns > 1) {
        #pragma omp parallel for schedule(dynamic, 1)
        for (int u = 0; u < nc * ns; u++) {              /* (chunk, column split) */
            int ch = u / ns, ca, cb;
            kc_head_split(s.C, ns, u % ns, &ca, &cb);
            int j0 = ch * KC_HEAD_VC, wd = nv - j0 < KC_HEAD_VC ? nv - j0 : KC_HEAD_VC;
            for (int r0 = 0; r0 < s.N && ca < cb; r0 += R) {
                int nr = s.N - r0 < R ? s.N - r0 : R;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, wd, cb - ca, nr, 1.0f,
                            logits + (size_t)r0 * s.Vl + j0, s.Vl, inp + (size_t)r0 * s.C + ca, s.C, 1.0f,
                            dw + (size_t)j0 * s.C + ca, s.C);
            }
        }
    }
    /* padding columns and the logits of a rank with none real: gradient 0 */
    if (nv < s.Vl) {
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < s.N; n++) memset(logits + (size_t)n * s.Vl + nv, 0, (size_t)(s.Vl - nv) * 4);
    }
    if (!dinp || G == 0) return;
    /* dinp += the groups' partials, in group order */
    size_t total = (size_t)s.N * s.C;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < total; i++) {
        float acc = part[i];
        for (int g = 1; g < G; g++) acc += part[(size_t)g * total + i];
        dinp[i] += acc;
    }
}
