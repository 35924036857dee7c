/* bench_sgemm.c — this machine's sgemm peak for a thread count: OpenBLAS on a
 * large square problem, the reference tests/bench/cpu/run.sh sets the
 * trainer's model FLOP/s against.
 *
 *   bench_sgemm N THREADS SECONDS
 *
 * C(N,N) = A(N,N)·B(N,N)ᵀ with OpenBLAS's own THREADS threads (the trainer
 * splits its GEMMs over OpenMP instead: docs/kernels.md), one untimed call
 * first, then calls for SECONDS (at least 3); prints `sgemm gflops G1 G2 ...`,
 * one figure (2·N³ / seconds) per call. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Monotonic seconds. */
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4096, threads = argc > 2 ? atoi(argv[2]) : 1;
    double secs = argc > 3 ? atof(argv[3]) : 5.0;
    size_t nn = (size_t)n * n;
    float *a = malloc(nn * 4), *b = malloc(nn * 4), *c = malloc(nn * 4);
    if (!a || !b || !c || n <= 0 || threads <= 0) {
        fprintf(stderr, "usage: bench_sgemm N THREADS SECONDS\n");
        return 2;
    }
    for (size_t i = 0; i < nn; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f, c[i] = 0.0f;
    openblas_set_num_threads(threads);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    printf("sgemm gflops");
    double start = now();
    for (int k = 0; k < 3 || now() - start < secs; k++) {
        double t = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        printf(" %.1f", 2.0 * n * (double)nn / (now() - t) / 1e9);
    }
    printf("\n");
    free(a), free(b), free(c);
    return 0;
}
