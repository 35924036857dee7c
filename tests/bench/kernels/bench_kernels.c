/* bench_kernels.c — GFLOP/s of the CPU matmul and attention kernels.
 *
 *   bench_kernels [SECONDS]        one line per case: name, shape, ms, GFLOP/s
 *   bench_kernels SECONDS whole    the matmul cases as OpenBLAS's own threaded
 *                                  GEMM, called whole (OMP_NUM_THREADS of its
 *                                  threads), the reference the kernels' split
 *                                  into single-threaded chunks is measured
 *                                  against (docs/kernels.md, "OpenBLAS")
 *
 * FLOPs counted: matmul forward 2·N·C·OC, backward twice that (dinp, dweight);
 * causal attention forward 2·2·B·NH·HS·T(T+1)/2 (q·k and p·v over the
 * visible keys), backward twice the forward (dv, dp, dq, dk; the recomputed
 * scores are not counted).  Norms (layernorm, rmsnorm) are memory-bound and
 * report GB/s instead: forward 8·N·C bytes (read the input, write the
 * output), backward 16·N·C (read the output gradient and the input, read and
 * write the input gradient); the weights' and statistics' bytes are not
 * counted.  tests/bench/kernels/bench_torch.py measures the
 * same cases in PyTorch; run.sh runs both with the same thread count.
 */
#include "kernels.h"

#include <cblas.h>
#include <omp.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>

/* A buffer of n small pseudo-random floats. */
static float *buf(size_t n)
{
    float *x = malloc(n * sizeof(float));
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) * 0x1p-24f - 0.5f;
    }
    return x;
}

/* Seconds of the fastest call of fn(ctx) among those made in min_s seconds
 * (after a warm-up): the machine is shared, the minimum is the least noisy. */
static double timeit(void (*fn)(void *), void *ctx, double min_s)
{
    fn(ctx);
    double best = 1e30, start = omp_get_wtime();
    do {
        double t0 = omp_get_wtime();
        fn(ctx);
        double t = omp_get_wtime() - t0;
        best = t < best ? t : best;
    } while (omp_get_wtime() - start < min_s);
    return best;
}

typedef struct Mm { int N, C, OC; float *x, *w, *b, *y, *dy, *dx, *dw, *db; } Mm;
static void mm_fwd(void *p) { Mm *m = p; kc_matmul_forward(m->y, m->x, m->w, m->b, m->N, m->C, m->OC); }
static void mm_bwd(void *p)
{
    Mm *m = p;
    kc_matmul_backward(m->dx, m->dw, m->db, m->dy, m->x, m->w, m->N, m->C, m->OC);
}

/* The same three GEMMs as kc_matmul_*, each one OpenBLAS call (its threads). */
static void whole_fwd(void *p)
{
    Mm *m = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m->N, m->OC, m->C, 1.0f, m->x, m->C, m->w, m->C, 0.0f,
                m->y, m->OC);
}
static void whole_bwd(void *p)
{
    Mm *m = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m->N, m->C, m->OC, 1.0f, m->dy, m->OC, m->w, m->C, 1.0f,
                m->dx, m->C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m->OC, m->C, m->N, 1.0f, m->dy, m->OC, m->x, m->C, 1.0f,
                m->dw, m->C);
}

typedef struct At { KcAttnShape s; float *qkv, *o, *lse, *dqkv, *dout; } At;
static void at_fwd(void *p)
{
    At *a = p;
    int q = a->s.NH * a->s.HS, k = a->s.NKV * a->s.HS;
    kc_attention_forward(a->o, a->lse, a->qkv, a->qkv + q, a->qkv + q + k, a->s);
}
static void at_bwd(void *p)
{
    At *a = p;
    int q = a->s.NH * a->s.HS, k = a->s.NKV * a->s.HS;
    kc_attention_backward(a->dqkv, a->dqkv + q, a->dqkv + q + k, a->dout, a->o, a->lse, a->qkv,
                          a->qkv + q, a->qkv + q + k, a->s);
}

typedef struct Nm { int N, C, rms; float *x, *w, *b, *y, *mean, *rstd, *dy, *dx, *dw, *db; } Nm;
static void nm_fwd(void *p)
{
    Nm *n = p;
    if (n->rms) kc_rmsnorm_forward(n->y, n->rstd, n->x, n->w, n->N, n->C, 1e-5f);
    else kc_layernorm_forward(n->y, n->mean, n->rstd, n->x, n->w, n->b, n->N, n->C, 1e-5f);
}
static void nm_bwd(void *p)
{
    Nm *n = p;
    if (n->rms) kc_rmsnorm_backward(n->dx, n->dw, n->dy, n->x, n->w, n->rstd, n->N, n->C);
    else kc_layernorm_backward(n->dx, n->dw, n->db, n->dy, n->x, n->w, n->mean, n->rstd, n->N, n->C);
}

int main(int argc, char **argv)
{
    /* `core`: the OpenBLAS kernels a trainer runs here (the upgrade its start
     * asks for, else what OpenBLAS chose), for run.sh to set for every program */
    if (argc > 1 && !strcmp(argv[1], "core")) {
        const char *up = kc_blas_core_upgrade();
        puts(up ? up : kc_blas_core());
        return 0;
    }
    double min_s = argc > 1 ? atof(argv[1]) : 1.0;
    int whole = argc > 2 && !strcmp(argv[2], "whole");
    kc_init();
    if (whole) openblas_set_num_threads(omp_get_max_threads());
    printf("threads %d\n", omp_get_max_threads());
    /* GPT-2 124M's linears (C = 768): qkv at 256 and 1024 tokens, proj, fc, fc2 at 1024 */
    int mms[][3] = {{256, 768, 2304}, {1024, 768, 2304}, {1024, 768, 768}, {1024, 768, 3072}, {1024, 3072, 768}};
    for (size_t i = 0; i < sizeof mms / sizeof mms[0]; i++) {
        Mm m = {.N = mms[i][0], .C = mms[i][1], .OC = mms[i][2]};
        size_t nx = (size_t)m.N * m.C, nw = (size_t)m.OC * m.C, ny = (size_t)m.N * m.OC;
        m.x = buf(nx), m.w = buf(nw), m.b = buf(m.OC), m.y = buf(ny), m.dy = buf(ny);
        m.dx = buf(nx), m.dw = buf(nw), m.db = buf(m.OC);
        double fl = 2.0 * m.N * m.C * m.OC;
        double tf = timeit(whole ? whole_fwd : mm_fwd, &m, min_s), tb = timeit(whole ? whole_bwd : mm_bwd, &m, min_s);
        printf("matmul    N=%d C=%d OC=%d          fwd %7.2f ms %6.1f GFLOP/s   bwd %7.2f ms %6.1f GFLOP/s\n",
               m.N, m.C, m.OC, tf * 1e3, fl / tf * 1e-9, tb * 1e3, 2 * fl / tb * 1e-9);
        free(m.x), free(m.w), free(m.b), free(m.y), free(m.dy), free(m.dx), free(m.dw), free(m.db);
    }
    if (whole) return 0;
    /* attention: GPT-2 small heads at T = 256 and 1024, and a Llama-like GQA */
    int ats[][5] = {{4, 256, 6, 6, 64}, {1, 1024, 12, 12, 64}, {1, 1024, 8, 2, 128}};
    for (size_t i = 0; i < sizeof ats / sizeof ats[0]; i++) {
        int B = ats[i][0], T = ats[i][1], NH = ats[i][2], NKV = ats[i][3], HS = ats[i][4];
        int W = (NH + 2 * NKV) * HS;
        At a = {.s = {B, T, NH, NKV, HS, W, W}};
        size_t nqkv = (size_t)B * T * W, no = (size_t)B * T * NH * HS;
        a.qkv = buf(nqkv), a.o = buf(no), a.lse = buf((size_t)B * NH * T), a.dqkv = buf(nqkv), a.dout = buf(no);
        double fl = 4.0 * B * NH * HS * (double)T * (T + 1) / 2;
        double tf = timeit(at_fwd, &a, min_s), tb = timeit(at_bwd, &a, min_s);
        printf("attention B=%d T=%d NH=%d NKV=%d HS=%d fwd %7.2f ms %6.1f GFLOP/s   bwd %7.2f ms %6.1f GFLOP/s\n",
               B, T, NH, NKV, HS, tf * 1e3, fl / tf * 1e-9, tb * 1e3, 2 * fl / tb * 1e-9);
        free(a.qkv), free(a.o), free(a.lse), free(a.dqkv), free(a.dout);
    }
    /* norms: the fidelity benchmark's rows (2 x 64 tokens, C = 128), GPT-2
     * small's (8 x 1024, C = 768), a Llama 7B micro-batch's (1 x 1024, C = 4096) */
    int nms[][2] = {{128, 128}, {8192, 768}, {1024, 4096}};
    for (int rms = 0; rms < 2; rms++)
        for (size_t i = 0; i < sizeof nms / sizeof nms[0]; i++) {
            Nm n = {.N = nms[i][0], .C = nms[i][1], .rms = rms};
            size_t nx = (size_t)n.N * n.C;
            n.x = buf(nx), n.w = buf(n.C), n.b = buf(n.C), n.y = buf(nx), n.dy = buf(nx), n.dx = buf(nx);
            n.mean = buf(n.N), n.rstd = buf(n.N), n.dw = buf(n.C), n.db = buf(n.C);
            nm_fwd(&n);
            double tf = timeit(nm_fwd, &n, min_s), tb = timeit(nm_bwd, &n, min_s);
            printf("%s  N=%d C=%d                 fwd %7.3f ms %6.1f GB/s      bwd %7.3f ms %6.1f GB/s\n",
                   rms ? "rmsnorm  " : "layernorm", n.N, n.C, tf * 1e3, 8.0 * nx / tf * 1e-9, tb * 1e3,
                   16.0 * nx / tb * 1e-9);
            free(n.x), free(n.w), free(n.b), free(n.y), free(n.dy), free(n.dx);
            free(n.mean), free(n.rstd), free(n.dw), free(n.db);
        }
    return 0;
}
