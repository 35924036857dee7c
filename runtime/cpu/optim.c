/* optim.c — the CPU backend's gradient norm and optimizer steps.
 *
 * The norm: every srt_grad_sumsq adds its range to an exact accumulator
 * (integer bins per float exponent, kc_sumsq_*); srt_grad_norm_finish sums
 * the bins over the group with an integer MPI_SUM, which is exact and
 * order-free, so the norm and the clipping scale are bit-identical in every
 * layout.  The step: torch.optim's AdamW, Adam (L2 weight decay added to the
 * gradient) or SGD, on fp32 master weights, streamed in chunks of CPU_CHUNK
 * so that 16-bit gradients and working copies go through a bounded scratch
 * (all-fp32 ranges in one call).
 */
#include "cpu.h"

#include <math.h>
#include <string.h>

#define A(t, span, mode) cpu_arg_of((t), (span), (mode))

/* Adds Σ g² to the step's exact accumulator. */
void cpu_grad_sumsq(srt_ctx *c, srt_stream s, srt_t g)
{
    cpu_state *st = cpu_st(c);
    if (g.dt == SRT_F32) { kc_sumsq_add(&st->sumsq, g.p, (size_t)g.n); return; }
    if (g.dt == SRT_BF16) { kc_sumsq_add_bf16(&st->sumsq, g.p, (size_t)g.n); return; }
    for (int64_t o = 0; o < g.n; o += CPU_CHUNK) {   /* fp16 -> fp32 is exact */
        int64_t len = g.n - o < CPU_CHUNK ? g.n - o : CPU_CHUNK;
        srt_t part = { (uint16_t *)g.p + o, len, g.dt };
        cpu_arg a[] = { A(part, len, CPU_R) };
        cpu_stage(c, "grad_sumsq", a, 1);
        kc_sumsq_add(&st->sumsq, a[0].f, (size_t)len);
        cpu_unstage(c);
    }
}

/* norm = sqrt(Σ over the group) / loss scale; the clipping scale is torch's
 * clip_grad_norm_: min(1, grad_clip / (norm + 1e-6)). */
void cpu_grad_norm_finish(srt_ctx *c, srt_stream s, srt_group g)
{
    cpu_state *st = cpu_st(c);
    st->sumsq_all = st->sumsq;
    if (c->gsize[g] > 1) cpu_allreduce_u64(c, g, st->sumsq_all.lo, 2 * KC_SUMSQ_BINS);
    kc_sumsq_zero(&st->sumsq);   /* the next step starts from nothing */
    double norm = sqrt(kc_sumsq_value(&st->sumsq_all)) / (double)c->loss_scale;
    c->grad_norm = norm;
    c->overflow = !isfinite(norm);
    double clip = c->prog->grad_clip;
    c->clip_scale = 1.0f;
    if (clip > 0.0 && !c->overflow) {
        float coef = (float)(clip / (norm + 1e-6));
        if (coef < 1.0f) c->clip_scale = coef;
    }
}

/* One chunk of the program's optimizer; a[]: params (working copy, absent
 * when it is master itself), master, grads, m, v. */
static void cpu_opt_chunk(srt_ctx *c, cpu_arg *a, int64_t n, bool decay)
{
    const srt_program *p = c->prog;
    float gs = c->clip_scale / c->loss_scale;
    double wd = decay ? p->weight_decay : 0.0;
    float *master = a[1].f, *grads = a[2].f;
    if (p->optimizer == 2) {
        KcSGD h = { c->lr, p->momentum, 0.0, wd, 0, c->step == 1, gs };
        kc_sgd_step(master, grads, a[3].f, (size_t)n, h);
    } else {
        KcAdamW h = { c->lr, p->beta1, p->beta2, p->eps, wd, (int)c->step, gs };
        if (p->optimizer == 1 && wd != 0.0) {   /* Adam: L2 decay joins the gradient */
            float *g2 = cpu_tmp(c, "optimizer_step", n);
            float w = (float)wd;
            for (int64_t i = 0; i < n; i++) g2[i] = grads[i] * gs + w * master[i];
            grads = g2;
            h.weight_decay = 0.0, h.grad_scale = 1.0f;
        }
        kc_adamw_step(master, NULL, grads, a[3].f, a[4].f, (size_t)n, h);
    }
    if (a[0].f) memcpy(a[0].f, master, (size_t)n * 4);   /* the 16-bit write-back rounds it */
}

/* The program's optimizer over a flat range, chunk by chunk. */
void cpu_optimizer_step(srt_ctx *c, srt_stream s, srt_t params, srt_t master, srt_t grads,
                        srt_t m, srt_t v, bool decay)
{
    if (c->overflow) return;   /* a non-finite norm: the step is skipped (fp16 loss scaling) */
    if (params.p == master.p) params.p = NULL;
    int64_t n = master.n;
    /* fp32 operands need no staging: one kernel call over the whole range
     * (one parallel loop, not one per chunk); Adam's decayed gradient needs
     * scratch of the chunk's size */
    srt_t t0[5] = { params, master, grads, m, v };
    bool all32 = !(c->prog->optimizer == 1 && decay && c->prog->weight_decay != 0.0);
    for (int i = 0; i < 5; i++) all32 &= !t0[i].p || t0[i].dt == SRT_F32;
    int64_t chunk = all32 ? n : CPU_CHUNK;
    for (int64_t o = 0; o < n; o += chunk) {
        int64_t len = n - o < chunk ? n - o : chunk;
        srt_t t[5] = { params, master, grads, m, v };
        cpu_arg a[5];
        for (int i = 0; i < 5; i++) {
            if (t[i].p) t[i].p = (uint8_t *)t[i].p + o * ops_dtype_size(t[i].dt);
            a[i] = A(t[i], len, i == 0 ? CPU_W : i == 2 ? CPU_R : CPU_RW);
        }
        cpu_stage(c, "optimizer_step", a, 5);
        cpu_opt_chunk(c, a, len, decay);
        cpu_unstage(c);
    }
}
