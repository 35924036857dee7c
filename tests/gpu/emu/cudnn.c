/* cudnn.c — the emulated cuDNN, prefix emdnn_: the backend (graph) API as an
 * interpreter of operation graphs on the CPU, compiled against the real
 * cudnn.h and linked in place of libcudnn (see cuemu.h for the execution
 * model: device memory is host memory, work runs at issue time).
 *
 * Descriptors keep their attributes with the documented attribute types and
 * element counts (anything else: CUDNN_STATUS_BAD_PARAM).  Finalize checks
 * what the documentation asks of each descriptor (required attributes,
 * shapes, the operation graph connected by tensor uids, acyclic, each tensor
 * produced at most once).  What the real library accepts but this emulation
 * does not compute (other pointwise modes, other compute types, vectorized
 * tensors, ...) fails finalize with CUDNN_STATUS_NOT_SUPPORTED, never a silent
 * wrong result.  The heuristics return one engine configuration (global
 * index 0, deterministic, tensor cores; CUEMU_DNN_NONDETERMINISTIC=1 adds the
 * NONDETERMINISTIC note, to test a caller's policy); its plan asks for
 * EMDNN_WS bytes of workspace, which execution fills with NaN so that a
 * workspace overlapping the caller's tensors shows.
 *
 * Execution evaluates the graph's operations in dependency order: every
 * tensor is an fp32 image indexed by element offset (its extent from dims and
 * strides); a graph input is read from the variant pack's pointer at each of
 * its elements' offsets, an output written back only at those offsets.
 * Arithmetic is fp32; every result is rounded to its tensor's data type
 * (round to nearest even, kernels/cpu/cast.c).  Semantics implemented:
 *   pointwise  y = f(x[, b[, t]]), x, b, t broadcast where their dim is 1;
 *              BINARY_SELECT y = t ? x : b; GEN_INDEX y = the index along
 *              POINTWISE_AXIS of x's shape; CMP_* y = 1 or 0.
 *   matmul     C(..., M, N) = A(..., M, K) · B(..., K, N); a batch dim of A or
 *              B is C's, 1 (broadcast) or a divisor of C's (grouped: C's
 *              index i reads i / (C's dim / its dim), the GQA head mapping).
 *   reduction  y = op over the x elements that map to each y element: a y dim
 *              of 1 reduces that dim, a divisor of x's reduces groups of
 *              consecutive indices (the dual of the grouped broadcast).
 *   reshape    y is x's memory seen with y's dims and strides (how
 *              cudnn-frontend transposes): the two must cover the same element
 *              offsets.
 */
#include <cudnn.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../kernels/cpu/kernels.h"
#include "cuemu.h"

enum {
    EMDNN_MAGIC = 0x444e4e45,   /* "ENND": a live descriptor                   */
    EMDNN_WS = 64 << 10,        /* the engine's workspace bytes                */
    EMDNN_MAXOPS = 256,         /* operations of one graph                     */
};

/* A handle: the stream the work is issued on (it runs at issue time). */
struct cudnnContext {
    uint32_t magic;
    cudaStream_t stream;
};

/* One backend descriptor of any type (the fields its type uses). */
typedef struct emdnn_desc emdnn_desc;
struct emdnn_desc {
    uint32_t magic;
    cudnnBackendDescriptorType_t type;
    bool final;
    const char *unsupported;        /* a documented attribute not emulated: finalize fails */
    /* tensor */
    int64_t uid, align, dim[CUDNN_DIM_MAX], stride[CUDNN_DIM_MAX];
    cudnnDataType_t dt;
    int nd, nstride;
    bool has_uid, has_dt, has_align, virt, byval;
    /* pointwise (mode), reduction (operator), heuristics (mode); their compute types */
    int64_t mode, axis;
    cudnnDataType_t prec;
    bool has_mode, has_prec, has_axis;
    /* operations: x, b, t, y (matmul a, b, c as x, b, y) and their mode descriptor */
    emdnn_desc *x, *b, *t, *y, *sub;
    /* operation graph: the operations, the distinct tensors by uid, the run order */
    cudnnHandle_t handle;
    emdnn_desc **ops, **tens;
    int nops, ntens, *order, *producer;
    /* heuristics, engine, engine config, plan: the graph and the engine */
    emdnn_desc *graph;
    int64_t gidx, ws;
    bool has_gidx, has_engine;
    /* variant pack */
    int64_t *uids;
    void **ptrs, *wsp;
    int nuids, nptrs;
};

/* ---- descriptors --------------------------------------------------------- */

/* d as a live descriptor, or NULL. */
static emdnn_desc *emdnn_live(cudnnBackendDescriptor_t d)
{
    emdnn_desc *e = d;
    return e && e->magic == EMDNN_MAGIC ? e : NULL;
}

/* Frees what a descriptor owns (not the descriptors it refers to). */
static void emdnn_clear(emdnn_desc *d)
{
    free(d->ops), free(d->tens), free(d->order), free(d->producer), free(d->uids), free(d->ptrs);
    d->ops = d->tens = NULL, d->order = d->producer = NULL, d->uids = NULL, d->ptrs = NULL;
}

/* A new, empty descriptor of one of the types this emulation interprets. */
cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *out)
{
    if (!out) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    switch (type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR: case CUDNN_BACKEND_REDUCTION_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
        break;
    default:
        return CUDNN_STATUS_NOT_SUPPORTED;      /* a descriptor type this emulation has no semantics for */
    }
    emdnn_desc *d = calloc(1, sizeof *d);
    if (!d) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    d->magic = EMDNN_MAGIC, d->type = type;
    *out = d;
    return CUDNN_STATUS_SUCCESS;
}

/* Frees a descriptor (not the ones it refers to, as in cuDNN). */
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t desc)
{
    emdnn_desc *d = emdnn_live(desc);
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    emdnn_clear(d);
    d->magic = 0;
    free(d);
    return CUDNN_STATUS_SUCCESS;
}

/* Re-initializing a descriptor in place: not emulated. */
cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t desc)
{
    (void)desc;
    return CUDNN_STATUS_NOT_SUPPORTED;          /* deprecated in cuDNN 9; attention.c does not use it */
}

/* ---- setting attributes --------------------------------------------------- */

/* The attribute's value as descriptor i of v, which must be live, of type want. */
static emdnn_desc *emdnn_ref(const void *v, int64_t i, cudnnBackendDescriptorType_t want)
{
    emdnn_desc *e = emdnn_live(((cudnnBackendDescriptor_t const *)v)[i]);
    return e && e->type == want ? e : NULL;
}

/* Whether (type, n) is what the attribute takes: type t, between lo and hi elements. */
#define EMDNN_WANT(T, LO, HI) \
    do { if (type != (T) || n < (LO) || n > (HI)) return CUDNN_STATUS_BAD_PARAM; } while (0)

/* One tensor-descriptor attribute. */
static cudnnStatus_t emdnn_set_tensor(emdnn_desc *d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t type,
                                      int64_t n, const void *v)
{
    switch (a) {
    case CUDNN_ATTR_TENSOR_UNIQUE_ID:
        EMDNN_WANT(CUDNN_TYPE_INT64, 1, 1);
        d->uid = *(const int64_t *)v, d->has_uid = true;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_TENSOR_DATA_TYPE:
        EMDNN_WANT(CUDNN_TYPE_DATA_TYPE, 1, 1);
        d->dt = *(const cudnnDataType_t *)v, d->has_dt = true;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_TENSOR_DIMENSIONS:
        EMDNN_WANT(CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX);
        memcpy(d->dim, v, (size_t)n * sizeof(int64_t)), d->nd = (int)n;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_TENSOR_STRIDES:
        EMDNN_WANT(CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX);
        memcpy(d->stride, v, (size_t)n * sizeof(int64_t)), d->nstride = (int)n;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT:
        EMDNN_WANT(CUDNN_TYPE_INT64, 1, 1);
        d->align = *(const int64_t *)v, d->has_align = true;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_TENSOR_IS_VIRTUAL:
        EMDNN_WANT(CUDNN_TYPE_BOOLEAN, 1, 1);
        d->virt = *(const bool *)v;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_TENSOR_IS_BY_VALUE:
        EMDNN_WANT(CUDNN_TYPE_BOOLEAN, 1, 1);
        d->byval = *(const bool *)v;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_TENSOR_VECTOR_COUNT: case CUDNN_ATTR_TENSOR_VECTORIZED_DIMENSION:
    case CUDNN_ATTR_TENSOR_REORDERING_MODE: case CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC:
        d->unsupported = "a vectorized, reordered or ragged tensor";
        return CUDNN_STATUS_SUCCESS;
    default:
        return CUDNN_STATUS_BAD_PARAM;
    }
}

/* One attribute of a pointwise, matmul or reduction descriptor. */
static cudnnStatus_t emdnn_set_mode(emdnn_desc *d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t type,
                                    int64_t n, const void *v)
{
    bool pw = d->type == CUDNN_BACKEND_POINTWISE_DESCRIPTOR, mm = d->type == CUDNN_BACKEND_MATMUL_DESCRIPTOR;
    bool rd = d->type == CUDNN_BACKEND_REDUCTION_DESCRIPTOR;
    if ((pw && a == CUDNN_ATTR_POINTWISE_MODE) || (rd && a == CUDNN_ATTR_REDUCTION_OPERATOR)) {
        EMDNN_WANT(pw ? CUDNN_TYPE_POINTWISE_MODE : CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, 1);
        d->mode = pw ? (int64_t)*(const cudnnPointwiseMode_t *)v : (int64_t)*(const cudnnReduceTensorOp_t *)v;
        d->has_mode = true;
        return CUDNN_STATUS_SUCCESS;
    }
    if ((pw && a == CUDNN_ATTR_POINTWISE_MATH_PREC) || (mm && a == CUDNN_ATTR_MATMUL_COMP_TYPE) ||
        (rd && a == CUDNN_ATTR_REDUCTION_COMP_TYPE)) {
        EMDNN_WANT(CUDNN_TYPE_DATA_TYPE, 1, 1);
        d->prec = *(const cudnnDataType_t *)v, d->has_prec = true;
        return CUDNN_STATUS_SUCCESS;
    }
    if (pw && a == CUDNN_ATTR_POINTWISE_AXIS) {
        EMDNN_WANT(CUDNN_TYPE_INT64, 1, 1);
        d->axis = *(const int64_t *)v, d->has_axis = true;
        return CUDNN_STATUS_SUCCESS;
    }
    if ((pw && (a == CUDNN_ATTR_POINTWISE_NAN_PROPAGATION || a == CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP ||
                a == CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP || a == CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE ||
                a == CUDNN_ATTR_POINTWISE_ELU_ALPHA || a == CUDNN_ATTR_POINTWISE_SOFTPLUS_BETA ||
                a == CUDNN_ATTR_POINTWISE_SWISH_BETA)) ||
        (mm && a == CUDNN_ATTR_MATMUL_PADDING_VALUE) || (rd && a == CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC)) {
        d->unsupported = "an activation parameter, NaN propagation, matmul padding or reduction determinism";
        return CUDNN_STATUS_SUCCESS;
    }
    return CUDNN_STATUS_BAD_PARAM;
}

/* Stores tensor descriptor i of v in *slot (it must be a tensor descriptor). */
static cudnnStatus_t emdnn_set_tensor_ref(emdnn_desc **slot, cudnnBackendAttributeType_t type, int64_t n,
                                          const void *v)
{
    EMDNN_WANT(CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1);
    emdnn_desc *e = emdnn_ref(v, 0, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    if (!e) return CUDNN_STATUS_BAD_PARAM;
    *slot = e;
    return CUDNN_STATUS_SUCCESS;
}

/* Stores the mode descriptor of type want in d->sub. */
static cudnnStatus_t emdnn_set_sub(emdnn_desc *d, cudnnBackendDescriptorType_t want, cudnnBackendAttributeType_t type,
                                   int64_t n, const void *v)
{
    EMDNN_WANT(CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1);
    emdnn_desc *e = emdnn_ref(v, 0, want);
    if (!e) return CUDNN_STATUS_BAD_PARAM;
    d->sub = e;
    return CUDNN_STATUS_SUCCESS;
}

/* One attribute of an operation descriptor (pointwise, matmul, reduction, reshape). */
static cudnnStatus_t emdnn_set_op(emdnn_desc *d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t type,
                                  int64_t n, const void *v)
{
    switch (d->type) {
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
        switch (a) {
        case CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR:
            return emdnn_set_sub(d, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, type, n, v);
        case CUDNN_ATTR_OPERATION_POINTWISE_XDESC: return emdnn_set_tensor_ref(&d->x, type, n, v);
        case CUDNN_ATTR_OPERATION_POINTWISE_BDESC: return emdnn_set_tensor_ref(&d->b, type, n, v);
        case CUDNN_ATTR_OPERATION_POINTWISE_TDESC: return emdnn_set_tensor_ref(&d->t, type, n, v);
        case CUDNN_ATTR_OPERATION_POINTWISE_YDESC: return emdnn_set_tensor_ref(&d->y, type, n, v);
        case CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1: case CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2:
            if ((type != CUDNN_TYPE_FLOAT && type != CUDNN_TYPE_DOUBLE) || n != 1) return CUDNN_STATUS_BAD_PARAM;
            if ((type == CUDNN_TYPE_FLOAT ? *(const float *)v : *(const double *)v) != 1.0)
                d->unsupported = "pointwise alpha scaling";
            return CUDNN_STATUS_SUCCESS;
        case CUDNN_ATTR_OPERATION_POINTWISE_DXDESC: case CUDNN_ATTR_OPERATION_POINTWISE_DYDESC:
            d->unsupported = "a pointwise backward operation (DXDESC, DYDESC)";
            return CUDNN_STATUS_SUCCESS;
        default: return CUDNN_STATUS_BAD_PARAM;
        }
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
        switch (a) {
        case CUDNN_ATTR_OPERATION_MATMUL_ADESC: return emdnn_set_tensor_ref(&d->x, type, n, v);
        case CUDNN_ATTR_OPERATION_MATMUL_BDESC: return emdnn_set_tensor_ref(&d->b, type, n, v);
        case CUDNN_ATTR_OPERATION_MATMUL_CDESC: return emdnn_set_tensor_ref(&d->y, type, n, v);
        case CUDNN_ATTR_OPERATION_MATMUL_DESC: return emdnn_set_sub(d, CUDNN_BACKEND_MATMUL_DESCRIPTOR, type, n, v);
        case CUDNN_ATTR_OPERATION_MATMUL_IRREGULARLY_STRIDED_BATCH_COUNT:
        case CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC: case CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC:
        case CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC:
            d->unsupported = "an irregularly strided or overridden matmul";
            return CUDNN_STATUS_SUCCESS;
        default: return CUDNN_STATUS_BAD_PARAM;
        }
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
        switch (a) {
        case CUDNN_ATTR_OPERATION_REDUCTION_XDESC: return emdnn_set_tensor_ref(&d->x, type, n, v);
        case CUDNN_ATTR_OPERATION_REDUCTION_YDESC: return emdnn_set_tensor_ref(&d->y, type, n, v);
        case CUDNN_ATTR_OPERATION_REDUCTION_DESC:
            return emdnn_set_sub(d, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, type, n, v);
        default: return CUDNN_STATUS_BAD_PARAM;
        }
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
        switch (a) {
        case CUDNN_ATTR_OPERATION_RESHAPE_XDESC: return emdnn_set_tensor_ref(&d->x, type, n, v);
        case CUDNN_ATTR_OPERATION_RESHAPE_YDESC: return emdnn_set_tensor_ref(&d->y, type, n, v);
        default: return CUDNN_STATUS_BAD_PARAM;
        }
    default:
        return CUDNN_STATUS_BAD_PARAM;
    }
}

/* Whether d is one of the operation descriptors this emulation evaluates. */
static bool emdnn_is_op(const emdnn_desc *d)
{
    return d->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR ||
           d->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR ||
           d->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR ||
           d->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR;
}

/* One attribute of a graph, heuristics, engine, engine config, plan or variant pack. */
static cudnnStatus_t emdnn_set_exec(emdnn_desc *d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t type,
                                    int64_t n, const void *v)
{
    switch (a) {
    case CUDNN_ATTR_OPERATIONGRAPH_HANDLE: case CUDNN_ATTR_EXECUTION_PLAN_HANDLE:
        if ((a == CUDNN_ATTR_OPERATIONGRAPH_HANDLE) != (d->type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR) ||
            (a == CUDNN_ATTR_EXECUTION_PLAN_HANDLE) != (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR))
            return CUDNN_STATUS_BAD_PARAM;
        EMDNN_WANT(CUDNN_TYPE_HANDLE, 1, 1);
        d->handle = *(const cudnnHandle_t *)v;
        if (!d->handle || d->handle->magic != EMDNN_MAGIC) return CUDNN_STATUS_BAD_PARAM;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_OPERATIONGRAPH_OPS:
        if (d->type != CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        EMDNN_WANT(CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, EMDNN_MAXOPS);
        for (int64_t i = 0; i < n; i++) {
            emdnn_desc *e = emdnn_live(((cudnnBackendDescriptor_t const *)v)[i]);
            if (!e || !emdnn_is_op(e)) return CUDNN_STATUS_BAD_PARAM;
        }
        free(d->ops);
        d->ops = malloc((size_t)n * sizeof *d->ops);
        memcpy(d->ops, v, (size_t)n * sizeof *d->ops), d->nops = (int)n;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH: case CUDNN_ATTR_ENGINE_OPERATION_GRAPH: {
        if ((a == CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH) != (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) ||
            (a == CUDNN_ATTR_ENGINE_OPERATION_GRAPH) != (d->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR))
            return CUDNN_STATUS_BAD_PARAM;
        EMDNN_WANT(CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1);
        d->graph = emdnn_ref(v, 0, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
        return d->graph ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
    }
    case CUDNN_ATTR_ENGINEHEUR_MODE:
        if (d->type != CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        EMDNN_WANT(CUDNN_TYPE_HEUR_MODE, 1, 1);
        d->mode = *(const cudnnBackendHeurMode_t *)v, d->has_mode = true;
        return d->mode == CUDNN_HEUR_MODE_INSTANT || d->mode == CUDNN_HEUR_MODE_B || d->mode == CUDNN_HEUR_MODE_FALLBACK ||
               d->mode == CUDNN_HEUR_MODE_A ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
    case CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET: case CUDNN_ATTR_ENGINE_SM_COUNT_TARGET:
        if (d->type != CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && d->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR)
            return CUDNN_STATUS_BAD_PARAM;
        EMDNN_WANT(CUDNN_TYPE_INT32, 1, 1);
        return CUDNN_STATUS_SUCCESS;            /* a target SM count does not change the results */
    case CUDNN_ATTR_ENGINE_GLOBAL_INDEX:
        if (d->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        EMDNN_WANT(CUDNN_TYPE_INT64, 1, 1);
        d->gidx = *(const int64_t *)v, d->has_gidx = true;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_ENGINECFG_ENGINE: {
        if (d->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        EMDNN_WANT(CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1);
        emdnn_desc *e = emdnn_ref(v, 0, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
        if (!e || !e->final) return CUDNN_STATUS_BAD_PARAM;
        d->graph = e->graph, d->gidx = e->gidx, d->has_engine = true;
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_ATTR_ENGINECFG_KNOB_CHOICES:
        if (d->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        d->unsupported = "knob choices";
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG: {
        if (d->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        EMDNN_WANT(CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1);
        emdnn_desc *e = emdnn_ref(v, 0, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        if (!e || !e->final) return CUDNN_STATUS_BAD_PARAM;
        d->graph = e->graph, d->gidx = e->gidx, d->has_engine = true;
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_ATTR_EXECUTION_PLAN_RUN_ONLY_INTERMEDIATE_UIDS:
        if (d->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        d->unsupported = "run-only intermediates";
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS:
        if (d->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        EMDNN_WANT(CUDNN_TYPE_INT64, 0, INT32_MAX);
        free(d->uids);
        d->uids = malloc((size_t)(n ? n : 1) * sizeof *d->uids);
        memcpy(d->uids, v, (size_t)n * sizeof *d->uids), d->nuids = (int)n;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS:
        if (d->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        EMDNN_WANT(CUDNN_TYPE_VOID_PTR, 0, INT32_MAX);
        free(d->ptrs);
        d->ptrs = malloc((size_t)(n ? n : 1) * sizeof *d->ptrs);
        memcpy(d->ptrs, v, (size_t)n * sizeof *d->ptrs), d->nptrs = (int)n;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_VARIANT_PACK_WORKSPACE:
        if (d->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        EMDNN_WANT(CUDNN_TYPE_VOID_PTR, 1, 1);
        d->wsp = *(void *const *)v;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_VARIANT_PACK_INTERMEDIATES: case CUDNN_ATTR_VARIANT_PACK_OVERRIDE_UNIQUE_IDS:
    case CUDNN_ATTR_VARIANT_PACK_OVERRIDE_SHAPES: case CUDNN_ATTR_VARIANT_PACK_OVERRIDE_STRIDES:
        if (d->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        d->unsupported = "intermediates or dynamic-shape overrides";
        return CUDNN_STATUS_SUCCESS;
    default:
        return CUDNN_STATUS_BAD_PARAM;
    }
}

/* Sets one attribute, checked against the documented type and element count. */
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t a,
                                       cudnnBackendAttributeType_t type, int64_t n, const void *v)
{
    emdnn_desc *d = emdnn_live(desc);
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    if (d->final) return CUDNN_STATUS_NOT_INITIALIZED;     /* the documented status for a finalized descriptor */
    if (n < 0 || (n > 0 && !v)) return CUDNN_STATUS_BAD_PARAM;
    switch (d->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: return emdnn_set_tensor(d, a, type, n, v);
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR: case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR:
        return emdnn_set_mode(d, a, type, n, v);
    default:
        return emdnn_is_op(d) ? emdnn_set_op(d, a, type, n, v) : emdnn_set_exec(d, a, type, n, v);
    }
}

/* ---- finalizing ------------------------------------------------------------ */

/* The number of elements of tensor t. */
static int64_t emdnn_count(const emdnn_desc *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->nd; i++) n *= t->dim[i];
    return n;
}

/* One more than t's largest element offset: the elements its image spans. */
static int64_t emdnn_extent(const emdnn_desc *t)
{
    int64_t e = 1;
    for (int i = 0; i < t->nd; i++) e += (t->dim[i] - 1) * t->stride[i];
    return e;
}

/* The bytes of one element of dt (0: not a type this emulation stores). */
static int64_t emdnn_esize(cudnnDataType_t dt)
{
    switch (dt) {
    case CUDNN_DATA_FLOAT: case CUDNN_DATA_INT32: return 4;
    case CUDNN_DATA_HALF: case CUDNN_DATA_BFLOAT16: return 2;
    case CUDNN_DATA_BOOLEAN: return 1;
    default: return 0;
    }
}

/* A tensor: uid, type, dims, strides and alignment set and sane. */
static cudnnStatus_t emdnn_fin_tensor(emdnn_desc *d)
{
    if (!d->has_uid || !d->has_dt || !d->has_align || d->nd == 0 || d->nstride != d->nd) return CUDNN_STATUS_BAD_PARAM;
    if (d->align <= 0 || (d->align & (d->align - 1))) return CUDNN_STATUS_BAD_PARAM;
    if (d->virt && d->byval) return CUDNN_STATUS_BAD_PARAM;
    for (int i = 0; i < d->nd; i++)
        if (d->dim[i] <= 0 || d->stride[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
    if (d->unsupported || !emdnn_esize(d->dt)) return CUDNN_STATUS_NOT_SUPPORTED;
    return CUDNN_STATUS_SUCCESS;
}

/* The operands a pointwise mode takes (1, 2 or 3), 0 for a mode not emulated. */
static int emdnn_arity(int64_t mode)
{
    switch (mode) {
    case CUDNN_POINTWISE_EXP: case CUDNN_POINTWISE_LOG: case CUDNN_POINTWISE_IDENTITY: case CUDNN_POINTWISE_NEG:
    case CUDNN_POINTWISE_ABS: case CUDNN_POINTWISE_SQRT: case CUDNN_POINTWISE_RSQRT:
    case CUDNN_POINTWISE_RECIPROCAL: case CUDNN_POINTWISE_GEN_INDEX:
        return 1;
    case CUDNN_POINTWISE_ADD: case CUDNN_POINTWISE_SUB: case CUDNN_POINTWISE_MUL: case CUDNN_POINTWISE_DIV:
    case CUDNN_POINTWISE_MAX: case CUDNN_POINTWISE_MIN: case CUDNN_POINTWISE_CMP_EQ: case CUDNN_POINTWISE_CMP_NEQ:
    case CUDNN_POINTWISE_CMP_GT: case CUDNN_POINTWISE_CMP_GE: case CUDNN_POINTWISE_CMP_LT: case CUDNN_POINTWISE_CMP_LE:
        return 2;
    case CUDNN_POINTWISE_BINARY_SELECT:
        return 3;
    default:
        return 0;
    }
}

/* Whether mode is a comparison (its output is a predicate). */
static bool emdnn_is_cmp(int64_t mode)
{
    return mode == CUDNN_POINTWISE_CMP_EQ || mode == CUDNN_POINTWISE_CMP_NEQ || mode == CUDNN_POINTWISE_CMP_GT ||
           mode == CUDNN_POINTWISE_CMP_GE || mode == CUDNN_POINTWISE_CMP_LT || mode == CUDNN_POINTWISE_CMP_LE;
}

/* A pointwise, matmul or reduction descriptor: its mode and compute type. */
static cudnnStatus_t emdnn_fin_mode(emdnn_desc *d)
{
    if (d->type != CUDNN_BACKEND_MATMUL_DESCRIPTOR && !d->has_mode) return CUDNN_STATUS_BAD_PARAM;
    if (!d->has_prec) return CUDNN_STATUS_BAD_PARAM;
    if (d->unsupported) return CUDNN_STATUS_NOT_SUPPORTED;
    if (d->type == CUDNN_BACKEND_POINTWISE_DESCRIPTOR) {
        if (!emdnn_arity(d->mode)) return CUDNN_STATUS_NOT_SUPPORTED;
        if (d->mode == CUDNN_POINTWISE_GEN_INDEX && !d->has_axis) return CUDNN_STATUS_BAD_PARAM;
        /* fp32 arithmetic; integer for an index; boolean for a comparison */
        bool ok = d->prec == CUDNN_DATA_FLOAT || (d->prec == CUDNN_DATA_INT32 && d->mode == CUDNN_POINTWISE_GEN_INDEX) ||
                  ((d->prec == CUDNN_DATA_BOOLEAN || d->prec == CUDNN_DATA_INT32) && emdnn_is_cmp(d->mode));
        return ok ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
    }
    if (d->type == CUDNN_BACKEND_REDUCTION_DESCRIPTOR && d->mode > CUDNN_REDUCE_TENSOR_AVG)
        return CUDNN_STATUS_NOT_SUPPORTED;
    return d->prec == CUDNN_DATA_FLOAT ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
}

/* Whether tensor t is set and finalized. */
static bool emdnn_ready(const emdnn_desc *t) { return t && t->final; }

/* Whether x's dims broadcast to y's: each equal or 1. */
static bool emdnn_bcast(const emdnn_desc *x, const emdnn_desc *y)
{
    if (x->nd != y->nd) return false;
    for (int i = 0; i < x->nd; i++)
        if (x->dim[i] != y->dim[i] && x->dim[i] != 1) return false;
    return true;
}

/* Whether a dim of extent small maps onto one of extent big: equal, 1 or a divisor (groups). */
static bool emdnn_groups(int64_t small, int64_t big) { return small == big || small == 1 || big % small == 0; }

/* Whether x's and y's element offsets are the same set (a reshape's contract here). */
static bool emdnn_same_image(const emdnn_desc *x, const emdnn_desc *y)
{
    int64_t e = emdnn_extent(x);
    if (e != emdnn_extent(y) || emdnn_count(x) != emdnn_count(y)) return false;
    unsigned char *seen = calloc((size_t)e, 1);
    bool ok = seen != NULL;
    const emdnn_desc *ts[2] = { x, y };
    for (int w = 0; w < 2 && ok; w++) {
        int64_t idx[CUDNN_DIM_MAX] = { 0 }, n = emdnn_count(ts[w]);
        for (int64_t k = 0; k < n && ok; k++) {
            int64_t off = 0, r = k;
            for (int i = ts[w]->nd - 1; i >= 0; i--) idx[i] = r % ts[w]->dim[i], r /= ts[w]->dim[i];
            for (int i = 0; i < ts[w]->nd; i++) off += idx[i] * ts[w]->stride[i];
            ok = seen[off] == w;        /* x: each offset once; y: each of x's once */
            seen[off] = (unsigned char)(w + 1);
        }
    }
    free(seen);
    return ok;
}

/* An operation: its descriptors set and finalized, the shapes its semantics need. */
static cudnnStatus_t emdnn_fin_op(emdnn_desc *d)
{
    if (d->unsupported) return CUDNN_STATUS_NOT_SUPPORTED;
    if (!emdnn_ready(d->x) || !emdnn_ready(d->y)) return CUDNN_STATUS_BAD_PARAM;
    const emdnn_desc *x = d->x, *b = d->b, *t = d->t, *y = d->y;
    if (y->byval) return CUDNN_STATUS_BAD_PARAM;           /* a by-value tensor is an input */
    switch (d->type) {
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
        if (!d->sub || !d->sub->final) return CUDNN_STATUS_BAD_PARAM;
        int ar = emdnn_arity(d->sub->mode);
        if ((ar >= 2) != (b != NULL) || (ar == 3) != (t != NULL)) return CUDNN_STATUS_BAD_PARAM;
        if ((b && !b->final) || (t && !t->final)) return CUDNN_STATUS_BAD_PARAM;
        if (d->sub->mode == CUDNN_POINTWISE_GEN_INDEX) {
            if (x->nd != y->nd || memcmp(x->dim, y->dim, sizeof(int64_t) * (size_t)x->nd)) return CUDNN_STATUS_BAD_PARAM;
            if (d->sub->axis < 0 || d->sub->axis >= x->nd) return CUDNN_STATUS_BAD_PARAM;
            return CUDNN_STATUS_SUCCESS;
        }
        if (!emdnn_bcast(x, y) || (b && !emdnn_bcast(b, y)) || (t && !emdnn_bcast(t, y))) return CUDNN_STATUS_BAD_PARAM;
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: {
        if (!d->sub || !d->sub->final || !emdnn_ready(b)) return CUDNN_STATUS_BAD_PARAM;
        int nd = y->nd;
        if (nd < 2 || x->nd != nd || b->nd != nd) return CUDNN_STATUS_BAD_PARAM;
        if (x->dim[nd - 2] != y->dim[nd - 2] || b->dim[nd - 1] != y->dim[nd - 1] || x->dim[nd - 1] != b->dim[nd - 2])
            return CUDNN_STATUS_BAD_PARAM;
        for (int i = 0; i < nd - 2; i++)
            if (!emdnn_groups(x->dim[i], y->dim[i]) || !emdnn_groups(b->dim[i], y->dim[i]))
                return CUDNN_STATUS_BAD_PARAM;
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
        if (!d->sub || !d->sub->final || x->nd != y->nd) return CUDNN_STATUS_BAD_PARAM;
        for (int i = 0; i < x->nd; i++)
            if (!emdnn_groups(y->dim[i], x->dim[i])) return CUDNN_STATUS_BAD_PARAM;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
        if (emdnn_count(x) != emdnn_count(y)) return CUDNN_STATUS_BAD_PARAM;
        return emdnn_same_image(x, y) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
    default:
        return CUDNN_STATUS_BAD_PARAM;
    }
}

/* The index in g->tens of the tensor with t's uid, -1 if none. */
static int emdnn_tix(const emdnn_desc *g, const emdnn_desc *t)
{
    for (int i = 0; i < g->ntens; i++)
        if (g->tens[i]->uid == t->uid) return i;
    return -1;
}

/* Adds t to g's tensors (BAD_PARAM: another tensor with its uid differs). */
static cudnnStatus_t emdnn_add_tensor(emdnn_desc *g, emdnn_desc *t)
{
    if (!t) return CUDNN_STATUS_SUCCESS;
    int i = emdnn_tix(g, t);
    if (i < 0) {
        g->tens[g->ntens++] = t;
        return CUDNN_STATUS_SUCCESS;
    }
    const emdnn_desc *u = g->tens[i];
    bool same = u->dt == t->dt && u->nd == t->nd && u->virt == t->virt && u->byval == t->byval &&
                !memcmp(u->dim, t->dim, sizeof(int64_t) * (size_t)t->nd) &&
                !memcmp(u->stride, t->stride, sizeof(int64_t) * (size_t)t->nd);
    return same ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

/* The union-find root of op i. */
static int emdnn_root(int *parent, int i)
{
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
}

/* An operation graph: a handle, finalized operations whose tensors are
 * consistent by uid, each produced at most once, every virtual tensor
 * produced and consumed, connected, acyclic; records the run order. */
static cudnnStatus_t emdnn_fin_graph(emdnn_desc *g)
{
    if (!g->handle || g->nops == 0) return CUDNN_STATUS_BAD_PARAM;
    free(g->tens), free(g->order), free(g->producer);
    g->tens = calloc((size_t)g->nops * 4, sizeof *g->tens);
    g->order = calloc((size_t)g->nops, sizeof *g->order);
    g->producer = malloc((size_t)g->nops * 4 * sizeof *g->producer);
    int *consumers = calloc((size_t)g->nops * 4, sizeof *consumers), *parent = malloc((size_t)g->nops * sizeof(int));
    int *indeg = calloc((size_t)g->nops, sizeof(int));
    cudnnStatus_t r = CUDNN_STATUS_SUCCESS;
    g->ntens = 0;
    for (int i = 0; i < g->nops && !r; i++) {
        emdnn_desc *op = g->ops[i];
        if (!op->final) r = CUDNN_STATUS_BAD_PARAM;
        emdnn_desc *ts[4] = { op->x, op->b, op->t, op->y };
        for (int k = 0; k < 4 && !r; k++) r = emdnn_add_tensor(g, ts[k]);
    }
    for (int i = 0; i < g->ntens; i++) g->producer[i] = -1;
    for (int i = 0; i < g->nops; i++) parent[i] = i;
    for (int i = 0; i < g->nops && !r; i++) {
        const emdnn_desc *op = g->ops[i];
        int yi = emdnn_tix(g, op->y);
        if (g->producer[yi] >= 0) r = CUDNN_STATUS_BAD_PARAM;          /* two writers */
        g->producer[yi] = i;
    }
    for (int i = 0; i < g->nops && !r; i++) {
        const emdnn_desc *op = g->ops[i];
        const emdnn_desc *in[3] = { op->x, op->b, op->t };
        for (int k = 0; k < 3 && !r; k++) {
            if (!in[k]) continue;
            int ti = emdnn_tix(g, in[k]), p = g->producer[ti];
            consumers[ti]++;
            if (p == i) r = CUDNN_STATUS_BAD_PARAM;                    /* an operation reading its own output */
            else if (p >= 0) indeg[i]++, parent[emdnn_root(parent, p)] = emdnn_root(parent, i);
            else if (g->tens[ti]->virt) r = CUDNN_STATUS_BAD_PARAM;    /* a virtual tensor nobody computes */
        }
    }
    for (int i = 0; i < g->ntens && !r; i++)
        if (g->tens[i]->virt && !consumers[i]) r = CUDNN_STATUS_BAD_PARAM;   /* a virtual result nobody reads */
    /* connected: operations sharing a graph input are joined too */
    for (int ti = 0; ti < g->ntens && !r; ti++) {
        int first = -1;
        for (int i = 0; i < g->nops; i++) {
            const emdnn_desc *op = g->ops[i];
            const emdnn_desc *ts[4] = { op->x, op->b, op->t, op->y };
            for (int k = 0; k < 4; k++)
                if (ts[k] && ts[k]->uid == g->tens[ti]->uid) {
                    if (first < 0) first = i;
                    else parent[emdnn_root(parent, i)] = emdnn_root(parent, first);
                }
        }
    }
    for (int i = 1; i < g->nops && !r; i++)
        if (emdnn_root(parent, i) != emdnn_root(parent, 0)) r = CUDNN_STATUS_BAD_PARAM;
    /* the run order: Kahn's algorithm over producer -> consumer edges */
    int done = 0;
    bool *ran = calloc((size_t)g->nops, sizeof(bool));
    while (!r && done < g->nops) {
        int next = -1;
        for (int i = 0; i < g->nops && next < 0; i++)
            if (!ran[i] && indeg[i] == 0) next = i;
        if (next < 0) {
            r = CUDNN_STATUS_BAD_PARAM;                                 /* a cycle */
            break;
        }
        ran[next] = true, g->order[done++] = next;
        int yi = emdnn_tix(g, g->ops[next]->y);
        for (int i = 0; i < g->nops; i++) {
            const emdnn_desc *op = g->ops[i];
            const emdnn_desc *in[3] = { op->x, op->b, op->t };
            for (int k = 0; k < 3; k++)
                if (in[k] && emdnn_tix(g, in[k]) == yi) indeg[i]--;
        }
    }
    free(ran), free(consumers), free(parent), free(indeg);
    return r;
}

/* Validates a descriptor as its type requires; it is then read-only. */
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t desc)
{
    emdnn_desc *d = emdnn_live(desc);
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    if (d->final) return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t r;
    switch (d->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: r = emdnn_fin_tensor(d); break;
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR: case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR:
        r = emdnn_fin_mode(d);
        break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: r = emdnn_fin_graph(d); break;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
        r = d->graph && d->graph->final && d->has_mode ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
        break;
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
        r = !d->graph || !d->graph->final || !d->has_gidx ? CUDNN_STATUS_BAD_PARAM
            : d->gidx != 0 ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_SUCCESS;   /* engine 0 is the only one */
        break;
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
        r = !d->has_engine ? CUDNN_STATUS_BAD_PARAM : d->unsupported ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_SUCCESS;
        break;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
        r = !d->handle || !d->has_engine ? CUDNN_STATUS_BAD_PARAM
            : d->unsupported ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_SUCCESS;
        d->ws = EMDNN_WS;
        break;
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
        r = !d->uids || !d->ptrs || d->nuids != d->nptrs ? CUDNN_STATUS_BAD_PARAM
            : d->unsupported ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_SUCCESS;
        for (int i = 0; i < d->nuids && !r; i++)
            for (int j = 0; j < i; j++)
                if (d->uids[i] == d->uids[j]) r = CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES;
        break;
    default:
        r = emdnn_is_op(d) ? emdnn_fin_op(d) : CUDNN_STATUS_BAD_PARAM;
        break;
    }
    if (r == CUDNN_STATUS_SUCCESS) d->final = true;
    return r;
}

/* ---- getting attributes ----------------------------------------------------- */

/* Copies have elements of size esz to out (at most req), the full count to *cnt. */
static cudnnStatus_t emdnn_give(int64_t req, int64_t *cnt, void *out, const void *have, int64_t nhave, size_t esz)
{
    *cnt = nhave;
    if (out) memcpy(out, have, (size_t)(req < nhave ? req : nhave) * esz);
    return CUDNN_STATUS_SUCCESS;
}

/* Fills engine-config descriptors (the caller's) with the one configuration of graph g. */
static cudnnStatus_t emdnn_give_cfg(emdnn_desc *g, cudnnBackendDescriptorType_t want, int64_t req, int64_t *cnt,
                                    void *out)
{
    *cnt = 1;
    if (!out || req < 1) return CUDNN_STATUS_SUCCESS;
    emdnn_desc *e = emdnn_live(((cudnnBackendDescriptor_t *)out)[0]);
    if (!e || e->type != want) return CUDNN_STATUS_BAD_PARAM;
    e->graph = g, e->gidx = 0, e->has_gidx = e->has_engine = true, e->final = true;
    return CUDNN_STATUS_SUCCESS;
}

/* Reads one attribute of a finalized descriptor (*cnt: how many it has). */
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const desc, cudnnBackendAttributeName_t a,
                                       cudnnBackendAttributeType_t type, int64_t req, int64_t *cnt, void *out)
{
    emdnn_desc *d = emdnn_live(desc);
    if (!d || !cnt || req < 0) return CUDNN_STATUS_BAD_PARAM;
    if (!d->final) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
    /* CUEMU_DNN_NONDETERMINISTIC=1: the engine says what an atomic-accumulation engine says */
    static const cudnnBackendNumericalNote_t notes[] = { CUDNN_NUMERICAL_NOTE_TENSOR_CORE,
                                                         CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC };
    const char *nd = getenv("CUEMU_DNN_NONDETERMINISTIC");
    int64_t nnotes = nd && strcmp(nd, "1") == 0 ? 2 : 1;
    static const cudnnBackendBehaviorNote_t behaviour[] = { CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION };
    int64_t one = 1, zero = 0;
#define EMDNN_GET(T) do { if (type != (T)) return CUDNN_STATUS_BAD_PARAM; } while (0)
    switch (d->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
        switch (a) {
        case CUDNN_ATTR_TENSOR_UNIQUE_ID: EMDNN_GET(CUDNN_TYPE_INT64); return emdnn_give(req, cnt, out, &d->uid, 1, 8);
        case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT:
            EMDNN_GET(CUDNN_TYPE_INT64);
            return emdnn_give(req, cnt, out, &d->align, 1, 8);
        case CUDNN_ATTR_TENSOR_DIMENSIONS: EMDNN_GET(CUDNN_TYPE_INT64); return emdnn_give(req, cnt, out, d->dim, d->nd, 8);
        case CUDNN_ATTR_TENSOR_STRIDES:
            EMDNN_GET(CUDNN_TYPE_INT64);
            return emdnn_give(req, cnt, out, d->stride, d->nd, 8);
        case CUDNN_ATTR_TENSOR_DATA_TYPE:
            EMDNN_GET(CUDNN_TYPE_DATA_TYPE);
            return emdnn_give(req, cnt, out, &d->dt, 1, sizeof d->dt);
        case CUDNN_ATTR_TENSOR_IS_VIRTUAL: EMDNN_GET(CUDNN_TYPE_BOOLEAN); return emdnn_give(req, cnt, out, &d->virt, 1, 1);
        case CUDNN_ATTR_TENSOR_IS_BY_VALUE:
            EMDNN_GET(CUDNN_TYPE_BOOLEAN);
            return emdnn_give(req, cnt, out, &d->byval, 1, 1);
        default: return CUDNN_STATUS_NOT_SUPPORTED;
        }
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
        if (a != CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT) return CUDNN_STATUS_NOT_SUPPORTED;
        EMDNN_GET(CUDNN_TYPE_INT64);
        return emdnn_give(req, cnt, out, &one, 1, 8);
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
        if (a != CUDNN_ATTR_ENGINEHEUR_RESULTS) return CUDNN_STATUS_NOT_SUPPORTED;
        EMDNN_GET(CUDNN_TYPE_BACKEND_DESCRIPTOR);
        return emdnn_give_cfg(d->graph, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, req, cnt, out);
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
        if (a == CUDNN_ATTR_ENGINECFG_ENGINE) {
            EMDNN_GET(CUDNN_TYPE_BACKEND_DESCRIPTOR);
            return emdnn_give_cfg(d->graph, CUDNN_BACKEND_ENGINE_DESCRIPTOR, req, cnt, out);
        }
        if (a == CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE) {
            int64_t ws = EMDNN_WS;
            EMDNN_GET(CUDNN_TYPE_INT64);
            return emdnn_give(req, cnt, out, &ws, 1, 8);
        }
        return CUDNN_STATUS_NOT_SUPPORTED;
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
        switch (a) {
        case CUDNN_ATTR_ENGINE_GLOBAL_INDEX: EMDNN_GET(CUDNN_TYPE_INT64); return emdnn_give(req, cnt, out, &d->gidx, 1, 8);
        case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE:
            EMDNN_GET(CUDNN_TYPE_NUMERICAL_NOTE);
            return emdnn_give(req, cnt, out, notes, nnotes, sizeof notes[0]);
        case CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE:
            EMDNN_GET(CUDNN_TYPE_BEHAVIOR_NOTE);
            return emdnn_give(req, cnt, out, behaviour, 1, sizeof behaviour[0]);
        case CUDNN_ATTR_ENGINE_KNOB_INFO:
            EMDNN_GET(CUDNN_TYPE_BACKEND_DESCRIPTOR);
            return emdnn_give(req, cnt, out, &zero, 0, sizeof(void *));   /* no knobs */
        default: return CUDNN_STATUS_NOT_SUPPORTED;
        }
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
        if (a != CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) return CUDNN_STATUS_NOT_SUPPORTED;
        EMDNN_GET(CUDNN_TYPE_INT64);
        return emdnn_give(req, cnt, out, &d->ws, 1, 8);
    default:
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
#undef EMDNN_GET
}

/* ---- execution ---------------------------------------------------------------- */

/* v rounded to what a tensor of type dt holds. */
static float emdnn_round(cudnnDataType_t dt, float v)
{
    switch (dt) {
    case CUDNN_DATA_HALF: return kc_f32_from_fp16(kc_fp16_from_f32(v));
    case CUDNN_DATA_BFLOAT16: return kc_f32_from_bf16(kc_bf16_from_f32(v));
    case CUDNN_DATA_INT32: return (float)(int32_t)nearbyintf(v);
    case CUDNN_DATA_BOOLEAN: return v != 0.0f ? 1.0f : 0.0f;
    default: return v;
    }
}

/* Element off of memory p holding type dt, as fp32. */
static float emdnn_load(const void *p, cudnnDataType_t dt, int64_t off)
{
    switch (dt) {
    case CUDNN_DATA_HALF: return kc_f32_from_fp16(((const uint16_t *)p)[off]);
    case CUDNN_DATA_BFLOAT16: return kc_f32_from_bf16(((const uint16_t *)p)[off]);
    case CUDNN_DATA_INT32: return (float)((const int32_t *)p)[off];
    case CUDNN_DATA_BOOLEAN: return ((const uint8_t *)p)[off] ? 1.0f : 0.0f;
    default: return ((const float *)p)[off];
    }
}

/* Stores v (already rounded to dt) at element off of memory p. */
static void emdnn_store(void *p, cudnnDataType_t dt, int64_t off, float v)
{
    switch (dt) {
    case CUDNN_DATA_HALF: ((uint16_t *)p)[off] = kc_fp16_from_f32(v); break;
    case CUDNN_DATA_BFLOAT16: ((uint16_t *)p)[off] = kc_bf16_from_f32(v); break;
    case CUDNN_DATA_INT32: ((int32_t *)p)[off] = (int32_t)v; break;
    case CUDNN_DATA_BOOLEAN: ((uint8_t *)p)[off] = v != 0.0f; break;
    default: ((float *)p)[off] = v; break;
    }
}

/* Element k (row-major over t's dims) as a multi-index; returns its offset in t. */
static int64_t emdnn_index(const emdnn_desc *t, int64_t k, int64_t *idx)
{
    int64_t off = 0;
    for (int i = t->nd - 1; i >= 0; i--) idx[i] = k % t->dim[i], k /= t->dim[i];
    for (int i = 0; i < t->nd; i++) off += idx[i] * t->stride[i];
    return off;
}

/* Advances multi-index idx over t's dims (row-major) and returns the new offset from off. */
static int64_t emdnn_next(const emdnn_desc *t, int64_t *idx, int64_t off)
{
    for (int i = t->nd - 1; i >= 0; i--) {
        off += t->stride[i];
        if (++idx[i] < t->dim[i]) return off;
        off -= t->dim[i] * t->stride[i], idx[i] = 0;
    }
    return off;
}

/* The offset in t of y's multi-index idx, t's dims mapping onto y's (equal, 1, or groups). */
static int64_t emdnn_map(const emdnn_desc *t, const emdnn_desc *y, const int64_t *idx, int from)
{
    int64_t off = 0;
    for (int i = from; i < t->nd; i++) {
        int64_t d = t->dim[i], e = y->dim[i];
        int64_t j = d == e ? idx[i] : d == 1 ? 0 : d < e ? idx[i] / (e / d) : idx[i];
        off += j * t->stride[i];
    }
    return off;
}

/* f(x, b, t) of pointwise mode m in fp32. */
static float emdnn_pw(int64_t m, float x, float b, float t)
{
    switch (m) {
    case CUDNN_POINTWISE_ADD: return x + b;
    case CUDNN_POINTWISE_SUB: return x - b;
    case CUDNN_POINTWISE_MUL: return x * b;
    case CUDNN_POINTWISE_DIV: return x / b;
    case CUDNN_POINTWISE_MAX: return fmaxf(x, b);
    case CUDNN_POINTWISE_MIN: return fminf(x, b);
    case CUDNN_POINTWISE_EXP: return expf(x);
    case CUDNN_POINTWISE_LOG: return logf(x);
    case CUDNN_POINTWISE_NEG: return -x;
    case CUDNN_POINTWISE_ABS: return fabsf(x);
    case CUDNN_POINTWISE_SQRT: return sqrtf(x);
    case CUDNN_POINTWISE_RSQRT: return 1.0f / sqrtf(x);
    case CUDNN_POINTWISE_RECIPROCAL: return 1.0f / x;
    case CUDNN_POINTWISE_IDENTITY: return x;
    case CUDNN_POINTWISE_CMP_EQ: return x == b;
    case CUDNN_POINTWISE_CMP_NEQ: return x != b;
    case CUDNN_POINTWISE_CMP_GT: return x > b;
    case CUDNN_POINTWISE_CMP_GE: return x >= b;
    case CUDNN_POINTWISE_CMP_LT: return x < b;
    case CUDNN_POINTWISE_CMP_LE: return x <= b;
    case CUDNN_POINTWISE_BINARY_SELECT: return t != 0.0f ? x : b;
    default: return NAN;        /* unreachable: finalize rejects other modes */
    }
}

/* Runs one operation of graph g on the tensors' fp32 images buf. */
static void emdnn_run_op(const emdnn_desc *g, const emdnn_desc *op, float **buf)
{
    const emdnn_desc *x = op->x, *b = op->b, *t = op->t, *y = op->y;
    float *xb = buf[emdnn_tix(g, x)], *yb = buf[emdnn_tix(g, y)];
    float *bb = b ? buf[emdnn_tix(g, b)] : NULL, *tb = t ? buf[emdnn_tix(g, t)] : NULL;
    int64_t idx[CUDNN_DIM_MAX], n = emdnn_count(y);
    if (op->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
        int64_t m = op->sub->mode;
        memset(idx, 0, sizeof idx);
        for (int64_t k = 0, yo = 0; k < n; k++, yo = emdnn_next(y, idx, yo)) {
            float v = m == CUDNN_POINTWISE_GEN_INDEX ? (float)idx[op->sub->axis]
                      : emdnn_pw(m, xb[emdnn_map(x, y, idx, 0)], bb ? bb[emdnn_map(b, y, idx, 0)] : 0.0f,
                                 tb ? tb[emdnn_map(t, y, idx, 0)] : 0.0f);
            yb[yo] = emdnn_round(y->dt, v);
        }
    } else if (op->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) {
        int nd = y->nd;
        int64_t M = y->dim[nd - 2], N = y->dim[nd - 1], K = x->dim[nd - 1], batches = n / (M * N);
        for (int64_t bt = 0; bt < batches; bt++) {
            int64_t yo = emdnn_index(y, bt * M * N, idx);
            int64_t ao = emdnn_map(x, y, idx, 0), bo = emdnn_map(b, y, idx, 0);   /* idx's last two are 0 */
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    float acc = 0.0f;
                    for (int64_t kk = 0; kk < K; kk++)
                        acc += xb[ao + i * x->stride[nd - 2] + kk * x->stride[nd - 1]] *
                               bb[bo + kk * b->stride[nd - 2] + j * b->stride[nd - 1]];
                    yb[yo + i * y->stride[nd - 2] + j * y->stride[nd - 1]] = emdnn_round(y->dt, acc);
                }
        }
    } else if (op->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
        int64_t m = op->sub->mode, nx = emdnn_count(x), per = nx / n;
        float init = m == CUDNN_REDUCE_TENSOR_MUL ? 1.0f : m == CUDNN_REDUCE_TENSOR_MIN ? INFINITY
                     : m == CUDNN_REDUCE_TENSOR_MAX ? -INFINITY : 0.0f;
        memset(idx, 0, sizeof idx);
        for (int64_t k = 0, o = 0; k < n; k++, o = emdnn_next(y, idx, o)) yb[o] = init;
        memset(idx, 0, sizeof idx);
        for (int64_t k = 0, xo = 0; k < nx; k++, xo = emdnn_next(x, idx, xo)) {
            float v = xb[xo];
            /* x's index onto y's: a dim of 1 reduces, a smaller dim takes groups */
            int64_t yo = 0;
            for (int i = 0; i < y->nd; i++)
                if (y->dim[i] > 1) yo += (y->dim[i] == x->dim[i] ? idx[i] : idx[i] / (x->dim[i] / y->dim[i])) * y->stride[i];
            float *a = &yb[yo];
            switch (m) {
            case CUDNN_REDUCE_TENSOR_ADD: case CUDNN_REDUCE_TENSOR_AVG: *a += v; break;
            case CUDNN_REDUCE_TENSOR_MUL: *a *= v; break;
            case CUDNN_REDUCE_TENSOR_MIN: *a = fminf(*a, v); break;
            case CUDNN_REDUCE_TENSOR_MAX: *a = fmaxf(*a, v); break;
            default: *a = fmaxf(*a, fabsf(v)); break;                  /* AMAX */
            }
        }
        memset(idx, 0, sizeof idx);
        for (int64_t k = 0, o = 0; k < n; k++, o = emdnn_next(y, idx, o)) {
            float *a = &yb[o];
            *a = emdnn_round(y->dt, m == CUDNN_REDUCE_TENSOR_AVG ? *a / (float)per : *a);
        }
    } else {    /* reshape: the same offsets, seen with y's dims */
        int64_t nx = emdnn_count(x);
        memset(idx, 0, sizeof idx);
        for (int64_t k = 0, o = 0; k < nx; k++, o = emdnn_next(x, idx, o)) yb[o] = emdnn_round(y->dt, xb[o]);
    }
}

/* The variant pack's pointer for uid, or NULL. */
static void *emdnn_ptr(const emdnn_desc *vp, int64_t uid)
{
    for (int i = 0; i < vp->nuids; i++)
        if (vp->uids[i] == uid) return vp->ptrs[i];
    return NULL;
}

/* Evaluates the plan's graph on the variant pack's tensors, now (the stream runs at issue). */
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan_desc, cudnnBackendDescriptor_t vp_desc)
{
    emdnn_desc *plan = emdnn_live(plan_desc), *vp = emdnn_live(vp_desc);
    if (!h || h->magic != EMDNN_MAGIC || !plan || !vp || plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR ||
        vp->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
        return CUDNN_STATUS_BAD_PARAM;
    if (!plan->final || !vp->final) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
    const emdnn_desc *g = plan->graph;
    /* every non-virtual tensor's pointer, in device memory over its extent, aligned as declared */
    void **ptr = calloc((size_t)g->ntens, sizeof *ptr);
    if (!ptr) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    for (int i = 0; i < g->ntens; i++) {
        const emdnn_desc *t = g->tens[i];
        if (t->virt) continue;
        ptr[i] = emdnn_ptr(vp, t->uid);
        if (!ptr[i]) {
            free(ptr);
            return CUDNN_STATUS_BAD_PARAM;
        }
        if (t->byval) continue;
        if ((uintptr_t)ptr[i] % (uintptr_t)t->align) {
            free(ptr);
            return CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER;
        }
        size_t bytes = (size_t)(emdnn_extent(t) * emdnn_esize(t->dt));
        if (!cuemu_device_range(ptr[i], bytes)) {
            void *p = ptr[i];
            free(ptr);      /* a test's cuemu_fault may return to it by longjmp */
            cuemu_fault("cudnnBackendExecute", "tensor uid %lld: %zu bytes at %p are not device memory",
                        (long long)t->uid, bytes, p);
        }
    }
    if (plan->ws > 0) {
        if (!vp->wsp) {
            free(ptr);
            return CUDNN_STATUS_BAD_PARAM;
        }
        if (!cuemu_device_range(vp->wsp, (size_t)plan->ws)) {
            free(ptr);      /* as above: the fault may return by longjmp */
            cuemu_fault("cudnnBackendExecute", "the workspace: %lld bytes at %p are not device memory",
                        (long long)plan->ws, vp->wsp);
        }
    }
    /* the fp32 images, all NaN until loaded or computed: taken before any
     * access is recorded, so that a failure leaves no trace of the call */
    float **buf = calloc((size_t)g->ntens, sizeof *buf);
    if (!buf) {
        free(ptr);
        return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    }
    for (int i = 0; i < g->ntens; i++) {
        int64_t e = emdnn_extent(g->tens[i]);
        if (!(buf[i] = malloc((size_t)e * sizeof(float)))) {
            while (i-- > 0) free(buf[i]);
            free(buf), free(ptr);
            return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
        }
        for (int64_t k = 0; k < e; k++) buf[i][k] = NAN;
    }
    /* what the graph reads and writes, on the handle's stream, for the race detector (cuemu.h) */
    for (int i = 0; i < g->ntens; i++) {
        const emdnn_desc *t = g->tens[i];
        if (!t->virt && !t->byval && g->producer[i] < 0)
            cuemu_access("cudnnBackendExecute", "an input tensor", h->stream, ptr[i],
                         (size_t)(emdnn_extent(t) * emdnn_esize(t->dt)), false);
    }
    if (plan->ws > 0) {
        cuemu_access("cudnnBackendExecute", "the workspace", h->stream, vp->wsp, (size_t)plan->ws, true);
        memset(vp->wsp, 0xff, (size_t)plan->ws);    /* NaN: a workspace shared with live tensors shows */
    }
    for (int i = 0; i < g->ntens; i++) {
        const emdnn_desc *t = g->tens[i];
        if (!t->virt && !t->byval && g->producer[i] >= 0)
            cuemu_access("cudnnBackendExecute", "an output tensor", h->stream, ptr[i],
                         (size_t)(emdnn_extent(t) * emdnn_esize(t->dt)), true);
    }
    /* the inputs' fp32 images, loaded */
    int64_t idx[CUDNN_DIM_MAX];
    for (int i = 0; i < g->ntens; i++) {
        const emdnn_desc *t = g->tens[i];
        int64_t n = emdnn_count(t);
        if (t->virt || g->producer[i] >= 0) continue;
        memset(idx, 0, sizeof idx);
        for (int64_t k = 0, o = 0; k < n; k++, o = emdnn_next(t, idx, o))
            buf[i][o] = emdnn_round(t->dt, emdnn_load(ptr[i], t->dt, o));
    }
    for (int k = 0; k < g->nops; k++) emdnn_run_op(g, g->ops[g->order[k]], buf);
    /* the outputs, written only at their elements' offsets */
    for (int i = 0; i < g->ntens; i++) {
        const emdnn_desc *t = g->tens[i];
        if (!t->virt && g->producer[i] >= 0) {
            int64_t n = emdnn_count(t);
            memset(idx, 0, sizeof idx);
            for (int64_t k = 0, o = 0; k < n; k++, o = emdnn_next(t, idx, o)) emdnn_store(ptr[i], t->dt, o, buf[i][o]);
        }
        free(buf[i]);
    }
    free(buf), free(ptr);
    return CUDNN_STATUS_SUCCESS;
}

/* ---- the handle and the library ------------------------------------------------ */

/* The version of the headers this emulation was compiled against. */
size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

/* A handle (no device state to set up). */
cudnnStatus_t cudnnCreate(cudnnHandle_t *handle)
{
    if (!handle) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    cudnnHandle_t h = calloc(1, sizeof *h);
    if (!h) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    h->magic = EMDNN_MAGIC;
    *handle = h;
    return CUDNN_STATUS_SUCCESS;
}

/* Frees a handle. */
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle)
{
    if (!handle || handle->magic != EMDNN_MAGIC) return CUDNN_STATUS_BAD_PARAM;
    handle->magic = 0;
    free(handle);
    return CUDNN_STATUS_SUCCESS;
}

/* Records the handle's stream (work runs at issue time whatever the stream). */
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream)
{
    if (!handle || handle->magic != EMDNN_MAGIC) return CUDNN_STATUS_BAD_PARAM;
    handle->stream = stream;
    return CUDNN_STATUS_SUCCESS;
}

/* The status's enumerator name, as cuDNN prints it. */
const char *cudnnGetErrorString(cudnnStatus_t s)
{
    switch (s) {
#define EMDNN_NAME(x) case x: return #x;
    EMDNN_NAME(CUDNN_STATUS_SUCCESS)
    EMDNN_NAME(CUDNN_STATUS_NOT_INITIALIZED)
    EMDNN_NAME(CUDNN_STATUS_BAD_PARAM)
    EMDNN_NAME(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)
    EMDNN_NAME(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER)
    EMDNN_NAME(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED)
    EMDNN_NAME(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES)
    EMDNN_NAME(CUDNN_STATUS_NOT_SUPPORTED)
    EMDNN_NAME(CUDNN_STATUS_INTERNAL_ERROR)
    EMDNN_NAME(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
    EMDNN_NAME(CUDNN_STATUS_EXECUTION_FAILED)
#undef EMDNN_NAME
    default: return "CUDNN_STATUS_UNKNOWN (emulated cuDNN)";
    }
}
