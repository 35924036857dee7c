/* compute.c — the CPU backend's compute ops: each stages its operands in fp32
 * (cpu_stage; a no-op for f32 ones), calls its kc_* kernel, and converts back
 * what it wrote. */
#include "cpu.h"

#include <math.h>
#include <string.h>

#include "data.h"

#define A(t, span, mode) cpu_arg_of((t), (span), (mode))
#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- data and loss ------------------------------------------------------------------ */

/* The data loader writes straight into the arena (int32 views); an absent
 * one of the two goes to scratch. */
void cpu_load_batch(srt_ctx *c, srt_stream s, int mb, srt_t tokens, srt_t targets)
{
    if (!c->data) ctx_die(c, "load_batch: no data loader is attached to the context");
    int64_t n = c->prog->micro_batch * c->prog->seq_len;
    cpu_stage(c, "load_batch", NULL, 0);
    int32_t *tok = tokens.p ? tokens.p : (int32_t *)cpu_tmp(c, "load_batch", n);
    int32_t *tgt = targets.p ? targets.p : (int32_t *)cpu_tmp(c, "load_batch", n);
    int e = data_batch(c->data, c->data_step, c->dp_idx, c->prog->dp, mb, c->prog->micro_batch,
                       tok, tgt);
    if (e != DATA_OK) ctx_fatal(c, 1, "%s", data_error(c->data));
}

/* The step's loss += mean(losses) / microbatches, summed in row order. */
void cpu_loss_add(srt_ctx *c, srt_stream s, srt_t losses, int N)
{
    cpu_arg a[] = { A(losses, N, CPU_R) };
    cpu_stage(c, "loss_add", a, NARGS(a));
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += a[0].f[i];
    cpu_unstage(c);
    c->loss += sum / N / (double)c->prog->microbatches;
}

/* ---- linear layers and norms ------------------------------------------------------------- */

void cpu_matmul_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t inp, srt_t w, srt_t bias,
                    int N, int C, int OC)
{
    cpu_arg a[] = { A(out, (int64_t)N * OC, CPU_W), A(inp, (int64_t)N * C, CPU_R),
                    A(w, (int64_t)OC * C, CPU_R), A(bias, OC, CPU_R) };
    cpu_stage(c, "matmul_fwd", a, NARGS(a));
    kc_matmul_forward(a[0].f, a[1].f, a[2].f, a[3].f, N, C, OC);
    cpu_unstage(c);
}

/* Block by block through cpu_matmul_fwd: Debian's OpenBLAS has no batched
 * sgemm (no cblas_sgemm_batch), and the same calls keep the losses those of
 * the unbatched code bit for bit. */
void cpu_matmul_fwd_batched(srt_ctx *c, srt_stream s, srt_t out, srt_t inp, srt_t w, srt_t bias, int N, int C,
                            int OC, int batch, int64_t out_stride, int64_t inp_stride)
{
    for (int64_t b = 0; b < batch; b++)
        cpu_matmul_fwd(c, s, ops_block(out, b, out_stride, (int64_t)N * OC), ops_block(inp, b, inp_stride, (int64_t)N * C),
                       w, bias, N, C, OC);
}

/* Block by block through cpu_matmul_gelu_fwd, as cpu_matmul_fwd_batched. */
void cpu_matmul_gelu_fwd_batched(srt_ctx *c, srt_stream s, srt_t out, srt_t pre, srt_t inp, srt_t w, srt_t bias,
                                 int N, int C, int OC, int batch, int64_t out_stride, int64_t inp_stride)
{
    for (int64_t b = 0; b < batch; b++)
        cpu_matmul_gelu_fwd(c, s, ops_block(out, b, out_stride, (int64_t)N * OC),
                            ops_block(pre, b, out_stride, (int64_t)N * OC), ops_block(inp, b, inp_stride, (int64_t)N * C),
                            w, bias, N, C, OC);
}

/* kc_matmul_backward on staged operands. */
void cpu_matmul_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t dbias, srt_t dout,
                    srt_t inp, srt_t w, int N, int C, int OC)
{
    cpu_arg a[] = { A(dinp, (int64_t)N * C, CPU_RW), A(dw, (int64_t)OC * C, CPU_RW),
                    A(dbias, OC, CPU_RW), A(dout, (int64_t)N * OC, CPU_R),
                    A(inp, (int64_t)N * C, CPU_R), A(w, (int64_t)OC * C, CPU_R) };
    cpu_stage(c, "matmul_bwd", a, NARGS(a));
    kc_matmul_backward(a[0].f, a[1].f, a[2].f, a[3].f, a[4].f, a[5].f, N, C, OC);
    cpu_unstage(c);
}

/* The fused GELU MLP layer as today's unfused sequence (matmul_fwd into pre,
 * then gelu_fwd), so results are bit for bit those of the separate ops. */
void cpu_matmul_gelu_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t pre, srt_t inp, srt_t w,
                         srt_t bias, int N, int C, int OC)
{
    cpu_matmul_fwd(c, s, pre, inp, w, bias, N, C, OC);
    srt_t p = pre, o = out;
    p.n = o.n = (int64_t)N * OC;
    cpu_gelu_fwd(c, s, o, p);
}

/* One chunk of the in-place GELU derivative: a[0] (dpre, holding dout·w)
 * becomes gelu'(pre)·dout·w. */
static void cpu_dgelu_ew(cpu_arg *a, int64_t n, void *ud)
{
    kc_gelu_backward_inplace(a[0].f, a[1].f, (size_t)n);
}

/* The fused data gradient through GELU as the unfused sequence: zero dpre,
 * dpre += dout·w (matmul_bwd's dinp, rounded to dpre's dtype as that
 * temporary would be), dpre = gelu'(pre)·dpre in place, then the bias
 * gradient as the next matmul_bwd would sum it from dpre. */
void cpu_matmul_bwd_dgelu(srt_ctx *c, srt_stream s, srt_t dpre, srt_t dbias_pre, srt_t dout,
                          srt_t w, srt_t pre, int N, int C, int OC)
{
    srt_t none = { NULL, 0, SRT_F32 }, d = dpre, p = pre;
    d.n = p.n = (int64_t)N * C;
    cpu_zero(c, s, d);
    cpu_matmul_bwd(c, s, d, none, none, dout, none, w, N, C, OC);
    cpu_arg a[] = { A(d, d.n, CPU_RW), A(p, d.n, CPU_R) };
    cpu_elementwise(c, "matmul_bwd_dgelu", a, NARGS(a), d.n, cpu_dgelu_ew, NULL);
    if (dbias_pre.p) {
        cpu_arg b[] = { A(dbias_pre, C, CPU_RW), A(d, d.n, CPU_R) };
        cpu_stage(c, "matmul_bwd_dgelu", b, NARGS(b));
        kc_matmul_backward(NULL, NULL, b[0].f, b[1].f, NULL, NULL, N, OC, C);
        cpu_unstage(c);
    }
}

/* kc_layernorm_forward on staged operands. */
void cpu_layernorm_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t mean, srt_t rstd, srt_t inp,
                       srt_t w, srt_t b, int N, int C, float eps)
{
    cpu_arg a[] = { A(out, (int64_t)N * C, CPU_W), A(mean, N, CPU_W), A(rstd, N, CPU_W),
                    A(inp, (int64_t)N * C, CPU_R), A(w, C, CPU_R), A(b, C, CPU_R) };
    cpu_stage(c, "layernorm_fwd", a, NARGS(a));
    kc_layernorm_forward(a[0].f, a[1].f, a[2].f, a[3].f, a[4].f, a[5].f, N, C, eps);
    cpu_unstage(c);
}

/* kc_layernorm_backward on staged operands. */
void cpu_layernorm_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t db, srt_t dout,
                       srt_t inp, srt_t w, srt_t mean, srt_t rstd, int N, int C)
{
    cpu_arg a[] = { A(dinp, (int64_t)N * C, CPU_RW), A(dw, C, CPU_RW), A(db, C, CPU_RW),
                    A(dout, (int64_t)N * C, CPU_R), A(inp, (int64_t)N * C, CPU_R), A(w, C, CPU_R),
                    A(mean, N, CPU_R), A(rstd, N, CPU_R) };
    cpu_stage(c, "layernorm_bwd", a, NARGS(a));
    kc_layernorm_backward(a[0].f, a[1].f, a[2].f, a[3].f, a[4].f, a[5].f, a[6].f, a[7].f, N, C);
    cpu_unstage(c);
}

/* kc_rmsnorm_forward on staged operands. */
void cpu_rmsnorm_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t rstd, srt_t inp, srt_t w,
                     int N, int C, float eps)
{
    cpu_arg a[] = { A(out, (int64_t)N * C, CPU_W), A(rstd, N, CPU_W),
                    A(inp, (int64_t)N * C, CPU_R), A(w, C, CPU_R) };
    cpu_stage(c, "rmsnorm_fwd", a, NARGS(a));
    kc_rmsnorm_forward(a[0].f, a[1].f, a[2].f, a[3].f, N, C, eps);
    cpu_unstage(c);
}

/* kc_rmsnorm_backward on staged operands. */
void cpu_rmsnorm_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t dout, srt_t inp,
                     srt_t w, srt_t rstd, int N, int C)
{
    cpu_arg a[] = { A(dinp, (int64_t)N * C, CPU_RW), A(dw, C, CPU_RW),
                    A(dout, (int64_t)N * C, CPU_R), A(inp, (int64_t)N * C, CPU_R), A(w, C, CPU_R),
                    A(rstd, N, CPU_R) };
    cpu_stage(c, "rmsnorm_bwd", a, NARGS(a));
    kc_rmsnorm_backward(a[0].f, a[1].f, a[2].f, a[3].f, a[4].f, a[5].f, N, C);
    cpu_unstage(c);
}

/* ---- pointwise ops ------------------------------------------------------------------------ */

static void cpu_gelu_fwd_ew(cpu_arg *a, int64_t n, void *ud)
{
    kc_gelu_forward(a[0].f, a[1].f, (size_t)n);
}

/* GELU, chunked when 16-bit. */
void cpu_gelu_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t inp)
{
    cpu_arg a[] = { A(out, out.n, CPU_W), A(inp, out.n, CPU_R) };
    cpu_elementwise(c, "gelu_fwd", a, NARGS(a), out.n, cpu_gelu_fwd_ew, NULL);
}

/* One chunk of gelu_bwd. */
static void cpu_gelu_bwd_ew(cpu_arg *a, int64_t n, void *ud)
{
    kc_gelu_backward(a[0].f, a[1].f, a[2].f, (size_t)n);
}

/* GELU's gradient, chunked when 16-bit. */
void cpu_gelu_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t inp, srt_t dout)
{
    cpu_arg a[] = { A(dinp, dinp.n, CPU_RW), A(inp, dinp.n, CPU_R), A(dout, dinp.n, CPU_R) };
    cpu_elementwise(c, "gelu_bwd", a, NARGS(a), dinp.n, cpu_gelu_bwd_ew, NULL);
}

/* One chunk of add_fwd. */
static void cpu_add_fwd_ew(cpu_arg *a, int64_t n, void *ud)
{
    kc_residual_forward(a[0].f, a[1].f, a[2].f, (size_t)n);
}

/* The residual add, chunked when 16-bit. */
void cpu_add_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t a_, srt_t b)
{
    cpu_arg a[] = { A(out, out.n, CPU_W), A(a_, out.n, CPU_R), A(b, out.n, CPU_R) };
    cpu_elementwise(c, "add_fwd", a, NARGS(a), out.n, cpu_add_fwd_ew, NULL);
}

/* One chunk of add_bwd. */
static void cpu_add_bwd_ew(cpu_arg *a, int64_t n, void *ud)
{
    kc_residual_backward(a[0].f, a[1].f, a[2].f, (size_t)n);
}

/* The residual add's gradients, chunked when 16-bit. */
void cpu_add_bwd(srt_ctx *c, srt_stream s, srt_t da, srt_t db, srt_t dout)
{
    cpu_arg a[] = { A(da, dout.n, CPU_RW), A(db, dout.n, CPU_RW), A(dout, dout.n, CPU_R) };
    cpu_elementwise(c, "add_bwd", a, NARGS(a), dout.n, cpu_add_bwd_ew, NULL);
}

/* Elements of a strided operand: rows of width, ld apart. */
static int64_t cpu_span(int64_t rows, int64_t width, int64_t ld)
{
    return rows > 0 ? (rows - 1) * ld + width : 0;
}

/* kc_swiglu_forward on staged operands. */
void cpu_swiglu_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t a_, srt_t b, int N, int H, int ld)
{
    int64_t sp = cpu_span(N, H, ld);
    cpu_arg a[] = { A(out, (int64_t)N * H, CPU_W), A(a_, sp, CPU_R), A(b, sp, CPU_R) };
    cpu_stage(c, "swiglu_fwd", a, NARGS(a));
    kc_swiglu_forward(a[0].f, a[1].f, a[2].f, N, H, ld);
    cpu_unstage(c);
}

/* kc_swiglu_backward on staged operands. */
void cpu_swiglu_bwd(srt_ctx *c, srt_stream s, srt_t da, srt_t db, srt_t dout, srt_t a_, srt_t b,
                    int N, int H, int ld)
{
    int64_t sp = cpu_span(N, H, ld);
    cpu_arg a[] = { A(da, sp, CPU_RW), A(db, sp, CPU_RW), A(dout, (int64_t)N * H, CPU_R),
                    A(a_, sp, CPU_R), A(b, sp, CPU_R) };
    cpu_stage(c, "swiglu_bwd", a, NARGS(a));
    kc_swiglu_backward(a[0].f, a[1].f, a[2].f, a[3].f, a[4].f, N, H, ld);
    cpu_unstage(c);
}

/* ---- attention and rope ---------------------------------------------------------------------- */

void cpu_attention_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v,
                       int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv)
{
    int64_t rows = (int64_t)B * T;
    int64_t sq = cpu_span(rows, (int64_t)NH * HS, ld_q), skv = cpu_span(rows, (int64_t)NKV * HS, ld_kv);
    cpu_arg a[] = { A(out, rows * NH * HS, CPU_W), A(lse, rows * NH, CPU_W), A(q, sq, CPU_R),
                    A(k, skv, CPU_R), A(v, skv, CPU_R) };
    cpu_stage(c, "attention_fwd", a, NARGS(a));
    KcAttnShape sh = { B, T, NH, NKV, HS, ld_q, ld_kv };
    kc_attention_forward(a[0].f, a[1].f, a[2].f, a[3].f, a[4].f, sh);
    cpu_unstage(c);
}

/* kc_attention_backward; dq, dk, dv of one dqkv share a staged range. */
void cpu_attention_bwd(srt_ctx *c, srt_stream s, srt_t dq, srt_t dk, srt_t dv, srt_t dout,
                       srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v,
                       int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv)
{
    int64_t rows = (int64_t)B * T;
    int64_t sq = cpu_span(rows, (int64_t)NH * HS, ld_q), skv = cpu_span(rows, (int64_t)NKV * HS, ld_kv);
    cpu_arg a[] = { A(dq, sq, CPU_RW), A(dk, skv, CPU_RW), A(dv, skv, CPU_RW),
                    A(dout, rows * NH * HS, CPU_R), A(out, rows * NH * HS, CPU_R),
                    A(lse, rows * NH, CPU_R), A(q, sq, CPU_R), A(k, skv, CPU_R), A(v, skv, CPU_R) };
    cpu_stage(c, "attention_bwd", a, NARGS(a));
    KcAttnShape sh = { B, T, NH, NKV, HS, ld_q, ld_kv };
    kc_attention_backward(a[0].f, a[1].f, a[2].f, a[3].f, a[4].f, a[5].f, a[6].f, a[7].f, a[8].f, sh);
    cpu_unstage(c);
}

/* The angle tables' rows from position 0 for T positions of head size HS at
 * theta, computed at their first use (a Llama's: its one theta and head
 * size); NULL when the context has none that fit. */
static const float *cpu_rope_tab(srt_ctx *c, int T, int HS, float theta, const float **sn)
{
    cpu_state *st = cpu_st(c);
    if (!st->rope_cs || HS != st->rope_hs || T > st->rope_npos) return NULL;
    if (theta != st->rope_theta) {
        kc_rope_table(st->rope_cs, st->rope_sn, st->rope_npos, HS, theta);
        st->rope_theta = theta;
    }
    *sn = st->rope_sn;
    return st->rope_cs;
}

/* kc_rope_forward in place (from the angle tables where the context has them). */
void cpu_rope_fwd(srt_ctx *c, srt_stream s, srt_t x, int B, int T, int NH, int HS, int ld,
                  float theta)
{
    cpu_arg a[] = { A(x, cpu_span((int64_t)B * T, (int64_t)NH * HS, ld), CPU_RW) };
    cpu_stage(c, "rope_fwd", a, NARGS(a));
    const float *sn, *cs = cpu_rope_tab(c, T, HS, theta, &sn);
    if (cs) kc_rope_forward_tab(a[0].f, a[0].f, B, T, NH, HS, ld, cs, sn);
    else kc_rope_forward(a[0].f, a[0].f, B, T, NH, HS, ld, 0, theta);
    cpu_unstage(c);
}

/* dx := R^T dx in place: from the angle tables, rotated back where it lies;
 * without them the kernel accumulates into a gradient that must not alias
 * its input, so dx goes to a copy and its rotated columns to 0. */
void cpu_rope_bwd(srt_ctx *c, srt_stream s, srt_t dx, int B, int T, int NH, int HS, int ld,
                  float theta)
{
    int64_t rows = (int64_t)B * T, width = (int64_t)NH * HS, sp = cpu_span(rows, width, ld);
    cpu_arg a[] = { A(dx, sp, CPU_RW) };
    cpu_stage(c, "rope_bwd", a, NARGS(a));
    const float *sn, *cs = cpu_rope_tab(c, T, HS, theta, &sn);
    if (cs) {
        kc_rope_inverse_tab(a[0].f, B, T, NH, HS, ld, cs, sn);
    } else {
        float *g = cpu_tmp(c, "rope_bwd", sp);
        memcpy(g, a[0].f, (size_t)sp * 4);
        for (int64_t r = 0; r < rows; r++) memset(a[0].f + r * ld, 0, (size_t)width * 4);
        kc_rope_backward(a[0].f, g, B, T, NH, HS, ld, 0, theta);
    }
    cpu_unstage(c);
}

/* ---- embedding and the loss ------------------------------------------------------------------ */

void cpu_embed_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t tokens, srt_t wte, srt_t wpe,
                   int B, int T, int C, int v0, int v1)
{
    cpu_arg a[] = { A(out, (int64_t)B * T * C, CPU_W), A(wte, (int64_t)(v1 - v0) * C, CPU_R),
                    A(wpe, (int64_t)T * C, CPU_R) };
    cpu_stage(c, "embed_fwd", a, NARGS(a));
    kc_embedding_forward(a[0].f, tokens.p, a[1].f, a[2].f, B, T, C, v0, v1);
    cpu_unstage(c);
}

/* kc_embedding_backward on staged operands. */
void cpu_embed_bwd(srt_ctx *c, srt_stream s, srt_t dwte, srt_t dwpe, srt_t dout, srt_t tokens,
                   int B, int T, int C, int v0, int v1)
{
    cpu_arg a[] = { A(dwte, (int64_t)(v1 - v0) * C, CPU_RW), A(dwpe, (int64_t)T * C, CPU_RW),
                    A(dout, (int64_t)B * T * C, CPU_R) };
    cpu_stage(c, "embed_bwd", a, NARGS(a));
    kc_embedding_backward(a[0].f, a[1].f, a[2].f, tokens.p, B, T, C, v0, v1);
    cpu_unstage(c);
}

/* The global row max, sum and target logit g[3][N] from this rank's
 * partials part[3][N]: across tp the three statistics of every member are
 * all-gathered and combined in member order by the same kc_xent_combine a
 * single process uses for R partials, so every member gets bit-identical
 * values.  Scratch from cpu_tmp. */
static void cpu_xent_global(srt_ctx *c, float *g, const float *part, int N)
{
    int64_t R = c->gsize[SRT_TP];
    if (R == 1) {
        kc_xent_combine(g, g + N, g + 2 * N, part, part + N, part + 2 * N, 1, N);
        return;
    }
    float *all = cpu_tmp(c, "xent", 3 * R * N);              /* [R][3][N] */
    float *by = cpu_tmp(c, "xent", 3 * R * N);               /* [3][R][N] */
    cpu_allgather_f32(c, SRT_TP, all, part, 3 * (int64_t)N);
    for (int64_t r = 0; r < R; r++)
        for (int k = 0; k < 3; k++)
            memcpy(by + ((int64_t)k * R + r) * N, all + (r * 3 + k) * N, (size_t)N * 4);
    kc_xent_combine(g, g + N, g + 2 * N, by, by + R * N, by + 2 * R * N, (int)R, N);
}

/* Phase 1 on the local vocabulary slice, the global statistics, phase 2. */
void cpu_xent_fwd_bwd(srt_ctx *c, srt_stream s, srt_t losses, srt_t logits, srt_t targets,
                      int N, int Vl, int v0, int V, float dloss)
{
    cpu_arg a[] = { A(losses, N, CPU_W), A(logits, (int64_t)N * Vl, CPU_RW) };
    cpu_stage(c, "xent_fwd_bwd", a, NARGS(a));
    const int32_t *tg = targets.p;
    float *part = cpu_tmp(c, "xent_fwd_bwd", 3 * (int64_t)N);            /* [3][N] */
    float *g = cpu_tmp(c, "xent_fwd_bwd", 3 * (int64_t)N);               /* gmax, gsum, gtlogit */
    kc_xent_partial(part, part + N, part + 2 * N, a[1].f, tg, N, Vl, v0, V);
    cpu_xent_global(c, g, part, N);
    kc_xent_loss(a[0].f, tg, g, g + N, g + 2 * N, N);
    kc_xent_backward(a[1].f, tg, g, g + N, dloss, N, Vl, v0, V);
    cpu_unstage(c);
}

/* The fused head: kc_head_forward, the global statistics, the losses and
 * kc_head_backward, the logits never leaving the kernels' chunks between
 * them (kernels/cpu/head.c).  16-bit operands take the three ops in turn
 * instead, so that the logits and their gradient are rounded where a
 * 16-bit store rounds them, as on a GPU. */
void cpu_head_xent(srt_ctx *c, srt_stream s, srt_t losses, srt_t dinp, srt_t dw, srt_t logits,
                   srt_t inp, srt_t w, srt_t targets, int N, int C, int Vl, int v0, int V,
                   float dloss)
{
    srt_t none = { NULL, 0, SRT_F32 }, t[] = { dinp, dw, logits, inp, w };
    bool f32 = true;
    for (int i = 0; i < 5; i++) f32 &= !t[i].p || t[i].dt == SRT_F32;
    if (!f32) {
        cpu_matmul_fwd(c, s, logits, inp, w, none, N, C, Vl);
        cpu_xent_fwd_bwd(c, s, losses, logits, targets, N, Vl, v0, V, dloss);
        if (dinp.p || dw.p) cpu_matmul_bwd(c, s, dinp, dw, none, logits, inp, w, N, C, Vl);
        return;
    }
    cpu_stage(c, "head_xent", NULL, 0);
    KcHeadShape sh = { N, C, Vl, v0, V };
    const int32_t *tg = targets.p;
    float *part = cpu_tmp(c, "head_xent", 3 * (int64_t)N);              /* [3][N] */
    float *g = cpu_tmp(c, "head_xent", 3 * (int64_t)N);                 /* gmax, gsum, gtlogit */
    float *scratch = cpu_tmp(c, "head_xent", (int64_t)kc_head_scratch_floats(sh));
    kc_head_forward(logits.p, part, part + N, part + 2 * N, scratch, inp.p, w.p, tg, sh);
    cpu_xent_global(c, g, part, N);
    kc_xent_loss(losses.p, tg, g, g + N, g + 2 * N, N);
    if (dinp.p || dw.p)
        kc_head_backward(dinp.p, dw.p, logits.p, scratch, inp.p, w.p, tg, g, g + N, dloss, sh);
}

/* ---- casts and zeroing -------------------------------------------------------------------------- */

typedef struct cpu_conv { srt_dtype from, to; } cpu_conv;

/* One chunk of a 16-bit to 16-bit conversion. */
static void cpu_convert_ew(cpu_arg *a, int64_t n, void *ud)
{
    /* both operands arrive as fp32 (staged); the write-back rounds to dst's dtype */
    if (a[0].f != a[1].f) memcpy(a[0].f, a[1].f, (size_t)n * 4);
}

/* Casts through kc_cast_*; a copy when the dtypes agree. */
void cpu_convert(srt_ctx *c, srt_stream s, srt_t dst, srt_t src)
{
    int64_t es = ops_dtype_size(dst.dt);
    if (dst.dt == src.dt) {   /* a plain copy; any dtype, no rounding */
        if (dst.p != src.p) memmove(dst.p, src.p, (size_t)(dst.n * es));
        return;
    }
    if (dst.dt == SRT_F32) { cpu_to_f32(dst.p, src.p, src.dt, src.n); return; }
    if (src.dt == SRT_F32) { cpu_from_f32(dst.p, src.p, dst.dt, dst.n); return; }
    cpu_arg a[] = { A(dst, dst.n, CPU_W), A(src, src.n, CPU_R) };   /* bf16 <-> fp16 via fp32 */
    cpu_elementwise(c, "convert", a, NARGS(a), dst.n, cpu_convert_ew, NULL);
}

/* memset (zero bits are 0 in every dtype), by all threads for the large
 * gradient buffers: one core alone does not reach the memory's bandwidth. */
void cpu_zero(srt_ctx *c, srt_stream s, srt_t x)
{
    enum { PIECE = 1 << 20 };   /* bytes per thread's piece */
    size_t bytes = (size_t)(x.n * ops_dtype_size(x.dt)), pieces = (bytes + PIECE - 1) / PIECE;
    if (pieces < 4) { memset(x.p, 0, bytes); return; }
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < pieces; i++) {
        size_t o = i * PIECE;
        memset((uint8_t *)x.p + o, 0, bytes - o < PIECE ? bytes - o : PIECE);
    }
}
