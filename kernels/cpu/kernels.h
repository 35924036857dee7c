/* kernels.h — the CPU reference kernels (prefix kc_), one file per op family.
 *
 * Plain C functions on contiguous fp32 arrays: the numerical truth that the
 * CUDA kernels are checked against and the compute of the CPU backend.
 * docs/kernels.md says what each one computes, its shapes and its numerics.
 *
 * Conventions shared by every kernel:
 * - Shapes are written as in llm.c: (B,T,C) is B*T*C floats, C fastest.
 * - Every backward ACCUMULATES (+=) into every gradient it writes, inputs and
 *   parameters alike; the caller zeroes them.  Accumulating is how gradient
 *   accumulation over micro-batches and the two uses of a residual work.
 *   The one exception is the fused cross-entropy, which writes dlogits in
 *   place over the logits (kc_xent_backward, kc_head_backward).
 * - Where a backward has several gradient outputs, any of them may be NULL:
 *   that gradient is not computed.
 * - Deterministic: the same inputs give bit-identical outputs whatever
 *   OMP_NUM_THREADS is.  No float reduction depends on the thread count;
 *   every cross-row reduction has a fixed order.
 * - No kernel allocates memory: scratch lives on the stack in small tiles,
 *   or is the caller's (the fused head's, kc_head_scratch_floats).
 */
#ifndef SHARDK_CPU_KERNELS_H
#define SHARDK_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* ---- matmul.c: linear layers through OpenBLAS --------------------------- */
/* Makes OpenBLAS single-threaded (the kernels split GEMMs across OpenMP
 * threads themselves, in chunks fixed by the shape).  Called by the matmuls on first
 * use; call it at start-up to keep that out of a timed region. */
void kc_init(void);
/* OpenBLAS's name for the kernels it runs ("Prescott", "SkylakeX", ...). */
const char *kc_blas_core(void);
/* The kernels OpenBLAS should be told to run (its OPENBLAS_CORETYPE, read
 * when the library is loaded) because the ones it chose leave this CPU's
 * AVX2 or AVX-512 unused — a CPU model it does not recognise, on which it
 * falls back to SSE3 — or NULL when its choice stands. */
const char *kc_blas_core_upgrade(void);
/* out(N,OC) = inp(N,C) . weight(OC,C)^T + bias(OC); bias may be NULL. */
void kc_matmul_forward(float *out, const float *inp, const float *weight,
                       const float *bias, int N, int C, int OC);
/* dinp(N,C) += dout.weight; dweight(OC,C) += dout^T.inp; dbias(OC) += sum dout. */
void kc_matmul_backward(float *dinp, float *dweight, float *dbias,
                        const float *dout, const float *inp, const float *weight,
                        int N, int C, int OC);

/* ---- norm.c: layernorm and rmsnorm over the last axis ------------------- */
/* out(N,C) = (inp - mean) * rstd * weight + bias; saves mean(N), rstd(N). */
void kc_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int N, int C, float eps);
void kc_layernorm_backward(float *dinp, float *dweight, float *dbias,
                           const float *dout, const float *inp, const float *weight,
                           const float *mean, const float *rstd, int N, int C);
/* out(N,C) = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps); saves rstd(N). */
void kc_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                        int N, int C, float eps);
void kc_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                         const float *weight, const float *rstd, int N, int C);

/* ---- activation.c: pointwise ops on flat arrays -------------------------- */
void kc_gelu_forward(float *out, const float *inp, size_t n);      /* tanh approximation */
void kc_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
/* d := gelu'(inp) * d, in place (a data gradient through the gelu). */
void kc_gelu_backward_inplace(float *d, const float *inp, size_t n);
void kc_relu_forward(float *out, const float *inp, size_t n);
void kc_relu_backward(float *dinp, const float *inp, const float *dout, size_t n);
/* out(N,H) = silu(a) * b, where a and b are (N,H) with row stride ld (floats):
 * ld = H for two tensors, ld = 2H for the halves of one [gate | up] row. */
void kc_swiglu_forward(float *out, const float *a, const float *b, int N, int H, int ld);
/* da, db (row stride ld, like a and b) += the gradients of silu(a) * b. */
void kc_swiglu_backward(float *da, float *db, const float *dout, const float *a,
                        const float *b, int N, int H, int ld);
void kc_residual_forward(float *out, const float *a, const float *b, size_t n);
void kc_residual_backward(float *da, float *db, const float *dout, size_t n);

/* ---- attention.c: causal self-attention, grouped-query, flash-style ------ */
/* q (B,T,NH,HS) and k, v (B,T,NKV,HS), each token row ld_q / ld_kv floats
 * apart (NH*HS and NKV*HS when packed; 3C for llm.c's fused qkv (B,T,3C)).
 * Head h reads kv head h / (NH/NKV).  out (B,T,NH,HS) is packed; lse (B,NH,T)
 * holds the log-sum-exp of each softmax row, all that backward needs. */
typedef struct KcAttnShape { int B, T, NH, NKV, HS, ld_q, ld_kv; } KcAttnShape;
void kc_attention_forward(float *out, float *lse, const float *q, const float *k,
                          const float *v, KcAttnShape s);
/* dq, dk, dv have the strides of q, k, v; they may all point into one dqkv. */
void kc_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                           const float *out, const float *lse, const float *q,
                           const float *k, const float *v, KcAttnShape s);

/* ---- rope.c: rotary position embedding, Hugging Face rotate-half -------- */
/* x (B,T,NH,HS), token rows ld floats apart; position of token t is
 * pos0 + t.  out may equal inp (in place). */
void kc_rope_forward(float *out, const float *inp, int B, int T, int NH, int HS, int ld,
                     int pos0, float theta);
/* dinp += R^T dout (dinp must not alias dout). */
void kc_rope_backward(float *dinp, const float *dout, int B, int T, int NH, int HS, int ld,
                      int pos0, float theta);
/* The angles' cos and sin of positions 0 .. npos-1, (npos, HS/2) each, as
 * the two above compute them: the same bits. */
void kc_rope_table(float *cs, float *sn, int npos, int HS, float theta);
/* kc_rope_forward and kc_rope_backward from such a table: cs, sn its rows
 * from position pos0 on. */
void kc_rope_forward_tab(float *out, const float *inp, int B, int T, int NH, int HS, int ld,
                         const float *cs, const float *sn);
void kc_rope_backward_tab(float *dinp, const float *dout, int B, int T, int NH, int HS, int ld,
                          const float *cs, const float *sn);
/* x := R^T x in place from such a table: kc_rope_backward into zeros, without
 * the zeros or a copy (the same values; a zero's sign may differ). */
void kc_rope_inverse_tab(float *x, int B, int T, int NH, int HS, int ld, const float *cs, const float *sn);

/* ---- embedding.c: token (+ position) embedding, vocab-parallel ---------- */
/* out(B,T,C) = wte[tok - v0] for tokens in [v0,v1), else 0; + wpe(T,C)[t]
 * when wpe is not NULL.  wte is the local shard (v1-v0, C). */
void kc_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                          const float *wpe, int B, int T, int C, int v0, int v1);
void kc_embedding_backward(float *dwte, float *dwpe, const float *dout,
                           const int32_t *tokens, int B, int T, int C, int v0, int v1);

/* ---- crossentropy.c: fused softmax cross-entropy, vocab-parallel -------- */
/* logits (N,Vl) hold vocab columns [v0, v0+Vl); columns >= V are padding.
 * Phase 1, per row: rowmax = local max, rowsum = sum exp(x - rowmax),
 * tlogit = the target's logit if the target is local, else 0. */
void kc_xent_partial(float *rowmax, float *rowsum, float *tlogit, const float *logits,
                     const int32_t *targets, int N, int Vl, int v0, int V);
/* Across tp ranks: gmax = max-allreduce(rowmax); kc_xent_rescale; then
 * sum-allreduce rowsum and tlogit.  rowsum *= exp(rowmax - gmax). */
void kc_xent_rescale(float *rowsum, const float *rowmax, const float *gmax, int N);
/* The same combine for R partials held in one process, laid out [R][N]
 * (R = 1: the single-rank case; R > 1: a split vocabulary in a test). */
void kc_xent_combine(float *gmax, float *gsum, float *gtlogit, const float *rowmax,
                     const float *rowsum, const float *tlogit, int R, int N);
/* Phase 2: loss(N) = log(gsum) + gmax - gtlogit (0 where target < 0). */
void kc_xent_loss(float *loss, const int32_t *targets, const float *gmax,
                  const float *gsum, const float *gtlogit, int N);
/* Phase 2: logits := (softmax - onehot(target)) * dloss, in place; padded
 * columns and rows whose target is < 0 get 0. */
void kc_xent_backward(float *logits, const int32_t *targets, const float *gmax,
                      const float *gsum, float dloss, int N, int Vl, int v0, int V);

/* ---- head.c: the output head fused with the cross-entropy, vocab-parallel */
/* logits (N,Vl) = inp(N,C) . w(Vl,C)^T hold vocab columns [v0, v0+Vl) of V;
 * columns >= V are padding.  The phases of crossentropy.c around the GEMMs,
 * a chunk of the vocabulary at a time (head.c says how). */
typedef struct KcHeadShape { int N, C, Vl, v0, V; } KcHeadShape;
/* The floats of scratch either phase needs. */
size_t kc_head_scratch_floats(KcHeadShape s);
/* Phase 1: the logits, and kc_xent_partial's three row statistics. */
void kc_head_forward(float *logits, float *rowmax, float *rowsum, float *tlogit, float *scratch,
                     const float *inp, const float *w, const int32_t *targets, KcHeadShape s);
/* Phase 2, with the combined gmax and gsum: logits := dlogits = (softmax -
 * onehot) * dloss in place (0 on padding and ignored rows), then
 * dinp(N,C) += dlogits . w and dw(Vl,C) += dlogits^T . inp (either may be
 * NULL). */
void kc_head_backward(float *dinp, float *dw, float *logits, float *scratch, const float *inp,
                      const float *w, const int32_t *targets, const float *gmax, const float *gsum,
                      float dloss, KcHeadShape s);

/* ---- optim.c: optimizer steps on flat fp32 shards, gradient norm -------- */
typedef struct KcAdamW {
    double lr, beta1, beta2, eps, weight_decay; /* weight_decay: this range's */
    int t;                                      /* step, from 1               */
    float grad_scale;                           /* grads are multiplied by it */
} KcAdamW;
/* torch.optim.AdamW on params(n) with moments m(n), v(n); writes a bf16 copy
 * of the new params to params_bf16 when it is not NULL. */
void kc_adamw_step(float *params, uint16_t *params_bf16, const float *grads, float *m,
                   float *v, size_t n, KcAdamW h);
typedef struct KcSGD {
    double lr, momentum, dampening, weight_decay;
    int nesterov, first_step;                   /* first_step: buf := grad    */
    float grad_scale;
} KcSGD;
/* torch.optim.SGD; buf(n) is the momentum buffer (unused if momentum = 0). */
void kc_sgd_step(float *params, const float *grads, float *buf, size_t n, KcSGD h);

/* The exact sum of squares of many floats: for every float exponent, the
 * integer sum of the squared 24-bit significands, split into 24-bit halves.
 * Integer sums are associative, so the result is the same for any thread
 * count and any sharding; ranks combine by an MPI_SUM of 512 uint64. */
enum { KC_SUMSQ_BINS = 256 };
typedef struct KcSumsq { uint64_t lo[KC_SUMSQ_BINS], hi[KC_SUMSQ_BINS]; } KcSumsq;
void kc_sumsq_zero(KcSumsq *acc);
void kc_sumsq_add(KcSumsq *acc, const float *x, size_t n);
void kc_sumsq_add_bf16(KcSumsq *acc, const uint16_t *x, size_t n);
void kc_sumsq_merge(KcSumsq *dst, const KcSumsq *src);
double kc_sumsq_value(const KcSumsq *acc);      /* NaN/inf if any input was */
double kc_global_norm(const float *x, size_t n);  /* sqrt of the above       */
void kc_scale(float *x, size_t n, float s);     /* x *= s (gradient clipping) */
int kc_all_finite(const float *x, size_t n);    /* the loss-scale overflow check */

/* ---- cast.c: fp32 <-> bf16 / fp16, round to nearest even ---------------- */
uint16_t kc_bf16_from_f32(float f);             /* NaN stays NaN (quiet)     */
float kc_f32_from_bf16(uint16_t h);
uint16_t kc_fp16_from_f32(float f);             /* subnormals, inf on overflow */
float kc_f32_from_fp16(uint16_t h);
void kc_cast_f32_to_bf16(uint16_t *out, const float *inp, size_t n);
void kc_cast_bf16_to_f32(float *out, const uint16_t *inp, size_t n);
void kc_cast_f32_to_fp16(uint16_t *out, const float *inp, size_t n);
void kc_cast_fp16_to_f32(float *out, const uint16_t *inp, size_t n);
/* x := f32(bf16(x)): what storing in bf16 and computing in fp32 does to x. */
void kc_round_bf16(float *x, size_t n);

/* ---- vmath.c: shared numerics ------------------------------------------- */
/* y(n) = exp(x) (in place allowed), vectorised; within 2 ulp of exp for
 * normal results, 0 below exp's subnormal range, inf above 88.72, NaN kept. */
void kc_vexp(float *y, const float *x, size_t n);

/* For the kernel sources: compile a hot function once per x86-64 level and
 * pick one at load time.  Clones may differ in the last bit (FMA contraction,
 * like OpenBLAS's per-CPU kernels); one machine always runs the same clone,
 * so results stay bit-identical across thread counts. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KC_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KC_MULTIVERSION
#endif

#endif
