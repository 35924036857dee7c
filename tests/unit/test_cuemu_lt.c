/* test_cuemu_lt.c — the emulated cuBLASLt (tests/gpu/emu/cublaslt.c) driven
 * through the public API the way runtime/cuda/gemm.c drives it (descriptor,
 * layouts, a preference with a workspace and alignments, the heuristic's
 * first algorithm, cublasLtMatmul), against a double-precision reference
 * written from the documented math; then the calls the real library
 * refuses, with its status codes, and the device fault of a matrix that
 * runs past its allocation.
 *
 * Inputs are multiples of 1/64 below 1 in magnitude: exact in bf16, fp16 and
 * fp32, with products and sums exact in fp32 for these k, so the only
 * error left is the final rounding to D's type (half an ulp, to nearest
 * even) and fp32's tanh; the tolerances are that and no more.
 *
 * Device memory is cudaMalloc'd through the emulated runtime (cudart.c)
 * when the build links it (CUEMU_LT_WITH_CUDART), else by the tiny
 * allocator below, which is what cuemu_device_range then consults. */
#include <cublasLt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../gpu/emu/cuemu.h"

#ifdef CUEMU_LT_WITH_CUDART
#include <cuda_runtime_api.h>
/* Device memory from the emulated runtime. */
static void *t_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc(%zu) failed\n", bytes);
        exit(1);
    }
    return p;
}
/* Frees t_alloc's memory. */
static void t_free(void *p) { cudaFree(p); }
#else
/* The test's own "device memory": a list of live blocks. */
enum { T_MAX_BLOCKS = 64 };
static struct { char *p; size_t n; } t_blocks[T_MAX_BLOCKS];

/* A block of device memory, 256-byte aligned like cudaMalloc's. */
static void *t_alloc(size_t bytes)
{
    for (int i = 0; i < T_MAX_BLOCKS; i++)
        if (!t_blocks[i].p) {
            t_blocks[i].p = aligned_alloc(256, (bytes + 255) / 256 * 256);
            t_blocks[i].n = bytes;
            return t_blocks[i].p;
        }
    fprintf(stderr, "t_alloc: out of blocks\n");
    exit(1);
}

/* Frees a block of t_alloc. */
static void t_free(void *p)
{
    for (int i = 0; i < T_MAX_BLOCKS; i++)
        if (t_blocks[i].p == p) {
            free(p);
            t_blocks[i].p = NULL;
        }
}

/* Whether [p, p + bytes) lies in one live block (cuemu.h's contract). */
bool cuemu_device_range(const void *p, size_t bytes)
{
    for (int i = 0; i < T_MAX_BLOCKS; i++) {
        const char *b = t_blocks[i].p;
        if (b && (const char *)p >= b && (const char *)p + bytes <= b + t_blocks[i].n &&
            (bytes || (const char *)p < b + t_blocks[i].n))
            return true;
    }
    return false;
}

/* A device fault ends the process (cuemu.h's contract). */
void cuemu_fault(const char *who, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda emulator: %s: ", who);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(134);
}

/* Without cudart.c there is no race detector (one stream here): nothing to record. */
void cuemu_access(const char *who, const char *what, const void *s, const void *p, size_t bytes, bool write)
{
    (void)who, (void)what, (void)s, (void)p, (void)bytes, (void)write;
}
#endif

static int t_fails, t_checks;

/* Records one check; prints the failing ones. */
static void t_check(bool ok, const char *fmt, ...)
{
    t_checks++;
    if (ok) return;
    t_fails++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* ---- values --------------------------------------------------------------------------- */

/* Bytes of an element of t. */
static size_t t_esize(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

/* Stores an exactly representable value v as element i of a t-typed array. */
static void t_put(void *p, cudaDataType_t t, size_t i, double v)
{
    float f = (float)v;
    if (t == CUDA_R_32F) ((float *)p)[i] = f;
    else if (t == CUDA_R_16F) ((_Float16 *)p)[i] = (_Float16)f;
    else {
        uint32_t u;
        memcpy(&u, &f, 4);
        ((uint16_t *)p)[i] = (uint16_t)(u >> 16);   /* exact: the low 16 bits are zero */
    }
}

/* Element i of a t-typed array as a double. */
static double t_get(const void *p, cudaDataType_t t, size_t i)
{
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    if (t == CUDA_R_16F) return (double)((const _Float16 *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A random multiple of 1/64 in [-1, 1]. */
static double t_rand(void) { return (double)(rand() % 129 - 64) / 64.0; }

/* The relative rounding bound of t (half an ulp relative to the value). */
static double t_eps(cudaDataType_t t) { return t == CUDA_R_16BF ? 0x1p-8 : t == CUDA_R_16F ? 0x1p-11 : 0x1p-23; }

/* GELU, tanh form, in double. */
static double t_gelu(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

/* d/dx of t_gelu, differentiated by hand from its formula. */
static double t_dgelu(double x)
{
    double s = sqrt(2.0 / M_PI), u = s * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

/* Whether got is ref rounded to t (plus an fp32 tanh's error when gelu). */
static bool t_close(double got, double ref, cudaDataType_t t, bool gelu)
{
    double tol = t_eps(t) * fabs(ref) + (gelu ? 2e-6 * (1.0 + fabs(ref)) : 1e-30);
    return fabs(got - ref) <= tol;
}

/* ---- driving the library as gemm.c does ---------------------------------------------- */

/* One matmul case: shapes, types, transposes, epilogue, beta. */
typedef struct t_case {
    bool ta, tb;
    int m, n, k;
    cudaDataType_t abt, dt;
    int32_t epi;
    float beta;
    int pad;                 /* extra leading-dimension elements (ld = rows + pad) */
} t_case;

/* The plan gemm.c makes: descriptor, layouts, heuristic. */
typedef struct t_plan {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    size_t ws_need;
} t_plan;

static cublasLtHandle_t t_lt;
static void *t_ws;
static const size_t t_ws_bytes = 32 << 20;

/* Builds the plan for a case; the heuristic's status. */
static cublasStatus_t t_plan_make(const t_case *c, int64_t lda, int64_t ldb, int64_t ldd, int64_t aux_ld,
                                  uint64_t ws_pref, t_plan *pl)
{
    memset(pl, 0, sizeof *pl);
    cublasLtMatmulDescCreate(&pl->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    int32_t opa = c->ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = c->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    if (c->epi != CUBLASLT_EPILOGUE_DEFAULT)
        cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &c->epi, sizeof c->epi);
    if (aux_ld) cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    if (c->ta) cublasLtMatrixLayoutCreate(&pl->a, c->abt, c->k, c->m, lda);
    else cublasLtMatrixLayoutCreate(&pl->a, c->abt, c->m, c->k, lda);
    if (c->tb) cublasLtMatrixLayoutCreate(&pl->b, c->abt, c->n, c->k, ldb);
    else cublasLtMatrixLayoutCreate(&pl->b, c->abt, c->k, c->n, ldb);
    cublasLtMatrixLayoutCreate(&pl->d, c->dt, c->m, c->n, ldd);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    uint32_t al = 16;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_pref, sizeof ws_pref);
    for (int i = 0; i < 4; i++)
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i, &al, sizeof al);
    cublasLtMatmulHeuristicResult_t res[3];
    int found = -1;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(t_lt, pl->op, pl->a, pl->b, pl->d, pl->d, pref, 3, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS) {
        t_check(found == 1 && res[0].state == CUBLAS_STATUS_SUCCESS, "heuristic: %d algos, state %d", found,
                (int)res[0].state);
        t_check(res[0].workspaceSize <= ws_pref, "heuristic: workspace %zu over the preference %llu",
                res[0].workspaceSize, (unsigned long long)ws_pref);
        pl->algo = res[0].algo;
        pl->ws_need = res[0].workspaceSize;
    } else {
        t_check(found == 0, "heuristic failed with %d but returned %d algos", (int)st, found);
    }
    return st;
}

/* Releases a plan. */
static void t_plan_free(t_plan *pl)
{
    cublasLtMatmulDescDestroy(pl->op);
    cublasLtMatrixLayoutDestroy(pl->a);
    cublasLtMatrixLayoutDestroy(pl->b);
    cublasLtMatrixLayoutDestroy(pl->d);
}

/* Runs one case through the plan and checks D (and aux, the bias gradient)
 * against the reference. */
static void t_run_case(const t_case *c)
{
    int m = c->m, n = c->n, k = c->k;
    int64_t arows = c->ta ? k : m, acols = c->ta ? m : k, brows = c->tb ? n : k, bcols = c->tb ? k : n;
    int64_t lda = arows + c->pad, ldb = brows + c->pad, ldd = m + c->pad;
    bool aux = c->epi == CUBLASLT_EPILOGUE_GELU_AUX || c->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
               c->epi == CUBLASLT_EPILOGUE_DGELU || c->epi == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    bool bias_in = c->epi == CUBLASLT_EPILOGUE_BIAS || c->epi == CUBLASLT_EPILOGUE_GELU_BIAS ||
                   c->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool bgrad = c->epi == CUBLASLT_EPILOGUE_DGELU_BGRAD || c->epi == CUBLASLT_EPILOGUE_BGRADA ||
                 c->epi == CUBLASLT_EPILOGUE_BGRADB;
    bool gelu = c->epi == CUBLASLT_EPILOGUE_GELU || c->epi == CUBLASLT_EPILOGUE_GELU_BIAS ||
                c->epi == CUBLASLT_EPILOGUE_GELU_AUX || c->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool dgelu = c->epi == CUBLASLT_EPILOGUE_DGELU || c->epi == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    int64_t aux_ld = aux ? (m + 7) / 8 * 8 + 8 : 0;
    size_t ae = t_esize(c->abt), de = t_esize(c->dt);
    void *A = t_alloc((size_t)(lda * acols) * ae), *B = t_alloc((size_t)(ldb * bcols) * ae);
    void *D = t_alloc((size_t)(ldd * n) * de);
    int64_t bn = c->epi == CUBLASLT_EPILOGUE_BGRADB ? n : m;
    void *bias = (bias_in || bgrad) ? t_alloc((size_t)bn * de) : NULL;
    void *X = aux ? t_alloc((size_t)(aux_ld * n) * de) : NULL;
    for (int64_t i = 0; i < lda * acols; i++) t_put(A, c->abt, (size_t)i, t_rand());
    for (int64_t i = 0; i < ldb * bcols; i++) t_put(B, c->abt, (size_t)i, t_rand());
    for (int64_t i = 0; i < ldd * n; i++) t_put(D, c->dt, (size_t)i, c->beta != 0.0f ? t_rand() : NAN);
    if (bias_in)
        for (int64_t i = 0; i < bn; i++) t_put(bias, c->dt, (size_t)i, t_rand());
    if (dgelu)
        for (int64_t i = 0; i < aux_ld * n; i++) t_put(X, c->dt, (size_t)i, 2.0 * t_rand());
    else if (aux)
        for (int64_t i = 0; i < aux_ld * n; i++) t_put(X, c->dt, (size_t)i, 7.0);   /* the padding stays 7 */
    /* the reference, from the stored inputs */
    double *ref = malloc(sizeof(double) * (size_t)(m * n)), *pre = malloc(sizeof(double) * (size_t)(m * n));
    double *gref = calloc((size_t)bn, sizeof(double));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++)
                s += t_get(A, c->abt, (size_t)(c->ta ? l + i * lda : i + l * lda)) *
                     t_get(B, c->abt, (size_t)(c->tb ? j + l * ldb : l + j * ldb));
            if (c->beta != 0.0f) s += c->beta * t_get(D, c->dt, (size_t)(i + j * ldd));
            if (bias_in) s += t_get(bias, c->dt, (size_t)i);
            pre[i + j * m] = s;
            if (gelu) s = t_gelu(s);
            if (dgelu) s *= t_dgelu(t_get(X, c->dt, (size_t)(i + j * aux_ld)));
            ref[i + j * m] = s;
            if (c->epi == CUBLASLT_EPILOGUE_DGELU_BGRAD) gref[i] += s;
        }
    if (c->epi == CUBLASLT_EPILOGUE_BGRADA)
        for (int i = 0; i < m; i++)
            for (int l = 0; l < k; l++) gref[i] += t_get(A, c->abt, (size_t)(c->ta ? l + i * lda : i + l * lda));
    if (c->epi == CUBLASLT_EPILOGUE_BGRADB)
        for (int j = 0; j < n; j++)
            for (int l = 0; l < k; l++) gref[j] += t_get(B, c->abt, (size_t)(c->tb ? j + l * ldb : l + j * ldb));
    t_plan pl;
    cublasStatus_t st = t_plan_make(c, lda, ldb, ldd, aux_ld, t_ws_bytes, &pl);
    t_check(st == CUBLAS_STATUS_SUCCESS, "case ta %d tb %d %dx%dx%d types %d->%d epi %d: heuristic %s", c->ta, c->tb,
            m, n, k, c->abt, c->dt, c->epi, cublasLtGetStatusString(st));
    if (bias) cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (X) cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &X, sizeof X);
    float alpha = 1.0f, beta = c->beta;
    st = cublasLtMatmul(t_lt, pl.op, &alpha, A, pl.a, B, pl.b, &beta, D, pl.d, D, pl.d, &pl.algo, t_ws, t_ws_bytes, 0);
    t_check(st == CUBLAS_STATUS_SUCCESS, "case ta %d tb %d %dx%dx%d epi %d: matmul %s", c->ta, c->tb, m, n, k, c->epi,
            cublasLtGetStatusString(st));
    int bad = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double got = t_get(D, c->dt, (size_t)(i + j * ldd)), r = ref[i + j * m];
            if (!t_close(got, r, c->dt, gelu || dgelu) && bad++ < 3)
                fprintf(stderr, "  D(%d,%d) = %.9g, reference %.9g\n", i, j, got, r);
            if (aux && !dgelu) {   /* aux: the GELU input, rounded to D's type */
                double ga = t_get(X, c->dt, (size_t)(i + j * aux_ld));
                if (!t_close(ga, pre[i + j * m], c->dt, false) && bad++ < 3)
                    fprintf(stderr, "  aux(%d,%d) = %.9g, reference %.9g\n", i, j, ga, pre[i + j * m]);
            }
        }
    if (aux && !dgelu)   /* the aux ld's padding rows untouched */
        for (int j = 0; j < n; j++)
            for (int64_t i = m; i < aux_ld; i++)
                if (t_get(X, c->dt, (size_t)(i + j * aux_ld)) != 7.0 && bad++ < 3)
                    fprintf(stderr, "  aux padding (%lld,%d) written\n", (long long)i, j);
    for (int j = 0; j < n; j++)   /* D's ld padding untouched (only checkable where beta filled it) */
        for (int64_t i = m; i < ldd && c->beta != 0.0f; i++)
            if (isnan(t_get(D, c->dt, (size_t)(i + j * ldd))) && bad++ < 3) fprintf(stderr, "  D padding written\n");
    if (bgrad)
        for (int64_t i = 0; i < bn; i++) {
            double got = t_get(bias, c->dt, (size_t)i), r = gref[i];
            double tol = t_eps(c->dt) * fabs(r) + (dgelu ? 2e-6 * (double)n * (1.0 + fabs(r)) : 1e-30);
            if (fabs(got - r) > tol && bad++ < 6) fprintf(stderr, "  bgrad(%lld) = %.9g, reference %.9g\n",
                                                         (long long)i, got, r);
        }
    t_check(bad == 0, "case ta %d tb %d m %d n %d k %d types %d->%d epi %d beta %g: %d wrong values", c->ta, c->tb, m,
            n, k, c->abt, c->dt, c->epi, (double)c->beta, bad);
    t_plan_free(&pl);
    free(ref);
    free(pre);
    free(gref);
    t_free(A);
    t_free(B);
    t_free(D);
    if (bias) t_free(bias);
    if (X) t_free(X);
}

/* Every transpose, type row and epilogue gemm.c uses (and the other GELU and BGRAD ones). */
static void t_math(void)
{
    static const cudaDataType_t ab[3] = {CUDA_R_16BF, CUDA_R_32F, CUDA_R_16F};
    static const int32_t epis[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU,
                                   CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX,
                                   CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU,
                                   CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB};
    for (int t = 0; t < 3; t++)
        for (int out32 = 0; out32 < 2; out32++) {
            cudaDataType_t dt = out32 ? CUDA_R_32F : ab[t];
            if (out32 && ab[t] == CUDA_R_32F) continue;
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++)
                    for (size_t e = 0; e < sizeof epis / sizeof epis[0]; e++)
                        for (int acc = 0; acc < 2; acc++) {
                            t_case c = {ta, tb, 24, 13, 37, ab[t], dt, epis[e], acc ? 1.0f : 0.0f, (ta + tb) * 8};
                            t_run_case(&c);
                        }
        }
    /* gemm.c's three forms at a transformer-ish shape: out = inp·w^T (+bias), dinp += dout·w, dw += dout^T·inp */
    int N = 64, C = 48, OC = 96;
    t_case fwd = {true, false, OC, N, C, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 0.0f, 0};
    t_case dinp = {false, false, C, N, OC, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT, 1.0f, 0};
    t_case dw = {false, true, C, OC, N, CUDA_R_16BF, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, 1.0f, 0};
    t_case dg = {false, false, C, N, OC, CUDA_R_16BF, CUDA_R_32F, CUBLASLT_EPILOGUE_DGELU_BGRAD, 0.0f, 0};
    t_run_case(&fwd);
    t_run_case(&dinp);
    t_run_case(&dw);
    t_run_case(&dg);
}

/* ---- rejections ---------------------------------------------------------------------------- */

/* A plain bf16 16x8x8 NN problem's plan and buffers, for the refusals. */
typedef struct t_small { t_case c; t_plan pl; void *A, *B, *D, *bias; } t_small;

/* Sets up t_small with an epilogue; the heuristic's status. */
static cublasStatus_t t_small_make(t_small *s, int32_t epi, int64_t aux_ld)
{
    s->c = (t_case){false, false, 16, 8, 8, CUDA_R_16BF, CUDA_R_16BF, epi, 0.0f, 0};
    s->A = t_alloc(16 * 8 * 2);
    s->B = t_alloc(8 * 8 * 2);
    s->D = t_alloc(16 * 8 * 2);
    s->bias = t_alloc(64);
    memset(s->A, 0, 16 * 8 * 2);
    memset(s->B, 0, 8 * 8 * 2);
    return t_plan_make(&s->c, 16, 8, 16, aux_ld, t_ws_bytes, &s->pl);
}

/* The matmul of t_small with a workspace of ws bytes. */
static cublasStatus_t t_small_run(t_small *s, size_t ws)
{
    float alpha = 1.0f, beta = 0.0f;
    return cublasLtMatmul(t_lt, s->pl.op, &alpha, s->A, s->pl.a, s->B, s->pl.b, &beta, s->D, s->pl.d, s->D, s->pl.d,
                          &s->pl.algo, t_ws, ws, 0);
}

/* Releases t_small. */
static void t_small_free(t_small *s)
{
    t_plan_free(&s->pl);
    t_free(s->A);
    t_free(s->B);
    t_free(s->D);
    t_free(s->bias);
}

/* Expects status want from the call, naming it. */
static void t_expect(cublasStatus_t got, cublasStatus_t want, const char *what)
{
    t_check(got == want, "%s: got %s, want %s", what, cublasLtGetStatusString(got), cublasLtGetStatusString(want));
}

/* What the library refuses, with its codes. */
static void t_refusals(void)
{
    t_plan pl;
    /* ld < rows */
    t_case c = {false, false, 16, 8, 8, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT, 0.0f, 0};
    t_expect(t_plan_make(&c, 15, 8, 16, 0, t_ws_bytes, &pl), CUBLAS_STATUS_INVALID_VALUE, "lda 15 < 16 rows");
    t_plan_free(&pl);
    t_expect(t_plan_make(&c, 16, 8, 8, 0, t_ws_bytes, &pl), CUBLAS_STATUS_INVALID_VALUE, "ldd 8 < 16 rows");
    t_plan_free(&pl);
    /* shapes that do not chain: op(A) 16 x 8 and a B layout of 9 rows */
    {
        t_small s;
        t_expect(t_small_make(&s, CUBLASLT_EPILOGUE_DEFAULT, 0), CUBLAS_STATUS_SUCCESS, "the plain plan");
        cublasLtMatrixLayout_t b9;
        cublasLtMatrixLayoutCreate(&b9, CUDA_R_16BF, 9, 8, 9);
        float one = 1.0f, zero = 0.0f;
        t_expect(cublasLtMatmul(t_lt, s.pl.op, &one, s.A, s.pl.a, s.B, b9, &zero, s.D, s.pl.d, s.D, s.pl.d,
                                &s.pl.algo, t_ws, t_ws_bytes, 0), CUBLAS_STATUS_INVALID_VALUE, "k 8 against k 9");
        cublasLtMatrixLayoutDestroy(b9);
        /* the workspace: less than the algorithm needs */
        t_check(s.pl.ws_need > 0, "the algorithm uses a workspace when allowed (%zu)", s.pl.ws_need);
        t_expect(t_small_run(&s, s.pl.ws_need - 1), CUBLAS_STATUS_INVALID_VALUE, "workspace one byte short");
        t_expect(t_small_run(&s, s.pl.ws_need), CUBLAS_STATUS_SUCCESS, "workspace exactly enough");
        /* a row-major layout */
        int32_t row = CUBLASLT_ORDER_ROW;
        cublasLtMatrixLayoutSetAttribute(s.pl.a, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row);
        t_expect(t_small_run(&s, t_ws_bytes), CUBLAS_STATUS_NOT_SUPPORTED, "CUBLASLT_ORDER_ROW");
        t_expect(cublasLtMatrixLayoutSetAttribute(s.pl.a, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, 8),
                 CUBLAS_STATUS_INVALID_VALUE, "an attribute of the wrong size");
        t_small_free(&s);
    }
    /* the workspace preference is honoured */
    t_expect(t_plan_make(&c, 16, 8, 16, 0, 1000, &pl), CUBLAS_STATUS_SUCCESS, "a 1000-byte workspace preference");
    t_check(pl.ws_need <= 1000, "workspace %zu within a 1000-byte preference", pl.ws_need);
    t_plan_free(&pl);
    /* unsupported type combinations: bf16 in, fp16 out; fp32 in, bf16 out */
    c.dt = CUDA_R_16F;
    t_expect(t_plan_make(&c, 16, 8, 16, 0, t_ws_bytes, &pl), CUBLAS_STATUS_NOT_SUPPORTED, "bf16 x bf16 -> fp16");
    t_plan_free(&pl);
    c.abt = CUDA_R_32F, c.dt = CUDA_R_16BF;
    t_expect(t_plan_make(&c, 16, 8, 16, 0, t_ws_bytes, &pl), CUBLAS_STATUS_NOT_SUPPORTED, "fp32 x fp32 -> bf16");
    t_plan_free(&pl);
    c.abt = CUDA_R_16BF;
    /* an fp32 bias with a bf16 D */
    {
        c.dt = CUDA_R_16BF;
        c.epi = CUBLASLT_EPILOGUE_BIAS;
        t_plan_make(&c, 16, 8, 16, 0, t_ws_bytes, &pl);
        int32_t f32 = CUDA_R_32F;
        cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &f32, sizeof f32);
        cublasLtMatmulPreference_t pref;
        cublasLtMatmulPreferenceCreate(&pref);
        cublasLtMatmulHeuristicResult_t r;
        int found = -1;
        t_expect(cublasLtMatmulAlgoGetHeuristic(t_lt, pl.op, pl.a, pl.b, pl.d, pl.d, pref, 1, &r, &found),
                 CUBLAS_STATUS_NOT_SUPPORTED, "an fp32 bias with a bf16 D");
        t_check(found == 0, "no algorithm returned with a refusal (%d)", found);
        t_expect(cublasLtMatmulAlgoGetHeuristic(t_lt, pl.op, pl.a, pl.b, pl.d, pl.d, pref, 0, &r, &found),
                 CUBLAS_STATUS_INVALID_VALUE, "requestedAlgoCount 0");
        cublasLtMatmulPreferenceDestroy(pref);
        t_plan_free(&pl);
    }
    /* the bias: misaligned, missing */
    {
        t_small s;
        t_expect(t_small_make(&s, CUBLASLT_EPILOGUE_BIAS, 0), CUBLAS_STATUS_SUCCESS, "the bias plan");
        t_expect(t_small_run(&s, t_ws_bytes), CUBLAS_STATUS_INVALID_VALUE, "BIAS without a bias pointer");
        char *mis = (char *)s.bias + 2;
        cublasLtMatmulDescSetAttribute(s.pl.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &mis, sizeof mis);
        t_expect(t_small_run(&s, t_ws_bytes), CUBLAS_STATUS_INVALID_VALUE, "a bias 2 bytes off 16-byte alignment");
        cublasLtMatmulDescSetAttribute(s.pl.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &s.bias, sizeof s.bias);
        t_expect(t_small_run(&s, t_ws_bytes), CUBLAS_STATUS_SUCCESS, "an aligned bias");
        t_small_free(&s);
    }
    /* the aux leading dimension: a multiple of 8, at least D's rows */
    {
        t_small s;
        t_expect(t_small_make(&s, CUBLASLT_EPILOGUE_GELU_AUX, 20), CUBLAS_STATUS_INVALID_VALUE, "aux ld 20");
        t_small_free(&s);
        t_expect(t_small_make(&s, CUBLASLT_EPILOGUE_GELU_AUX, 8), CUBLAS_STATUS_INVALID_VALUE, "aux ld 8 < 16 rows");
        t_small_free(&s);
        t_expect(t_small_make(&s, CUBLASLT_EPILOGUE_DGELU, 24), CUBLAS_STATUS_SUCCESS, "aux ld 24");
        t_expect(t_small_run(&s, t_ws_bytes), CUBLAS_STATUS_INVALID_VALUE, "DGELU without an aux pointer");
        int32_t f32 = CUDA_R_32F;
        cublasLtMatmulDescSetAttribute(s.pl.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &f32, sizeof f32);
        void *aux = t_alloc(24 * 8 * 4);
        cublasLtMatmulDescSetAttribute(s.pl.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
        t_expect(t_small_run(&s, t_ws_bytes), CUBLAS_STATUS_INVALID_VALUE, "an fp32 aux with a bf16 D");
        t_free(aux);
        t_small_free(&s);
    }
    /* pointers less aligned than the preference promised */
    {
        t_small s;
        t_small_make(&s, CUBLASLT_EPILOGUE_DEFAULT, 0);
        float alpha = 1.0f, beta = 0.0f;
        t_expect(cublasLtMatmul(t_lt, s.pl.op, &alpha, (char *)s.A + 2, s.pl.a, s.B, s.pl.b, &beta, s.D, s.pl.d, s.D,
                                s.pl.d, &s.pl.algo, t_ws, t_ws_bytes, 0),
                 CUBLAS_STATUS_INVALID_VALUE, "A 2-byte aligned with an algorithm for 16");
        t_small_free(&s);
    }
}

/* The strided batch gemm.c runs for srt_matmul_fwd_batched: out_b(N,OC) =
 * inp_b·w^T + bias, i.e. D_b (OC x N) = op_T(w) · inp_b, the weight A shared
 * (stride 0), B and D strided with gaps between the matrices, the bias
 * shared (BIAS_BATCH_STRIDE 0), in bf16 and fp32: each matrix equals the
 * reference; the gaps of B hold NaN (a read of them would show) and those of
 * D stay as they were.  Then what it refuses: batch counts that differ,
 * a batched GELU epilogue (gemm.c batches none). */
static void t_batch(void)
{
    static const cudaDataType_t ab[2] = {CUDA_R_16BF, CUDA_R_32F};
    const int N = 8, C = 16, OC = 24, batch = 3;
    const int64_t sb = 3 * (int64_t)C * N, sd = (int64_t)OC * N + 8;   /* B: 2 gaps of a matrix; D: 8 elements */
    for (int t = 0; t < 2; t++) {
        cudaDataType_t ty = ab[t];
        size_t es = t_esize(ty);
        void *A = t_alloc((size_t)(C * OC) * es), *B = t_alloc((size_t)(sb * batch) * es);
        void *D = t_alloc((size_t)(sd * batch) * es), *bias = t_alloc((size_t)OC * es);
        for (int64_t i = 0; i < (int64_t)C * OC; i++) t_put(A, ty, (size_t)i, t_rand());
        for (int64_t i = 0; i < sb * batch; i++) t_put(B, ty, (size_t)i, i % sb < (int64_t)C * N ? t_rand() : NAN);
        for (int64_t i = 0; i < sd * batch; i++) t_put(D, ty, (size_t)i, 7.0);
        for (int i = 0; i < OC; i++) t_put(bias, ty, (size_t)i, t_rand());
        cublasLtMatmulDesc_t op;
        cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        int32_t opt = CUBLAS_OP_T, epi = CUBLASLT_EPILOGUE_BIAS;
        int64_t zero = 0;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opt, sizeof opt);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &zero, sizeof zero);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        cublasLtMatrixLayout_t la, lb, ld;
        cublasLtMatrixLayoutCreate(&la, ty, C, OC, C);
        cublasLtMatrixLayoutCreate(&lb, ty, C, N, C);
        cublasLtMatrixLayoutCreate(&ld, ty, OC, N, OC);
        cublasLtMatrixLayout_t ls[3] = {la, lb, ld};
        int64_t strides[3] = {0, sb, sd};
        int32_t nb = batch;
        for (int i = 0; i < 3; i++) {
            cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &nb, sizeof nb);
            cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                             sizeof strides[i]);
        }
        cublasLtMatmulPreference_t pref;
        cublasLtMatmulPreferenceCreate(&pref);
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        t_expect(cublasLtMatmulAlgoGetHeuristic(t_lt, op, la, lb, ld, ld, pref, 1, &res, &found),
                 CUBLAS_STATUS_SUCCESS, "the batched forward's heuristic");
        float alpha = 1.0f, beta = 0.0f;
        t_expect(cublasLtMatmul(t_lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res.algo, t_ws, t_ws_bytes, 0),
                 CUBLAS_STATUS_SUCCESS, "the batched forward");
        int bad = 0;
        for (int b = 0; b < batch; b++)
            for (int64_t e = 0; e < sd; e++) {
                double got = t_get(D, ty, (size_t)(b * sd + e));
                if (e >= (int64_t)OC * N) {   /* a gap */
                    if (!(got == 7.0) && bad++ < 3) fprintf(stderr, "  batch %d: D's gap %lld written\n", b, (long long)e);
                    continue;
                }
                int i = (int)(e % OC), j = (int)(e / OC);
                double r = t_get(bias, ty, (size_t)i);
                for (int l = 0; l < C; l++)
                    r += t_get(A, ty, (size_t)(l + i * C)) * t_get(B, ty, (size_t)(b * sb + l + j * C));
                if (!t_close(got, r, ty, false) && bad++ < 3)
                    fprintf(stderr, "  batch %d: D(%d,%d) = %.9g, reference %.9g\n", b, i, j, got, r);
            }
        t_check(bad == 0, "the batched forward (type %d): %d elements off", (int)ty, bad);
        /* B's batch count other than A's and D's */
        int32_t two = 2;
        cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof two);
        t_expect(cublasLtMatmul(t_lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res.algo, t_ws, t_ws_bytes, 0),
                 CUBLAS_STATUS_INVALID_VALUE, "batch counts 3, 2, 3");
        cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &nb, sizeof nb);
        /* a batched GELU epilogue: not emulated */
        epi = CUBLASLT_EPILOGUE_GELU;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
        t_expect(cublasLtMatmulAlgoGetHeuristic(t_lt, op, la, lb, ld, ld, pref, 1, &res, &found),
                 CUBLAS_STATUS_NOT_SUPPORTED, "a batched GELU epilogue");
        cublasLtMatmulPreferenceDestroy(pref);
        for (int i = 0; i < 3; i++) cublasLtMatrixLayoutDestroy(ls[i]);
        cublasLtMatmulDescDestroy(op);
        t_free(A), t_free(B), t_free(D), t_free(bias);
    }
}

/* A D layout running past its allocation is a device fault, not a result. */
static void t_fault(void)
{
    t_small s;
    t_small_make(&s, CUBLASLT_EPILOGUE_DEFAULT, 0);
    void *d_short = t_alloc(16 * 8 * 2 - 2);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        float alpha = 1.0f, beta = 0.0f;
        cublasLtMatmul(t_lt, s.pl.op, &alpha, s.A, s.pl.a, s.B, s.pl.b, &beta, d_short, s.pl.d, d_short, s.pl.d,
                       &s.pl.algo, t_ws, t_ws_bytes, 0);
        _exit(0);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    t_check(!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0), "a D 2 bytes short of its layout did not fault");
    t_free(d_short);
    t_small_free(&s);
}

int main(void)
{
    srand(7);
    if (cublasLtCreate(&t_lt) != CUBLAS_STATUS_SUCCESS) return 1;
    t_ws = t_alloc(t_ws_bytes);
    t_math();
    t_refusals();
    t_batch();
    t_fault();
    t_free(t_ws);
    cublasLtDestroy(t_lt);
    printf("test_cuemu_lt: %d checks, %d failed\n", t_checks, t_fails);
    return t_fails ? 1 : 0;
}
