/* attention.c — causal attention on the GPU: cuDNN's fused flash attention
 * through the cuDNN backend C API, the kg_ kernels where cuDNN declines.
 *
 * At start-up (cu_attn_init) the one attention shape the program uses
 * (B micro_batch, T seq_len, NH heads/tp, NKV kv heads per rank, HS
 * hidden/heads, and the row strides compiler/emit.c passes: the fused
 * qkv's QKV for GPT, QD / KVD for Llama's separate q, k, v) gets two
 * operation graphs, each lowered the way cudnn-frontend lowers its sdpa
 * nodes to backend operations, which cuDNN's runtime-fusion flash-attention
 * engines match:
 *
 *   forward:  S = Q·K^T (fp32) → ×scale → causal mask (GEN_INDEX row/col,
 *             CMP_GE, BINARY_SELECT with the lowest float) → row max M →
 *             exp(S - M) → row sum Z → stats = M + log Z (the lse) →
 *             P = exp/Z (bf16) → O = P·V
 *   backward: Σ = rowsum(dO ⊙ O) (fp32, workspace) → S = Q·K^T ×scale −
 *             stats → causal mask → P = exp → dV = P^T·dO →
 *             dS = P ⊙ (dO·V^T − Σ) ×scale → dK = dS^T·Q →
 *             dQ_acc = dS·K (fp32, workspace) → dQ = identity(dQ_acc)
 *
 * with GQA as batch broadcasting of the kv heads (forward, dQ) and, in the
 * backward, dK / dV computed per query head and summed over each kv head's
 * group by a reduction.  The engine is the first of heuristics mode A (then
 * mode FALLBACK) whose execution plan finalizes and whose workspace fits.
 *
 * The stats are cuDNN's natural-log log-sum-exp of the scaled scores per
 * (B, NH, T) row, packed (B, NH, T): exactly the lse of srt_attention_fwd
 * and of kg_attention_forward, so both paths share the lse buffer and
 * either backward can follow either forward.
 *
 * srt_attention_bwd accumulates into dq, dk, dv (+=) while cuDNN
 * overwrites: its gradients go into a zeroed scratch that mirrors dq, dk,
 * dv's layout, which is then added to them (kg_residual_forward).  The
 * workspace holds the engine's workspace, Σ, dQ_acc and that scratch; it is
 * the plan's attention.workspace buffer when the spec's cluster has GPUs
 * (a graph that needs more than it holds is not used: the kg_ kernels run
 * instead and the start-up line says how many bytes it needed), else the
 * backend's own allocation, reported as outside the plan.
 *
 * Fallbacks to the kg_ kernels: a dtype other than bf16 / fp16, a head size
 * or row stride not a multiple of 8 elements, cuDNN declining the graph,
 * the workspace, only nondeterministic engines (unless
 * SRT_ATTN_NONDETERMINISTIC=1), a call with another shape than the
 * program's, a pointer not 16-byte aligned.  One line on rank 0 at start-up says which path the
 * forward and the backward take. */
#include "cu.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    CU_DNN_DESCS = 256,         /* descriptors of one graph (tensors, ops, configurations) */
    CU_DNN_OPS = 40,            /* operations of one graph                                 */
    CU_DNN_CFGS = 16,           /* engine configurations asked of the heuristics           */
    CU_ATTN_ALIGN = 256,        /* alignment of the workspace's pieces                     */
};

/* The uids of the graphs' non-virtual tensors (virtual ones count from 100). */
enum {
    U_Q = 1, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEG, U_DO, U_DQ, U_DK, U_DV, U_SUM, U_DQACC, U_ONE,
    U_VIRTUAL = 100,
};

/* One operation graph being built, then its execution plan. */
typedef struct cu_dnn_graph {
    cudnnBackendDescriptor_t desc[CU_DNN_DESCS];   /* every descriptor made, released at fini */
    int ndesc;
    cudnnBackendDescriptor_t ops[CU_DNN_OPS];
    int nops;
    int64_t next_uid;
    cudnnBackendDescriptor_t plan;  /* NULL: this graph is not used              */
    int64_t ws;                     /* the engine's workspace bytes              */
    int64_t engine;                 /* the engine's global index                 */
    bool nondeterministic;          /* the engine's numerical notes say so       */
    bool failed;
    char why[240];                  /* why the graph is not used                 */
} cu_dnn_graph;

/* The program's attention shape and its two graphs. */
typedef struct cu_attn {
    int B, T, NH, NKV, HS, ldq, ldkv;
    srt_dtype dt;
    cu_dnn_graph fwd, bwd;
    int64_t sum_off, dqacc_off, scratch_off, scratch_n;   /* the backward's pieces of the workspace */
    int64_t need_fwd, need_bwd;                           /* workspace bytes each graph needs        */
    void *ws;
    size_t ws_bytes;
    bool ws_planned;
    bool other_shape_said;          /* a call of another shape was reported      */
} cu_attn;

/* n rounded up to a multiple of CU_ATTN_ALIGN. */
static int64_t cu_attn_up(int64_t n) { return (n + CU_ATTN_ALIGN - 1) / CU_ATTN_ALIGN * CU_ATTN_ALIGN; }

/* Records the first failure of a graph's construction (the graph then falls back). */
static bool cu_dnn_ok(cu_dnn_graph *g, cudnnStatus_t r, const char *what)
{
    if (g->failed) return false;
    if (r == CUDNN_STATUS_SUCCESS) return true;
    g->failed = true;
    snprintf(g->why, sizeof g->why, "%s: %s", what, cudnnGetErrorString(r));
    return false;
}

/* A new descriptor of type t, kept for release at fini (NULL after a failure). */
static cudnnBackendDescriptor_t cu_dnn_new(cu_dnn_graph *g, cudnnBackendDescriptorType_t t, const char *what)
{
    if (g->failed) return NULL;
    if (g->ndesc == CU_DNN_DESCS) {
        g->failed = true;
        snprintf(g->why, sizeof g->why, "%s: more than %d descriptors", what, CU_DNN_DESCS);
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    if (!cu_dnn_ok(g, cudnnBackendCreateDescriptor(t, &d), what)) return NULL;
    g->desc[g->ndesc++] = d;
    return d;
}

/* Sets one attribute (nothing after a failure). */
static void cu_dnn_set(cu_dnn_graph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                       cudnnBackendAttributeType_t t, int64_t n, const void *v, const char *what)
{
    if (g->failed) return;
    cu_dnn_ok(g, cudnnBackendSetAttribute(d, a, t, n, v), what);
}

/* Finalizes a descriptor (nothing after a failure). */
static void cu_dnn_fin(cu_dnn_graph *g, cudnnBackendDescriptor_t d, const char *what)
{
    if (g->failed) return;
    cu_dnn_ok(g, cudnnBackendFinalize(d), what);
}

/* A 4-d tensor: uid 0 makes a virtual one with the next virtual uid. */
static cudnnBackendDescriptor_t cu_dnn_tensor(cu_dnn_graph *g, int64_t uid, cudnnDataType_t dt,
                                              const int64_t dim[4], const int64_t stride[4], bool by_value,
                                              const char *what)
{
    cudnnBackendDescriptor_t d = cu_dnn_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    bool virt = uid == 0;
    if (virt) uid = g->next_uid++;
    int64_t align = 16;
    cu_dnn_set(g, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
    cu_dnn_set(g, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, what);
    cu_dnn_set(g, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, what);
    cu_dnn_set(g, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride, what);
    cu_dnn_set(g, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
    cu_dnn_set(g, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, what);
    if (by_value) cu_dnn_set(g, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, what);
    cu_dnn_fin(g, d, what);
    return d;
}

/* A virtual 4-d tensor of dims (a, b, c, e), strides packed unless given. */
static cudnnBackendDescriptor_t cu_dnn_virt(cu_dnn_graph *g, cudnnDataType_t dt, int64_t a, int64_t b, int64_t c,
                                            int64_t e, const char *what)
{
    int64_t dim[4] = { a, b, c, e }, stride[4] = { b * c * e, c * e, e, 1 };
    return cu_dnn_tensor(g, 0, dt, dim, stride, false, what);
}

/* A host scalar passed by value (its pointer goes in the variant pack). */
static cudnnBackendDescriptor_t cu_dnn_scalar(cu_dnn_graph *g, int64_t uid, const char *what)
{
    int64_t one[4] = { 1, 1, 1, 1 };
    return cu_dnn_tensor(g, uid, CUDNN_DATA_FLOAT, one, one, true, what);
}

/* Appends a finalized operation. */
static void cu_dnn_op(cu_dnn_graph *g, cudnnBackendDescriptor_t op, const char *what)
{
    cu_dnn_fin(g, op, what);
    if (g->failed) return;
    if (g->nops == CU_DNN_OPS) {
        g->failed = true;
        snprintf(g->why, sizeof g->why, "%s: more than %d operations", what, CU_DNN_OPS);
        return;
    }
    g->ops[g->nops++] = op;
}

/* y = mode(x[, b[, t]]) elementwise; axis >= 0 for GEN_INDEX; prec the compute type. */
static void cu_dnn_pw(cu_dnn_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, int64_t axis,
                      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                      cudnnBackendDescriptor_t y, const char *what)
{
    cudnnBackendDescriptor_t pw = cu_dnn_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    cu_dnn_set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
    cu_dnn_set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
    if (axis >= 0) cu_dnn_set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
    cu_dnn_fin(g, pw, what);
    cudnnBackendDescriptor_t op = cu_dnn_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    cu_dnn_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, what);
    cu_dnn_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    if (b) cu_dnn_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, what);
    if (t) cu_dnn_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, what);
    cu_dnn_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    cu_dnn_op(g, op, what);
}

/* c = a·b over the last two dims (batch dims broadcast), fp32 compute. */
static void cu_dnn_mm(cu_dnn_graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                      cudnnBackendDescriptor_t c, const char *what)
{
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = cu_dnn_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
    cu_dnn_set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
    cu_dnn_fin(g, mm, what);
    cudnnBackendDescriptor_t op = cu_dnn_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
    cu_dnn_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, what);
    cu_dnn_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, what);
    cu_dnn_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, what);
    cu_dnn_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, what);
    cu_dnn_op(g, op, what);
}

/* y = the reduction of x over the dims where y has extent 1, fp32 compute. */
static void cu_dnn_red(cu_dnn_graph *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                       cudnnBackendDescriptor_t y, const char *what)
{
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t rd = cu_dnn_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
    cu_dnn_set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, what);
    cu_dnn_set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
    cu_dnn_fin(g, rd, what);
    cudnnBackendDescriptor_t op = cu_dnn_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
    cu_dnn_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    cu_dnn_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    cu_dnn_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd, what);
    cu_dnn_op(g, op, what);
}

/* y = x seen with y's dims and strides (a transpose of the last two dims). */
static void cu_dnn_reshape(cu_dnn_graph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y, const char *what)
{
    cudnnBackendDescriptor_t op = cu_dnn_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
    cu_dnn_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    cu_dnn_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    cu_dnn_op(g, op, what);
}

/* s = the causal mask of s (row < col: the lowest float), a new virtual tensor. */
static cudnnBackendDescriptor_t cu_dnn_causal(cu_dnn_graph *g, cudnnBackendDescriptor_t s, cudnnBackendDescriptor_t neg,
                                              int64_t B, int64_t NH, int64_t T)
{
    cudnnBackendDescriptor_t row = cu_dnn_virt(g, CUDNN_DATA_INT32, B, NH, T, T, "causal mask (row index)");
    cudnnBackendDescriptor_t col = cu_dnn_virt(g, CUDNN_DATA_INT32, B, NH, T, T, "causal mask (column index)");
    cudnnBackendDescriptor_t keep = cu_dnn_virt(g, CUDNN_DATA_BOOLEAN, B, NH, T, T, "causal mask (row >= col)");
    cudnnBackendDescriptor_t out = cu_dnn_virt(g, CUDNN_DATA_FLOAT, B, NH, T, T, "causal mask (masked scores)");
    cu_dnn_pw(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 2, s, NULL, NULL, row, "causal mask: GEN_INDEX axis 2");
    cu_dnn_pw(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 3, s, NULL, NULL, col, "causal mask: GEN_INDEX axis 3");
    cu_dnn_pw(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1, row, col, NULL, keep, "causal mask: CMP_GE");
    cu_dnn_pw(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, s, neg, keep, out,
              "causal mask: BINARY_SELECT");
    return out;
}

/* The cuDNN data type of the working precision. */
static cudnnDataType_t cu_dnn_type(srt_dtype dt) { return dt == SRT_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16; }

/* The BHSD view of a (B,T,H,HS) tensor with token rows ld apart: dims and strides. */
static void cu_bhsd(int64_t dim[4], int64_t stride[4], int64_t B, int64_t H, int64_t T, int64_t HS, int64_t ld)
{
    dim[0] = B, dim[1] = H, dim[2] = T, dim[3] = HS;
    stride[0] = T * ld, stride[1] = HS, stride[2] = ld, stride[3] = 1;
}

/* The same with the last two dims swapped (K^T, V^T). */
static void cu_bhds(int64_t dim[4], int64_t stride[4], int64_t B, int64_t H, int64_t T, int64_t HS, int64_t ld)
{
    dim[0] = B, dim[1] = H, dim[2] = HS, dim[3] = T;
    stride[0] = T * ld, stride[1] = HS, stride[2] = 1, stride[3] = ld;
}

/* The forward graph's operations. */
static void cu_attn_fwd_graph(cu_attn *a, cu_dnn_graph *g)
{
    int64_t B = a->B, T = a->T, NH = a->NH, NKV = a->NKV, HS = a->HS, dim[4], st[4];
    cudnnDataType_t io = cu_dnn_type(a->dt), f32 = CUDNN_DATA_FLOAT;
    cu_bhsd(dim, st, B, NH, T, HS, a->ldq);
    cudnnBackendDescriptor_t q = cu_dnn_tensor(g, U_Q, io, dim, st, false, "forward: Q");
    cu_bhds(dim, st, B, NKV, T, HS, a->ldkv);
    cudnnBackendDescriptor_t kt = cu_dnn_tensor(g, U_K, io, dim, st, false, "forward: K^T");
    cu_bhsd(dim, st, B, NKV, T, HS, a->ldkv);
    cudnnBackendDescriptor_t v = cu_dnn_tensor(g, U_V, io, dim, st, false, "forward: V");
    cu_bhsd(dim, st, B, NH, T, HS, NH * HS);
    cudnnBackendDescriptor_t o = cu_dnn_tensor(g, U_O, io, dim, st, false, "forward: O");
    int64_t sdim[4] = { B, NH, T, 1 }, sst[4] = { NH * T, T, 1, 1 };
    cudnnBackendDescriptor_t stats = cu_dnn_tensor(g, U_STATS, f32, sdim, sst, false, "forward: stats");
    cudnnBackendDescriptor_t scale = cu_dnn_scalar(g, U_SCALE, "forward: scale");
    cudnnBackendDescriptor_t neg = cu_dnn_scalar(g, U_NEG, "forward: mask value");

    cudnnBackendDescriptor_t s = cu_dnn_virt(g, f32, B, NH, T, T, "forward: S");
    cu_dnn_mm(g, q, kt, s, "forward: S = Q K^T");
    cudnnBackendDescriptor_t ss = cu_dnn_virt(g, f32, B, NH, T, T, "forward: scaled S");
    cu_dnn_pw(g, CUDNN_POINTWISE_MUL, f32, -1, s, scale, NULL, ss, "forward: S * scale");
    cudnnBackendDescriptor_t sm = cu_dnn_causal(g, ss, neg, B, NH, T);
    cudnnBackendDescriptor_t mx = cu_dnn_virt(g, f32, B, NH, T, 1, "forward: row max");
    cu_dnn_red(g, CUDNN_REDUCE_TENSOR_MAX, sm, mx, "forward: row max");
    cudnnBackendDescriptor_t d = cu_dnn_virt(g, f32, B, NH, T, T, "forward: S - max");
    cu_dnn_pw(g, CUDNN_POINTWISE_SUB, f32, -1, sm, mx, NULL, d, "forward: S - max");
    cudnnBackendDescriptor_t e = cu_dnn_virt(g, f32, B, NH, T, T, "forward: exp");
    cu_dnn_pw(g, CUDNN_POINTWISE_EXP, f32, -1, d, NULL, NULL, e, "forward: exp");
    cudnnBackendDescriptor_t z = cu_dnn_virt(g, f32, B, NH, T, 1, "forward: row sum");
    cu_dnn_red(g, CUDNN_REDUCE_TENSOR_ADD, e, z, "forward: row sum");
    cudnnBackendDescriptor_t lz = cu_dnn_virt(g, f32, B, NH, T, 1, "forward: log sum");
    cu_dnn_pw(g, CUDNN_POINTWISE_LOG, f32, -1, z, NULL, NULL, lz, "forward: log sum");
    cu_dnn_pw(g, CUDNN_POINTWISE_ADD, f32, -1, mx, lz, NULL, stats, "forward: stats = max + log sum");
    cudnnBackendDescriptor_t p = cu_dnn_virt(g, io, B, NH, T, T, "forward: P");
    cu_dnn_pw(g, CUDNN_POINTWISE_DIV, f32, -1, e, z, NULL, p, "forward: P = exp / sum");
    cu_dnn_mm(g, p, v, o, "forward: O = P V");
}

/* The backward graph's operations. */
static void cu_attn_bwd_graph(cu_attn *a, cu_dnn_graph *g)
{
    int64_t B = a->B, T = a->T, NH = a->NH, NKV = a->NKV, HS = a->HS, dim[4], st[4];
    cudnnDataType_t io = cu_dnn_type(a->dt), f32 = CUDNN_DATA_FLOAT;
    bool gqa = NKV != NH;
    cu_bhsd(dim, st, B, NH, T, HS, a->ldq);
    cudnnBackendDescriptor_t q = cu_dnn_tensor(g, U_Q, io, dim, st, false, "backward: Q");
    cudnnBackendDescriptor_t dq = cu_dnn_tensor(g, U_DQ, io, dim, st, false, "backward: dQ");
    cu_bhds(dim, st, B, NKV, T, HS, a->ldkv);
    cudnnBackendDescriptor_t kt = cu_dnn_tensor(g, U_K, io, dim, st, false, "backward: K^T");
    cudnnBackendDescriptor_t vt = cu_dnn_tensor(g, U_V, io, dim, st, false, "backward: V^T");
    cu_bhsd(dim, st, B, NKV, T, HS, a->ldkv);
    cudnnBackendDescriptor_t k = cu_dnn_tensor(g, 0, io, dim, st, false, "backward: K");
    cudnnBackendDescriptor_t dk = cu_dnn_tensor(g, U_DK, io, dim, st, false, "backward: dK");
    cudnnBackendDescriptor_t dv = cu_dnn_tensor(g, U_DV, io, dim, st, false, "backward: dV");
    cu_bhsd(dim, st, B, NH, T, HS, NH * HS);
    cudnnBackendDescriptor_t o = cu_dnn_tensor(g, U_O, io, dim, st, false, "backward: O");
    cudnnBackendDescriptor_t dout = cu_dnn_tensor(g, U_DO, io, dim, st, false, "backward: dO");
    int64_t sdim[4] = { B, NH, T, 1 }, sst[4] = { NH * T, T, 1, 1 };
    cudnnBackendDescriptor_t stats = cu_dnn_tensor(g, U_STATS, f32, sdim, sst, false, "backward: stats");
    cudnnBackendDescriptor_t sum = cu_dnn_tensor(g, U_SUM, f32, sdim, sst, false, "backward: softmax sum");
    int64_t adim[4] = { B, NH, T, HS }, ast[4] = { NH * T * HS, T * HS, HS, 1 };
    cudnnBackendDescriptor_t dqacc = cu_dnn_tensor(g, U_DQACC, f32, adim, ast, false, "backward: dQ accumulator");
    cudnnBackendDescriptor_t scale = cu_dnn_scalar(g, U_SCALE, "backward: scale");
    cudnnBackendDescriptor_t neg = cu_dnn_scalar(g, U_NEG, "backward: mask value");
    cudnnBackendDescriptor_t one = cu_dnn_scalar(g, U_ONE, "backward: one");

    /* Σ = rowsum(dO ⊙ O), kept in the workspace */
    cudnnBackendDescriptor_t t1 = cu_dnn_virt(g, f32, B, NH, T, HS, "backward: dO * O");
    cu_dnn_pw(g, CUDNN_POINTWISE_MUL, f32, -1, dout, o, NULL, t1, "backward: dO * O");
    cudnnBackendDescriptor_t t2 = cu_dnn_virt(g, f32, B, NH, T, 1, "backward: rowsum(dO * O)");
    cu_dnn_red(g, CUDNN_REDUCE_TENSOR_ADD, t1, t2, "backward: rowsum(dO * O)");
    cu_dnn_pw(g, CUDNN_POINTWISE_MUL, f32, -1, t2, one, NULL, sum, "backward: softmax sum");
    /* P = exp(S·scale − stats), masked */
    cudnnBackendDescriptor_t s = cu_dnn_virt(g, f32, B, NH, T, T, "backward: S");
    cu_dnn_mm(g, q, kt, s, "backward: S = Q K^T");
    cudnnBackendDescriptor_t ss = cu_dnn_virt(g, f32, B, NH, T, T, "backward: scaled S");
    cu_dnn_pw(g, CUDNN_POINTWISE_MUL, f32, -1, s, scale, NULL, ss, "backward: S * scale");
    cudnnBackendDescriptor_t sl = cu_dnn_virt(g, f32, B, NH, T, T, "backward: S - stats");
    cu_dnn_pw(g, CUDNN_POINTWISE_SUB, f32, -1, ss, stats, NULL, sl, "backward: S - stats");
    cudnnBackendDescriptor_t sm = cu_dnn_causal(g, sl, neg, B, NH, T);
    cudnnBackendDescriptor_t p = cu_dnn_virt(g, f32, B, NH, T, T, "backward: P");
    cu_dnn_pw(g, CUDNN_POINTWISE_EXP, f32, -1, sm, NULL, NULL, p, "backward: P = exp");
    /* dV = P^T·dO (summed over a kv head's query heads for GQA) */
    int64_t tdim[4] = { B, NH, T, T }, tst[4] = { NH * T * T, T * T, 1, T };
    cudnnBackendDescriptor_t pt = cu_dnn_tensor(g, 0, io, tdim, tst, false, "backward: P^T");
    cu_dnn_reshape(g, p, pt, "backward: P^T");
    if (gqa) {
        cudnnBackendDescriptor_t full = cu_dnn_virt(g, io, B, NH, T, HS, "backward: dV per query head");
        cu_dnn_mm(g, pt, dout, full, "backward: dV = P^T dO");
        cu_dnn_red(g, CUDNN_REDUCE_TENSOR_ADD, full, dv, "backward: dV over the query heads");
    } else {
        cu_dnn_mm(g, pt, dout, dv, "backward: dV = P^T dO");
    }
    /* dS = P ⊙ (dO·V^T − Σ) · scale */
    cudnnBackendDescriptor_t dp = cu_dnn_virt(g, f32, B, NH, T, T, "backward: dP");
    cu_dnn_mm(g, dout, vt, dp, "backward: dP = dO V^T");
    cudnnBackendDescriptor_t dps = cu_dnn_virt(g, f32, B, NH, T, T, "backward: dP - sum");
    cu_dnn_pw(g, CUDNN_POINTWISE_SUB, f32, -1, dp, sum, NULL, dps, "backward: dP - softmax sum");
    cudnnBackendDescriptor_t ds = cu_dnn_virt(g, f32, B, NH, T, T, "backward: dS");
    cu_dnn_pw(g, CUDNN_POINTWISE_MUL, f32, -1, dps, p, NULL, ds, "backward: dS = P (dP - sum)");
    cudnnBackendDescriptor_t dss = cu_dnn_virt(g, f32, B, NH, T, T, "backward: scaled dS");
    cu_dnn_pw(g, CUDNN_POINTWISE_MUL, f32, -1, ds, scale, NULL, dss, "backward: dS * scale");
    /* dK = dS^T·Q */
    cudnnBackendDescriptor_t dst = cu_dnn_tensor(g, 0, io, tdim, tst, false, "backward: dS^T");
    cu_dnn_reshape(g, dss, dst, "backward: dS^T");
    if (gqa) {
        cudnnBackendDescriptor_t full = cu_dnn_virt(g, io, B, NH, T, HS, "backward: dK per query head");
        cu_dnn_mm(g, dst, q, full, "backward: dK = dS^T Q");
        cu_dnn_red(g, CUDNN_REDUCE_TENSOR_ADD, full, dk, "backward: dK over the query heads");
    } else {
        cu_dnn_mm(g, dst, q, dk, "backward: dK = dS^T Q");
    }
    /* dQ = dS·K, accumulated in fp32 in the workspace */
    cu_dnn_reshape(g, kt, k, "backward: K from K^T");
    cu_dnn_mm(g, dss, k, dqacc, "backward: dQ = dS K");
    cu_dnn_pw(g, CUDNN_POINTWISE_IDENTITY, f32, -1, dqacc, NULL, NULL, dq, "backward: dQ from its accumulator");
}

/* The operation graph, the heuristics (mode A, then FALLBACK) and the first
 * execution plan that finalizes with a workspace of at most ws_max bytes
 * beyond extra (NULL plan and a reason otherwise).  Engines whose numerical
 * notes say nondeterministic (the backward's atomic dQ accumulation) are
 * skipped unless SRT_ATTN_NONDETERMINISTIC=1: the trainer's resume is bit
 * for bit, which run-to-run varying gradients would break. */
static void cu_attn_plan(srt_ctx *c, cu_dnn_graph *g, int64_t extra, int64_t ws_max)
{
    cudnnHandle_t h = cu_st(c)->dnn;
    const char *env = getenv("SRT_ATTN_NONDETERMINISTIC");
    bool allow_nondet = env && strcmp(env, "1") == 0, skipped_nondet = false;
    cudnnBackendDescriptor_t graph = cu_dnn_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    cu_dnn_set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "operation graph: handle");
    cu_dnn_set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops,
               "operation graph: operations");
    cu_dnn_fin(g, graph, "operation graph");
    int64_t smallest = -1;
    cudnnBackendHeurMode_t modes[2] = { CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK };
    for (int m = 0; m < 2 && !g->failed && !g->plan; m++) {
        const char *what = m == 0 ? "engine heuristics (mode A)" : "engine heuristics (mode FALLBACK)";
        cudnnBackendDescriptor_t heur = cu_dnn_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, what);
        cu_dnn_set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, what);
        cu_dnn_set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m], what);
        cudnnBackendDescriptor_t cfg[CU_DNN_CFGS];
        for (int i = 0; i < CU_DNN_CFGS; i++) cfg[i] = cu_dnn_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, what);
        int64_t n = 0;
        if (g->failed) return;
        /* mode A declining the graph still leaves mode FALLBACK */
        cudnnStatus_t hr = cudnnBackendFinalize(heur);
        if (hr == CUDNN_STATUS_SUCCESS)
            hr = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                          CU_DNN_CFGS, &n, cfg);
        if (hr != CUDNN_STATUS_SUCCESS) {
            if (m == 1) cu_dnn_ok(g, hr, what);
            continue;
        }
        for (int64_t i = 0; i < n && !g->plan; i++) {
            /* the engine's index and whether its results vary from run to run */
            cudnnBackendDescriptor_t eng = cu_dnn_new(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
            cudnnBackendNumericalNote_t notes[16];
            int64_t nn = 0, cnt = 0, index = -1;
            bool nondet = false;
            if (!eng) return;
            if (cudnnBackendGetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt,
                                         &eng) == CUDNN_STATUS_SUCCESS) {
                cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &index);
                if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 16, &nn,
                                             notes) == CUDNN_STATUS_SUCCESS)
                    for (int64_t j = 0; j < nn; j++)
                        if (notes[j] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) nondet = true;
            }
            if (nondet && !allow_nondet) {
                skipped_nondet = true;
                continue;
            }
            cudnnBackendDescriptor_t plan = NULL;
            if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS)
                continue;
            int64_t ws = 0;
            cnt = 0;
            if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
                cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                         1, &cfg[i]) ||
                cudnnBackendFinalize(plan) ||
                cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt,
                                         &ws) ||
                extra + cu_attn_up(ws) > ws_max) {
                if (cnt == 1 && (smallest < 0 || ws < smallest)) smallest = ws;
                cudnnBackendDestroyDescriptor(plan);
                continue;
            }
            g->plan = plan;
            g->ws = ws;
            g->engine = index;
            g->nondeterministic = nondet;
        }
    }
    if (!g->plan && !g->failed) {
        g->failed = true;
        if (smallest >= 0)
            snprintf(g->why, sizeof g->why, "needs %lld bytes of workspace, %lld available",
                     (long long)(extra + cu_attn_up(smallest)), (long long)ws_max);
        else if (skipped_nondet)
            snprintf(g->why, sizeof g->why, "only nondeterministic engines (SRT_ATTN_NONDETERMINISTIC=1 allows them)");
        else
            snprintf(g->why, sizeof g->why, "no engine of cuDNN's heuristics finalizes an execution plan");
    }
}

/* Releases a graph's descriptors. */
static void cu_attn_graph_fini(cu_dnn_graph *g)
{
    if (g->plan) cudnnBackendDestroyDescriptor(g->plan);
    g->plan = NULL;
    for (int i = g->ndesc - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(g->desc[i]);
    g->ndesc = 0;
}

/* One graph's path, for the start-up line. */
static void cu_attn_say(char *out, size_t n, const cu_dnn_graph *g)
{
    if (g->plan)
        snprintf(out, n, "cuDNN fused SDPA (engine %lld, %lld bytes of engine workspace%s)", (long long)g->engine,
                 (long long)g->ws, g->nondeterministic ? ", nondeterministic" : "");
    else
        snprintf(out, n, "kg_ kernels (cuDNN: %s)", g->why);
}

/* The cuDNN handle on the compute stream; the program's attention shape's
 * graphs and plans, its workspace, and the path, reported once. */
void cu_attn_init(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    cudnnStatus_t r = cudnnCreate(&st->dnn);
    if (r != CUDNN_STATUS_SUCCESS)
        ctx_fatal(c, 1, "cudnnCreate: %s (is libcudnn %d on the library path?)", cudnnGetErrorString(r),
                  (int)CUDNN_MAJOR);
    r = cudnnSetStream(st->dnn, st->stream[SRT_COMPUTE]);
    if (r != CUDNN_STATUS_SUCCESS) ctx_die(c, "cudnnSetStream: %s", cudnnGetErrorString(r));
    const srt_program *pg = c->prog;
    if (pg->heads <= 0) return;
    cu_attn *a = ctx_alloc(c, (int64_t)sizeof *a, "the cuDNN attention graphs");
    st->attn = a;
    int64_t tp = pg->tp > 0 ? pg->tp : 1, kv = pg->kv_heads > 0 ? pg->kv_heads : pg->heads;
    a->B = (int)pg->micro_batch, a->T = (int)pg->seq_len, a->NH = (int)(pg->heads / tp);
    a->NKV = (int)(kv < tp ? 1 : kv / tp), a->HS = (int)(pg->hidden / pg->heads), a->dt = pg->dtype;
    /* the strides compiler/emit.c passes: GPT's fused qkv rows, Llama's separate q, k, v */
    if (pg->family == 0) a->ldq = a->ldkv = (a->NH + 2 * a->NKV) * a->HS;
    else a->ldq = a->NH * a->HS, a->ldkv = a->NKV * a->HS;
    a->fwd.next_uid = a->bwd.next_uid = U_VIRTUAL;

    /* the workspace: the plan's buffer, or none yet */
    for (int i = 0; i < c->cls->nbuffers; i++) {
        const srt_buffer *b = &c->cls->buffers[i];
        if (b->space == 0 && strcmp(b->name, "attention.workspace") == 0) {
            a->ws = srt_dev(c, b->offset);
            a->ws_bytes = (size_t)b->bytes;
            a->ws_planned = true;
        }
    }
    /* the backward's own pieces: Σ, dQ_acc, the scratch for dq, dk, dv (+=) */
    int64_t rows = (int64_t)a->B * a->T, esz = cu_dsize(a->dt);
    int64_t sq = (rows - 1) * a->ldq + (int64_t)a->NH * a->HS, skv = (rows - 1) * a->ldkv + (int64_t)a->NKV * a->HS;
    a->scratch_n = a->ldq == a->ldkv && a->ldq == (a->NH + 2 * a->NKV) * a->HS ? rows * a->ldq : sq + 2 * skv;
    a->sum_off = 0;
    a->dqacc_off = cu_attn_up(rows * a->NH * 4);
    a->scratch_off = a->dqacc_off + cu_attn_up(rows * a->NH * a->HS * 4);
    int64_t bwd_extra = a->scratch_off + cu_attn_up(a->scratch_n * esz);
    int64_t avail = a->ws_planned ? (int64_t)a->ws_bytes : INT64_MAX / 4;

    const char *no = NULL;
    if (a->dt != SRT_BF16 && a->dt != SRT_F16) no = "the dtype is not bf16 or fp16";
    else if (a->HS % 8 || a->ldq % 8 || a->ldkv % 8) no = "the head size or a row stride is not a multiple of 8";
    else if (a->NH % a->NKV) no = "the kv heads do not divide the heads";
    if (no) {
        snprintf(a->fwd.why, sizeof a->fwd.why, "%s", no);
        snprintf(a->bwd.why, sizeof a->bwd.why, "%s", no);
    } else {
        cu_attn_fwd_graph(a, &a->fwd);
        cu_attn_plan(c, &a->fwd, 0, avail);
        cu_attn_bwd_graph(a, &a->bwd);
        cu_attn_plan(c, &a->bwd, bwd_extra, avail);
    }
    a->need_fwd = a->fwd.plan ? cu_attn_up(a->fwd.ws) : 0;
    a->need_bwd = a->bwd.plan ? a->scratch_off + cu_attn_up(a->scratch_n * esz) + cu_attn_up(a->bwd.ws) : 0;
    /* the engine's workspace after the backward's own pieces */
    int64_t need = a->need_fwd > a->need_bwd ? a->need_fwd : a->need_bwd;
    if (!a->ws_planned && need > 0) {
        a->ws_bytes = (size_t)need;
        CU_CHECK(c, cudaMalloc(&a->ws, a->ws_bytes), "cudaMalloc (the cuDNN attention workspace)");
    }
    if (c->rank == 0) {
        char f[320], b[320];
        cu_attn_say(f, sizeof f, &a->fwd);
        cu_attn_say(b, sizeof b, &a->bwd);
        printf("shardrt: cuda: attention (B %d, T %d, heads %d, kv heads %d, head size %d, ld %d/%d, %s; cuDNN %zu): "
               "forward %s; backward %s; workspace %zu bytes %s\n",
               a->B, a->T, a->NH, a->NKV, a->HS, a->ldq, a->ldkv, a->dt == SRT_F16 ? "fp16" : a->dt == SRT_BF16 ?
               "bf16" : "fp32", cudnnGetVersion(), f, b, a->ws_bytes,
               a->ws_planned ? "(the plan's attention.workspace)" : "(outside the plan: the spec's cluster.gpu is cpu)");
        fflush(stdout);
    }
}

/* Releases the plans, the workspace (when ours) and the handle. */
void cu_attn_fini(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    cu_attn *a = st->attn;
    if (a) {
        cu_attn_graph_fini(&a->fwd);
        cu_attn_graph_fini(&a->bwd);
        if (!a->ws_planned && a->ws) cudaFree(a->ws);
        a->ws = NULL;
    }
    if (st->dnn) cudnnDestroy(st->dnn);
    st->dnn = NULL;
}

/* Whether p is 16-byte aligned (the tensors' declared alignment). */
static bool cu_attn_al(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* The program's shape's graphs when this call has that shape (else NULL, said once). */
static cu_attn *cu_attn_for(srt_ctx *c, int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv, srt_dtype dt)
{
    cu_attn *a = cu_st(c)->attn;
    if (!a) return NULL;
    if (a->B == B && a->T == T && a->NH == NH && a->NKV == NKV && a->HS == HS && a->ldq == ld_q && a->ldkv == ld_kv &&
        a->dt == dt)
        return a;
    if (!a->other_shape_said && c->rank == 0) {
        printf("shardrt: cuda: attention (B %d, T %d, heads %d, kv heads %d, head size %d, ld %d/%d) is not the "
               "program's shape: kg_ kernels\n", B, T, NH, NKV, HS, ld_q, ld_kv);
        fflush(stdout);
    }
    a->other_shape_said = true;
    return NULL;
}

/* Runs a plan with a variant pack of n tensors on s, ending the job on failure. */
static void cu_attn_exec(srt_ctx *c, srt_stream s, cu_attn *a, cu_dnn_graph *g, int n, const int64_t *uids,
                         void **ptrs, void *ws, const char *what)
{
    cu_state *st = cu_st(c);
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t r = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (!r) r = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (!r) r = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (!r) r = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (!r) r = cudnnBackendFinalize(vp);
    if (!r) r = cudnnSetStream(st->dnn, cu_stream(c, s));
    if (!r) r = cudnnBackendExecute(st->dnn, g->plan, vp);
    if (vp) cudnnBackendDestroyDescriptor(vp);
    if (r != CUDNN_STATUS_SUCCESS)
        ctx_die(c, "%s (B %d, T %d, heads %d, kv heads %d, head size %d, ld %d/%d): cuDNN: %s", what, a->B, a->T, a->NH,
                a->NKV, a->HS, a->ldq, a->ldkv, cudnnGetErrorString(r));
}

void cu_attention_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v,
                      int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv)
{
    cu_attn *a = cu_attn_for(c, B, T, NH, NKV, HS, ld_q, ld_kv, q.dt);
    if (a && a->fwd.plan && k.dt == q.dt && v.dt == q.dt && out.dt == q.dt && lse.dt == SRT_F32 &&
        cu_attn_al(q.p) && cu_attn_al(k.p) && cu_attn_al(v.p) && cu_attn_al(out.p) && cu_attn_al(lse.p)) {
        float scale = 1.0f / sqrtf((float)HS), neg = -FLT_MAX;
        int64_t uids[7] = { U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEG };
        void *ptrs[7] = { q.p, k.p, v.p, out.p, lse.p, &scale, &neg };
        cu_attn_exec(c, s, a, &a->fwd, 7, uids, ptrs, a->ws, "attention_fwd");
        return;
    }
    cu_kg(c, kg_attention_forward(out, lse, q, k, v, B, T, NH, NKV, HS, ld_q, ld_kv, cu_stream(c, s)),
          "attention_fwd");
}

void cu_attention_bwd(srt_ctx *c, srt_stream s, srt_t dq, srt_t dk, srt_t dv, srt_t dout,
                      srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v,
                      int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv)
{
    cu_attn *a = cu_attn_for(c, B, T, NH, NKV, HS, ld_q, ld_kv, q.dt);
    /* all three gradients (the emitter always asks for them) of the working dtype */
    bool fit = a && a->bwd.plan && dq.p && dk.p && dv.p && dq.dt == q.dt && dk.dt == q.dt && dv.dt == q.dt &&
               k.dt == q.dt && v.dt == q.dt && dout.dt == q.dt && out.dt == q.dt && lse.dt == SRT_F32;
    void *p[9] = { dq.p, dk.p, dv.p, dout.p, out.p, lse.p, q.p, k.p, v.p };
    for (int i = 0; fit && i < 9; i++) fit = cu_attn_al(p[i]);
    if (fit) {
        /* cuDNN overwrites: its gradients go to a zeroed scratch laid out like
         * dq, dk, dv (one region spanning all three when they share one
         * buffer, else three regions), then are added to them */
        int64_t rows = (int64_t)B * T, esz = cu_dsize(q.dt);
        int64_t sq = (rows - 1) * ld_q + (int64_t)NH * HS, skv = (rows - 1) * ld_kv + (int64_t)NKV * HS;
        uint8_t *lo = dq.p, *hi = (uint8_t *)dq.p + sq * esz;
        uint8_t *g3[3] = { dq.p, dk.p, dv.p };
        int64_t n3[3] = { sq, skv, skv };
        for (int i = 1; i < 3; i++) {
            if (g3[i] < lo) lo = g3[i];
            if (g3[i] + n3[i] * esz > hi) hi = g3[i] + n3[i] * esz;
        }
        uint8_t *scr = (uint8_t *)a->ws + a->scratch_off;
        void *ws_ptr[3];
        srt_t reg[3], sreg[3];
        int nreg;
        if ((hi - lo) / esz <= a->scratch_n) {
            nreg = 1;
            reg[0] = (srt_t){ lo, (int64_t)((hi - lo) / esz), q.dt };
            sreg[0] = (srt_t){ scr, reg[0].n, q.dt };
            for (int i = 0; i < 3; i++) ws_ptr[i] = scr + (g3[i] - lo);
        } else {
            nreg = 3;
            int64_t off = 0;
            for (int i = 0; i < 3; i++) {
                reg[i] = (srt_t){ g3[i], n3[i], q.dt };
                sreg[i] = (srt_t){ scr + off * esz, n3[i], q.dt };
                ws_ptr[i] = sreg[i].p;
                off += n3[i];
            }
        }
        cudaStream_t cs = cu_stream(c, s);
        for (int i = 0; i < nreg; i++)
            CU_CHECK(c, cudaMemsetAsync(sreg[i].p, 0, (size_t)(sreg[i].n * esz), cs), "attention_bwd (scratch)");
        float scale = 1.0f / sqrtf((float)HS), neg = -FLT_MAX, one = 1.0f;
        int64_t uids[14] = { U_Q, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, U_SUM, U_DQACC,
                             U_SCALE, U_NEG, U_ONE };
        void *ptrs[14] = { q.p, k.p, v.p, out.p, lse.p, dout.p, ws_ptr[0], ws_ptr[1], ws_ptr[2],
                           (uint8_t *)a->ws + a->sum_off, (uint8_t *)a->ws + a->dqacc_off, &scale, &neg, &one };
        /* the engine's own workspace lies after the backward's pieces */
        cu_attn_exec(c, s, a, &a->bwd, 14, uids, ptrs, (uint8_t *)a->ws + a->scratch_off + cu_attn_up(a->scratch_n * esz),
                     "attention_bwd");
        for (int i = 0; i < nreg; i++)
            cu_kg(c, kg_residual_forward(reg[i], reg[i], sreg[i], cs), "attention_bwd (dq, dk, dv +=)");
        return;
    }
    cu_kg(c, kg_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, B, T, NH, NKV, HS, ld_q, ld_kv,
                                   cu_stream(c, s)), "attention_bwd");
}
