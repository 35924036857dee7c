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
 * alignments, counted up to 16 bytes: what the widest loads and Hopper's TMA
 * need) gets its descriptors, layouts and the heuristic's first algorithm
 * once, and keeps them: at start-up for every shape the program declares
 * (srt_program.gemms, 16-byte aligned pointers), else on first use, which is
 * reported once per plan (an undeclared shape is an emitter bug; a declared
 * one with less aligned pointers, or a bias the epilogue cannot take, is
 * not).  The
 * workspace is the plan's cublaslt.workspace buffer when the spec's cluster
 * has GPUs (compiler/sched.c plans 32 MiB), else 32 MiB of the backend's own.
 * The GELU MLP's fused ops use the GELU epilogues (cu_gelu_epilogue):
 * srt_matmul_gelu_fwd GELU_AUX_BIAS (D = gelu(pre), aux = pre = the GEMM +
 * bias), srt_matmul_bwd_dgelu DGELU_BGRAD (fp32 dpre with a bias gradient)
 * or DGELU (aux = pre read back), beta 0: dpre is overwritten.  Where the
 * epilogue cannot run they run the GEMM and the GELU kernels separately. */
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

/* The largest power of two up to 16 that divides p's address: the plans'
 * alignment class (start-up plans assume 16). */
static int64_t cu_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int64_t al = 16;
    while (al > 1 && a % (uintptr_t)al) al /= 2;
    return al;
}

static void cu_gemm_startup(srt_ctx *c);

/* The workspace: the plan's buffer, else our own; then the declared shapes' plans. */
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
    cu_gemm_startup(c);
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

/* A strided batch in cuBLASLt's terms: count matrices, B's and D's
 * strides in elements (A, the weight, is shared: stride 0); count 1 for
 * one matrix. */
typedef struct cu_batch { int count; int64_t b, d; } cu_batch;
static const cu_batch cu_one = { 1, 0, 0 };

/* Makes layout l a batch of count matrices, stride elements apart. */
static void cu_batch_layout(srt_ctx *c, cublasLtMatrixLayout_t l, int count, int64_t stride)
{
    int32_t n = count;
    cu_lt(c, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n), "BATCH_COUNT");
    cu_lt(c, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
          "STRIDED_BATCH_OFFSET");
}

/* One GEMM in cuBLASLt's terms (see the file comment): transposes, m n k,
 * leading dimensions, dtypes, the bias epilogue and beta = 1. */
typedef struct cu_form {
    bool ta, tb;
    int m, n, k, lda, ldb, ldd;
    srt_dtype adt, bdt, ddt;
    bool bias, acc;
} cu_form;

/* The cuBLASLt form of a declared shape: what cu_matmul_fwd / _bwd run for
 * it (the fused GELU kinds: their GEMM's form, without their epilogues). */
static cu_form cu_form_of(const srt_gemm_shape *g)
{
    int N = g->N, C = g->C, OC = g->OC;
    switch (g->kind) {
    case SRT_GEMM_FWD:
    case SRT_GEMM_FWD_BATCHED:
    case SRT_GEMM_FWD_GELU_BATCHED:
    case SRT_GEMM_FWD_GELU: return (cu_form){true, false, OC, N, C, C, C, OC, g->dt, g->dt, g->out_dt, g->bias, false};
    case SRT_GEMM_BWD_DATA: return (cu_form){false, false, C, N, OC, C, OC, C, g->dt, g->dt, g->out_dt, false, true};
    case SRT_GEMM_BWD_DGELU: return (cu_form){false, false, C, N, OC, C, OC, C, g->dt, g->dt, g->out_dt, false, false};
    default: return (cu_form){false, true, C, OC, N, C, OC, C, g->dt, g->dt, g->out_dt, false, true};
    }
}

/* Reports a plan built on first use (once: the plan is kept): whether the
 * program declared its shape (then only the pointers' alignment or the
 * bias's variant is new) or not (the emitter's table lacks it). */
static void cu_gemm_late(srt_ctx *c, const char *what, const cu_form *f, int64_t al_a, int64_t al_b, int64_t al_d)
{
    bool declared = false;
    for (int i = 0; i < c->prog->ngemms && !declared; i++) {
        cu_form d = cu_form_of(&c->prog->gemms[i]);
        declared = d.ta == f->ta && d.tb == f->tb && d.m == f->m && d.n == f->n && d.k == f->k && d.adt == f->adt &&
                   d.bdt == f->bdt && d.ddt == f->ddt;
    }
    if (declared)
        printf("shardrt: cuda: rank %d: %s m %d n %d k %d: a declared shape in a variant not planned at start-up "
               "(bias %d, pointers aligned to %lld %lld %lld bytes): planned on first use\n", (int)c->rank, what,
               f->m, f->n, f->k, (int)f->bias, (long long)al_a, (long long)al_b, (long long)al_d);
    else
        printf("shardrt: cuda: rank %d: %s m %d n %d k %d (dtypes %d %d -> %d): undeclared GEMM shape (not in "
               "srt_program.gemms): planned on first use\n", (int)c->rank, what, f->m, f->n, f->k, (int)f->adt,
               (int)f->bdt, (int)f->ddt);
    fflush(stdout);
}

/* Set while cu_gemm_startup plans the declared shapes; a plan made when it is
 * clear is made on first use, in a step (one context per process). */
static bool cu_gemm_in_startup;

/* The cached plan for a shape; made now when missing (reported when late).
 * gelu: 0, or the GELU epilogue of the fused ops (CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
 * GELU_AUX without a bias, DGELU, DGELU_BGRAD), its aux matrix shaped as D
 * (leading dimension m) in D's dtype.  soft: NULL, remembered, instead of the
 * end of the job when cuBLASLt has no algorithm (the fused op falls back). */
static cu_gemm *cu_gemm_plan_epi(srt_ctx *c, const char *what, bool ta, bool tb, int m, int n, int k, srt_dtype adt,
                                 int lda, srt_dtype bdt, int ldb, srt_dtype ddt, int ldd, bool bias, srt_dtype biasdt,
                                 bool accumulate, int64_t al_a, int64_t al_b, int64_t al_d, int32_t gelu, bool soft,
                                 cu_batch bt)
{
    cu_state *st = cu_st(c);
    int64_t key[17] = { ta, tb, m, n, k, adt, lda, bdt, ldb,
                        ((int64_t)gelu << 16) + ddt * 16 + (bias ? 1 + biasdt : 0), ldd, accumulate,
                        al_a * 1024 + al_b, al_d, bt.count, bt.b, bt.d };
    for (int i = 0; i < st->ngemm; i++)
        if (memcmp(st->gemm[i].key, key, sizeof key) == 0) return st->gemm[i].failed ? NULL : &st->gemm[i];
    if (st->ngemm == CU_GEMM_CACHE) ctx_die(c, "%s: more than %d matmul shapes", what, CU_GEMM_CACHE);
    if (!cu_gemm_in_startup) {
        cu_form f = {ta, tb, m, n, k, lda, ldb, ldd, adt, bdt, ddt, bias, accumulate};
        cu_gemm_late(c, what, &f, al_a, al_b, al_d);
    }
    cu_gemm *g = &st->gemm[st->ngemm];
    memcpy(g->key, key, sizeof key);
    cu_lt(c, cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    int32_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cu_lt(c, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), "TRANSA");
    cu_lt(c, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), "TRANSB");
    int32_t epi = gelu ? gelu : bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (epi != CUBLASLT_EPILOGUE_DEFAULT)
        cu_lt(c, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "EPILOGUE");
    if (bias) {
        int32_t bt = cu_cuda_type(c, biasdt);
        cu_lt(c, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
              "BIAS_DATA_TYPE");
    }
    if (gelu) {   /* aux: the GELU input (pre), D's shape and dtype (the default aux type) */
        int64_t ald = m;
        cu_lt(c, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ald, sizeof ald),
              "EPILOGUE_AUX_LD");
    }
    /* stored shapes: A is (k x m) when transposed, else (m x k); B (n x k) or (k x n) */
    g->a = ta ? cu_layout(c, adt, k, m, lda) : cu_layout(c, adt, m, k, lda);
    g->b = tb ? cu_layout(c, bdt, n, k, ldb) : cu_layout(c, bdt, k, n, ldb);
    g->d = cu_layout(c, ddt, m, n, ldd);
    if (bt.count > 1) {   /* A shared (stride 0), B and D strided; the bias shared (its batch stride 0) */
        int64_t zero = 0;
        cu_batch_layout(c, g->a, bt.count, 0);
        cu_batch_layout(c, g->b, bt.count, bt.b);
        cu_batch_layout(c, g->d, bt.count, bt.d);
        if (bias)
            cu_lt(c, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &zero, sizeof zero),
                  "BIAS_BATCH_STRIDE");
        if (gelu)   /* aux is shaped as D: its blocks as far apart */
            cu_lt(c, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &bt.d,
                                                    sizeof bt.d), "EPILOGUE_AUX_BATCH_STRIDE");
    }
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
    /* no algorithm is the call's own CUBLAS_STATUS_NOT_SUPPORTED (0 found), which a soft plan survives */
    cublasStatus_t hr = cublasLtMatmulAlgoGetHeuristic(st->lt, g->op, g->a, g->b, g->d, g->d, pref, 1, &res, &found);
    if (hr != CUBLAS_STATUS_NOT_SUPPORTED || !soft) cu_lt(c, hr, what);
    cublasLtMatmulPreferenceDestroy(pref);
    g->failed = hr != CUBLAS_STATUS_SUCCESS || found < 1 || res.state != CUBLAS_STATUS_SUCCESS;
    if (g->failed && soft) {   /* kept, so that the fallback does not ask again every step */
        st->ngemm++;
        return NULL;
    }
    if (g->failed)
        ctx_die(c, "%s: cuBLASLt has no algorithm for m %d n %d k %d (transa %d transb %d, dtypes %d %d -> %d, "
                "alignments %lld %lld %lld)", what, m, n, k, ta, tb, (int)adt, (int)bdt, (int)ddt, (long long)al_a,
                (long long)al_b, (long long)al_d);
    g->algo = res.algo;
    st->ngemm++;
    return g;
}

/* The cached plan for a shape without a GELU epilogue. */
static cu_gemm *cu_gemm_plan(srt_ctx *c, const char *what, bool ta, bool tb, int m, int n, int k, srt_dtype adt,
                             int lda, srt_dtype bdt, int ldb, srt_dtype ddt, int ldd, bool bias, srt_dtype biasdt,
                             bool accumulate, int64_t al_a, int64_t al_b, int64_t al_d)
{
    return cu_gemm_plan_epi(c, what, ta, tb, m, n, k, adt, lda, bdt, ldb, ddt, ldd, bias, biasdt, accumulate, al_a,
                            al_b, al_d, 0, false, cu_one);
}

/* The GELU epilogue a fused op uses for D of m rows (the aux leading
 * dimension, a multiple of 8), or 0 when it runs unfused: forward
 * GELU_AUX_BIAS (GELU_AUX without a bias); backward DGELU_BGRAD when the bias
 * gradient is wanted and fp32 (the epilogue's bias gradient has D's dtype:
 * a bf16 sum would round where rtk.cu's fp32 sum does not), else DGELU. */
static int32_t cu_gelu_epilogue(bool fwd, bool bias, srt_dtype ddt, int m)
{
    if (m % 8) return 0;
    if (fwd) return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    return bias && ddt == SRT_F32 ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
}

/* Plans every GEMM shape the program declares, for 16-byte aligned pointers
 * (the arenas' tensors are), and says how many.  The fused GELU kinds get
 * the epilogue their op will ask for; one that runs unfused (its leading
 * dimension not a multiple of 8) is only counted. */
static void cu_gemm_startup(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    static const char *const what[3] = {"matmul_fwd", "matmul_bwd (dinp)", "matmul_bwd (dw)"};
    int fused = 0;
    cu_gemm_in_startup = true;
    for (int i = 0; i < c->prog->ngemms; i++) {
        const srt_gemm_shape *g = &c->prog->gemms[i];
        if (g->kind < SRT_GEMM_FWD || g->kind > SRT_GEMM_FWD_GELU_BATCHED)
            ctx_die(c, "srt_program.gemms[%d]: kind %d is not an SRT_GEMM_* kind", i, g->kind);
        cu_form f = cu_form_of(g);
        if (g->kind == SRT_GEMM_FWD_BATCHED) {   /* its bias in the epilogue, as cu_matmul_fwd_batched asks */
            cu_batch bt = { g->batch, g->inp_stride, g->out_stride };
            cu_gemm_plan_epi(c, "matmul_fwd_batched", f.ta, f.tb, f.m, f.n, f.k, f.adt, f.lda, f.bdt, f.ldb, f.ddt,
                             f.ldd, f.bias, g->dt, f.acc, 16, 16, 16, 0, false, g->batch > 1 ? bt : cu_one);
            continue;
        }
        if (g->kind > SRT_GEMM_BWD_WEIGHT) {   /* with the epilogue the op will ask for (cu_gelu_epilogue) */
            bool fwd = g->kind == SRT_GEMM_FWD_GELU || g->kind == SRT_GEMM_FWD_GELU_BATCHED;
            int32_t gelu = cu_gelu_epilogue(fwd, g->bias, g->out_dt, f.m);
            cu_batch bt = { g->batch, g->inp_stride, g->out_stride };
            if (gelu)
                cu_gemm_plan_epi(c, g->kind == SRT_GEMM_FWD_GELU_BATCHED ? "matmul_gelu_fwd_batched"
                                    : fwd ? "matmul_gelu_fwd" : "matmul_bwd_dgelu", f.ta,
                                 f.tb, f.m, f.n, f.k, f.adt, f.lda, f.bdt, f.ldb, f.ddt, f.ldd,
                                 fwd && f.bias, g->dt, f.acc, 16, 16, 16, gelu, true,
                                 g->kind == SRT_GEMM_FWD_GELU_BATCHED && g->batch > 1 ? bt : cu_one);
            else
                fused++;
            continue;
        }
        cu_gemm_plan(c, what[g->kind], f.ta, f.tb, f.m, f.n, f.k, f.adt, f.lda, f.bdt, f.ldb, f.ddt, f.ldd, f.bias,
                     g->dt, f.acc, 16, 16, 16);
    }
    cu_gemm_in_startup = false;
    if (c->rank == 0) {
        printf("shardrt: cuda: cuBLASLt: %d GEMM shapes declared, %d plans built at start-up", c->prog->ngemms,
               st->ngemm);
        if (fused) printf(" (%d fused GELU shapes without their epilogue: the GEMM and the GELU kernel)", fused);
        printf("\n");
        fflush(stdout);
    }
}

/* D = op(A)·op(B) (+ D when accumulate; + bias in the epilogue) on s. */
static void cu_gemm_run_batch(srt_ctx *c, srt_stream s, const char *what, bool ta, bool tb, int m, int n, int k,
                              srt_t A, int lda, srt_t B, int ldb, srt_t D, int ldd, srt_t bias, bool accumulate,
                              cu_batch bt)
{
    cu_state *st = cu_st(c);
    bool has_bias = bias.p != NULL;
    cu_gemm *g = cu_gemm_plan_epi(c, what, ta, tb, m, n, k, A.dt, lda, B.dt, ldb, D.dt, ldd, has_bias,
                                  has_bias ? bias.dt : SRT_F32, accumulate, cu_align(A.p), cu_align(B.p),
                                  cu_align(D.p), 0, false, bt);
    if (has_bias)
        cu_lt(c, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias.p, sizeof bias.p),
              "BIAS_POINTER");
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cu_lt(c, cublasLtMatmul(st->lt, g->op, &alpha, A.p, g->a, B.p, g->b, &beta, D.p, g->d, D.p, g->d, &g->algo,
                            st->ws, st->ws_bytes, cu_stream(c, s)), what);
}

/* One matrix: D = op(A)·op(B) (+ D when accumulate; + bias in the epilogue) on s. */
static void cu_gemm_run(srt_ctx *c, srt_stream s, const char *what, bool ta, bool tb, int m, int n, int k,
                        srt_t A, int lda, srt_t B, int ldb, srt_t D, int ldd, srt_t bias, bool accumulate)
{
    cu_gemm_run_batch(c, s, what, ta, tb, m, n, k, A, lda, B, ldb, D, ldd, bias, accumulate, cu_one);
}

/* D = op(A)·op(B) with a GELU epilogue on s, beta 0: aux the GELU input
 * (written forward, read backward), bias the forward's bias or the BGRAD
 * output.  False, nothing issued, when cuBLASLt has no algorithm for it. */
static bool cu_gemm_gelu(srt_ctx *c, srt_stream s, const char *what, bool ta, bool tb, int m, int n, int k, srt_t A,
                         int lda, srt_t B, int ldb, srt_t D, int ldd, int32_t gelu, srt_t bias, void *aux, cu_batch bt)
{
    cu_state *st = cu_st(c);
    bool fwd_bias = gelu == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    cu_gemm *g = cu_gemm_plan_epi(c, what, ta, tb, m, n, k, A.dt, lda, B.dt, ldb, D.dt, ldd, fwd_bias,
                                  fwd_bias ? bias.dt : SRT_F32, false, cu_align(A.p), cu_align(B.p), cu_align(D.p),
                                  gelu, true, bt);
    if (!g) return false;
    if (bias.p)
        cu_lt(c, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias.p, sizeof bias.p),
              "BIAS_POINTER");
    cu_lt(c, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux),
          "EPILOGUE_AUX_POINTER");
    float alpha = 1.0f, beta = 0.0f;
    cu_lt(c, cublasLtMatmul(st->lt, g->op, &alpha, A.p, g->a, B.p, g->b, &beta, D.p, g->d, D.p, g->d, &g->algo,
                            st->ws, st->ws_bytes, cu_stream(c, s)), what);
    return true;
}

/* The rtk.cu dtype code of a float dtype. */
static int cu_rtk_dt(srt_dtype dt) { return dt == SRT_BF16 ? 1 : dt == SRT_F16 ? 2 : 0; }

/* Whether the bias epilogue takes this bias: 16-byte aligned, and in D's
 * dtype or, for an fp32 D, the inputs' (cuBLASLt's bias types; it refuses
 * others with CUBLAS_STATUS_NOT_SUPPORTED). */
static bool cu_bias_epi_ok(srt_t bias, srt_dtype ddt, srt_dtype abdt)
{
    return bias.p && cu_align(bias.p) >= 16 && (bias.dt == ddt || (ddt == SRT_F32 && bias.dt == abdt));
}

/* out(N,OC) = inp·w^T + bias: the bias in the epilogue when it can take it
 * (cu_bias_epi_ok), else added after. */
void cu_matmul_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t inp, srt_t w, srt_t bias, int N, int C, int OC)
{
    srt_t none = { NULL, 0, SRT_F32 };
    bool epi = cu_bias_epi_ok(bias, out.dt, inp.dt);
    cu_gemm_run(c, s, "matmul_fwd", true, false, OC, N, C, w, C, inp, C, out, OC, epi ? bias : none, false);
    if (bias.p && !epi)
        CU_CHECK(c, cu_k_bias_add(out.p, cu_rtk_dt(out.dt), bias.p, cu_rtk_dt(bias.dt), N, OC, cu_stream(c, s)),
                 "matmul_fwd (bias)");
}

/* out_b = inp_b·w^T + bias for each of the batch's blocks, one cuBLASLt
 * call (B and D strided, the weight shared); a bias the epilogue cannot take
 * is added block by block after. */
void cu_matmul_fwd_batched(srt_ctx *c, srt_stream s, srt_t out, srt_t inp, srt_t w, srt_t bias, int N, int C,
                           int OC, int batch, int64_t out_stride, int64_t inp_stride)
{
    srt_t none = { NULL, 0, SRT_F32 };
    bool epi = cu_bias_epi_ok(bias, out.dt, inp.dt);
    cu_batch bt = { batch, inp_stride, out_stride };
    cu_gemm_run_batch(c, s, "matmul_fwd_batched", true, false, OC, N, C, w, C, inp, C, out, OC, epi ? bias : none,
                      false, batch > 1 ? bt : cu_one);
    for (int64_t b = 0; bias.p && !epi && b < batch; b++)
        CU_CHECK(c, cu_k_bias_add(ops_block(out, b, out_stride, (int64_t)N * OC).p, cu_rtk_dt(out.dt),
                                  bias.p, cu_rtk_dt(bias.dt), N, OC, cu_stream(c, s)), "matmul_fwd_batched (bias)");
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

/* pre = inp·w^T + bias and out = gelu(pre) in one GEMM (GELU_AUX_BIAS, aux =
 * pre), else matmul_fwd into pre and kg_gelu_forward. */
void cu_matmul_gelu_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t pre, srt_t inp, srt_t w, srt_t bias, int N, int C,
                        int OC)
{
    srt_t none = { NULL, 0, SRT_F32 };
    int32_t gelu = cu_gelu_epilogue(true, bias.p != NULL, out.dt, OC);
    bool fuse = gelu && pre.dt == out.dt && cu_align(pre.p) >= 16 &&
                (!bias.p || cu_bias_epi_ok(bias, out.dt, inp.dt));
    if (fuse && cu_gemm_gelu(c, s, "matmul_gelu_fwd", true, false, OC, N, C, w, C, inp, C, out, OC, gelu,
                             bias.p ? bias : none, pre.p, cu_one))
        return;
    srt_t p = pre, o = out;
    p.n = o.n = (int64_t)N * OC;
    cu_matmul_fwd(c, s, p, inp, w, bias, N, C, OC);
    cu_kg(c, kg_gelu_forward(o, p, cu_stream(c, s)), "matmul_gelu_fwd (gelu)");
}

/* cu_matmul_gelu_fwd on a strided batch: one GELU_AUX(_BIAS) cuBLASLt call,
 * pre's blocks (aux) as far apart as out's; else block by block. */
void cu_matmul_gelu_fwd_batched(srt_ctx *c, srt_stream s, srt_t out, srt_t pre, srt_t inp, srt_t w, srt_t bias,
                                int N, int C, int OC, int batch, int64_t out_stride, int64_t inp_stride)
{
    srt_t none = { NULL, 0, SRT_F32 };
    int32_t gelu = cu_gelu_epilogue(true, bias.p != NULL, out.dt, OC);
    bool fuse = gelu && pre.dt == out.dt && cu_align(pre.p) >= 16 &&
                (!bias.p || cu_bias_epi_ok(bias, out.dt, inp.dt));
    cu_batch bt = { batch, inp_stride, out_stride };
    if (fuse && cu_gemm_gelu(c, s, "matmul_gelu_fwd_batched", true, false, OC, N, C, w, C, inp, C, out, OC, gelu,
                             bias.p ? bias : none, pre.p, batch > 1 ? bt : cu_one))
        return;
    for (int64_t b = 0; b < batch; b++)
        cu_matmul_gelu_fwd(c, s, ops_block(out, b, out_stride, (int64_t)N * OC), ops_block(pre, b, out_stride, (int64_t)N * OC),
                           ops_block(inp, b, inp_stride, (int64_t)N * C), w, bias, N, C, OC);
}

/* dpre = (dout·w) ⊙ gelu'(pre), overwritten, in one GEMM (DGELU_BGRAD or
 * DGELU, aux = pre), else the GEMM and rtk.cu's in-place derivative; then
 * dbias_pre += the column sums of dpre: BGRAD's fp32 output added, or
 * rtk.cu's deterministic sum. */
void cu_matmul_bwd_dgelu(srt_ctx *c, srt_stream s, srt_t dpre, srt_t dbias_pre, srt_t dout, srt_t w, srt_t pre,
                         int N, int C, int OC)
{
    cu_state *st = cu_st(c);
    srt_t none = { NULL, 0, SRT_F32 }, bg = { st->f32_tmp, C, SRT_F32 };
    int32_t gelu = cu_gelu_epilogue(false, dbias_pre.p != NULL, dpre.dt, C);
    bool bgrad = gelu == CUBLASLT_EPILOGUE_DGELU_BGRAD && C <= st->f32_tmp_n;
    if (gelu == CUBLASLT_EPILOGUE_DGELU_BGRAD && !bgrad) gelu = CUBLASLT_EPILOGUE_DGELU;
    bool fuse = gelu && pre.dt == dpre.dt && cu_align(pre.p) >= 16;
    if (!fuse || !cu_gemm_gelu(c, s, "matmul_bwd_dgelu", false, false, C, N, OC, w, C, dout, OC, dpre, C, gelu,
                               bgrad ? bg : none, pre.p, cu_one)) {
        bgrad = false;
        srt_t d = dpre;
        d.n = (int64_t)N * C;
        cu_zero(c, s, d);
        cu_gemm_run(c, s, "matmul_bwd (dinp)", false, false, C, N, OC, w, C, dout, OC, dpre, C, none, true);
        CU_CHECK(c, cu_k_dgelu_inplace(dpre.p, cu_rtk_dt(dpre.dt), pre.p, cu_rtk_dt(pre.dt), (int64_t)N * C,
                                       cu_stream(c, s)), "matmul_bwd_dgelu (gelu')");
    }
    if (!dbias_pre.p) return;
    if (bgrad) {
        CU_CHECK(c, cu_k_bias_add(dbias_pre.p, cu_rtk_dt(dbias_pre.dt), st->f32_tmp, 0, 1, C, cu_stream(c, s)),
                 "matmul_bwd_dgelu (dbias)");
        return;
    }
    if ((int64_t)CU_BIAS_CHUNKS * C > st->f32_tmp_n)
        ctx_die(c, "matmul_bwd_dgelu: a bias of %d, the backend planned partials for %lld", C,
                (long long)(st->f32_tmp_n / CU_BIAS_CHUNKS));
    CU_CHECK(c, cu_k_bias_grad(dbias_pre.p, cu_rtk_dt(dbias_pre.dt), dpre.p, cu_rtk_dt(dpre.dt), N, C, st->f32_tmp,
                               cu_stream(c, s)), "matmul_bwd_dgelu (dbias)");
}
