/* bench_kernels.c — times the CUDA kernels (kernels/cuda) at GPT-2 124M's
 * shapes in bf16 (B=8, T=1024, C=768, V=50257 padded to 50304, 124M
 * parameters): milliseconds per call (CUDA events, the mean of ROUNDS calls
 * after two warm-up calls) and the effective bandwidth of the bytes each call
 * must move at least, against the device's peak.
 *
 * Usage: bench_kernels_cuda [ROUNDS]   (default 20).  Exit 77: no device.
 */
#include "../../../../kernels/cuda/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ends the bench on a CUDA error. */
#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d: %s: %s [%s]\n", __FILE__, __LINE__, #x,                \
                    cudaGetErrorString(e_), kg_error_detail());                            \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

enum { B = 8, T = 1024, C = 768, NH = 12, HS = 64, V = 50257, VP = 50304 };
#define NPARAM 124475904LL   /* GPT-2 124M with the padded vocabulary */

static int g_rounds = 20;
static double g_peak_gbs;
static cudaEvent_t g_t0, g_t1;

/* A device tensor of n elements of dt, filled with v (zero for I32). */
static srt_t dev(int64_t n, srt_dtype dt, float v)
{
    srt_t t = { NULL, n, dt };
    size_t es = dt == SRT_BF16 || dt == SRT_F16 ? 2 : 4;
    CK(cudaMalloc(&t.p, (size_t)n * es));
    if (dt == SRT_I32) CK(kg_zero(t, 0));
    else CK(kg_fill(t, v, 0));
    return t;
}

/* What a case runs: one call of a kernel (or a chain) on stream 0. */
typedef void (*bench_fn)(void *ctx);

/* Times fn and prints ms and GB/s for `bytes` moved per call. */
static void bench(const char *name, bench_fn fn, void *ctx, double bytes)
{
    fn(ctx), fn(ctx);
    CK(cudaEventRecord(g_t0, 0));
    for (int r = 0; r < g_rounds; r++) fn(ctx);
    CK(cudaEventRecord(g_t1, 0));
    CK(cudaEventSynchronize(g_t1));
    float ms;
    CK(cudaEventElapsedTime(&ms, g_t0, g_t1));
    ms /= (float)g_rounds;
    double gbs = bytes / (ms * 1e-3) / 1e9;
    printf("%-34s %9.3f ms %8.0f GB/s  %5.1f%% of peak\n", name, ms, gbs, 100.0 * gbs / g_peak_gbs);
}

/* The tensors every case draws from. */
typedef struct Ctx {
    srt_t tok, tgt, wte, wpe, x, y, dx, dy, w, b, mean, rstd, h, dh, logits, gmax, gsum, gtl, loss;
    srt_t qkv, att, lse, dqkv, datt;
    srt_t master, grads, m, v, params;
    KgSumsq *acc;
    float *clip;
} Ctx;

static void f_emb_fwd(void *p) { Ctx *c = p; CK(kg_embedding_forward(c->x, c->tok, c->wte, c->wpe, B, T, C, 0, VP, 0)); }
static void f_emb_bwd(void *p) { Ctx *c = p; CK(kg_embedding_backward(c->wte, c->wpe, c->dy, c->tok, B, T, C, 0, VP, 0)); }
static void f_ln_fwd(void *p) { Ctx *c = p; CK(kg_layernorm_forward(c->y, c->mean, c->rstd, c->x, c->w, c->b, B * T, C, 1e-5f, 0)); }
static void f_ln_bwd(void *p) { Ctx *c = p; CK(kg_layernorm_backward(c->dx, c->w, c->b, c->dy, c->x, c->w, c->mean, c->rstd, B * T, C, 0)); }
static void f_gelu_fwd(void *p) { Ctx *c = p; CK(kg_gelu_forward(c->h, c->dh, 0)); }
static void f_gelu_bwd(void *p) { Ctx *c = p; CK(kg_gelu_backward(c->dh, c->h, c->dh, 0)); }
static void f_add_fwd(void *p) { Ctx *c = p; CK(kg_residual_forward(c->y, c->y, c->x, 0)); }
static void f_rope_fwd(void *p) { Ctx *c = p; CK(kg_rope_forward(c->qkv, c->qkv, B, T, 2 * NH, HS, 3 * C, 0, 10000.0f, 0)); }
static void f_xent(void *p)
{
    Ctx *c = p;
    CK(kg_xent_partial(c->gmax, c->gsum, c->gtl, c->logits, c->tgt, B * T, VP, 0, V, 0));
    CK(kg_xent_combine(c->gmax, c->gsum, c->gtl, c->gmax, c->gsum, c->gtl, 1, B * T, 0));
    CK(kg_xent_loss(c->loss, c->tgt, c->gmax, c->gsum, c->gtl, B * T, 0));
    CK(kg_xent_backward(c->logits, c->tgt, c->gmax, c->gsum, 1.0f / (B * T), B * T, VP, 0, V, 0));
}
static void f_attn_fwd(void *p)
{
    Ctx *c = p;
    srt_t q = c->qkv, k = c->qkv, v = c->qkv;
    k.p = (uint16_t *)k.p + C, v.p = (uint16_t *)v.p + 2 * C;
    k.n -= C, v.n -= 2 * C;
    CK(kg_attention_forward(c->att, c->lse, q, k, v, 1, T, NH, NH, HS, 3 * C, 3 * C, 0));
}
static void f_attn_bwd(void *p)
{
    Ctx *c = p;
    srt_t q = c->qkv, k = c->qkv, v = c->qkv, dq = c->dqkv, dk = c->dqkv, dv = c->dqkv;
    k.p = (uint16_t *)k.p + C, v.p = (uint16_t *)v.p + 2 * C;
    dk.p = (uint16_t *)dk.p + C, dv.p = (uint16_t *)dv.p + 2 * C;
    k.n -= C, v.n -= 2 * C, dk.n -= C, dv.n -= 2 * C;
    CK(kg_attention_backward(dq, dk, dv, c->datt, c->att, c->lse, q, k, v, 1, T, NH, NH, HS, 3 * C,
                             3 * C, 0));
}
static void f_sumsq(void *p) { Ctx *c = p; CK(kg_sumsq_zero(c->acc, 0)); CK(kg_sumsq_add(c->acc, c->grads, 0)); }
static void f_adamw(void *p)
{
    Ctx *c = p;
    KgAdamW h = { 6e-4, 0.9, 0.95, 1e-8, 0.1, 10, 0, 1.0f };
    CK(kg_adamw_step(c->params, c->master, c->grads, c->m, c->v, h, c->clip, NULL, 0));
}

int main(int argc, char **argv)
{
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("skipped: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "none");
        return 77;
    }
    if (argc > 1) g_rounds = atoi(argv[1]) > 0 ? atoi(argv[1]) : 20;
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int clock_khz = 0, bus_bits = 0;
    CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0));
    CK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0));
    g_peak_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8) / 1e9;
    printf("device %s, peak %.0f GB/s; GPT-2 124M shapes, bf16, B=%d T=%d, mean of %d calls\n",
           prop.name, g_peak_gbs, B, T, g_rounds);
    CK(cudaEventCreate(&g_t0));
    CK(cudaEventCreate(&g_t1));
    const int64_t BT = (int64_t)B * T;
    Ctx c;
    memset(&c, 0, sizeof c);
    int32_t *tok = malloc(BT * 4);
    for (int64_t i = 0; i < BT; i++) tok[i] = (int32_t)((i * 7919) % V);
    c.tok = dev(BT, SRT_I32, 0), c.tgt = dev(BT, SRT_I32, 0);
    CK(cudaMemcpy(c.tok.p, tok, BT * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c.tgt.p, tok, BT * 4, cudaMemcpyHostToDevice));
    c.wte = dev((int64_t)VP * C, SRT_BF16, 0.01f), c.wpe = dev((int64_t)T * C, SRT_BF16, 0.01f);
    c.x = dev(BT * C, SRT_BF16, 0.5f), c.y = dev(BT * C, SRT_BF16, 0.25f);
    c.dx = dev(BT * C, SRT_BF16, 0.0f), c.dy = dev(BT * C, SRT_BF16, 0.001f);
    c.w = dev(C, SRT_BF16, 1.0f), c.b = dev(C, SRT_BF16, 0.0f);
    c.mean = dev(BT, SRT_F32, 0.0f), c.rstd = dev(BT, SRT_F32, 1.0f);
    c.h = dev(BT * 4 * C, SRT_BF16, 0.3f), c.dh = dev(BT * 4 * C, SRT_BF16, 0.01f);
    c.logits = dev(BT * VP, SRT_BF16, 0.0f);
    c.gmax = dev(BT, SRT_F32, 0), c.gsum = dev(BT, SRT_F32, 0), c.gtl = dev(BT, SRT_F32, 0);
    c.loss = dev(BT, SRT_F32, 0);
    c.qkv = dev(BT * 3 * C, SRT_BF16, 0.02f), c.dqkv = dev(BT * 3 * C, SRT_BF16, 0.0f);
    c.att = dev(BT * C, SRT_BF16, 0.0f), c.datt = dev(BT * C, SRT_BF16, 0.001f);
    c.lse = dev((int64_t)B * NH * T, SRT_F32, 0.0f);
    c.master = dev(NPARAM, SRT_F32, 0.01f), c.grads = dev(NPARAM, SRT_BF16, 0.001f);
    c.m = dev(NPARAM, SRT_F32, 0.0f), c.v = dev(NPARAM, SRT_F32, 0.0f);
    c.params = dev(NPARAM, SRT_BF16, 0.0f);
    CK(cudaMalloc((void **)&c.acc, sizeof(KgSumsq)));
    CK(cudaMalloc((void **)&c.clip, 4));
    float one = 1.0f;
    CK(cudaMemcpy(c.clip, &one, 4, cudaMemcpyHostToDevice));
    const double act = (double)BT * C * 2;   /* one bf16 (B,T,C) tensor */
    bench("embedding fwd", f_emb_fwd, &c, 2 * act + BT * 4);
    bench("embedding bwd (wte+wpe)", f_emb_bwd, &c, act + (double)BT * C * 2 * 2 + T * C * 4.0);
    bench("layernorm fwd", f_ln_fwd, &c, 2 * act);
    bench("layernorm bwd (dinp, dw, db)", f_ln_bwd, &c, 3 * act + act);
    bench("gelu fwd (B,T,4C)", f_gelu_fwd, &c, 2 * 4 * act);
    bench("gelu bwd (B,T,4C)", f_gelu_bwd, &c, 4 * 4 * act);
    bench("residual fwd", f_add_fwd, &c, 3 * act);
    bench("rope fwd (q and k of qkv)", f_rope_fwd, &c, 2 * 2 * act);
    bench("xent partial..backward (V=50304)", f_xent, &c, 3.0 * BT * VP * 2);
    bench("sumsq 124M bf16", f_sumsq, &c, NPARAM * 2.0);
    bench("adamw 124M (bf16 grads, params)", f_adamw, &c, NPARAM * (2.0 + 3 * 8 + 2));
    g_rounds = g_rounds < 3 ? g_rounds : 3;   /* the fallback attention is slow */
    bench("attention fallback fwd (B=1)", f_attn_fwd, &c, act / B * 4 + B * NH * T * 4.0 / B);
    bench("attention fallback bwd (B=1)", f_attn_bwd, &c, act / B * 8);
    printf("(attention GB/s: the bytes of its inputs and outputs once; it is O(T^2) and not bandwidth-bound)\n");
    free(tok);
    return 0;
}
