/* cublaslt.c — an emulated libcublasLt, prefix emlt_: the cublasLt* functions
 * runtime/cuda/gemm.c calls, written against the real cublasLt.h, run on the
 * CPU.  Device memory is host memory and a matmul runs inside the call (the
 * stream is synchronous, cuemu.h).
 *
 * What it computes is the documented contract of cublasLtMatmul:
 *   D = epilogue(alpha * op(A) * op(B) + beta * C (+ bias))
 * column-major (CUBLASLT_ORDER_COL), fp32 accumulation (CUBLAS_COMPUTE_32F,
 * scale type CUDA_R_32F, alpha and beta host floats), results rounded to D's
 * type to nearest even.  A strided batch (every layout's BATCH_COUNT the
 * same, each matrix STRIDED_BATCH_OFFSET elements after the one before; 0
 * shares one, as a weight is shared) runs matrix by matrix, the BIAS
 * epilogue's vector BIAS_BATCH_STRIDE elements apart (0: shared).  Epilogues: DEFAULT, BIAS (a vector of D's rows,
 * broadcast along D's columns), GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS
 * (aux = the GELU input, D's shape, leading dimension EPILOGUE_AUX_LD, D's
 * type), DGELU, DGELU_BGRAD (D = the matmul times gelu'(aux); the bias
 * gradient, D's rows summed over D's columns, in D's type, written to
 * BIAS_POINTER), BGRADA and BGRADB (the sums of op(A)'s rows / op(B)'s
 * columns over k).  GELU is the tanh form, in fp32.
 *
 * What it refuses is what the library refuses, with the library's status:
 * type combinations outside the supported-type table, orders other than
 * COL, batches of other epilogues than DEFAULT, BIAS, GELU_AUX and
 * GELU_AUX_BIAS (whose aux matrices are EPILOGUE_AUX_BATCH_STRIDE apart), plane offsets,
 * batch modes other than strided, device pointer modes (NOT_SUPPORTED: what gemm.c does not
 * use is not emulated, and says so rather than computing something else);
 * inconsistent shapes, ld < rows, an aux ld not a multiple of 8, a
 * workspace smaller than the algorithm's, missing or misaligned epilogue
 * pointers (INVALID_VALUE).  A pointer whose bytes are not device memory
 * is a device fault (cuemu_fault), as an illegal address is on a GPU.
 */
#include <cublasLt.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuemu.h"

enum {
    EMLT_MAGIC_HANDLE = 0x4c54484e,    /* "LTHN" */
    EMLT_MAGIC_LAYOUT = 0x4c544c59,    /* "LTLY" */
    EMLT_MAGIC_DESC = 0x4c544453,      /* "LTDS" */
    EMLT_MAGIC_PREF = 0x4c545046,      /* "LTPF" */
    EMLT_MAGIC_ALGO = 0x4c54414c,      /* "LTAL" */
    EMLT_WS_WANT = 4 << 20,            /* what the emulated algorithm asks for, when the preference allows */
    EMLT_EPI_ALIGN = 16,               /* bias and aux pointers: the epilogue's 16-byte vector accesses */
};

/* The handle: only a tag (the library's context lives on the device). */
struct cublasLtContext { uint32_t magic; };

/* A matrix layout's attributes (cublasLtMatrixLayoutAttribute_t). */
typedef struct emlt_layout {
    uint32_t magic;
    uint32_t type;
    int32_t order;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t batch_stride, plane_offset;
    uint32_t batch_mode;
} emlt_layout;

/* A matmul descriptor's attributes (cublasLtMatmulDescAttributes_t), each in
 * the type and size the header documents. */
typedef struct emlt_desc {
    uint32_t magic;
    int32_t compute, scale, pmode, transa, transb, transc, fill;
    uint32_t epilogue;
    const void *bias;
    int64_t bias_bstride;
    void *aux;
    int64_t aux_ld, aux_bstride, alpha_vstride;
    int32_t sm_target;
    const void *a_scale, *b_scale, *c_scale, *d_scale;
    void *amax_d;
    int32_t aux_type;
    void *aux_scale, *aux_amax;
    int8_t fast_accum;
    int32_t bias_type;
    int32_t a_smode, b_smode, c_smode, d_smode, aux_smode;
    void *d_out_scale;
    int32_t d_out_smode;
    void *emu_desc;
} emlt_desc;

/* A heuristic preference's attributes (cublasLtMatmulPreferenceAttributes_t). */
typedef struct emlt_pref {
    uint32_t magic;
    uint32_t search_mode;
    uint64_t max_ws;
    uint32_t red_mask;
    uint32_t align[4];    /* A, B, C, D in bytes */
    float max_waves;
    uint64_t impl_mask;
} emlt_pref;

/* The emulated algorithm, in cublasLtMatmulAlgo_t's 64 bytes: what it was
 * chosen for, the workspace it needs and the alignments it assumes. */
typedef struct emlt_algo {
    uint32_t magic;
    uint32_t types;        /* emlt_types_key of the problem it was chosen for */
    uint32_t epilogue;
    uint32_t align[4];     /* bytes the A, B, C, D pointers must be aligned to */
    uint64_t ws;
} emlt_algo;
_Static_assert(sizeof(emlt_algo) <= sizeof(cublasLtMatmulAlgo_t), "the algo fits the library's opaque struct");

/* One checked matmul problem: the operation's dimensions and types, resolved. */
typedef struct emlt_prob {
    int64_t m, n, k;
    bool ta, tb;
    uint32_t at, bt, ct, dt;
    uint32_t epi;
    bool bias_in, bias_out, aux_out, aux_in, gelu;
    uint32_t bias_t, aux_t;
    int64_t bias_n;        /* elements of the bias or bias gradient vector */
    int64_t batch;         /* matrices in the (strided) batch */
} emlt_prob;

/* ---- element types ------------------------------------------------------------------------- */

/* Bytes of one element of a supported type, 0 for any other. */
static size_t emlt_esize(uint32_t t)
{
    switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16BF:
    case CUDA_R_16F: return 2;
    default: return 0;
    }
}

/* The float value of element i of a t-typed array. */
static float emlt_load(const void *p, uint32_t t, int64_t i)
{
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    if (t == CUDA_R_16F) return (float)((const _Float16 *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* fp32 -> bf16, rounded to nearest even (NaN stays a quiet NaN). */
static uint16_t emlt_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Stores v rounded to t (to nearest even) as element i. */
static void emlt_store(void *p, uint32_t t, int64_t i, float v)
{
    if (t == CUDA_R_32F) ((float *)p)[i] = v;
    else if (t == CUDA_R_16F) ((_Float16 *)p)[i] = (_Float16)v;
    else ((uint16_t *)p)[i] = emlt_bf16(v);
}

/* The A/B/C/D types of a problem packed in one word (an algo's fingerprint). */
static uint32_t emlt_types_key(const emlt_prob *p)
{
    return (p->at & 0xff) | (p->bt & 0xff) << 8 | (p->ct & 0xff) << 16 | (p->dt & 0xff) << 24;
}

/* ---- handle ------------------------------------------------------------------------------- */

/* Creates a handle. */
cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle)
{
    if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
    struct cublasLtContext *h = malloc(sizeof *h);
    if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
    h->magic = EMLT_MAGIC_HANDLE;
    *lightHandle = h;
    return CUBLAS_STATUS_SUCCESS;
}

/* Destroys a handle. */
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle)
{
    if (!lightHandle || lightHandle->magic != EMLT_MAGIC_HANDLE) return CUBLAS_STATUS_NOT_INITIALIZED;
    lightHandle->magic = 0;
    free(lightHandle);
    return CUBLAS_STATUS_SUCCESS;
}

/* The name of a status, as the library spells it. */
const char *cublasLtGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "<unknown>";
}

/* ---- matrix layouts ----------------------------------------------------------------------- */

/* Creates a column-major layout of rows x cols with leading dimension ld. */
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld)
{
    if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
    emlt_layout *l = calloc(1, sizeof *l);
    if (!l) return CUBLAS_STATUS_ALLOC_FAILED;
    *l = (emlt_layout){ .magic = EMLT_MAGIC_LAYOUT, .type = (uint32_t)type, .order = CUBLASLT_ORDER_COL,
                        .rows = rows, .cols = cols, .ld = ld, .batch = 1 };
    *matLayout = (cublasLtMatrixLayout_t)(void *)l;
    return CUBLAS_STATUS_SUCCESS;
}

/* The layout behind a handle, NULL when it is not one of ours. */
static emlt_layout *emlt_layout_of(cublasLtMatrixLayout_t h)
{
    emlt_layout *l = (emlt_layout *)(void *)h;
    return l && l->magic == EMLT_MAGIC_LAYOUT ? l : NULL;
}

/* Destroys a layout. */
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout)
{
    emlt_layout *l = emlt_layout_of(matLayout);
    if (l) {
        l->magic = 0;
        free(l);
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* Copies an attribute's value in when its size is the documented one. */
#define EMLT_SET(field)                                                    \
    do {                                                                   \
        if (sizeInBytes != sizeof(field)) return CUBLAS_STATUS_INVALID_VALUE; \
        memcpy(&(field), buf, sizeInBytes);                                \
        return CUBLAS_STATUS_SUCCESS;                                      \
    } while (0)

/* Sets one layout attribute (type, order, rows, cols, ld, batch). */
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes)
{
    emlt_layout *l = emlt_layout_of(matLayout);
    if (!l || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: EMLT_SET(l->type);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: EMLT_SET(l->order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: EMLT_SET(l->rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS: EMLT_SET(l->cols);
    case CUBLASLT_MATRIX_LAYOUT_LD: EMLT_SET(l->ld);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: EMLT_SET(l->batch);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: EMLT_SET(l->batch_stride);
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: EMLT_SET(l->plane_offset);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: EMLT_SET(l->batch_mode);
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

/* ---- matmul descriptors ------------------------------------------------------------------- */

/* Creates a matmul descriptor with the header's defaults. */
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType)
{
    if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
    emlt_desc *d = calloc(1, sizeof *d);
    if (!d) return CUBLAS_STATUS_ALLOC_FAILED;
    d->magic = EMLT_MAGIC_DESC;
    d->compute = computeType;
    d->scale = scaleType;
    d->pmode = CUBLASLT_POINTER_MODE_HOST;
    d->transa = d->transb = d->transc = CUBLAS_OP_N;
    d->fill = CUBLAS_FILL_MODE_FULL;
    d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    d->aux_type = -1;
    d->bias_type = -1;
    *matmulDesc = (cublasLtMatmulDesc_t)(void *)d;
    return CUBLAS_STATUS_SUCCESS;
}

/* The descriptor behind a handle, NULL when it is not one of ours. */
static emlt_desc *emlt_desc_of(cublasLtMatmulDesc_t h)
{
    emlt_desc *d = (emlt_desc *)(void *)h;
    return d && d->magic == EMLT_MAGIC_DESC ? d : NULL;
}

/* Destroys a matmul descriptor. */
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc)
{
    emlt_desc *d = emlt_desc_of(matmulDesc);
    if (d) {
        d->magic = 0;
        free(d);
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* Sets one matmul descriptor attribute, checking its documented size. */
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes)
{
    emlt_desc *d = emlt_desc_of(matmulDesc);
    if (!d || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: EMLT_SET(d->compute);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: EMLT_SET(d->scale);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: EMLT_SET(d->pmode);
    case CUBLASLT_MATMUL_DESC_TRANSA: EMLT_SET(d->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB: EMLT_SET(d->transb);
    case CUBLASLT_MATMUL_DESC_TRANSC: EMLT_SET(d->transc);
    case CUBLASLT_MATMUL_DESC_FILL_MODE: EMLT_SET(d->fill);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: EMLT_SET(d->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: EMLT_SET(d->bias);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: EMLT_SET(d->bias_bstride);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: EMLT_SET(d->aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: EMLT_SET(d->aux_ld);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: EMLT_SET(d->aux_bstride);
    case CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE: EMLT_SET(d->alpha_vstride);
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: EMLT_SET(d->sm_target);
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: EMLT_SET(d->a_scale);
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: EMLT_SET(d->b_scale);
    case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER: EMLT_SET(d->c_scale);
    case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER: EMLT_SET(d->d_scale);
    case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: EMLT_SET(d->amax_d);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: EMLT_SET(d->aux_type);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER: EMLT_SET(d->aux_scale);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER: EMLT_SET(d->aux_amax);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: EMLT_SET(d->fast_accum);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: EMLT_SET(d->bias_type);
    case CUBLASLT_MATMUL_DESC_A_SCALE_MODE: EMLT_SET(d->a_smode);
    case CUBLASLT_MATMUL_DESC_B_SCALE_MODE: EMLT_SET(d->b_smode);
    case CUBLASLT_MATMUL_DESC_C_SCALE_MODE: EMLT_SET(d->c_smode);
    case CUBLASLT_MATMUL_DESC_D_SCALE_MODE: EMLT_SET(d->d_smode);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE: EMLT_SET(d->aux_smode);
    case CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER: EMLT_SET(d->d_out_scale);
    case CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE: EMLT_SET(d->d_out_smode);
    case CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR: EMLT_SET(d->emu_desc);
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

/* ---- heuristic preferences ---------------------------------------------------------------- */

/* Creates a preference with the header's defaults (no workspace, 256-byte alignments). */
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
    emlt_pref *p = calloc(1, sizeof *p);
    if (!p) return CUBLAS_STATUS_ALLOC_FAILED;
    *p = (emlt_pref){ .magic = EMLT_MAGIC_PREF, .search_mode = CUBLASLT_SEARCH_BEST_FIT,
                      .red_mask = CUBLASLT_REDUCTION_SCHEME_MASK, .align = {256, 256, 256, 256},
                      .impl_mask = UINT64_MAX };
    *pref = (cublasLtMatmulPreference_t)(void *)p;
    return CUBLAS_STATUS_SUCCESS;
}

/* The preference behind a handle, NULL when it is not one of ours. */
static emlt_pref *emlt_pref_of(cublasLtMatmulPreference_t h)
{
    emlt_pref *p = (emlt_pref *)(void *)h;
    return p && p->magic == EMLT_MAGIC_PREF ? p : NULL;
}

/* Destroys a preference. */
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    emlt_pref *p = emlt_pref_of(pref);
    if (p) {
        p->magic = 0;
        free(p);
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* Sets one preference attribute, checking its documented size. */
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t sizeInBytes)
{
    emlt_pref *p = emlt_pref_of(pref);
    if (!p || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: EMLT_SET(p->search_mode);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: EMLT_SET(p->max_ws);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: EMLT_SET(p->red_mask);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: EMLT_SET(p->align[0]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: EMLT_SET(p->align[1]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: EMLT_SET(p->align[2]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: EMLT_SET(p->align[3]);
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: EMLT_SET(p->max_waves);
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: EMLT_SET(p->impl_mask);
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

/* ---- the problem's checks ----------------------------------------------------------------- */

/* Whether the (A=B, C=D) types are a row of the supported-type table for
 * CUBLAS_COMPUTE_32F with scale type CUDA_R_32F (the floating rows). */
static bool emlt_types_ok(uint32_t ab, uint32_t cd)
{
    if (ab == CUDA_R_32F) return cd == CUDA_R_32F;
    if (ab == CUDA_R_16BF) return cd == CUDA_R_16BF || cd == CUDA_R_32F;
    if (ab == CUDA_R_16F) return cd == CUDA_R_16F || cd == CUDA_R_32F;
    return false;
}

/* Whether a layout is one this emulation runs: column-major, one matrix or
 * a strided batch, no planes (NOT_SUPPORTED otherwise: gemm.c uses no other). */
static bool emlt_layout_plain(const emlt_layout *l)
{
    return l->order == CUBLASLT_ORDER_COL && l->plane_offset == 0 && l->batch_mode == 0;
}

/* Whether a layout's leading dimension fits its rows (ld >= rows, ld >= 1). */
static bool emlt_ld_ok(const emlt_layout *l)
{
    return l->ld >= 1 && (uint64_t)l->ld >= l->rows && l->rows <= INT32_MAX && l->cols <= INT32_MAX;
}

/* Checks an operation against its layouts as the library does and resolves
 * it into p: the status cublasLtMatmul (and the heuristic) return. */
static cublasStatus_t emlt_check(const emlt_desc *d, const emlt_layout *A, const emlt_layout *B,
                                 const emlt_layout *C, const emlt_layout *D, emlt_prob *p)
{
    if (!d || !A || !B || !C || !D) return CUBLAS_STATUS_INVALID_VALUE;
    memset(p, 0, sizeof *p);
    if (d->compute != CUBLAS_COMPUTE_32F && d->compute != CUBLAS_COMPUTE_32F_PEDANTIC)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->scale != CUDA_R_32F || d->pmode != CUBLASLT_POINTER_MODE_HOST) return CUBLAS_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < 2; i++) {
        int32_t t = i ? d->transb : d->transa;
        if (t != CUBLAS_OP_N && t != CUBLAS_OP_T && t != CUBLAS_OP_C) return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (d->transc != CUBLAS_OP_N || d->fill != CUBLAS_FILL_MODE_FULL) return CUBLAS_STATUS_NOT_SUPPORTED;
    /* fp8-only attributes: "set for an unsupported ... combination" is INVALID_VALUE */
    if (d->a_scale || d->b_scale || d->c_scale || d->d_scale || d->amax_d || d->aux_scale || d->aux_amax ||
        d->d_out_scale || d->a_smode || d->b_smode || d->c_smode || d->d_smode || d->aux_smode || d->d_out_smode)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (d->emu_desc) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!emlt_layout_plain(A) || !emlt_layout_plain(B) || !emlt_layout_plain(C) || !emlt_layout_plain(D))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    p->at = A->type, p->bt = B->type, p->ct = C->type, p->dt = D->type;
    if (p->at != p->bt || p->ct != p->dt || !emlt_types_ok(p->at, p->dt)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!emlt_ld_ok(A) || !emlt_ld_ok(B) || !emlt_ld_ok(C) || !emlt_ld_ok(D)) return CUBLAS_STATUS_INVALID_VALUE;
    p->ta = d->transa != CUBLAS_OP_N;
    p->tb = d->transb != CUBLAS_OP_N;
    p->m = (int64_t)D->rows, p->n = (int64_t)D->cols;
    int64_t am = (int64_t)(p->ta ? A->cols : A->rows), ak = (int64_t)(p->ta ? A->rows : A->cols);
    int64_t bk = (int64_t)(p->tb ? B->cols : B->rows), bn = (int64_t)(p->tb ? B->rows : B->cols);
    if (am != p->m || bn != p->n || ak != bk) return CUBLAS_STATUS_INVALID_VALUE;
    if (C->rows != D->rows || C->cols != D->cols) return CUBLAS_STATUS_INVALID_VALUE;
    p->k = ak;
    if (A->batch < 1 || B->batch != A->batch || C->batch != A->batch || D->batch != A->batch)
        return CUBLAS_STATUS_INVALID_VALUE;
    p->batch = A->batch;
    p->epi = d->epilogue;
    switch (p->epi) {
    case CUBLASLT_EPILOGUE_DEFAULT: break;
    case CUBLASLT_EPILOGUE_BIAS: p->bias_in = true; break;
    case CUBLASLT_EPILOGUE_GELU: p->gelu = true; break;
    case CUBLASLT_EPILOGUE_GELU_BIAS: p->gelu = p->bias_in = true; break;
    case CUBLASLT_EPILOGUE_GELU_AUX: p->gelu = p->aux_out = true; break;
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: p->gelu = p->aux_out = p->bias_in = true; break;
    case CUBLASLT_EPILOGUE_DGELU: p->aux_in = true; break;
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: p->aux_in = p->bias_out = true; break;
    case CUBLASLT_EPILOGUE_BGRADA:
    case CUBLASLT_EPILOGUE_BGRADB: p->bias_out = true; break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;   /* the ReLU family: not emulated */
    }
    if (p->batch > 1 && p->epi != CUBLASLT_EPILOGUE_DEFAULT && p->epi != CUBLASLT_EPILOGUE_BIAS &&
        p->epi != CUBLASLT_EPILOGUE_GELU_AUX && p->epi != CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
        return CUBLAS_STATUS_NOT_SUPPORTED;   /* gemm.c batches only these (the aux EPILOGUE_AUX_BATCH_STRIDE apart) */
    p->bias_n = p->epi == CUBLASLT_EPILOGUE_BGRADB ? p->n : p->m;
    if (p->bias_in) {
        /* the bias has D's type by default; an A-typed (16-bit) bias with an fp32 D is the other accepted case */
        p->bias_t = d->bias_type == -1 ? p->dt : (uint32_t)d->bias_type;
        if (p->bias_t != p->dt && !(p->dt == CUDA_R_32F && p->bias_t == p->at)) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (p->bias_out) {   /* the bias gradient has D's type */
        p->bias_t = p->dt;
        if (d->bias_type != -1 && (uint32_t)d->bias_type != p->dt) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (p->aux_in || p->aux_out) {
        p->aux_t = d->aux_type == -1 ? p->dt : (uint32_t)d->aux_type;
        if (p->aux_t != p->dt) return CUBLAS_STATUS_INVALID_VALUE;
        if (d->aux_ld < p->m || d->aux_ld % 8) return CUBLAS_STATUS_INVALID_VALUE;
    } else if (d->aux_type != -1) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* The largest power of two dividing x, up to cap (cap when x is 0). */
static uint32_t emlt_pow2_div(uint64_t x, uint32_t cap)
{
    uint32_t a = 1;
    while (a < cap && x % ((uint64_t)a * 2) == 0) a *= 2;
    return a;
}

/* The alignment (bytes) the emulated algorithm assumes for a matrix: what
 * the preference promises, capped at 16 (the widest vector access) and at
 * what the leading dimension keeps from column to column (and a batch's
 * stride from matrix to matrix); 0 when that is
 * less than one element (no algorithm then). */
static uint32_t emlt_algo_align(uint32_t promised, const emlt_layout *l)
{
    size_t es = emlt_esize(l->type);
    uint32_t a = emlt_pow2_div(promised, 16);
    if (l->cols > 1) {
        uint32_t la = emlt_pow2_div((uint64_t)l->ld * es, 16);
        if (la < a) a = la;
    }
    if (l->batch > 1) {   /* and from matrix to matrix of a batch */
        uint32_t lb = emlt_pow2_div((uint64_t)(l->batch_stride < 0 ? -l->batch_stride : l->batch_stride) * es, 16);
        if (lb < a) a = lb;
    }
    return a >= es ? a : 0;
}

/* Whether a pointer the epilogue uses is aligned as its vector accesses need. */
static bool emlt_epi_aligned(const void *q)
{
    return (uintptr_t)q % EMLT_EPI_ALIGN == 0;
}

/* ---- the heuristic ------------------------------------------------------------------------ */

/* Chooses the one emulated algorithm for the problem under the preference:
 * workspace within the preference's maximum, alignments within its promises. */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount)
{
    if (!lightHandle || lightHandle->magic != EMLT_MAGIC_HANDLE) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount) return CUBLAS_STATUS_INVALID_VALUE;
    *returnAlgoCount = 0;
    const emlt_pref *pf = emlt_pref_of(preference);
    if (!pf) return CUBLAS_STATUS_INVALID_VALUE;
    const emlt_desc *d = emlt_desc_of(operationDesc);
    const emlt_layout *L[4] = { emlt_layout_of(Adesc), emlt_layout_of(Bdesc), emlt_layout_of(Cdesc),
                                emlt_layout_of(Ddesc) };
    emlt_prob p;
    cublasStatus_t st = emlt_check(d, L[0], L[1], L[2], L[3], &p);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    emlt_algo a = { .magic = EMLT_MAGIC_ALGO, .types = emlt_types_key(&p), .epilogue = p.epi };
    for (int i = 0; i < 4; i++) {
        a.align[i] = emlt_algo_align(pf->align[i], L[i]);
        if (!a.align[i]) return CUBLAS_STATUS_NOT_SUPPORTED;   /* no algorithm for so little alignment */
    }
    /* the epilogue pointers, when already set, count for the choice (the header says so) */
    if ((p.bias_in || p.bias_out) && d->bias && !emlt_epi_aligned(d->bias)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if ((p.aux_in || p.aux_out) && d->aux && !emlt_epi_aligned(d->aux)) return CUBLAS_STATUS_NOT_SUPPORTED;
    a.ws = pf->max_ws < EMLT_WS_WANT ? pf->max_ws / 256 * 256 : EMLT_WS_WANT;
    cublasLtMatmulHeuristicResult_t *r = &heuristicResultsArray[0];
    memset(r, 0, sizeof *r);
    memcpy(&r->algo, &a, sizeof a);
    r->workspaceSize = (size_t)a.ws;
    r->state = CUBLAS_STATUS_SUCCESS;
    r->wavesCount = 1.0f;
    *returnAlgoCount = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the matmul --------------------------------------------------------------------------- */

/* The bytes a column-major rows x cols matrix with leading dimension ld spans. */
static size_t emlt_span(int64_t rows, int64_t cols, int64_t ld, uint32_t t)
{
    if (rows == 0 || cols == 0) return 0;
    return (size_t)(ld * (cols - 1) + rows) * emlt_esize(t);
}

/* Ends the process unless [q, q + bytes) is device memory (what reading or
 * writing it would do on a GPU). */
static void emlt_range(const void *q, size_t bytes, const char *what)
{
    if (bytes && !cuemu_device_range(q, bytes))
        cuemu_fault("cublasLtMatmul", "%s [%p, +%zu bytes) is not device memory", what, q, bytes);
}

/* GELU, tanh form, in fp32. */
static float emlt_gelu(float x)
{
    const float s = 0.7978845608028654f, c = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(s * (x + c * x * x * x)));
}

/* The exact derivative of the tanh-form GELU, in fp32. */
static float emlt_dgelu(float x)
{
    const float s = 0.7978845608028654f, c = 0.044715f;
    float t = tanhf(s * (x + c * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * s * (1.0f + 3.0f * c * x * x);
}

/* op(X) as a dense fp32 rows x cols array (row index fastest): X is stored
 * column-major with leading dimension ld, transposed when t. */
static float *emlt_op_f32(const void *x, uint32_t type, int64_t ld, bool t, int64_t rows, int64_t cols)
{
    float *o = malloc((size_t)(rows * cols > 0 ? rows * cols : 1) * sizeof *o);
    if (!o) return NULL;
    for (int64_t j = 0; j < cols; j++)
        for (int64_t i = 0; i < rows; i++) o[i + j * rows] = emlt_load(x, type, t ? j + i * ld : i + j * ld);
    return o;
}

/* Runs a checked problem: the GEMM in fp32, then the epilogue, then the
 * stores rounded to their types.  False when scratch memory ran out. */
static bool emlt_run(const emlt_prob *p, const emlt_desc *d, float alpha, const void *A, const emlt_layout *LA,
                     const void *B, const emlt_layout *LB, float beta, const void *C, const emlt_layout *LC, void *D,
                     const emlt_layout *LD, const void *bias, void *aux)
{
    int64_t m = p->m, n = p->n, k = p->k;
    float *a = emlt_op_f32(A, p->at, LA->ld, p->ta, m, k);      /* (m, k): a[i + l*m] */
    float *bt = emlt_op_f32(B, p->bt, LB->ld, !p->tb, n, k);    /* op(B)^T (n, k): bt[j + l*n] */
    float *v = malloc((size_t)(m * n > 0 ? m * n : 1) * sizeof *v);
    float *g = p->bias_out ? calloc((size_t)(p->bias_n > 0 ? p->bias_n : 1), sizeof *g) : NULL;
    bool ok = a && bt && v && (!p->bias_out || g);
    for (int64_t j = 0; ok && j < n; j++)
        for (int64_t i = 0; i < m; i++) {
            float acc = 0.0f;
            for (int64_t l = 0; l < k; l++) acc += a[i + l * m] * bt[j + l * n];
            float x = alpha * acc;
            if (beta != 0.0f) x += beta * emlt_load(C, p->ct, i + j * LC->ld);
            if (p->bias_in) x += emlt_load(bias, p->bias_t, i);
            if (p->aux_out) emlt_store(aux, p->aux_t, i + j * d->aux_ld, x);
            if (p->gelu) x = emlt_gelu(x);
            if (p->aux_in) x *= emlt_dgelu(emlt_load(aux, p->aux_t, i + j * d->aux_ld));
            if (p->epi == CUBLASLT_EPILOGUE_DGELU_BGRAD) g[i] += x;
            v[i + j * m] = x;
        }
    if (ok && p->epi == CUBLASLT_EPILOGUE_BGRADA)
        for (int64_t i = 0; i < m; i++)
            for (int64_t l = 0; l < k; l++) g[i] += a[i + l * m];
    if (ok && p->epi == CUBLASLT_EPILOGUE_BGRADB)
        for (int64_t j = 0; j < n; j++)
            for (int64_t l = 0; l < k; l++) g[j] += bt[j + l * n];
    for (int64_t j = 0; ok && j < n; j++)
        for (int64_t i = 0; i < m; i++) emlt_store(D, p->dt, i + j * LD->ld, v[i + j * m]);
    for (int64_t i = 0; ok && p->bias_out && i < p->bias_n; i++) emlt_store((void *)d->bias, p->bias_t, i, g[i]);
    free(a);
    free(bt);
    free(v);
    free(g);
    return ok;
}

/* D = epilogue(alpha * op(A) * op(B) + beta * C), run now (the stream is
 * synchronous), after the checks the library makes at this call. */
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream)
{
    if (!lightHandle || lightHandle->magic != EMLT_MAGIC_HANDLE) return CUBLAS_STATUS_NOT_INITIALIZED;
    const emlt_desc *d = emlt_desc_of(computeDesc);
    const emlt_layout *L[4] = { emlt_layout_of(Adesc), emlt_layout_of(Bdesc), emlt_layout_of(Cdesc),
                                emlt_layout_of(Ddesc) };
    emlt_prob p;
    cublasStatus_t st = emlt_check(d, L[0], L[1], L[2], L[3], &p);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    /* in place (C == D): one layout for both */
    if (C == D && (L[2]->ld != L[3]->ld || L[2]->type != L[3]->type)) return CUBLAS_STATUS_INVALID_VALUE;
    emlt_algo a;
    if (algo) {
        memcpy(&a, algo, sizeof a);
        if (a.magic != EMLT_MAGIC_ALGO) return CUBLAS_STATUS_INVALID_VALUE;
        if (a.types != emlt_types_key(&p) || a.epilogue != p.epi) return CUBLAS_STATUS_INVALID_VALUE;
    } else {   /* NULL: the implicit heuristic with default preferences (no workspace, 256-byte alignment) */
        a = (emlt_algo){ .magic = EMLT_MAGIC_ALGO, .types = emlt_types_key(&p), .epilogue = p.epi };
        for (int i = 0; i < 4; i++)
            if (!(a.align[i] = emlt_algo_align(256, L[i]))) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (workspaceSizeInBytes < a.ws || (a.ws && !workspace)) return CUBLAS_STATUS_INVALID_VALUE;
    float al = *(const float *)alpha, be = *(const float *)beta;
    const void *ptr[4] = { A, B, C, D };
    for (int i = 0; i < 4; i++) {
        if (i == 2 && be == 0.0f) continue;   /* beta 0: C is not read */
        if (!ptr[i] || (uintptr_t)ptr[i] % a.align[i]) return CUBLAS_STATUS_INVALID_VALUE;
    }
    if ((p.bias_in || p.bias_out) && (!d->bias || !emlt_epi_aligned(d->bias))) return CUBLAS_STATUS_INVALID_VALUE;
    if ((p.aux_in || p.aux_out) && (!d->aux || !emlt_epi_aligned(d->aux))) return CUBLAS_STATUS_INVALID_VALUE;
    /* matrix by matrix of the batch (one, unbatched): every byte the kernel
     * would touch, in device memory, and what it reads and writes, for the
     * race detector (cuemu.h) */
    const void *A0 = A, *B0 = B, *C0 = C, *bias0 = d->bias;
    void *D0 = D;
    char *aux0 = d->aux;
    for (int64_t bi = 0; bi < p.batch; bi++) {
        A = (const char *)A0 + bi * L[0]->batch_stride * (int64_t)emlt_esize(p.at);
        B = (const char *)B0 + bi * L[1]->batch_stride * (int64_t)emlt_esize(p.bt);
        C = (const char *)C0 + bi * L[2]->batch_stride * (int64_t)emlt_esize(p.ct);
        D = (char *)D0 + bi * L[3]->batch_stride * (int64_t)emlt_esize(p.dt);
        const void *bias = p.bias_in ? (const char *)bias0 + bi * d->bias_bstride * (int64_t)emlt_esize(p.bias_t)
                                     : bias0;
        void *aux = p.aux_in || p.aux_out ? aux0 + bi * d->aux_bstride * (int64_t)emlt_esize(p.aux_t) : aux0;
        emlt_range(A, emlt_span((int64_t)L[0]->rows, (int64_t)L[0]->cols, L[0]->ld, p.at), "A");
        emlt_range(B, emlt_span((int64_t)L[1]->rows, (int64_t)L[1]->cols, L[1]->ld, p.bt), "B");
        if (be != 0.0f) emlt_range(C, emlt_span(p.m, p.n, L[2]->ld, p.ct), "C");
        emlt_range(D, emlt_span(p.m, p.n, L[3]->ld, p.dt), "D");
        if (p.bias_in || p.bias_out) emlt_range(bias, (size_t)p.bias_n * emlt_esize(p.bias_t), "the bias vector");
        if (p.aux_in || p.aux_out) emlt_range(aux, emlt_span(p.m, p.n, d->aux_ld, p.aux_t), "the aux matrix");
        cuemu_access("cublasLtMatmul", "A", stream, A, emlt_span((int64_t)L[0]->rows, (int64_t)L[0]->cols, L[0]->ld, p.at), false);
        cuemu_access("cublasLtMatmul", "B", stream, B, emlt_span((int64_t)L[1]->rows, (int64_t)L[1]->cols, L[1]->ld, p.bt), false);
        if (be != 0.0f) cuemu_access("cublasLtMatmul", "C", stream, C, emlt_span(p.m, p.n, L[2]->ld, p.ct), false);
        if (p.bias_in) cuemu_access("cublasLtMatmul", "the bias vector", stream, bias, (size_t)p.bias_n * emlt_esize(p.bias_t), false);
        if (p.aux_in) cuemu_access("cublasLtMatmul", "the aux matrix", stream, aux, emlt_span(p.m, p.n, d->aux_ld, p.aux_t), false);
        if (a.ws) cuemu_access("cublasLtMatmul", "the workspace", stream, workspace, (size_t)a.ws, true);
        cuemu_access("cublasLtMatmul", "D", stream, D, emlt_span(p.m, p.n, L[3]->ld, p.dt), true);
        if (p.bias_out) cuemu_access("cublasLtMatmul", "the bias gradient", stream, bias, (size_t)p.bias_n * emlt_esize(p.bias_t), true);
        if (p.aux_out) cuemu_access("cublasLtMatmul", "the aux matrix", stream, aux, emlt_span(p.m, p.n, d->aux_ld, p.aux_t), true);
        if (a.ws) {   /* the algorithm's scratch: scribbled, as a real kernel's partial sums would */
            emlt_range(workspace, (size_t)a.ws, "the workspace");
            memset(workspace, 0xa5, (size_t)a.ws);
        }
        if (!emlt_run(&p, d, al, A, L[0], B, L[1], be, C, L[2], D, L[3], bias, aux)) return CUBLAS_STATUS_ALLOC_FAILED;
    }
    return CUBLAS_STATUS_SUCCESS;
}
