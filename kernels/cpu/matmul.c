/* matmul.c — linear layers: out = inp . W^T + b, through OpenBLAS sgemm.
 *
 * OpenBLAS runs single-threaded; we split each GEMM into row chunks whose
 * boundaries depend only on the shape, and hand chunks to OpenMP threads.
 * Every output element is then computed by one sgemm call whose operands do
 * not depend on the thread count, so results are bit-identical for any
 * OMP_NUM_THREADS, and OpenBLAS's spinning thread pool never competes with
 * OpenMP's for the cores.
 */
#include "kernels.h"

#include <cblas.h>
#include <pthread.h>

static pthread_once_t kc_init_once = PTHREAD_ONCE_INIT;

/* One-time set-up: OpenBLAS must not start threads of its own. */
static void kc_init_blas(void)
{
    openblas_set_num_threads(1);
}

/* Public entry for the one-time set-up, safe to call any number of times. */
void kc_init(void)
{
    pthread_once(&kc_init_once, kc_init_blas);
}

/* Rows per chunk when an M-row GEMM output is split: a pure function of M.
 * About 256 rows (smaller chunks re-pack the other operand too often), an
 * even number of chunks (2 and 4 threads stay balanced), at most 64, and a
 * multiple of 16 rows (the sgemm micro-kernel height). */
static int kc_chunk_rows(int M)
{
    int nchunks = (M + 256) / 512 * 2;
    if (nchunks < 2) nchunks = 2;
    if (nchunks > 64) nchunks = 64;
    int rows = (M + nchunks - 1) / nchunks;
    return (rows + 15) / 16 * 16;
}

/* C(M,N) = op(A) . op(B) + beta * C, row-major, split over M. */
static void kc_sgemm_rows(int transa, int transb, int M, int N, int K, const float *A, int lda,
                          const float *B, int ldb, float beta, float *C, int ldc)
{
    kc_init();
    if (M <= 0 || N <= 0) return;
    int rows = kc_chunk_rows(M);
    int nchunks = (M + rows - 1) / rows;
    /* dynamic: a chunk is the same sgemm call whichever thread takes it, and a
     * core taken by another process then delays one chunk, not half the work */
    #pragma omp parallel for schedule(dynamic, 1)
    for (int c = 0; c < nchunks; c++) {
        int m0 = c * rows;
        int m1 = m0 + rows < M ? m0 + rows : M;
        /* row m of op(A) starts at A + m*lda untransposed, at A + m transposed */
        const float *a = transa ? A + m0 : A + (size_t)m0 * lda;
        cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                    transb ? CblasTrans : CblasNoTrans, m1 - m0, N, K, 1.0f, a, lda, B, ldb,
                    beta, C + (size_t)m0 * ldc, ldc);
    }
}

/* out(N,OC) = inp(N,C) . weight(OC,C)^T + bias(OC). */
void kc_matmul_forward(float *out, const float *inp, const float *weight,
                       const float *bias, int N, int C, int OC)
{
    float beta = 0.0f;
    if (bias) {
        /* start from the bias so sgemm adds the product to it (beta = 1) */
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            float *o = out + (size_t)n * OC;    /* (OC) */
            for (int j = 0; j < OC; j++) o[j] = bias[j];
        }
        beta = 1.0f;
    }
    kc_sgemm_rows(0, 1, N, OC, C, inp, C, weight, C, beta, out, OC);
}

/* dbias(OC) += sum over rows of dout(N,OC), in row order, in double. */
static void kc_bias_backward(float *dbias, const float *dout, int N, int OC)
{
    enum { COLS = 64 };
    int nblocks = (OC + COLS - 1) / COLS;
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * COLS;
        int nc = OC - c0 < COLS ? OC - c0 : COLS;
        double acc[COLS] = {0};
        for (int n = 0; n < N; n++) {
            const float *d = dout + (size_t)n * OC + c0;   /* (nc) */
            for (int j = 0; j < nc; j++) acc[j] += d[j];
        }
        for (int j = 0; j < nc; j++) dbias[c0 + j] += (float)acc[j];
    }
}

/* Accumulates the three gradients of kc_matmul_forward. */
void kc_matmul_backward(float *dinp, float *dweight, float *dbias,
                        const float *dout, const float *inp, const float *weight,
                        int N, int C, int OC)
{
    /* dinp(N,C) += dout(N,OC) . weight(OC,C) */
    if (dinp) kc_sgemm_rows(0, 0, N, C, OC, dout, OC, weight, C, 1.0f, dinp, C);
    /* dweight(OC,C) += dout^T(OC,N) . inp(N,C): the sum over N runs inside
     * one sgemm call per chunk of OC rows */
    if (dweight) kc_sgemm_rows(1, 0, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias) kc_bias_backward(dbias, dout, N, OC);
}
