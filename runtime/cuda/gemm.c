/* gemm.c — the linear layers through cuBLASLt: bf16 (or fp32, fp16) in, fp32
 * compute, the bias in the forward GEMM's epilogue (CUBLASLT_EPILOGUE_BIAS; a
 * kernel of rtk.cu adds it when its pointer is not 16-byte aligned),
 * the backward's two GEMMs accumulating (beta = 1) and the bias gradient in
 * rtk.cu (it accumulates, which the BGRAD epilogues, which overwrite, do
 * not).  Row-major (N,C) tensors are column-major (C,N) to cuBLASLt, so
 *   out(N,OC)  = inp·w^T      is  D(OC x N)  = op_T(w: C x OC) · inp(C x N)
 *   dinp(N,C) += dout·w       is  D(C x N)  += w(C x OC) · dout(OC x N)
 *   dw(OC,C)  += dout^T·inp   is  D(C x OC) += inp(C x N) · op_T(dout: OC x N).
 * Each distinct shape (with its dtypes, epilogue, beta and the pointers'
 * alignments) gets its descriptors, layouts and the heuristic's first
 * algorithm once, on first use (the first step), and keeps them.  The
 * workspace is the plan's cublaslt.workspace buffer when the spec's cluster
 * has GPUs (compiler/sched.c plans 32 MiB), else 32 MiB of the backend's own.
 * The GELU epilogues are not used: srt_matmul_fwd has no activation (the
 * emitter issues srt_gelu_fwd separately). */
#include "cu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ends the job when a cuBLASLt call failed, naming the op. */
static void cu_lt(srt_ctx *c, cublasStatus_t r, const char *what)
{
    if (r == CUBLAS_STATUS_SUCCESS) return;
    ctx_die(c, "%s: cuBLASLt status %d (%s)", what, (int)r, cublasLtGetStatusString(r));
}

/* The CUDA data type of a float dtype. */
static cudaDataType_t cu_cuda_type(srt_ctx *c, srt_dtype dt)
{
    switch (dt) {
    case SRT_F32: return CUDA_R_32F;
    case SRT_BF16: return CUDA_R_16BF;
    case SRT_F16: return CUDA_R_16F;
    default: ctx_die(c, "matmul: dtype %d is not a float dtype", (int)dt);
    }
}

/* The largest power of two up to 256 that divides p's address. */
static int64_t cu_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int64_t al = 256;
    while (al > 1 && a % (uintptr_t)al) al /= 2;
    return al;
}

/* The workspace: the plan's buffer, else our own. */
void cu_gemm_init(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    cu_lt(c, cublasLtCreate(&st->lt), "cublasLtCreate");
    st->gemm = ctx_alloc(c, (int64_t)CU_GEMM_CACHE * (int64_t)sizeof(cu_gemm), "the cuBLASLt plan cache");
    for (int i = 0; i < c->cls->nbuffers; i++) {
        const srt_buffer *b = &c->cls->buffers[i];
        if (b->space == 0 && strcmp(b->name, "cublaslt.workspace") == 0) {
            st->ws = srt_dev(c, b->offset);
            st->ws_bytes = (size_t)b->bytes;
            st->ws_planned = true;
        }
    }
    if (!st->ws) {
        st->ws_bytes = CU_WORKSPACE;
        CU_CHECK(c, cudaMalloc(&st->ws, st->ws_bytes), "cudaMalloc (the cuBLASLt workspace)");
    }
    /* the bias gradient's partial sums: CU_BIAS_CHUNKS rows of the widest layer */
    int64_t oc = 1;
    for (int i = 0; i < c->cls->nparams; i++) {
        const srt_param *q = &c->cls->params[i];
        int64_t r = q->shard_rows > 0 ? q->shard_rows : q->rows_mem;
        if (r > oc) oc = r;
    }
    st->f32_tmp_n = (int64_t)CU_BIAS_CHUNKS * oc;
    CU_CHECK(c, cudaMalloc((void **)&st->f32_tmp, (size_t)st->f32_tmp_n * 4), "cudaMalloc (bias gradient partials)");
    if (c->rank == 0 && !st->ws_planned) {
        printf("shardrt: cuda: cuBLASLt workspace of %zu bytes outside the plan (the spec's cluster.gpu is cpu: "
               "plan it with a GPU cluster to count it)\n", st->ws_bytes);
        fflush(stdout);
    }
}

/* Releases the cached descriptors, the workspace and the handle. */
void cu_gemm_fini(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    for (int i = 0; i < st->ngemm; i++) {
        cublasLtMatmulDescDestroy(st->gemm[i].op);
        cublasLtMatrixLayoutDestroy(st->gemm[i].a);
        cublasLtMatrixLayoutDestroy(st->gemm[i].b);
        cublasLtMatrixLayoutDestroy(st->gemm[i].d);
    }
    st->ngemm = 0;
    free(st->gemm);
    if (!st->ws_planned) cudaFree(st->ws);
    cudaFree(st->f32_tmp);
    if (st->lt) cublasLtDestroy(st->lt);
}

/* A matrix layout of rows x cols, column-major with leading dimension ld. */
static cublasLtMatrixLayout_t cu_layout(srt_ctx *c, srt_dtype dt, int64_t rows, int64_t cols, int64_t ld)
{
    cublasLtMatrixLayout_t l;
    cu_lt(c, cublasLtMatrixLayoutCreate(&l, cu_cuda_type(c, dt), (uint64_t)rows, (uint64_t)cols, ld),
          "cublasLtMatrixLayoutCreate");
    return l;
}

/* The cached plan for a shape, made on first use. */
static cu_gemm *cu_gemm_plan(srt_ctx *c, const char *what, bool ta, bool tb, int m, int n, int k, srt_dtype adt,
                             int lda, srt_dtype bdt, int ldb, srt_dtype ddt, int ldd, bool bias, srt_dtype biasdt,
                             bool accumulate, int64_t al_a, int64_t al_b, int64_t al_d)
{
    cu_state *st = cu_st(c);
    int64_t key[14] = { ta, tb, m, n, k, adt, lda, bdt, ldb, ddt * 16 + (bias ? 1 + biasdt : 0), ldd, accumulate,
                        al_a * 1024 + al_b, al_d };
    for (int i = 0; i < st->ngemm; i++)
        if (memcmp(st->gemm[i].key, key, sizeof key) == 0) return &st->gemm[i];
    if (st->ngemm == CU_GEMM_CACHE) ctx_die(c, "%s: more than %d matmul shapes", what, CU_GEMM_CACHE);
    cu_gemm *g = &st->gemm[st->ngemm];
    memcpy(g->key, key, sizeof key);
    cu_lt(c, cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    int32_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cu_lt(c, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), "TRANSA");
    cu_lt(c, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), "TRANSB");
    if (bias) {
        int32_t epi = CUBLASLT_EPILOGUE_BIAS;
        int32_t bt = cu_cuda_type(c, biasdt);
        cu_lt(c, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "EPILOGUE");
        cu_lt(c, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
              "BIAS_DATA_TYPE");
    }
    /* stored shapes: A is (k x m) when transposed, else (m x k); B (n x k) or (k x n) */
    g->a = ta ? cu_layout(c, adt, k, m, lda) : cu_layout(c, adt, m, k, lda);
    g->b = tb ? cu_layout(c, bdt, n, k, ldb) : cu_layout(c, bdt, k, n, ldb);
    g->d = cu_layout(c, ddt, m, n, ldd);
    cublasLtMatmulPreference_t pref;
    cu_lt(c, cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    uint64_t ws = st->ws_bytes;
    uint32_t aa = (uint32_t)al_a, ab = (uint32_t)al_b, ad = (uint32_t)al_d;
    cu_lt(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
          "PREF_MAX_WORKSPACE_BYTES");
    cu_lt(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa),
          "PREF_MIN_ALIGNMENT_A_BYTES");
    cu_lt(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab),
          "PREF_MIN_ALIGNMENT_B_BYTES");
    cu_lt(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof ad),
          "PREF_MIN_ALIGNMENT_C_BYTES");
    cu_lt(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof ad),
          "PREF_MIN_ALIGNMENT_D_BYTES");
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    memset(&res, 0, sizeof res);
    cu_lt(c, cublasLtMatmulAlgoGetHeuristic(st->lt, g->op, g->a, g->b, g->d, g->d, pref, 1, &res, &found),
          what);
    cublasLtMatmulPreferenceDestroy(pref);
    if (found < 1 || res.state != CUBLAS_STATUS_SUCCESS)
        ctx_die(c, "%s: cuBLASLt has no algorithm for m %d n %d k %d (transa %d transb %d, dtypes %d %d -> %d, "
                "alignments %lld %lld %lld)", what, m, n, k, ta, tb, (int)adt, (int)bdt, (int)ddt, (long long)al_a,
                (long long)al_b, (long long)al_d);
    g->algo = res.algo;
    st->ngemm++;
    return g;
}

/* D = op(A)·op(B) (+ D when accumulate; + bias in the epilogue) on s. */
static void cu_gemm_run(srt_ctx *c, srt_stream s, const char *what, bool ta, bool tb, int m, int n, int k,
                        srt_t A, int lda, srt_t B, int ldb, srt_t D, int ldd, srt_t bias, bool accumulate)
{
    cu_state *st = cu_st(c);
    bool has_bias = bias.p != NULL;
    cu_gemm *g = cu_gemm_plan(c, what, ta, tb, m, n, k, A.dt, lda, B.dt, ldb, D.dt, ldd, has_bias,
                              has_bias ? bias.dt : SRT_F32, accumulate, cu_align(A.p), cu_align(B.p), cu_align(D.p));
    if (has_bias)
        cu_lt(c, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias.p, sizeof bias.p),
              "BIAS_POINTER");
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cu_lt(c, cublasLtMatmul(st->lt, g->op, &alpha, A.p, g->a, B.p, g->b, &beta, D.p, g->d, D.p, g->d, &g->algo,
                            st->ws, st->ws_bytes, cu_stream(c, s)), what);
}

/* The rtk.cu dtype code of a float dtype. */
static int cu_rtk_dt(srt_dtype dt) { return dt == SRT_BF16 ? 1 : dt == SRT_F16 ? 2 : 0; }

/* out(N,OC) = inp·w^T + bias: the bias in the epilogue when its pointer is
 * 16-byte aligned (what the epilogue's vector loads want), else added after. */
void cu_matmul_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t inp, srt_t w, srt_t bias, int N, int C, int OC)
{
    srt_t none = { NULL, 0, SRT_F32 };
    bool epi = bias.p && cu_align(bias.p) >= 16;
    cu_gemm_run(c, s, "matmul_fwd", true, false, OC, N, C, w, C, inp, C, out, OC, epi ? bias : none, false);
    if (bias.p && !epi)
        CU_CHECK(c, cu_k_bias_add(out.p, cu_rtk_dt(out.dt), bias.p, cu_rtk_dt(bias.dt), N, OC, cu_stream(c, s)),
                 "matmul_fwd (bias)");
}

/* dinp += dout·w; dw += dout^T·inp; dbias += column sums of dout. */
void cu_matmul_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t dbias, srt_t dout, srt_t inp, srt_t w,
                   int N, int C, int OC)
{
    cu_state *st = cu_st(c);
    srt_t none = { NULL, 0, SRT_F32 };
    if (dinp.p) cu_gemm_run(c, s, "matmul_bwd (dinp)", false, false, C, N, OC, w, C, dout, OC, dinp, C, none, true);
    if (dw.p) cu_gemm_run(c, s, "matmul_bwd (dw)", false, true, C, OC, N, inp, C, dout, OC, dw, C, none, true);
    if (dbias.p) {
        if ((int64_t)CU_BIAS_CHUNKS * OC > st->f32_tmp_n)
            ctx_die(c, "matmul_bwd: a bias of %d, the backend planned partials for %lld", OC,
                    (long long)(st->f32_tmp_n / CU_BIAS_CHUNKS));
        CU_CHECK(c, cu_k_bias_grad(dbias.p, cu_rtk_dt(dbias.dt), dout.p, cu_rtk_dt(dout.dt), N, OC, st->f32_tmp,
                                   cu_stream(c, s)), "matmul_bwd (dbias)");
    }
}
