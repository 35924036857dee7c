/* matmul.c — linear layers: out = inp . W^T + b, through OpenBLAS sgemm.
 *
 * OpenBLAS runs single-threaded; each GEMM is split into chunks of the
 * output whose boundaries depend only on the shape, and the chunks go to
 * OpenMP threads.  Every output element is then computed by one sgemm call
 * whose operands do not depend on the thread count, so results are
 * bit-identical for any OMP_NUM_THREADS, and OpenBLAS's spinning thread pool
 * never competes with OpenMP's for the cores.
 *
 * A chunk re-packs the operand it shares with the other chunks, so the
 * split runs along the larger output dimension (rows of C when op(A) is the
 * larger operand, columns when op(B) is), in as few chunks as keep the
 * threads busy (about one per 2 GFLOP): the shared operand is the smaller
 * and packed a few times, the large one (a weight, or a layer's activations
 * at long sequences) once.  Cutting only the rows in pieces of about 256,
 * as before, re-packed the whole weight for every piece: 13% of a GPT-2
 * step went to OpenBLAS's packing routines (issue 16).
 */
#include "kernels.h"

#include <cblas.h>
#include <pthread.h>
#include <stdbool.h>
#include <strings.h>

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

const char *kc_blas_core(void) { return openblas_get_corename(); }

/* A DYNAMIC_ARCH OpenBLAS picks its kernels by the CPU model it recognises;
 * on one it does not (Debian's 0.3.21 on a vCPU reporting family 6, model
 * 207, with AVX-512) it falls back to Prescott's SSE3 kernels: a 1024^3 sgemm
 * on one thread ran 32.4 GFLOP/s so, 154.8 with OPENBLAS_CORETYPE=SkylakeX
 * (docs/kernels.md, "Which kernels OpenBLAS runs").  So the upgrade is asked for only
 * from a core below AVX2 that this table names (a core it does not name,
 * an AMD one say, or Haswell on an AVX-512 CPU, which an OpenBLAS built
 * without AVX-512 kernels chooses on purpose, stands), and only to a core
 * whose instructions the CPU has (__builtin_cpu_supports: CPUID and what
 * the OS enables). */
const char *kc_blas_core_upgrade(void)
{
    static const char *const below_avx2[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Sandybridge"};
    const char *core = openblas_get_corename();
    bool weak = false;
    for (size_t i = 0; core && i < sizeof below_avx2 / sizeof *below_avx2; i++) weak |= strcasecmp(core, below_avx2[i]) == 0;
    if (!weak) return NULL;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return NULL;
}

/* Chunks of an M x N x K GEMM: one per ~2 GFLOP (every chunk packs the
 * shared operand again: on one core, the GPT-2 linears at 1024 tokens ran 5
 * to 10% slower cut in 6 chunks than in 2), an even number (2 and 4 threads
 * stay balanced), at least 2, at most 64.  A function of the shape alone. */
static int kc_chunks(int M, int N, int K)
{
    double flops = 2.0 * M * N * K;
    int n = (int)(flops / 2e9 + 0.999);
    n += n & 1;
    return n < 2 ? 2 : n > 64 ? 64 : n;
}

/* C(M,N) = op(A)(M,K) . op(B)(K,N) + beta * C, row-major, split along the
 * larger of M and N (see the top of the file). */
static void kc_sgemm(int transa, int transb, int M, int N, int K, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc)
{
    kc_init();
    if (M <= 0 || N <= 0) return;
    int rows = M >= N;                          /* split M (rows of C), else N */
    int D = rows ? M : N, nchunks = kc_chunks(M, N, K);
    int len = ((D + nchunks - 1) / nchunks + 15) / 16 * 16;   /* whole micro-tiles */
    nchunks = (D + len - 1) / len;
    /* dynamic: a chunk is the same sgemm call whichever thread takes it, and a
     * core taken by another process then delays one chunk, not half the work */
    #pragma omp parallel for schedule(dynamic, 1)
    for (int c = 0; c < nchunks; c++) {
        int d0 = c * len, d1 = d0 + len < D ? d0 + len : D;
        /* row m of op(A) starts at A + m*lda untransposed, at A + m transposed;
         * column n of op(B) at B + n untransposed, at B + n*ldb transposed */
        const float *a = !rows ? A : transa ? A + d0 : A + (size_t)d0 * lda;
        const float *b = rows ? B : transb ? B + (size_t)d0 * ldb : B + d0;
        float *cc = rows ? C + (size_t)d0 * ldc : C + d0;
        cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                    transb ? CblasTrans : CblasNoTrans, rows ? d1 - d0 : M, rows ? N : d1 - d0, K,
                    1.0f, a, lda, b, ldb, beta, cc, ldc);
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
    kc_sgemm(0, 1, N, OC, C, inp, C, weight, C, beta, out, OC);
}

enum { KC_BIAS_COLS = 64 };   /* columns per block of the bias gradient */

/* One block of nc <= KC_BIAS_COLS columns of kc_bias_backward, its rows in
 * order.  Compiled per x86-64 level: its 64 double accumulators fit the
 * AVX-512 clone's registers (the SSE2 build spilled them every row); the
 * sums are adds of floats in row order in every clone, so the bits are the
 * same. */
KC_MULTIVERSION
static void kc_bias_block(float *dbias, const float *dout, int N, int OC, int c0, int nc)
{
    double acc[KC_BIAS_COLS] = {0};
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * OC + c0;   /* (nc) */
        for (int j = 0; j < nc; j++) acc[j] += d[j];
    }
    for (int j = 0; j < nc; j++) dbias[c0 + j] += (float)acc[j];
}

/* dbias(OC) += sum over rows of dout(N,OC), in row order, in double. */
static void kc_bias_backward(float *dbias, const float *dout, int N, int OC)
{
    int nblocks = (OC + KC_BIAS_COLS - 1) / KC_BIAS_COLS;
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * KC_BIAS_COLS;
        kc_bias_block(dbias, dout, N, OC, c0, OC - c0 < KC_BIAS_COLS ? OC - c0 : KC_BIAS_COLS);
    }
}

/* Accumulates the three gradients of kc_matmul_forward. */
void kc_matmul_backward(float *dinp, float *dweight, float *dbias,
                        const float *dout, const float *inp, const float *weight,
                        int N, int C, int OC)
{
    /* dinp(N,C) += dout(N,OC) . weight(OC,C) */
    if (dinp) kc_sgemm(0, 0, N, C, OC, dout, OC, weight, C, 1.0f, dinp, C);
    /* dweight(OC,C) += dout^T(OC,N) . inp(N,C): the sum over N runs inside
     * one sgemm call per chunk */
    if (dweight) kc_sgemm(1, 0, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias) kc_bias_backward(dbias, dout, N, OC);
}
