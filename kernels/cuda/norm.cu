/* norm.cu — layernorm and rmsnorm over the last axis, forward and backward.
 *
 * Forward and dinp: one warp per row (llm.c's layout); each lane sums a fixed
 * strided subset of the row in fp32, then a fixed butterfly adds the lanes.
 * Mean and variance are two passes over the row (no E[x^2] - E[x]^2
 * cancellation).  dweight / dbias: a separate kernel, one block per 32
 * columns; each of its 16 warps sums a fixed set of rows (w, w+16, ...) per
 * column, then one warp adds the 16 partials in warp order.  No atomics, no
 * scratch: the same bits on every run, whatever the GPU.
 */
#include "common.cuh"

enum {
    KG_NORM_ROWS = 8,    /* rows (warps) per block of the row kernels        */
    KG_NORM_PW = 16,     /* warps per block of the dweight / dbias kernel    */
    KG_NORM_UNROLL = 8,  /* rows whose loads a warp of that kernel has in flight */
};

/* Layernorm of one row per warp; rms != 0: rmsnorm (no mean, no bias). */
__global__ void kg_norm_fwd_kernel(KgT out, float *mean, float *rstd, KgC inp, KgC w, KgC b,
                                   int N, int C, float eps, int rms)
{
    int n = blockIdx.x * KG_NORM_ROWS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (n >= N) return;   /* whole warps leave: the shuffles stay full */
    int64_t row = (int64_t)n * C;
    float m = 0.0f;
    if (!rms) {
        float s = 0.0f;
        for (int i = lane; i < C; i += 32) s += kg_ld(inp.p, inp.dt, row + i);
        m = kg_warp_sum(s) / (float)C;
    }
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = kg_ld(inp.p, inp.dt, row + i) - m;
        v += d * d;
    }
    float r = 1.0f / sqrtf(kg_warp_sum(v) / (float)C + eps);   /* not rsqrtf: 2 ulp */
    for (int i = lane; i < C; i += 32) {
        float x = kg_ld(inp.p, inp.dt, row + i), o;
        if (rms) o = kg_ld(w.p, w.dt, i) * (x * r);   /* Hugging Face's order */
        else {
            o = (x - m) * r * kg_ld(w.p, w.dt, i);
            if (b.p) o += kg_ld(b.p, b.dt, i);
        }
        kg_st(out.p, out.dt, row + i, o);
    }
    if (lane == 0) {
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = r;
    }
}

/* dinp of one row per warp:
 * layernorm: dx += (w*dy - mean(w*dy) - norm * mean(w*dy*norm)) * rstd;
 * rmsnorm:   dx += rstd * (w*dy - x * rstd^2 * mean(w*dy*x)). */
__global__ void kg_norm_bwd_dinp_kernel(KgT dinp, KgC dout, KgC inp, KgC w, const float *mean,
                                        const float *rstd, int N, int C, int rms)
{
    int n = blockIdx.x * KG_NORM_ROWS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (n >= N) return;
    int64_t row = (int64_t)n * C;
    float m = rms ? 0.0f : mean[n], r = rstd[n];
    float s1 = 0.0f, s2 = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float dn = kg_ld(w.p, w.dt, i) * kg_ld(dout.p, dout.dt, row + i);
        float x = kg_ld(inp.p, inp.dt, row + i);
        s1 += dn;
        s2 += rms ? dn * x : dn * ((x - m) * r);
    }
    float mean_dn = kg_warp_sum(s1) / (float)C, mean_dnx = kg_warp_sum(s2) / (float)C;
    float k = mean_dnx * r * r;
    for (int i = lane; i < C; i += 32) {
        float dn = kg_ld(w.p, w.dt, i) * kg_ld(dout.p, dout.dt, row + i);
        float x = kg_ld(inp.p, inp.dt, row + i);
        float g = rms ? r * (dn - x * k) : (dn - mean_dn - ((x - m) * r) * mean_dnx) * r;
        kg_st(dinp.p, dinp.dt, row + i, kg_ld(dinp.p, dinp.dt, row + i) + g);
    }
}

/* dw[c] += sum_n dout*norm, db[c] += sum_n dout for 32 columns per block;
 * norm = (x - mean) * rstd, or x * rstd when mean is NULL. */
__global__ void __launch_bounds__(32 * KG_NORM_PW)
kg_norm_bwd_param_kernel(KgT dw, KgT db, KgC dout, KgC inp, const float *mean, const float *rstd,
                         int N, int C)
{
    __shared__ float pw[KG_NORM_PW][33], pb[KG_NORM_PW][33];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int c = blockIdx.x * 32 + lane;
    float sw = 0.0f, sb = 0.0f;
    if (c < C) {
        /* C / 32 blocks (24 for GPT-2 124M): the loads of KG_NORM_UNROLL rows
         * are issued before their sums, or each warp waits on memory row by
         * row (196 GB/s on an H200); the sums keep their order, row by row */
        int n = warp;
        for (; n + (KG_NORM_UNROLL - 1) * KG_NORM_PW < N; n += KG_NORM_UNROLL * KG_NORM_PW) {
            float d[KG_NORM_UNROLL], x[KG_NORM_UNROLL], m[KG_NORM_UNROLL], r[KG_NORM_UNROLL];
#pragma unroll
            for (int u = 0; u < KG_NORM_UNROLL; u++) {
                int nu = n + u * KG_NORM_PW;
                int64_t i = (int64_t)nu * C + c;
                d[u] = kg_ld(dout.p, dout.dt, i), x[u] = kg_ld(inp.p, inp.dt, i);
                m[u] = mean ? mean[nu] : 0.0f, r[u] = rstd[nu];
            }
#pragma unroll
            for (int u = 0; u < KG_NORM_UNROLL; u++) {
                sw += d[u] * ((x[u] - m[u]) * r[u]);
                sb += d[u];
            }
        }
        for (; n < N; n += KG_NORM_PW) {
            int64_t i = (int64_t)n * C + c;
            float d = kg_ld(dout.p, dout.dt, i), x = kg_ld(inp.p, inp.dt, i);
            float m = mean ? mean[n] : 0.0f;
            sw += d * ((x - m) * rstd[n]);
            sb += d;
        }
    }
    pw[warp][lane] = sw;
    pb[warp][lane] = sb;
    __syncthreads();
    if (warp == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int k = 0; k < KG_NORM_PW; k++) tw += pw[k][lane], tb += pb[k][lane];
        if (dw.p) kg_st(dw.p, dw.dt, c, kg_ld(dw.p, dw.dt, c) + tw);
        if (db.p) kg_st(db.p, db.dt, c, kg_ld(db.p, db.dt, c) + tb);
    }
}

/* The checks and launches shared by both norms. */
static cudaError_t kg_norm_fwd(const char *fn, srt_t out, srt_t mean, srt_t rstd, srt_t inp,
                               srt_t w, srt_t b, int N, int C, float eps, int rms,
                               cudaStream_t s)
{
    if (N < 0 || C <= 0) return kg_bad(fn, "bad shape N=%d C=%d", N, C);
    int64_t nc = (int64_t)N * C;
    KG_TRY(kg_arg(fn, "out", out, nc, KG_FLOAT, 0));
    KG_TRY(kg_arg(fn, "mean", mean, N, KG_F32, 1));
    KG_TRY(kg_arg(fn, "rstd", rstd, N, KG_F32, 1));
    KG_TRY(kg_arg(fn, "inp", inp, nc, KG_FLOAT, 0));
    KG_TRY(kg_arg(fn, "w", w, C, KG_FLOAT, 0));
    KG_TRY(kg_arg(fn, "b", b, C, KG_FLOAT, 1));
    if (N == 0) return cudaSuccess;
    KG_LAUNCH(kg_norm_fwd_kernel, (N + KG_NORM_ROWS - 1) / KG_NORM_ROWS, 32 * KG_NORM_ROWS, s,
        kg_t(out), (float *)mean.p, (float *)rstd.p, kg_t(inp), kg_t(w), kg_t(b), N, C, eps, rms);
    return kg_launched(fn);
}

/* The checks and launches shared by both norms' backward. */
static cudaError_t kg_norm_bwd(const char *fn, srt_t dinp, srt_t dw, srt_t db, srt_t dout,
                               srt_t inp, srt_t w, srt_t mean, srt_t rstd, int N, int C,
                               int rms, cudaStream_t s)
{
    if (N < 0 || C <= 0) return kg_bad(fn, "bad shape N=%d C=%d", N, C);
    int64_t nc = (int64_t)N * C;
    KG_TRY(kg_arg(fn, "dinp", dinp, nc, KG_FLOAT, 1));
    KG_TRY(kg_arg(fn, "dw", dw, C, KG_FLOAT, 1));
    KG_TRY(kg_arg(fn, "db", db, C, KG_FLOAT, 1));
    KG_TRY(kg_arg(fn, "dout", dout, nc, KG_FLOAT, 0));
    KG_TRY(kg_arg(fn, "inp", inp, nc, KG_FLOAT, 0));
    KG_TRY(kg_arg(fn, "w", w, C, KG_FLOAT, !dinp.p));
    KG_TRY(kg_arg(fn, "mean", mean, N, KG_F32, rms));
    KG_TRY(kg_arg(fn, "rstd", rstd, N, KG_F32, 0));
    if (N == 0) return cudaSuccess;
    const float *mp = rms ? NULL : (const float *)mean.p, *rp = (const float *)rstd.p;
    if (dinp.p) {
        KG_LAUNCH(kg_norm_bwd_dinp_kernel, (N + KG_NORM_ROWS - 1) / KG_NORM_ROWS, 32 * KG_NORM_ROWS, s,
            kg_t(dinp), kg_t(dout), kg_t(inp), kg_t(w), mp, rp, N, C, rms);
        KG_TRY(kg_launched(fn));
    }
    if (dw.p || db.p) {
        KG_LAUNCH(kg_norm_bwd_param_kernel, (C + 31) / 32, 32 * KG_NORM_PW, s,
            kg_t(dw), kg_t(db), kg_t(dout), kg_t(inp), mp, rp, N, C);
        KG_TRY(kg_launched(fn));
    }
    return cudaSuccess;
}

/* LayerNorm forward, saving mean and rstd. */
extern "C" cudaError_t kg_layernorm_forward(srt_t out, srt_t mean, srt_t rstd, srt_t inp,
                                            srt_t w, srt_t b, int N, int C, float eps,
                                            cudaStream_t s)
{
    return kg_norm_fwd(__func__, out, mean, rstd, inp, w, b, N, C, eps, 0, s);
}

/* dinp, dweight, dbias += the LayerNorm gradients. */
extern "C" cudaError_t kg_layernorm_backward(srt_t dinp, srt_t dw, srt_t db, srt_t dout,
                                             srt_t inp, srt_t w, srt_t mean, srt_t rstd, int N,
                                             int C, cudaStream_t s)
{
    return kg_norm_bwd(__func__, dinp, dw, db, dout, inp, w, mean, rstd, N, C, 0, s);
}

/* RMSNorm forward, saving rstd. */
extern "C" cudaError_t kg_rmsnorm_forward(srt_t out, srt_t rstd, srt_t inp, srt_t w, int N,
                                          int C, float eps, cudaStream_t s)
{
    srt_t none = { NULL, 0, SRT_F32 };
    return kg_norm_fwd(__func__, out, none, rstd, inp, w, none, N, C, eps, 1, s);
}

/* dinp, dweight += the RMSNorm gradients. */
extern "C" cudaError_t kg_rmsnorm_backward(srt_t dinp, srt_t dw, srt_t dout, srt_t inp, srt_t w,
                                           srt_t rstd, int N, int C, cudaStream_t s)
{
    srt_t none = { NULL, 0, SRT_F32 };
    return kg_norm_bwd(__func__, dinp, dw, none, dout, inp, w, none, rstd, N, C, 1, s);
}
