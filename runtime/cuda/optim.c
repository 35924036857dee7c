/* optim.c — the gradient norm, the optimizer step and fp16 loss scaling on
 * the GPU.
 *
 * The norm: kg_sumsq_add accumulates the exact integer bins (the CPU's
 * KcSumsq, so the norm is bit-identical to the CPU backend's and to every
 * layout's); grad_norm_finish sums the bins over the group with an NCCL
 * uint64 all-reduce, and kg_norm_finish computes the norm, the clipping
 * scale and the overflow flag on the device, where kg_adamw_step reads them:
 * no host synchronisation between the norm and the step.  The three values
 * are copied to pinned memory and reach the context (for the log) at the
 * stream's sync at the end of the step.
 *
 * fp16: the loss scale is the core's (runtime/core/lscale.c): the emitted
 * head multiplies the loss gradient by srt_loss_scale, kg_norm_finish and
 * the steps divide by c->loss_scale, and an overflow skips the step on the
 * device; the flag reaches the context at the step's final sync, before
 * srt_main moves the scale.
 *
 * Optimizer state in the pinned host arena (offload): the step runs on the
 * CPU with the kc_ kernels, on the SRT_HOST worker (host.c) when issued on
 * SRT_HOST, after the stream's earlier work has finished.
 */
#include "cu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cpu/kernels.h"

enum { CU_HOST_CHUNK = 1 << 16 };

/* The device scalars, the pinned copy, the host optimizer's chunks. */
void cu_optim_init(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    CU_CHECK(c, cudaMalloc((void **)&st->norm, sizeof *st->norm), "cudaMalloc (the gradient norm)");
    CU_CHECK(c, cudaMemset(st->norm, 0, sizeof *st->norm), "cudaMemset (the gradient norm)");
    CU_CHECK(c, cudaHostAlloc((void **)&st->norm_host, sizeof *st->norm_host, cudaHostAllocPortable),
             "cudaHostAlloc (the gradient norm)");
    memset(st->norm_host, 0, sizeof *st->norm_host);
    /* before any norm: clip scale 1, no overflow */
    cu_norm_out one = { 0.0, 1.0f, 0 };
    CU_CHECK(c, cudaMemcpy(&st->norm->out, &one, sizeof one, cudaMemcpyHostToDevice), "cudaMemcpy (the norm)");
    if (c->cls->host_arena > 0) {
        st->host_tmp_n = 5 * (int64_t)CU_HOST_CHUNK;
        st->host_tmp = ctx_alloc(c, st->host_tmp_n * 4, "the host optimizer's fp32 chunks");
    }
}

/* Releases the scalars. */
void cu_optim_fini(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    cudaFree(st->norm);
    if (st->norm_host) cudaFreeHost(st->norm_host);
    free(st->host_tmp);
}

/* Adds Σ g² to the step's exact bins. */
void cu_grad_sumsq(srt_ctx *c, srt_stream s, srt_t g)
{
    if (cu_host_defer(c, s)) {
        cu_host_grad_sumsq(c, g);
        return;
    }
    cu_kg(c, kg_sumsq_add(&cu_st(c)->norm->acc, g, cu_stream(c, s)), "grad_sumsq");
}

/* The bins over group g, the norm on the device, the bins zeroed for the
 * next step, the results copied out for the settle. */
void cu_grad_norm_finish(srt_ctx *c, srt_stream s, srt_group g)
{
    if (cu_host_defer(c, s)) {
        cu_st(c)->norm_pending = (int)s + 1;   /* set by the issuing thread, which settles it */
        cu_host_grad_norm_finish(c, g);
        return;
    }
    cu_grad_norm_finish_ls(c, s, g, c->loss_scale);
}

/* cu_grad_norm_finish with the loss scale given (the host worker's: the one
 * at the issue, which the trainer's thread may have changed since). */
void cu_grad_norm_finish_ls(srt_ctx *c, srt_stream s, srt_group g, float loss_scale)
{
    cu_state *st = cu_st(c);
    cudaStream_t cs = cu_stream(c, s);
    if (c->gsize[g] > 1)
        cu_allreduce_raw(c, s, g, &st->norm->acc, 2 * KG_SUMSQ_BINS, ncclUint64, ncclSum, "grad_norm_finish");
    cu_kg(c, kg_norm_finish(&st->norm->out.norm, &st->norm->out.clip_scale, &st->norm->out.overflow, &st->norm->acc,
                            c->prog->grad_clip, loss_scale, cs), "grad_norm_finish");
    cu_kg(c, kg_sumsq_zero(&st->norm->acc, cs), "grad_norm_finish: zero");
    CU_CHECK(c, cudaMemcpyAsync(st->norm_host, &st->norm->out, sizeof *st->norm_host, cudaMemcpyDeviceToHost, cs),
             "grad_norm_finish: copy out");
    if (s != SRT_HOST) st->norm_pending = (int)s + 1;   /* on the worker: set at the issue */
}

/* The norm's results into the context (after the sync of its stream). */
void cu_norm_settle(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    st->norm_pending = 0;
    c->grad_norm = st->norm_host->norm;
    c->clip_scale = st->norm_host->clip_scale;
    c->overflow = st->norm_host->overflow != 0;
}

/* fp32 chunk of n elements of t at element o into f (host memory). */
static void cu_host_f32(float *f, srt_t t, int64_t o, int64_t n)
{
    if (t.dt == SRT_F32) memcpy(f, (float *)t.p + o, (size_t)n * 4);
    else if (t.dt == SRT_BF16) kc_cast_bf16_to_f32(f, (uint16_t *)t.p + o, (size_t)n);
    else kc_cast_fp16_to_f32(f, (uint16_t *)t.p + o, (size_t)n);
}

/* The step on the CPU for state in the pinned host arena (offload). */
static void cu_host_step(srt_ctx *c, srt_stream s, srt_t params, srt_t master, srt_t grads, srt_t m, srt_t v,
                         bool decay, const cu_step_sc *sc)
{
    cu_state *st = cu_st(c);
    cudaStream_t cs = cu_stream(c, s);
    /* the norm through s, not the legacy stream: no implicit sync with the others */
    cu_norm_out o;
    CU_CHECK(c, cudaMemcpyAsync(&o, &st->norm->out, sizeof o, cudaMemcpyDeviceToHost, cs),
             "optimizer_step (host): the norm");
    CU_CHECK(c, cudaStreamSynchronize(cs), "optimizer_step (host): cudaStreamSynchronize");
    if (o.overflow) return;
    const srt_program *p = c->prog;
    float gs = o.clip_scale / sc->loss_scale;
    double wd = decay ? p->weight_decay : 0.0;
    if (!st->host_tmp) ctx_die(c, "optimizer_step: host state without a planned host arena");
    float *g = st->host_tmp, *g2 = st->host_tmp + CU_HOST_CHUNK;
    for (int64_t off = 0; off < master.n; off += CU_HOST_CHUNK) {
        int64_t n = master.n - off < CU_HOST_CHUNK ? master.n - off : CU_HOST_CHUNK;
        float *w = (float *)master.p + off;
        cu_host_f32(g, grads, off, n);
        if (p->optimizer == 2) {
            KcSGD h = { sc->lr, p->momentum, 0.0, wd, 0, sc->step == 1, gs };
            kc_sgd_step(w, g, m.p ? (float *)m.p + off : NULL, (size_t)n, h);
        } else {
            KcAdamW h = { sc->lr, p->beta1, p->beta2, p->eps, wd, (int)sc->step, gs };
            const float *gg = g;
            if (p->optimizer == 1 && wd != 0.0) {
                for (int64_t i = 0; i < n; i++) g2[i] = g[i] * gs + (float)wd * w[i];
                gg = g2;
                h.weight_decay = 0.0, h.grad_scale = 1.0f;
            }
            kc_adamw_step(w, NULL, gg, (float *)m.p + off, (float *)v.p + off, (size_t)n, h);
        }
        if (params.p && params.p != master.p) {
            if (params.dt == SRT_F32) memcpy((float *)params.p + off, w, (size_t)n * 4);
            else if (params.dt == SRT_BF16) kc_cast_f32_to_bf16((uint16_t *)params.p + off, w, (size_t)n);
            else kc_cast_f32_to_fp16((uint16_t *)params.p + off, w, (size_t)n);
        }
    }
}

/* The program's optimizer on a flat fp32 range, on the device (skipped
 * there when the norm overflowed). */
void cu_optimizer_step(srt_ctx *c, srt_stream s, srt_t params, srt_t master, srt_t grads, srt_t m, srt_t v,
                       bool decay)
{
    if (cu_host_defer(c, s)) {
        cu_host_optimizer_step(c, params, master, grads, m, v, decay);
        return;
    }
    cu_step_sc sc = cu_step_scalars(c);
    cu_optimizer_step_sc(c, s, params, master, grads, m, v, decay, &sc);
}

/* The step with the given scalars: on the CPU for state in the host arena,
 * else on the device. */
void cu_optimizer_step_sc(srt_ctx *c, srt_stream s, srt_t params, srt_t master, srt_t grads, srt_t m, srt_t v,
                          bool decay, const cu_step_sc *sc)
{
    cu_state *st = cu_st(c);
    if (cu_is_host(c, master.p)) {
        cu_host_step(c, s, params, master, grads, m, v, decay, sc);
        return;
    }
    const srt_program *p = c->prog;
    double wd = decay ? p->weight_decay : 0.0;
    cudaStream_t cs = cu_stream(c, s);
    const float *clip = &st->norm->out.clip_scale;
    const int *skip = &st->norm->out.overflow;
    if (p->optimizer == 2) {
        KgSGD h = { sc->lr, p->momentum, 0.0, wd, 0, sc->step == 1, sc->loss_scale };
        cu_kg(c, kg_sgd_step(params, master, grads, m, h, clip, skip, cs), "optimizer_step (sgd)");
    } else {
        KgAdamW h = { sc->lr, p->beta1, p->beta2, p->eps, wd, (int)sc->step, p->optimizer == 1, sc->loss_scale };
        cu_kg(c, kg_adamw_step(params, master, grads, m, v, h, clip, skip, cs), "optimizer_step");
    }
}
