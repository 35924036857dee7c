/* bench_adamw.c — the host AdamW (kernels/cpu kc_adamw_step, what the runtime's
 * optimizer and the offload path run) in parameters/s and GB/s, and this
 * machine's memory bandwidth measured by a copy loop in the same run.
 *
 *   bench_adamw N SECONDS
 *
 * Prints `adamw params_per_s P gb_per_s G` (28 bytes per parameter: params,
 * grads, m and v read, params, m and v written) and `copy gb_per_s G` (an
 * OpenMP copy loop over 16·N bytes, read + write counted). */
#include "kernels.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    size_t n = argc > 1 ? (size_t)atoll(argv[1]) : (size_t)1 << 24;
    double secs = argc > 2 ? atof(argv[2]) : 2.0;
    float *p = malloc(n * 4), *g = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
    if (!p || !g || !m || !v) return 1;
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) p[i] = 0.01f * (float)(i % 97), g[i] = 1e-3f * (float)(i % 13), m[i] = v[i] = 0;
    KcAdamW h = {1e-3, 0.9, 0.95, 1e-8, 0.1, 1, 1.0f};
    kc_adamw_step(p, NULL, g, m, v, n, h);   /* warm-up */
    double best = 1e30, t0 = now();
    for (int it = 2; now() - t0 < secs || it < 5; it++) {
        h.t = it;
        double a = now();
        kc_adamw_step(p, NULL, g, m, v, n, h);
        double b = now() - a;
        if (b < best) best = b;
    }
    printf("adamw threads %d n %zu params_per_s %.4g gb_per_s %.4g\n", omp_get_max_threads(), n, (double)n / best,
           28.0 * (double)n / best / 1e9);
    /* the bandwidth: a STREAM-style copy loop b[i] = a[i] over float arrays
     * of 4·N elements (the bytes AdamW's four arrays hold), read + write
     * counted, best of the runs; and memcpy of the same bytes, for reference */
    size_t m4 = 4 * n;
    float *a = malloc(m4 * 4), *b = malloc(m4 * 4);
    if (!a || !b) return 1;
#pragma omp parallel for
    for (size_t i = 0; i < m4; i++) a[i] = 1.0f, b[i] = 0.0f;
    double bc = 1e30, bm = 1e30;
    t0 = now();
    for (int it = 0; now() - t0 < secs || it < 5; it++) {
        double x = now();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < m4; i++) b[i] = a[i];
        double y = now();
        memcpy(a, b, m4 * 4);
        double z = now();
        if (y - x < bc) bc = y - x;
        if (z - y < bm) bm = z - y;
    }
    printf("copy gb_per_s %.4g memcpy_1thread_gb_per_s %.4g\n", 8.0 * (double)m4 / bc / 1e9, 8.0 * (double)m4 / bm / 1e9);
    return b[m4 / 2] == 1.0f ? 0 : 1;
}
