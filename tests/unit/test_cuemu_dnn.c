/* test_cuemu_dnn.c — the emulated cuDNN (tests/gpu/emu/cudnn.c) against
 * results written from the definitions, in two parts.
 *
 * 1. Small graphs through the backend API: a pointwise chain with a
 *    by-value scalar and broadcasting, reductions, batched matmuls with
 *    broadcast and grouped batch dims; and the rejections (attribute types
 *    and counts, missing attributes, unsupported modes, bad shapes, broken
 *    graphs, a missing uid, a pointer outside device memory).
 * 2. runtime/cuda/attention.c itself (included, as tests/e2e/cudnn_graph.c
 *    does): cu_attn_init builds and plans its forward and backward graphs,
 *    cu_attention_fwd / cu_attention_bwd run them through the interpreter, and
 *    O, the lse, dQ, dK, dV (accumulated, +=) are compared with causal
 *    attention computed in double from the same inputs, for GPT's fused qkv,
 *    Llama's GQA and MQA layouts, bf16 and fp16; and its policy (engines
 *    that say nondeterministic, a planned workspace too small).
 *
 * Device memory here is this test's own registry (cuemu_device_range), and
 * cuemu_fault returns to the test by longjmp so a fault can be expected. */
#include "attention.c"

#include <setjmp.h>
#include <stdarg.h>

#include "../../kernels/cpu/kernels.h"
#include "../gpu/emu/cuemu.h"

static int fails;

/* Every descriptor the test itself creates and has not destroyed, destroyed
 * at the end (so that LeakSanitizer sees what the emulated cuDNN leaks, not
 * the test's rejection paths): the test's calls go through td_create_desc /
 * td_destroy_desc, attention.c's (included above, which destroys its own)
 * do not. */
enum { TD_DESCS = 4096 };
static cudnnBackendDescriptor_t td_descs[TD_DESCS];
static int td_ndescs;

/* cudnnBackendCreateDescriptor, recorded. */
static cudnnStatus_t td_create_desc(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *d)
{
    cudnnStatus_t r = cudnnBackendCreateDescriptor(type, d);
    if (r == CUDNN_STATUS_SUCCESS && td_ndescs < TD_DESCS) td_descs[td_ndescs++] = *d;
    return r;
}

/* cudnnBackendDestroyDescriptor of a recorded descriptor, forgotten. */
static cudnnStatus_t td_destroy_desc(cudnnBackendDescriptor_t d)
{
    for (int i = 0; i < td_ndescs; i++)
        if (td_descs[i] == d) {
            td_descs[i] = td_descs[--td_ndescs];
            break;
        }
    return cudnnBackendDestroyDescriptor(d);
}

/* Destroys what td_create_desc recorded and is still live. */
static void td_destroy_descs(void)
{
    while (td_ndescs > 0) cudnnBackendDestroyDescriptor(td_descs[--td_ndescs]);
}
#define cudnnBackendCreateDescriptor td_create_desc
#define cudnnBackendDestroyDescriptor td_destroy_desc

/* Records a failed check. */
#define CHECK(cond, ...) \
    do { if (!(cond)) { fails++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

/* ---- device memory and the runtime functions attention.c links against ---- */

enum { TD_MAX = 4096 };
static struct { uint8_t *p; size_t n; } td_live[TD_MAX];

/* A zeroed "device" allocation the emulated cuDNN accepts. */
static void *td_alloc(size_t n)
{
    for (int i = 0; i < TD_MAX; i++)
        if (!td_live[i].p) {
            td_live[i].p = aligned_alloc(256, (n + 255) / 256 * 256);
            memset(td_live[i].p, 0, n);
            td_live[i].n = n;
            return td_live[i].p;
        }
    abort();
}

/* Releases a td_alloc allocation. */
static void td_free(void *p)
{
    for (int i = 0; i < TD_MAX; i++)
        if (td_live[i].p == p) free(p), td_live[i].p = NULL;
}

/* Whether [p, p + bytes) lies in one td_alloc allocation (cuemu.h's contract). */
bool cuemu_device_range(const void *p, size_t bytes)
{
    for (int i = 0; i < TD_MAX; i++)
        if (td_live[i].p && (const uint8_t *)p >= td_live[i].p && (const uint8_t *)p + bytes <= td_live[i].p + td_live[i].n)
            return true;
    return false;
}

/* The race detector is cudart.c's, which this test does not link (its
 * streams are never ordered or unordered here): an access is only counted. */
static long td_accesses;
void cuemu_access(const char *who, const char *what, const void *s, const void *p, size_t bytes, bool write)
{
    (void)who, (void)what, (void)s, (void)p, (void)bytes, (void)write;
    td_accesses++;
}

static jmp_buf td_fault_jmp;
static bool td_fault_expected;

/* A device fault: back to the test when it expects one, else the end. */
void cuemu_fault(const char *who, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("  (fault) %s: ", who);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (td_fault_expected) longjmp(td_fault_jmp, 1);
    abort();
}

/* The runtime and CUDA runtime functions attention.c calls, over td_alloc memory. */
void *ctx_alloc(srt_ctx *c, int64_t n, const char *w) { (void)c, (void)w; return calloc(1, (size_t)n); }
void ctx_die_at(const srt_ctx *c, const char *f, int l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("ctx_die (%s:%d): ", f, l);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    (void)c;
    exit(1);
}
void ctx_fatal(const srt_ctx *c, int code, const char *fmt, ...) { (void)c, (void)fmt; exit(code); }
void cu_check_at(srt_ctx *c, cudaError_t e, const char *w, const char *f, int l)
{
    (void)c;
    if (e != cudaSuccess) printf("cuda error %d: %s (%s:%d)\n", (int)e, w, f, l), exit(1);
}
void cu_kg(srt_ctx *c, cudaError_t e, const char *op) { cu_check_at(c, e, op, __FILE__, __LINE__); }
int64_t ops_dtype_size(srt_dtype dt) { return dt == SRT_F32 ? 4 : 2; }
static uint8_t *td_arena;        /* the "device arena" srt_dev offsets into */
void *srt_dev(srt_ctx *c, int64_t o) { (void)c; return td_arena + o; }
cudaError_t cudaMalloc(void **p, size_t n) { *p = td_alloc(n); return cudaSuccess; }
cudaError_t cudaFree(void *p) { td_free(p); return cudaSuccess; }
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) { (void)s; memset(p, v, n); return cudaSuccess; }

/* The kg_ attention kernels must not run: the test is of the cuDNN path. */
static int kg_calls;
cudaError_t kg_attention_forward(srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v, int B, int T, int NH, int NKV,
                                 int HS, int ld_q, int ld_kv, cudaStream_t s)
{
    (void)out, (void)lse, (void)q, (void)k, (void)v, (void)B, (void)T, (void)NH, (void)NKV, (void)HS, (void)ld_q;
    (void)ld_kv, (void)s;
    kg_calls++;
    return cudaSuccess;
}
cudaError_t kg_attention_backward(srt_t dq, srt_t dk, srt_t dv, srt_t dout, srt_t out, srt_t lse, srt_t q, srt_t k,
                                  srt_t v, int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv, cudaStream_t s)
{
    (void)dq, (void)dk, (void)dv, (void)dout, (void)out, (void)lse, (void)q, (void)k, (void)v, (void)B, (void)T;
    (void)NH, (void)NKV, (void)HS, (void)ld_q, (void)ld_kv, (void)s;
    kg_calls++;
    return cudaSuccess;
}

/* Element i of a bf16 / fp16 / fp32 buffer as fp32. */
static float td_get(const void *p, srt_dtype dt, int64_t i)
{
    if (dt == SRT_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == SRT_F16 ? kc_f32_from_fp16(h) : kc_f32_from_bf16(h);
}

/* Stores v (rounded to nearest even) as element i. */
static void td_put(void *p, srt_dtype dt, int64_t i, float v)
{
    if (dt == SRT_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = dt == SRT_F16 ? kc_fp16_from_f32(v) : kc_bf16_from_f32(v);
}

/* out = a + b elementwise in fp32, rounded to the dtype (the kg_ kernel's contract). */
cudaError_t kg_residual_forward(srt_t out, srt_t a, srt_t b, cudaStream_t s)
{
    (void)s;
    for (int64_t i = 0; i < out.n; i++) td_put(out.p, out.dt, i, td_get(a.p, a.dt, i) + td_get(b.p, b.dt, i));
    return cudaSuccess;
}

/* ---- part 1: small graphs through the API ----------------------------------- */

static cudnnHandle_t td_h;

/* A finalized tensor (uid, type, rank-n dims and strides; virtual / by value). */
static cudnnBackendDescriptor_t td_tensor(int64_t uid, cudnnDataType_t dt, int n, const int64_t *dim,
                                          const int64_t *st, bool virt, bool byval)
{
    cudnnBackendDescriptor_t d;
    int64_t al = 4;
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &d);
    cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, n, dim);
    cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, n, st);
    cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al);
    cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval);
    cudnnStatus_t r = cudnnBackendFinalize(d);
    CHECK(r == CUDNN_STATUS_SUCCESS, "tensor %lld: %s", (long long)uid, cudnnGetErrorString(r));
    return d;
}

/* A finalized pointwise operation y = mode(x[, b[, t]]); the status of its finalize in *r. */
static cudnnBackendDescriptor_t td_pw(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                      cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, cudnnStatus_t *r)
{
    cudnnBackendDescriptor_t pw, op;
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw);
    cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    *r = cudnnBackendFinalize(pw);
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &op);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    if (*r == CUDNN_STATUS_SUCCESS) *r = cudnnBackendFinalize(op);
    return op;
}

/* A finalized reduction y = op(x). */
static cudnnBackendDescriptor_t td_red(cudnnReduceTensorOp_t m, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t rd, op;
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, &rd);
    cudnnBackendSetAttribute(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &m);
    cudnnBackendSetAttribute(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    cudnnBackendFinalize(rd);
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, &op);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
    cudnnStatus_t r = cudnnBackendFinalize(op);
    CHECK(r == CUDNN_STATUS_SUCCESS, "reduction: %s", cudnnGetErrorString(r));
    return op;
}

/* A matmul c = a·b; the status of its finalize. */
static cudnnStatus_t td_mm(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c,
                           cudnnBackendDescriptor_t *out)
{
    cudnnBackendDescriptor_t mm, op;
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_MATMUL_DESCRIPTOR, &mm);
    cudnnBackendSetAttribute(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    cudnnBackendFinalize(mm);
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, &op);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    *out = op;
    return cudnnBackendFinalize(op);
}

/* The operation graph of n ops; its finalize status in *r. */
static cudnnBackendDescriptor_t td_graph(int n, cudnnBackendDescriptor_t *ops, cudnnStatus_t *r)
{
    cudnnBackendDescriptor_t g;
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g);
    cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &td_h);
    cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, ops);
    *r = cudnnBackendFinalize(g);
    return g;
}

/* The plan of graph g through heuristics mode A (NULL on a failure). */
static cudnnBackendDescriptor_t td_plan(cudnnBackendDescriptor_t g, int64_t *ws)
{
    cudnnBackendDescriptor_t heur, cfg, plan;
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    int64_t n = 0;
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
    cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
    cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    CHECK(cudnnBackendFinalize(heur) == CUDNN_STATUS_SUCCESS, "heuristics finalize");
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg);
    cudnnStatus_t r = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                               &n, &cfg);
    CHECK(r == CUDNN_STATUS_SUCCESS && n == 1, "heuristics results: %s, %lld", cudnnGetErrorString(r), (long long)n);
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
    cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &td_h);
    cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
    r = cudnnBackendFinalize(plan);
    CHECK(r == CUDNN_STATUS_SUCCESS, "plan finalize: %s", cudnnGetErrorString(r));
    cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, ws);
    return plan;
}

/* Executes plan with n (uid, pointer) pairs and a workspace; the status. */
static cudnnStatus_t td_exec(cudnnBackendDescriptor_t plan, int n, const int64_t *uids, void **ptrs, void *ws)
{
    cudnnBackendDescriptor_t vp;
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    cudnnStatus_t r = cudnnBackendFinalize(vp);
    if (r == CUDNN_STATUS_SUCCESS) r = cudnnBackendExecute(td_h, plan, vp);
    cudnnBackendDestroyDescriptor(vp);
    return r;
}

/* bf16(v) as fp32. */
static float td_bf(float v) { return kc_f32_from_bf16(kc_bf16_from_f32(v)); }

/* Pointwise chain with a by-value scale and a broadcast operand, two reductions:
 *   A = X·s, E = exp(A), Y = E − Bv (bf16, padded rows), R = Σ_last E, M = max_{1,2} E. */
static void test_pointwise_reduction(void)
{
    int64_t dx[3] = { 2, 3, 4 }, sx[3] = { 12, 4, 1 }, db[3] = { 2, 3, 1 }, sb[3] = { 3, 1, 1 };
    int64_t sy[3] = { 18, 6, 1 }, dr[3] = { 2, 3, 1 }, sr[3] = { 3, 1, 1 }, dm[3] = { 2, 1, 1 }, sm[3] = { 1, 1, 1 };
    int64_t one[3] = { 1, 1, 1 };
    cudnnBackendDescriptor_t X = td_tensor(1, CUDNN_DATA_FLOAT, 3, dx, sx, false, false);
    cudnnBackendDescriptor_t Bv = td_tensor(2, CUDNN_DATA_BFLOAT16, 3, db, sb, false, false);
    cudnnBackendDescriptor_t S = td_tensor(3, CUDNN_DATA_FLOAT, 3, one, one, false, true);
    cudnnBackendDescriptor_t Y = td_tensor(4, CUDNN_DATA_BFLOAT16, 3, dx, sy, false, false);
    cudnnBackendDescriptor_t R = td_tensor(5, CUDNN_DATA_FLOAT, 3, dr, sr, false, false);
    cudnnBackendDescriptor_t Mx = td_tensor(6, CUDNN_DATA_FLOAT, 3, dm, sm, false, false);
    cudnnBackendDescriptor_t A = td_tensor(100, CUDNN_DATA_FLOAT, 3, dx, sx, true, false);
    cudnnBackendDescriptor_t E = td_tensor(101, CUDNN_DATA_FLOAT, 3, dx, sx, true, false);
    cudnnStatus_t r1, r2, r3, rg;
    cudnnBackendDescriptor_t ops[5] = {
        td_pw(CUDNN_POINTWISE_SUB, E, Bv, NULL, Y, &r3),        /* listed out of order on purpose */
        td_pw(CUDNN_POINTWISE_MUL, X, S, NULL, A, &r1),
        td_pw(CUDNN_POINTWISE_EXP, A, NULL, NULL, E, &r2),
        td_red(CUDNN_REDUCE_TENSOR_ADD, E, R),
        td_red(CUDNN_REDUCE_TENSOR_MAX, E, Mx),
    };
    CHECK(!r1 && !r2 && !r3, "pointwise finalize: %d %d %d", r1, r2, r3);
    cudnnBackendDescriptor_t g = td_graph(5, ops, &rg);
    CHECK(rg == CUDNN_STATUS_SUCCESS, "graph finalize: %s", cudnnGetErrorString(rg));
    int64_t ws = 0;
    cudnnBackendDescriptor_t plan = td_plan(g, &ws);
    float *x = td_alloc(24 * 4), *rr = td_alloc(6 * 4), *mx = td_alloc(2 * 4), s = 0.75f;
    uint16_t *bv = td_alloc(6 * 2), *y = td_alloc(36 * 2);
    void *w = td_alloc((size_t)ws);
    for (int i = 0; i < 24; i++) x[i] = (float)(i % 7) * 0.25f - 0.5f;
    for (int i = 0; i < 6; i++) bv[i] = kc_bf16_from_f32(0.1f * (float)i + 0.3f);
    for (int i = 0; i < 36; i++) y[i] = 0x1234;                 /* the row padding must survive */
    int64_t uids[6] = { 1, 2, 3, 4, 5, 6 };
    void *ptrs[6] = { x, bv, &s, y, rr, mx };
    cudnnStatus_t r = td_exec(plan, 6, uids, ptrs, w);
    CHECK(r == CUDNN_STATUS_SUCCESS, "execute: %s", cudnnGetErrorString(r));
    for (int b = 0; b < 2; b++) {
        float m = -INFINITY;
        for (int c = 0; c < 3; c++) {
            float sum = 0.0f;
            for (int k = 0; k < 4; k++) {
                float e = expf(x[b * 12 + c * 4 + k] * s);
                float want = td_bf(e - kc_f32_from_bf16(bv[b * 3 + c]));
                float got = kc_f32_from_bf16(y[b * 18 + c * 6 + k]);
                CHECK(got == want, "Y[%d,%d,%d] = %g, want %g", b, c, k, got, want);
                sum += e, m = fmaxf(m, e);
            }
            CHECK(fabsf(rr[b * 3 + c] - sum) <= 1e-6f * sum, "R[%d,%d] = %g, want %g", b, c, rr[b * 3 + c], sum);
            CHECK(y[b * 18 + c * 6 + 4] == 0x1234 && y[b * 18 + c * 6 + 5] == 0x1234, "Y's padding was written");
        }
        CHECK(mx[b] == m, "M[%d] = %g, want %g", b, mx[b], m);
    }
    /* a missing uid: BAD_PARAM; a pointer outside device memory: a fault */
    r = td_exec(plan, 5, uids, ptrs, w);
    CHECK(r == CUDNN_STATUS_BAD_PARAM, "execute without uid 6: %s", cudnnGetErrorString(r));
    float host[24];
    void *bad[6] = { host, bv, &s, y, rr, mx };
    td_fault_expected = true;
    if (!setjmp(td_fault_jmp)) {
        td_exec(plan, 6, uids, bad, w);
        CHECK(0, "a host pointer for X did not fault");
    }
    td_fault_expected = false;
    printf("ok: pointwise chain (by-value scale, broadcast), ADD and MAX reductions\n");
}

/* Batched matmuls: C(2,3,3,5) = A(2,1,3,4)·B(1,3,4,5) (broadcast), and
 * C(1,4,2,2) = A(1,4,2,3)·B(1,2,3,2) (grouped: head h uses B's head h/2). */
static void test_matmul(void)
{
    int64_t da[4] = { 2, 1, 3, 4 }, sa[4] = { 12, 12, 4, 1 }, db[4] = { 1, 3, 4, 5 }, sb[4] = { 60, 20, 1, 4 };
    int64_t dc[4] = { 2, 3, 3, 5 }, sc[4] = { 45, 15, 5, 1 };
    cudnnBackendDescriptor_t A = td_tensor(1, CUDNN_DATA_FLOAT, 4, da, sa, false, false);
    cudnnBackendDescriptor_t Bt = td_tensor(2, CUDNN_DATA_FLOAT, 4, db, sb, false, false);   /* column-major B */
    cudnnBackendDescriptor_t C = td_tensor(3, CUDNN_DATA_FLOAT, 4, dc, sc, false, false), op;
    cudnnStatus_t r = td_mm(A, Bt, C, &op), rg;
    CHECK(r == CUDNN_STATUS_SUCCESS, "matmul finalize: %s", cudnnGetErrorString(r));
    cudnnBackendDescriptor_t g = td_graph(1, &op, &rg);
    int64_t ws = 0;
    cudnnBackendDescriptor_t plan = td_plan(g, &ws);
    float *a = td_alloc(24 * 4), *b = td_alloc(60 * 4), *c = td_alloc(90 * 4);
    void *w = td_alloc((size_t)ws);
    for (int i = 0; i < 24; i++) a[i] = (float)(i % 5 - 2);
    for (int i = 0; i < 60; i++) b[i] = (float)(i % 7 - 3);
    int64_t uids[3] = { 1, 2, 3 };
    void *ptrs[3] = { a, b, c };
    r = td_exec(plan, 3, uids, ptrs, w);
    CHECK(r == CUDNN_STATUS_SUCCESS, "matmul execute: %s", cudnnGetErrorString(r));
    for (int i0 = 0; i0 < 2; i0++)
        for (int i1 = 0; i1 < 3; i1++)
            for (int m = 0; m < 3; m++)
                for (int n = 0; n < 5; n++) {
                    float want = 0;
                    for (int k = 0; k < 4; k++) want += a[i0 * 12 + m * 4 + k] * b[i1 * 20 + n * 4 + k];
                    CHECK(c[i0 * 45 + i1 * 15 + m * 5 + n] == want, "C[%d,%d,%d,%d] = %g, want %g", i0, i1, m, n,
                          c[i0 * 45 + i1 * 15 + m * 5 + n], want);
                }
    /* grouped batch dim */
    int64_t ga[4] = { 1, 4, 2, 3 }, gsa[4] = { 24, 6, 3, 1 }, gb[4] = { 1, 2, 3, 2 }, gsb[4] = { 12, 6, 2, 1 };
    int64_t gc[4] = { 1, 4, 2, 2 }, gsc[4] = { 16, 4, 2, 1 };
    A = td_tensor(1, CUDNN_DATA_FLOAT, 4, ga, gsa, false, false);
    Bt = td_tensor(2, CUDNN_DATA_FLOAT, 4, gb, gsb, false, false);
    C = td_tensor(3, CUDNN_DATA_FLOAT, 4, gc, gsc, false, false);
    r = td_mm(A, Bt, C, &op);
    CHECK(r == CUDNN_STATUS_SUCCESS, "grouped matmul finalize: %s", cudnnGetErrorString(r));
    g = td_graph(1, &op, &rg);
    plan = td_plan(g, &ws);
    r = td_exec(plan, 3, uids, ptrs, w);
    CHECK(r == CUDNN_STATUS_SUCCESS, "grouped matmul execute: %s", cudnnGetErrorString(r));
    for (int h = 0; h < 4; h++)
        for (int m = 0; m < 2; m++)
            for (int n = 0; n < 2; n++) {
                float want = 0;
                for (int k = 0; k < 3; k++) want += a[h * 6 + m * 3 + k] * b[(h / 2) * 6 + k * 2 + n];
                CHECK(c[h * 4 + m * 2 + n] == want, "grouped C[%d,%d,%d] = %g, want %g", h, m, n, c[h * 4 + m * 2 + n],
                      want);
            }
    /* K mismatch and a batch dim that neither broadcasts nor groups: BAD_PARAM */
    int64_t bk[4] = { 1, 2, 4, 2 }, sbk[4] = { 16, 8, 2, 1 }, b3[4] = { 1, 3, 3, 2 }, sb3[4] = { 18, 6, 2, 1 };
    r = td_mm(A, td_tensor(7, CUDNN_DATA_FLOAT, 4, bk, sbk, false, false), C, &op);
    CHECK(r == CUDNN_STATUS_BAD_PARAM, "matmul with K 3 vs 4: %s", cudnnGetErrorString(r));
    r = td_mm(A, td_tensor(8, CUDNN_DATA_FLOAT, 4, b3, sb3, false, false), C, &op);
    CHECK(r == CUDNN_STATUS_BAD_PARAM, "matmul with batch 3 onto 4: %s", cudnnGetErrorString(r));
    printf("ok: batched matmul (broadcast and grouped batch dims, strided B), shape rejections\n");
}

/* What the real library rejects: attribute types and counts, missing
 * attributes, finalized descriptors, modes not emulated, broken graphs. */
static void test_rejections(void)
{
    cudnnBackendDescriptor_t d, e;
    int32_t d32[3] = { 1, 2, 3 };
    int64_t uid2[2] = { 1, 2 }, dim[3] = { 1, 2, 3 }, st[3] = { 6, 3, 1 }, v = 5;
    cudnnStatus_t r;
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &d);
    r = cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT32, 3, d32);
    CHECK(r == CUDNN_STATUS_BAD_PARAM, "dims as INT32: %s", cudnnGetErrorString(r));
    r = cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 2, uid2);
    CHECK(r == CUDNN_STATUS_BAD_PARAM, "two uids: %s", cudnnGetErrorString(r));
    r = cudnnBackendSetAttribute(d, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_INT64, 1, &v);
    CHECK(r == CUDNN_STATUS_BAD_PARAM, "a pointwise attribute on a tensor: %s", cudnnGetErrorString(r));
    cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &v);
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 3, dim);
    r = cudnnBackendFinalize(d);
    CHECK(r == CUDNN_STATUS_BAD_PARAM, "a tensor without strides: %s", cudnnGetErrorString(r));
    int64_t cnt = 0;
    r = cudnnBackendGetAttribute(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &cnt, &v);
    CHECK(r == CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "get before finalize: %s", cudnnGetErrorString(r));
    e = td_tensor(9, CUDNN_DATA_FLOAT, 3, dim, st, false, false);
    r = cudnnBackendSetAttribute(e, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &v);
    CHECK(r == CUDNN_STATUS_NOT_INITIALIZED, "set after finalize: %s", cudnnGetErrorString(r));
    int64_t got[3];
    r = cudnnBackendGetAttribute(e, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 3, &cnt, got);
    CHECK(r == CUDNN_STATUS_SUCCESS && cnt == 3 && got[0] == 6 && got[2] == 1, "get strides: %s", cudnnGetErrorString(r));
    /* a mode not emulated; a binary mode without b */
    cudnnBackendDescriptor_t y = td_tensor(10, CUDNN_DATA_FLOAT, 3, dim, st, false, false);
    td_pw(CUDNN_POINTWISE_TANH_FWD, e, NULL, NULL, y, &r);
    CHECK(r == CUDNN_STATUS_NOT_SUPPORTED, "TANH_FWD: %s", cudnnGetErrorString(r));
    cudnnBackendDescriptor_t ok1 = td_pw(CUDNN_POINTWISE_ADD, e, NULL, NULL, y, &r);
    CHECK(r == CUDNN_STATUS_BAD_PARAM, "ADD without BDESC: %s", cudnnGetErrorString(r));
    (void)ok1;
    /* broadcasting that is not: (1,2,3) + (1,3,3) */
    int64_t d3[3] = { 1, 3, 3 }, s3[3] = { 9, 3, 1 };
    td_pw(CUDNN_POINTWISE_ADD, e, td_tensor(11, CUDNN_DATA_FLOAT, 3, d3, s3, false, false), NULL, y, &r);
    CHECK(r == CUDNN_STATUS_BAD_PARAM, "ADD of (1,2,3) and (1,3,3): %s", cudnnGetErrorString(r));
    /* graphs: a virtual tensor nobody computes; two disconnected operations */
    cudnnBackendDescriptor_t vt = td_tensor(200, CUDNN_DATA_FLOAT, 3, dim, st, true, false);
    cudnnBackendDescriptor_t op1 = td_pw(CUDNN_POINTWISE_EXP, vt, NULL, NULL, y, &r);
    CHECK(r == CUDNN_STATUS_SUCCESS, "EXP op: %s", cudnnGetErrorString(r));
    td_graph(1, &op1, &r);
    CHECK(r == CUDNN_STATUS_BAD_PARAM, "a graph reading an uncomputed virtual tensor: %s", cudnnGetErrorString(r));
    cudnnBackendDescriptor_t ops2[2] = {
        td_pw(CUDNN_POINTWISE_EXP, e, NULL, NULL, y, &r),
        td_pw(CUDNN_POINTWISE_LOG, td_tensor(12, CUDNN_DATA_FLOAT, 3, dim, st, false, false), NULL, NULL,
              td_tensor(13, CUDNN_DATA_FLOAT, 3, dim, st, false, false), &r),
    };
    td_graph(2, ops2, &r);
    CHECK(r == CUDNN_STATUS_BAD_PARAM, "a disconnected graph: %s", cudnnGetErrorString(r));
    /* heuristics without a mode */
    cudnnStatus_t rg;
    cudnnBackendDescriptor_t g = td_graph(1, ops2, &rg), heur;
    CHECK(rg == CUDNN_STATUS_SUCCESS, "one EXP: %s", cudnnGetErrorString(rg));
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
    cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
    r = cudnnBackendFinalize(heur);
    CHECK(r == CUDNN_STATUS_BAD_PARAM, "heuristics without a mode: %s", cudnnGetErrorString(r));
    printf("ok: rejections (types, counts, missing attributes, finalized, unsupported mode, shapes, graphs)\n");
}

/* ---- part 2: attention.c's graphs computing attention ------------------------ */

/* One attention shape: cu_attn_init's graphs, then forward and backward through
 * cu_attention_fwd / cu_attention_bwd, checked against double-precision attention. */
static void test_attention(const char *name, int family, int B, int T, int NH, int NKV, int HS, int64_t gap,
                           srt_dtype dt)
{
    srt_program pg = { 0 };
    srt_class cls = { 0 };
    cu_state st = { 0 };
    srt_ctx c = { 0 };
    pg.family = family, pg.heads = NH, pg.kv_heads = NKV, pg.hidden = (int64_t)NH * HS, pg.tp = 1;
    pg.micro_batch = B, pg.seq_len = T, pg.dtype = dt;
    c.prog = &pg, c.cls = &cls, c.bs = &st;
    kg_calls = 0;
    cu_attn_init(&c);
    cu_attn *a = st.attn;
    CHECK(a && a->fwd.plan && a->bwd.plan, "%s: the graphs were not planned (forward: %s; backward: %s)", name,
          a ? a->fwd.why : "-", a ? a->bwd.why : "-");
    if (!a || !a->fwd.plan || !a->bwd.plan) return;
    int64_t rows = (int64_t)B * T, ldq = a->ldq, ldkv = a->ldkv, esz = dt == SRT_F32 ? 4 : 2;
    /* q, k, v (and dq, dk, dv) in GPT's one fused buffer or Llama's three */
    int64_t nq = rows * ldq, nkv = family == 0 ? 0 : rows * ldkv;
    /* gap > 0: q, k, v apart, so that dq, dk, dv take attention_bwd's three-region scratch */
    int64_t ntot = nq + 2 * nkv + 2 * gap;
    uint8_t *qb = td_alloc((size_t)(ntot * esz)), *dqb = td_alloc((size_t)(ntot * esz));
    uint8_t *ob = td_alloc((size_t)(rows * NH * HS * esz)), *dob = td_alloc((size_t)(rows * NH * HS * esz));
    float *lse = td_alloc((size_t)(rows * NH * 4));
    int64_t koff = family == 0 ? (int64_t)NH * HS : nq + gap;
    int64_t voff = family == 0 ? (int64_t)(NH + NKV) * HS : nq + nkv + 2 * gap;
    uint32_t seed = 12345;
    for (int64_t i = 0; i < ntot; i++) {
        seed = seed * 1664525u + 1013904223u;
        td_put(qb, dt, i, (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f);
        td_put(dqb, dt, i, 0.25f * (float)(i % 5) - 0.5f);              /* the gradients accumulate onto this */
    }
    for (int64_t i = 0; i < rows * NH * HS; i++) {
        seed = seed * 1664525u + 1013904223u;
        td_put(dob, dt, i, (float)(seed >> 8) / 16777216.0f - 0.5f);
    }
    srt_t q = { qb, nq, dt }, k = { qb + koff * esz, nkv ? nkv : nq, dt }, v = { qb + voff * esz, nkv ? nkv : nq, dt };
    srt_t o = { ob, rows * NH * HS, dt }, l = { lse, rows * NH, SRT_F32 }, dO = { dob, rows * NH * HS, dt };
    srt_t dq = { dqb, q.n, dt }, dk = { dqb + koff * esz, k.n, dt }, dv = { dqb + voff * esz, v.n, dt };
    cu_attention_fwd(&c, SRT_COMPUTE, o, l, q, k, v, B, T, NH, NKV, HS, (int)ldq, (int)ldkv);
    uint8_t *dq0 = malloc((size_t)(ntot * esz));
    memcpy(dq0, dqb, (size_t)(ntot * esz));
    cu_attention_bwd(&c, SRT_COMPUTE, dq, dk, dv, dO, o, l, q, k, v, B, T, NH, NKV, HS, (int)ldq, (int)ldkv);
    CHECK(kg_calls == 0, "%s: the kg_ kernels ran", name);

    /* the reference, in double from the same (rounded) inputs */
    double scale = 1.0 / sqrt((double)HS), eo = 0, mo = 0, el = 0, eg[3] = { 0 }, mg[3] = { 0 };
    int grp = NH / NKV;
    double *p = malloc(sizeof(double) * (size_t)T), *dp = malloc(sizeof(double) * (size_t)T);
    double *g = calloc((size_t)ntot, sizeof(double));        /* the reference gradients, same layout */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int kh = h / grp;
            for (int i = 0; i < T; i++) {
                const int64_t qi = (int64_t)(b * T + i) * ldq + h * HS, oi = (int64_t)(b * T + i) * NH * HS + h * HS;
                double m = -INFINITY, z = 0, sdo = 0;
                for (int j = 0; j <= i; j++) {
                    const int64_t kj = (int64_t)(b * T + j) * ldkv + kh * HS;
                    double s = 0;
                    for (int d = 0; d < HS; d++) s += (double)td_get(q.p, dt, qi + d) * td_get(k.p, dt, kj + d);
                    p[j] = s * scale, m = fmax(m, p[j]);
                }
                for (int j = 0; j <= i; j++) z += exp(p[j] - m);
                double lref = m + log(z);
                el = fmax(el, fabs(lse[(b * NH + h) * T + i] - lref));
                for (int d = 0; d < HS; d++) {
                    double ov = 0;
                    for (int j = 0; j <= i; j++)
                        ov += exp(p[j] - lref) * td_get(v.p, dt, (int64_t)(b * T + j) * ldkv + kh * HS + d);
                    eo = fmax(eo, fabs(td_get(ob, dt, oi + d) - ov)), mo = fmax(mo, fabs(ov));
                }
                /* backward from the graph's own inputs: O and the lse as produced */
                for (int d = 0; d < HS; d++) sdo += (double)td_get(dob, dt, oi + d) * td_get(ob, dt, oi + d);
                for (int j = 0; j <= i; j++) {
                    const int64_t vj = (int64_t)(b * T + j) * ldkv + kh * HS;
                    p[j] = exp(p[j] - lse[(b * NH + h) * T + i]);
                    double s = 0;
                    for (int d = 0; d < HS; d++) s += (double)td_get(dob, dt, oi + d) * td_get(v.p, dt, vj + d);
                    dp[j] = p[j] * (s - sdo) * scale;
                }
                for (int j = 0; j <= i; j++) {
                    const int64_t kj = (int64_t)(b * T + j) * ldkv + kh * HS;
                    for (int d = 0; d < HS; d++) {
                        g[qi + d] += dp[j] * td_get(k.p, dt, kj + d);
                        g[koff + kj + d] += dp[j] * td_get(q.p, dt, qi + d);
                        g[voff + kj + d] += p[j] * td_get(dob, dt, oi + d);
                    }
                }
            }
        }
    /* compare dq, dk, dv (minus what was there before) with the reference;
     * every other element of their buffer must be as it was */
    bool *mine = calloc((size_t)ntot, sizeof(bool));
    for (int w = 0; w < 3; w++) {
        int64_t base = w == 0 ? 0 : w == 1 ? koff : voff, ld = w == 0 ? ldq : ldkv, nh = w == 0 ? NH : NKV;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t e = 0; e < nh * HS; e++) {
                int64_t i = base + r * ld + e;
                mine[i] = true;
                double got = (double)td_get(dqb, dt, i) - td_get(dq0, dt, i);
                eg[w] = fmax(eg[w], fabs(got - g[i])), mg[w] = fmax(mg[w], fabs(g[i]));
            }
    }
    int64_t touched = 0;
    for (int64_t i = 0; i < ntot; i++) touched += !mine[i] && memcmp(dqb + i * esz, dq0 + i * esz, (size_t)esz);
    CHECK(touched == 0, "%s: %lld elements outside dq, dk, dv changed", name, (long long)touched);
    free(mine);
    /* the tolerance of the dtype: P and dS are rounded to it before their matmuls */
    double tol = dt == SRT_F16 ? 1e-2 : 3e-2;
    printf("%s: %s: |O err| %.2e (max %.2f), |lse err| %.2e, |dQ err| %.2e (max %.2f), |dK err| %.2e (max %.2f), "
           "|dV err| %.2e (max %.2f)\n", eo <= tol * mo && el <= 1e-4 && eg[0] <= tol * mg[0] && eg[1] <= tol * mg[1] &&
           eg[2] <= tol * mg[2] ? "ok" : "FAIL", name, eo, mo, el, eg[0], mg[0], eg[1], mg[1], eg[2], mg[2]);
    CHECK(eo <= tol * mo, "%s: O", name);
    CHECK(el <= 1e-4, "%s: lse", name);
    CHECK(eg[0] <= tol * mg[0] && eg[1] <= tol * mg[1] && eg[2] <= tol * mg[2], "%s: dQ, dK, dV", name);
    free(p), free(dp), free(g), free(dq0);
    cu_attn_fini(&c);
    free(a);
    td_free(qb), td_free(dqb), td_free(ob), td_free(dob), td_free(lse);
}

/* attention.c's policy: engines that say nondeterministic are skipped unless
 * SRT_ATTN_NONDETERMINISTIC=1, a planned workspace too small is not used;
 * either way the kg_ kernels run and the reason is kept for the start-up line. */
static void test_attention_policy(void)
{
    srt_program pg = { 0 };
    srt_buffer buf = { "attention.workspace", 0, 0, 4096 };
    srt_class cls = { 0 };
    pg.family = 0, pg.heads = 4, pg.kv_heads = 4, pg.hidden = 64, pg.tp = 1, pg.micro_batch = 1, pg.seq_len = 16;
    pg.dtype = SRT_BF16;
    for (int pass = 0; pass < 3; pass++) {
        cu_state st = { 0 };
        srt_ctx c = { 0 };
        c.prog = &pg, c.cls = &cls, c.bs = &st;
        setenv("CUEMU_DNN_NONDETERMINISTIC", pass < 2 ? "1" : "0", 1);
        setenv("SRT_ATTN_NONDETERMINISTIC", pass == 1 ? "1" : "0", 1);
        if (pass == 2) cls.buffers = &buf, cls.nbuffers = 1, td_arena = td_alloc(4096);
        cu_attn_init(&c);
        cu_attn *a = st.attn;
        if (pass == 0)
            CHECK(!a->fwd.plan && !a->bwd.plan && strstr(a->bwd.why, "only nondeterministic engines"),
                  "nondeterministic engines were not skipped: %s", a->bwd.why);
        if (pass == 1)
            CHECK(a->fwd.plan && a->bwd.plan && a->bwd.nondeterministic, "SRT_ATTN_NONDETERMINISTIC=1 was not honoured");
        if (pass == 2)
            CHECK(!a->fwd.plan && !a->bwd.plan && strstr(a->fwd.why, "4096 available"),
                  "a 4096-byte workspace was used: %s", a->fwd.why);
        cu_attn_fini(&c);
        free(a);
    }
    td_free(td_arena);
    unsetenv("CUEMU_DNN_NONDETERMINISTIC");
    unsetenv("SRT_ATTN_NONDETERMINISTIC");
    printf("ok: attention.c skips nondeterministic engines (unless allowed) and a workspace too small\n");
}

int main(void)
{
    printf("emulated cuDNN %zu\n", cudnnGetVersion());
    cudnnCreate(&td_h);
    test_pointwise_reduction();
    test_matmul();
    test_rejections();
    test_attention("tiny-gpt (fused qkv), bf16", 0, 2, 16, 4, 4, 16, 0, SRT_BF16);
    test_attention("llama GQA (separate q, k, v), bf16", 1, 2, 12, 4, 2, 8, 0, SRT_BF16);
    test_attention("llama MQA (q, k, v apart), fp16", 1, 1, 16, 4, 1, 16, 4096, SRT_F16);
    test_attention_policy();
    td_destroy_descs();
    cudnnDestroy(td_h);
    /* every execute told the race detector what it touched */
    if (td_accesses == 0) printf("FAIL: cudnnBackendExecute recorded no accesses for the race detector\n"), fails++;
    printf("%s (%d failures)\n", fails ? "FAIL" : "ok", fails);
    return fails != 0;
}
