/* cudnn_graph.c — builds runtime/cuda/attention.c's cuDNN attention graphs
 * (forward and backward) for the shapes the generated trainers use, without
 * a GPU: every tensor, pointwise, matmul, reduction and reshape descriptor
 * must finalize against the installed cuDNN (the operation graph, the
 * heuristics and the plans need a device and are not built here).  Includes
 * attention.c itself, with link-time fakes of the runtime functions it
 * calls: a dtype size and an allocation, and aborting ones for the start-up
 * and call paths a graph build never takes.  Exit 0 when both graphs of every
 * shape finalize, else 1 naming the first failure. */
#include "attention.c"

#include <stdlib.h>

/* The runtime functions attention.c links against (see the top). */
void *ctx_alloc(srt_ctx *c, int64_t n, const char *w) { (void)c, (void)w; return calloc(1, (size_t)n); }
void ctx_die_at(const srt_ctx *c, const char *f, int l, const char *fmt, ...) { (void)c, (void)f, (void)l, (void)fmt; abort(); }
void ctx_fatal(const srt_ctx *c, int code, const char *fmt, ...) { (void)c, (void)code, (void)fmt; abort(); }
void cu_check_at(srt_ctx *c, cudaError_t e, const char *w, const char *f, int l) { (void)c, (void)e, (void)w, (void)f, (void)l; abort(); }
void cu_kg(srt_ctx *c, cudaError_t e, const char *op) { (void)c, (void)e, (void)op; abort(); }
int64_t ops_dtype_size(srt_dtype dt) { return dt == SRT_F32 ? 4 : 2; }
void *srt_dev(srt_ctx *c, int64_t o) { (void)c, (void)o; abort(); }
cudaError_t kg_attention_forward(srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v, int B, int T, int NH, int NKV,
                                 int HS, int ld_q, int ld_kv, cudaStream_t s)
{ (void)out, (void)lse, (void)q, (void)k, (void)v, (void)B, (void)T, (void)NH, (void)NKV, (void)HS, (void)ld_q, (void)ld_kv, (void)s; abort(); }
cudaError_t kg_attention_backward(srt_t dq, srt_t dk, srt_t dv, srt_t dout, srt_t out, srt_t lse, srt_t q, srt_t k,
                                  srt_t v, int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv, cudaStream_t s)
{ (void)dq, (void)dk, (void)dv, (void)dout, (void)out, (void)lse, (void)q, (void)k, (void)v, (void)B, (void)T, (void)NH, (void)NKV, (void)HS, (void)ld_q, (void)ld_kv, (void)s; abort(); }
cudaError_t kg_residual_forward(srt_t out, srt_t a, srt_t b, cudaStream_t s) { (void)out, (void)a, (void)b, (void)s; abort(); }

/* Builds both graphs of one shape; 1 on a failure. */
static int cg_shape(const char *name, int B, int T, int NH, int NKV, int HS, int ldq, int ldkv, srt_dtype dt)
{
    static cu_attn a;
    cu_attn_graph_fini(&a.fwd);
    cu_attn_graph_fini(&a.bwd);
    memset(&a, 0, sizeof a);
    a.B = B, a.T = T, a.NH = NH, a.NKV = NKV, a.HS = HS, a.ldq = ldq, a.ldkv = ldkv, a.dt = dt;
    a.fwd.next_uid = a.bwd.next_uid = U_VIRTUAL;
    cu_attn_fwd_graph(&a, &a.fwd);
    cu_attn_bwd_graph(&a, &a.bwd);
    int bad = a.fwd.failed || a.bwd.failed || a.fwd.nops != 14 || a.bwd.nops != (NKV == NH ? 22 : 24);
    printf("%s: %s (B %d, T %d, heads %d/%d, head size %d, ld %d/%d): forward %s, %d operations; backward %s, "
           "%d operations\n", bad ? "FAIL" : "ok", name, B, T, NH, NKV, HS, ldq, ldkv,
           a.fwd.failed ? a.fwd.why : "finalized", a.fwd.nops, a.bwd.failed ? a.bwd.why : "finalized", a.bwd.nops);
    return bad;
}

int main(void)
{
    printf("cuDNN %zu\n", cudnnGetVersion());
    int bad = 0;
    bad |= cg_shape("tiny-gpt (fused qkv)", 4, 64, 4, 4, 16, 192, 192, SRT_BF16);
    bad |= cg_shape("gpt2-124M (fused qkv)", 4, 1024, 12, 12, 64, 2304, 2304, SRT_BF16);
    bad |= cg_shape("llama GQA (separate q, k, v)", 2, 256, 8, 2, 64, 512, 128, SRT_BF16);
    bad |= cg_shape("fp16", 2, 128, 4, 4, 32, 384, 384, SRT_F16);
    return bad;
}
