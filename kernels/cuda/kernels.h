/* kernels.h — the CUDA kernels (prefix kg_), the GPU twins of kernels/cpu (kc_).
 *
 * A plain C header (C11 or C++): one launcher per kernel, called by the CUDA
 * backend (runtime/cuda) on the stream an op is issued on.  docs/kernels.md
 * ("CUDA kernels") gives each kernel's algorithm, determinism and tolerance.
 *
 * Conventions shared by every launcher:
 * - Tensors are srt_t views (runtime/include/shardrt.h) of DEVICE memory: the
 *   pointer, the element count and the stored dtype.  Floating tensors may be
 *   SRT_F32, SRT_BF16 or SRT_F16 each on its own (arithmetic is fp32, results
 *   are rounded to nearest even when stored); statistics (mean, rstd, lse,
 *   the cross-entropy partials and losses), master weights and optimizer
 *   moments must be SRT_F32; tokens and targets SRT_I32.  A view with p NULL
 *   is an absent optional tensor.  The launcher checks every dtype and that
 *   every view holds at least the elements its shape reads or writes.
 * - Shapes are explicit ints, llm.c style, exactly as for the kc_ twin, and
 *   the semantics are the twin's: every backward ACCUMULATES (+=) into the
 *   gradients it writes (the caller zeroes them), except the cross-entropy
 *   backward, which overwrites the logits with dlogits.
 * - The stream comes last.  Launchers never synchronise and never allocate.
 * - Each returns cudaSuccess, cudaErrorInvalidValue for bad arguments (then
 *   kg_error_detail() says which), or the error of the launch itself.
 * - Deterministic: the same inputs on the same GPU give bit-identical outputs
 *   (no floating-point atomics anywhere; every reduction has a fixed order).
 */
#ifndef SHARDK_CUDA_KERNELS_H
#define SHARDK_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "shardrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The reason for the last error a launcher of this thread returned (one
 * line: the bad argument, or the launch's error; "" if none yet). */
const char *kg_error_detail(void);

/* ---- fill.cu: zero, fill, casts ------------------------------------------- */
/* x := 0 (any dtype; cudaMemsetAsync). */
cudaError_t kg_zero(srt_t x, cudaStream_t s);
/* x := value, rounded to x's dtype (floating dtypes only). */
cudaError_t kg_fill(srt_t x, float value, cudaStream_t s);
/* dst := src with a dtype conversion (same n; any pair of F32/BF16/F16,
 * round to nearest even, NaN stays NaN, fp16 overflow gives inf); equal
 * dtypes copy (I32 and U8 too). */
cudaError_t kg_convert(srt_t dst, srt_t src, cudaStream_t s);
/* x := f32(bf16(x)) for an F32 x: storing in bf16 and computing in fp32. */
cudaError_t kg_round_bf16(srt_t x, cudaStream_t s);

/* ---- embedding.cu: token (+ position) embedding, vocab-parallel ---------- */
/* out(B,T,C) = wte[tok - v0] for tokens in [v0,v1), else 0; + wpe(T,C)[t]
 * when wpe.p is not NULL.  wte is the local shard (v1-v0, C). */
cudaError_t kg_embedding_forward(srt_t out, srt_t tokens, srt_t wte, srt_t wpe,
                                 int B, int T, int C, int v0, int v1, cudaStream_t s);
/* dwte[tok - v0] += dout[b,t] for local tokens, in increasing b*T+t order per
 * row (each vocab row is owned by one block: no atomics); dwpe[t] +=
 * sum over b of dout[b,t], b increasing.  Either gradient may be absent. */
cudaError_t kg_embedding_backward(srt_t dwte, srt_t dwpe, srt_t dout, srt_t tokens,
                                  int B, int T, int C, int v0, int v1, cudaStream_t s);

/* ---- norm.cu: layernorm and rmsnorm over the last axis ------------------- */
/* out(N,C) = (inp - mean) * rstd * w + b (b may be absent); saves mean(N),
 * rstd(N) (F32; either may be absent). */
cudaError_t kg_layernorm_forward(srt_t out, srt_t mean, srt_t rstd, srt_t inp, srt_t w,
                                 srt_t b, int N, int C, float eps, cudaStream_t s);
/* dinp, dw, db += the gradients (any may be absent).  dw and db are reduced
 * over rows in a fixed order: per-block partials of fixed row ranges, then
 * the partials in block order. */
cudaError_t kg_layernorm_backward(srt_t dinp, srt_t dw, srt_t db, srt_t dout, srt_t inp,
                                  srt_t w, srt_t mean, srt_t rstd, int N, int C,
                                  cudaStream_t s);
/* out(N,C) = inp * rstd * w, rstd = 1/sqrt(mean(inp^2) + eps); saves rstd(N). */
cudaError_t kg_rmsnorm_forward(srt_t out, srt_t rstd, srt_t inp, srt_t w, int N, int C,
                               float eps, cudaStream_t s);
cudaError_t kg_rmsnorm_backward(srt_t dinp, srt_t dw, srt_t dout, srt_t inp, srt_t w,
                                srt_t rstd, int N, int C, cudaStream_t s);

/* ---- activation.cu: pointwise ops ----------------------------------------- */
/* out = gelu(inp) (tanh approximation), elementwise over inp.n. */
cudaError_t kg_gelu_forward(srt_t out, srt_t inp, cudaStream_t s);
/* dinp += gelu'(inp) * dout. */
cudaError_t kg_gelu_backward(srt_t dinp, srt_t inp, srt_t dout, cudaStream_t s);
/* out(N,H) = silu(a) * b, a and b rows ld elements apart (ld = 2H for the
 * halves of one [gate | up] row: pass the same buffer, b offset by H). */
cudaError_t kg_swiglu_forward(srt_t out, srt_t a, srt_t b, int N, int H, int ld,
                              cudaStream_t s);
/* da, db (rows ld apart, like a and b) += the gradients of silu(a) * b. */
cudaError_t kg_swiglu_backward(srt_t da, srt_t db, srt_t dout, srt_t a, srt_t b, int N,
                               int H, int ld, cudaStream_t s);
/* out = a + b over out.n (out may alias a or b). */
cudaError_t kg_residual_forward(srt_t out, srt_t a, srt_t b, cudaStream_t s);
/* da += dout; db += dout (either may be absent). */
cudaError_t kg_residual_backward(srt_t da, srt_t db, srt_t dout, cudaStream_t s);

/* ---- rope.cu: rotary position embedding, Hugging Face rotate-half -------- */
/* x (B,T,NH,HS), token rows ld elements apart; the position of token t is
 * pos0 + t.  out may equal inp (in place). */
cudaError_t kg_rope_forward(srt_t out, srt_t inp, int B, int T, int NH, int HS, int ld,
                            int pos0, float theta, cudaStream_t s);
/* dinp += R^T dout (dinp must not alias dout). */
cudaError_t kg_rope_backward(srt_t dinp, srt_t dout, int B, int T, int NH, int HS, int ld,
                             int pos0, float theta, cudaStream_t s);
/* out = R^T inp, overwriting (out may equal inp): srt_rope_bwd's in-place
 * dx := R^T dx without a copy. */
cudaError_t kg_rope_inverse(srt_t out, srt_t inp, int B, int T, int NH, int HS, int ld,
                            int pos0, float theta, cudaStream_t s);

/* ---- attention.cu: causal attention, the fallback when cuDNN declines ---- */
/* q (B,T,NH,HS), k and v (B,T,NKV,HS), token rows ld_q / ld_kv elements
 * apart; head h reads kv head h / (NH/NKV).  out (B,T,NH,HS) is packed; lse
 * (B,NH,T) F32 is each softmax row's log-sum-exp.  HS <= 256, NKV divides NH.
 * Scale 1/sqrt(HS); fp32 accumulation. */
cudaError_t kg_attention_forward(srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v, int B,
                                 int T, int NH, int NKV, int HS, int ld_q, int ld_kv,
                                 cudaStream_t s);
/* dq, dk, dv (the strides of q, k, v; they may all point into one dqkv) +=
 * the gradients.  dk and dv of a kv head are summed over its query heads and
 * query rows in a fixed order (no atomics). */
cudaError_t kg_attention_backward(srt_t dq, srt_t dk, srt_t dv, srt_t dout, srt_t out,
                                  srt_t lse, srt_t q, srt_t k, srt_t v, int B, int T, int NH,
                                  int NKV, int HS, int ld_q, int ld_kv, cudaStream_t s);

/* ---- crossentropy.cu: fused softmax cross-entropy, vocab-parallel -------- */
/* The pieces of kc_xent_*, so that the tp all-reduces go between them; the
 * probabilities are never stored.  logits (N,Vl) hold vocab columns
 * [v0, v0+Vl); columns >= V are padding.  Every other tensor is F32 (N)
 * except targets (I32, N).
 * Phase 1, per row: rowmax = local max, rowsum = sum exp(x - rowmax),
 * tlogit = the target's logit if the target is local, else 0. */
cudaError_t kg_xent_partial(srt_t rowmax, srt_t rowsum, srt_t tlogit, srt_t logits,
                            srt_t targets, int N, int Vl, int v0, int V, cudaStream_t s);
/* After gmax = max-allreduce(rowmax): rowsum *= exp(rowmax - gmax); then the
 * caller sum-allreduces rowsum and tlogit. */
cudaError_t kg_xent_rescale(srt_t rowsum, srt_t rowmax, srt_t gmax, int N, cudaStream_t s);
/* The same combine for R partials held in one process, laid out [R][N]
 * (R = 1: the single-rank case; then gmax, gsum, gtlogit may alias rowmax,
 * rowsum, tlogit). */
cudaError_t kg_xent_combine(srt_t gmax, srt_t gsum, srt_t gtlogit, srt_t rowmax,
                            srt_t rowsum, srt_t tlogit, int R, int N, cudaStream_t s);
/* Phase 2: loss(N) = log(gsum) + gmax - gtlogit (0 where target < 0). */
cudaError_t kg_xent_loss(srt_t loss, srt_t targets, srt_t gmax, srt_t gsum, srt_t gtlogit,
                         int N, cudaStream_t s);
/* Phase 2: logits := (softmax - onehot(target)) * dloss, in place; padded
 * columns and rows whose target is < 0 get 0. */
cudaError_t kg_xent_backward(srt_t logits, srt_t targets, srt_t gmax, srt_t gsum,
                             float dloss, int N, int Vl, int v0, int V, cudaStream_t s);

/* ---- optim.cu: optimizer steps on flat fp32 shards, gradient norm -------- */
/* The step's scales live on the device (written by kg_norm_finish), so that
 * no host synchronisation is needed between the norm and the step: the
 * gradient multiplier is *clip_scale / loss_scale (clip_scale NULL: 1), and
 * when *skip (may be NULL) is non-zero the step leaves everything untouched
 * (a non-finite norm under fp16 loss scaling). */
typedef struct KgAdamW {
    double lr, beta1, beta2, eps, weight_decay; /* weight_decay: this range's      */
    int t;                                      /* step, from 1                    */
    int l2;                                     /* 1: Adam, weight decay as L2 in  */
                                                /* the gradient; 0: AdamW          */
    float loss_scale;                           /* grads are divided by it         */
} KgAdamW;
/* torch.optim.AdamW (or Adam) on master(n) F32 with moments m(n), v(n) F32
 * and grads(n) of any floating dtype, n = master.n; writes the new weights
 * rounded to params' dtype into params when params.p is not NULL and not
 * master.p. */
cudaError_t kg_adamw_step(srt_t params, srt_t master, srt_t grads, srt_t m, srt_t v,
                          KgAdamW h, const float *clip_scale, const int *skip,
                          cudaStream_t s);
typedef struct KgSGD {
    double lr, momentum, dampening, weight_decay;
    int nesterov, first_step;                   /* first_step: buf := grad         */
    float loss_scale;
} KgSGD;
/* torch.optim.SGD; buf(n) F32 is the momentum buffer (may be absent when
 * momentum = 0).  params as for kg_adamw_step. */
cudaError_t kg_sgd_step(srt_t params, srt_t master, srt_t grads, srt_t buf, KgSGD h,
                        const float *clip_scale, const int *skip, cudaStream_t s);

/* The exact sum of squares, the same bins as KcSumsq (kernels/cpu/kernels.h):
 * for every float exponent e, the integer sum of the squared 24-bit
 * significands split into 24-bit halves; bin 255 counts infinities (lo) and
 * NaNs (hi).  Integer sums are associative, so the bins are bit-identical to
 * the CPU's whatever the grid, the order or the sharding; ranks combine them
 * with a uint64 sum all-reduce of the 512 words. */
enum { KG_SUMSQ_BINS = 256 };
typedef struct KgSumsq { unsigned long long lo[KG_SUMSQ_BINS], hi[KG_SUMSQ_BINS]; } KgSumsq;
/* *acc := 0 (acc in device memory). */
cudaError_t kg_sumsq_zero(KgSumsq *acc, cudaStream_t s);
/* *acc += the squares of x (F32, BF16 or F16; fp16 widens exactly). */
cudaError_t kg_sumsq_add(KgSumsq *acc, srt_t x, cudaStream_t s);
/* One thread, the CPU's arithmetic (kc_sumsq_value, then the CPU backend's
 * finish): *norm = sqrt(value) / loss_scale; *overflow = !isfinite(norm);
 * *clip_scale = min(1, (float)(grad_clip / (norm + 1e-6))) when grad_clip >
 * 0 and no overflow, else 1.  Any output pointer may be NULL. */
cudaError_t kg_norm_finish(double *norm, float *clip_scale, int *overflow,
                           const KgSumsq *acc, double grad_clip, float loss_scale,
                           cudaStream_t s);
/* x *= scale over x.n (F32/BF16/F16).  (This and kg_all_finite are in fill.cu.) */
cudaError_t kg_scale(srt_t x, float scale, cudaStream_t s);
/* The loss-scale overflow check: sets *all_finite (a device int) to 0 when
 * an element of x is inf or NaN and leaves it alone otherwise; the caller
 * sets it to 1 before a series of calls, which then AND.  Order-free. */
cudaError_t kg_all_finite(int *all_finite, srt_t x, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
