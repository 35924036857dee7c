/* attention.c — causal attention on the GPU.
 *
 * This version runs every shape on kernels/cuda's kg_attention_forward /
 * kg_attention_backward (fp32 accumulation, deterministic, any HS <= 256 and
 * GQA).  The cuDNN handle is created at start-up, so a broken cuDNN install
 * fails there, and the start-up line says which path attention takes; the
 * fused cuDNN SDPA graphs (backend API) are not built yet (docs/trainer.md,
 * "CUDA backend"). */
#include "cu.h"

#include <stdio.h>

/* The cuDNN handle on the compute stream; the path, reported once. */
void cu_attn_init(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    cudnnStatus_t r = cudnnCreate(&st->dnn);
    if (r != CUDNN_STATUS_SUCCESS)
        ctx_fatal(c, 1, "cudnnCreate: %s (is libcudnn %d on the library path?)", cudnnGetErrorString(r),
                  (int)CUDNN_MAJOR);
    r = cudnnSetStream(st->dnn, st->stream[SRT_COMPUTE]);
    if (r != CUDNN_STATUS_SUCCESS) ctx_die(c, "cudnnSetStream: %s", cudnnGetErrorString(r));
    if (c->rank == 0 && c->prog->heads > 0) {
        printf("shardrt: cuda: attention (B %lld, T %lld, heads %lld, head size %lld): kg_ attention kernels "
               "(cuDNN %zu loaded; its fused SDPA graphs are not used by this backend)\n",
               (long long)c->prog->micro_batch, (long long)c->prog->seq_len, (long long)c->prog->heads,
               (long long)(c->prog->hidden / c->prog->heads), cudnnGetVersion());
        fflush(stdout);
    }
}

/* Releases the handle. */
void cu_attn_fini(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    if (st->dnn) cudnnDestroy(st->dnn);
    st->dnn = NULL;
}

void cu_attention_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v,
                      int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv)
{
    cu_kg(c, kg_attention_forward(out, lse, q, k, v, B, T, NH, NKV, HS, ld_q, ld_kv, cu_stream(c, s)),
          "attention_fwd");
}

void cu_attention_bwd(srt_ctx *c, srt_stream s, srt_t dq, srt_t dk, srt_t dv, srt_t dout,
                      srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v,
                      int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv)
{
    cu_kg(c, kg_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, B, T, NH, NKV, HS, ld_q, ld_kv,
                                   cu_stream(c, s)), "attention_bwd");
}
