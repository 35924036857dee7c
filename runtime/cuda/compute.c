/* compute.c — the CUDA backend's compute ops over the kg_* kernels
 * (kernels/cuda), each launched on its op's stream; the data loader's
 * batches through pinned staging; the loss; the fused cross-entropy with
 * its tp all-reduces between the kernel phases. */
#include "cu.h"

#include <stdlib.h>
#include <string.h>

#include "data.h"

/* Allocates the scratch: 6 N floats, or N x the fused qkv width for Llama's
 * rope backward when larger (N: the token rows of a microbatch). */
void cu_compute_init(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    const srt_program *p = c->prog;
    int64_t N = p->micro_batch * p->seq_len;
    int64_t heads = p->heads > 0 ? p->heads : 1, kv = p->kv_heads > 0 ? p->kv_heads : heads;
    int64_t hs = p->hidden / heads, wqkv = (heads + 2 * kv) * hs;
    st->rows_max = N;
    st->scratch_n = 6 * N + 64;
    if (p->family == 1 && N * wqkv > st->scratch_n) st->scratch_n = N * wqkv;   /* rope: Llama only */
    CU_CHECK(c, cudaMalloc((void **)&st->scratch, (size_t)st->scratch_n * 4), "cudaMalloc (compute scratch)");
    /* two steps of microbatches: a slot is reused two steps after it was
     * filled, after the end-of-step stream syncs, so srt_load_batch never
     * waits for the device inside a step */
    st->nstages = p->microbatches > 2 ? 2 * (int)p->microbatches : 4;
    CU_CHECK(c, cudaHostAlloc((void **)&st->batch_stage, (size_t)st->nstages * 2 * (size_t)N * 4, cudaHostAllocPortable),
             "cudaHostAlloc (batch staging)");
    st->stage_done = ctx_alloc(c, (int64_t)st->nstages * (int64_t)sizeof *st->stage_done, "the batch staging's events");
    for (int i = 0; i < st->nstages; i++)
        CU_CHECK(c, cudaEventCreateWithFlags(&st->stage_done[i], cudaEventDisableTiming), "cudaEventCreate");
}

/* Releases the scratch and the staging. */
void cu_compute_fini(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    cudaFree(st->scratch);
    st->scratch = NULL;
    if (st->batch_stage) cudaFreeHost(st->batch_stage);
    for (int i = 0; st->stage_done && i < st->nstages; i++)
        if (st->stage_done[i]) cudaEventDestroy(st->stage_done[i]);
    free(st->stage_done);
    st->stage_done = NULL;
}

/* ---- data and loss ------------------------------------------------------------------ */

/* The loader fills a pinned slot (after the slot's last copy has finished:
 * two steps ago in training, so the host does not wait), then the copy to
 * the arena runs on s. */
void cu_load_batch(srt_ctx *c, srt_stream s, int mb, srt_t tokens, srt_t targets)
{
    cu_state *st = cu_st(c);
    if (!c->data) ctx_die(c, "load_batch: no data loader is attached to the context");
    int64_t n = c->prog->micro_batch * c->prog->seq_len;
    int slot = st->stage_next;
    st->stage_next = (slot + 1) % st->nstages;
    cudaError_t q = cudaEventQuery(st->stage_done[slot]);   /* done: no host sync inside a step */
    if (q == cudaErrorNotReady) q = cudaEventSynchronize(st->stage_done[slot]);
    CU_CHECK(c, q, "load_batch: waiting for a staging slot");
    int32_t *tok = st->batch_stage + (size_t)slot * 2 * (size_t)n, *tgt = tok + n;
    int e = data_batch(c->data, c->data_step, c->dp_idx, c->prog->dp, mb, c->prog->micro_batch, tok, tgt);
    if (e != DATA_OK) ctx_fatal(c, 1, "%s", data_error(c->data));
    cudaStream_t cs = cu_stream(c, s);
    if (tokens.p)
        CU_CHECK(c, cudaMemcpyAsync(tokens.p, tok, (size_t)n * 4, cudaMemcpyHostToDevice, cs), "load_batch: tokens");
    if (targets.p)
        CU_CHECK(c, cudaMemcpyAsync(targets.p, tgt, (size_t)n * 4, cudaMemcpyHostToDevice, cs), "load_batch: targets");
    CU_CHECK(c, cudaEventRecord(st->stage_done[slot], cs), "load_batch: cudaEventRecord");
}

/* loss += mean(losses) / microbatches on the device; c->loss gets it at the
 * stream's next sync (the end of the step). */
void cu_loss_add(srt_ctx *c, srt_stream s, srt_t losses, int N)
{
    cu_state *st = cu_st(c);
    double *acc = NULL;
    CU_CHECK(c, cudaHostGetDevicePointer((void **)&acc, &st->loss_acc[s], 0), "loss_add: cudaHostGetDevicePointer");
    CU_CHECK(c, cu_k_loss_add(acc, losses.p, N, 1.0 / (double)c->prog->microbatches, cu_stream(c, s)), "loss_add");
    st->loss_pending[s] = true;
}

/* ---- norms, activations, residuals ------------------------------------------------------- */

void cu_layernorm_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t mean, srt_t rstd, srt_t inp,
                      srt_t w, srt_t b, int N, int C, float eps)
{
    cu_kg(c, kg_layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps, cu_stream(c, s)), "layernorm_fwd");
}

void cu_layernorm_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t db, srt_t dout,
                      srt_t inp, srt_t w, srt_t mean, srt_t rstd, int N, int C)
{
    cu_kg(c, kg_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, cu_stream(c, s)),
          "layernorm_bwd");
}

void cu_rmsnorm_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t rstd, srt_t inp, srt_t w,
                    int N, int C, float eps)
{
    cu_kg(c, kg_rmsnorm_forward(out, rstd, inp, w, N, C, eps, cu_stream(c, s)), "rmsnorm_fwd");
}

void cu_rmsnorm_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t dout, srt_t inp,
                    srt_t w, srt_t rstd, int N, int C)
{
    cu_kg(c, kg_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C, cu_stream(c, s)), "rmsnorm_bwd");
}

void cu_gelu_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t inp)
{
    cu_kg(c, kg_gelu_forward(out, inp, cu_stream(c, s)), "gelu_fwd");
}

void cu_gelu_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t inp, srt_t dout)
{
    cu_kg(c, kg_gelu_backward(dinp, inp, dout, cu_stream(c, s)), "gelu_bwd");
}

void cu_swiglu_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t a, srt_t b, int N, int H, int ld)
{
    cu_kg(c, kg_swiglu_forward(out, a, b, N, H, ld, cu_stream(c, s)), "swiglu_fwd");
}

void cu_swiglu_bwd(srt_ctx *c, srt_stream s, srt_t da, srt_t db, srt_t dout, srt_t a, srt_t b,
                   int N, int H, int ld)
{
    cu_kg(c, kg_swiglu_backward(da, db, dout, a, b, N, H, ld, cu_stream(c, s)), "swiglu_bwd");
}

void cu_add_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t a, srt_t b)
{
    cu_kg(c, kg_residual_forward(out, a, b, cu_stream(c, s)), "add_fwd");
}

void cu_add_bwd(srt_ctx *c, srt_stream s, srt_t da, srt_t db, srt_t dout)
{
    cu_kg(c, kg_residual_backward(da, db, dout, cu_stream(c, s)), "add_bwd");
}

/* ---- rope ---------------------------------------------------------------------------------- */

void cu_rope_fwd(srt_ctx *c, srt_stream s, srt_t x, int B, int T, int NH, int HS, int ld, float theta)
{
    cu_kg(c, kg_rope_forward(x, x, B, T, NH, HS, ld, 0, theta, cu_stream(c, s)), "rope_fwd");
}

/* In place: dx's rotated columns go to scratch (same row stride), are
 * zeroed in dx, and kg_rope_backward adds R^T of the copy back. */
void cu_rope_bwd(srt_ctx *c, srt_stream s, srt_t dx, int B, int T, int NH, int HS, int ld, float theta)
{
    cu_state *st = cu_st(c);
    cudaStream_t cs = cu_stream(c, s);
    int64_t es = cu_dsize(dx.dt), rows = (int64_t)B * T, span = (rows - 1) * ld + (int64_t)NH * HS;
    if (span * es > st->scratch_n * 4)
        ctx_die(c, "rope_bwd: %lld elements of scratch, the backend planned %lld bytes", (long long)span,
                (long long)st->scratch_n * 4);
    CU_CHECK(c, cudaMemcpyAsync(st->scratch, dx.p, (size_t)(span * es), cudaMemcpyDefault, cs), "rope_bwd: copy");
    CU_CHECK(c, cudaMemset2DAsync(dx.p, (size_t)(ld * es), 0, (size_t)((int64_t)NH * HS * es), (size_t)rows, cs),
             "rope_bwd: zero");
    srt_t tmp = { st->scratch, span, dx.dt };
    srt_t d = { dx.p, span, dx.dt };
    cu_kg(c, kg_rope_backward(d, tmp, B, T, NH, HS, ld, 0, theta, cs), "rope_bwd");
}

/* ---- embedding ------------------------------------------------------------------------------ */

void cu_embed_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t tokens, srt_t wte, srt_t wpe,
                  int B, int T, int C, int v0, int v1)
{
    cu_kg(c, kg_embedding_forward(out, tokens, wte, wpe, B, T, C, v0, v1, cu_stream(c, s)), "embed_fwd");
}

void cu_embed_bwd(srt_ctx *c, srt_stream s, srt_t dwte, srt_t dwpe, srt_t dout, srt_t tokens,
                  int B, int T, int C, int v0, int v1)
{
    cu_kg(c, kg_embedding_backward(dwte, dwpe, dout, tokens, B, T, C, v0, v1, cu_stream(c, s)), "embed_bwd");
}

/* ---- cross-entropy --------------------------------------------------------------------------- */

/* The phases of kg_xent_*; across the tp group the row max, then the row
 * sums and target logits (one all-reduce of 2N adjacent floats), on s.  dloss
 * already carries the fp16 loss scale (the emitted head multiplies it). */
void cu_xent_fwd_bwd(srt_ctx *c, srt_stream s, srt_t losses, srt_t logits, srt_t targets,
                     int N, int Vl, int v0, int V, float dloss)
{
    cu_state *st = cu_st(c);
    cudaStream_t cs = cu_stream(c, s);
    if (N > st->rows_max) ctx_die(c, "xent_fwd_bwd: %d rows, the backend planned %lld", N, (long long)st->rows_max);
    float *f = st->scratch;
    srt_t rowmax = { f, N, SRT_F32 }, rowsum = { f + N, N, SRT_F32 }, tlogit = { f + 2 * N, N, SRT_F32 };
    srt_t gmax = { f + 3 * N, N, SRT_F32 };
    cu_kg(c, kg_xent_partial(rowmax, rowsum, tlogit, logits, targets, N, Vl, v0, V, cs), "xent_fwd_bwd: partial");
    if (c->gsize[SRT_TP] > 1) {
        CU_CHECK(c, cudaMemcpyAsync(gmax.p, rowmax.p, (size_t)N * 4, cudaMemcpyDeviceToDevice, cs), "xent: copy");
        cu_allreduce_raw(c, s, SRT_TP, gmax.p, N, ncclFloat32, ncclMax, "xent_fwd_bwd (row max)");
        cu_kg(c, kg_xent_rescale(rowsum, rowmax, gmax, N, cs), "xent_fwd_bwd: rescale");
        cu_allreduce_raw(c, s, SRT_TP, rowsum.p, 2 * (int64_t)N, ncclFloat32, ncclSum, "xent_fwd_bwd (row sums)");
    } else {
        cu_kg(c, kg_xent_combine(gmax, rowsum, tlogit, rowmax, rowsum, tlogit, 1, N, cs), "xent_fwd_bwd: combine");
    }
    cu_kg(c, kg_xent_loss(losses, targets, gmax, rowsum, tlogit, N, cs), "xent_fwd_bwd: loss");
    cu_kg(c, kg_xent_backward(logits, targets, gmax, rowsum, dloss, N, Vl, v0, V, cs),
          "xent_fwd_bwd: backward");
}

/* The fused head as its three ops on s: the logits GEMM, the cross-entropy
 * (the logits overwritten with their gradient) and, when a gradient is
 * asked for, the two backward GEMMs.  cuBLASLt plans their shapes at
 * start-up (the emitter declares a head_xent's GEMMs as those of the
 * matmul ops). */
void cu_head_xent(srt_ctx *c, srt_stream s, srt_t losses, srt_t dinp, srt_t dw, srt_t logits, srt_t inp, srt_t w,
                  srt_t targets, int N, int C, int Vl, int v0, int V, float dloss)
{
    srt_t none = { NULL, 0, SRT_F32 };
    cu_matmul_fwd(c, s, logits, inp, w, none, N, C, Vl);
    cu_xent_fwd_bwd(c, s, losses, logits, targets, N, Vl, v0, V, dloss);
    if (dinp.p || dw.p) cu_matmul_bwd(c, s, dinp, dw, none, logits, inp, w, N, C, Vl);
}

/* ---- casts and zeroing ------------------------------------------------------------------------ */

void cu_convert(srt_ctx *c, srt_stream s, srt_t dst, srt_t src)
{
    cu_kg(c, kg_convert(dst, src, cu_stream(c, s)), "convert");
}

void cu_zero(srt_ctx *c, srt_stream s, srt_t x)
{
    cu_kg(c, kg_zero(x, cu_stream(c, s)), "zero");
}
