/* attention.cu — plain causal attention with grouped-query heads: the
 * fallback for shapes cuDNN's fused attention declines.  Correct and simple
 * rather than fast.
 *
 * One warp per query row (forward, dq) or per key row (dk, dv); lane l holds
 * the head dimensions l, l+32, ... (HS <= 256: at most 8 per lane).  Dot
 * products are a per-lane partial plus a fixed butterfly (kg_warp_sum);
 * forward keeps an online softmax over the keys 0..i and saves the
 * log-sum-exp; backward recomputes the probabilities from it.  dk and dv of
 * key j of kv head g sum over the group's heads, then the queries i >= j, in
 * that order (the CPU twin's order), in registers: no atomics, no (T,T)
 * matrix, no scratch, the same bits on every run.  fp32 arithmetic.
 */
#include "common.cuh"

enum {
    KG_ATT_MAXR = 8,     /* head dimensions per lane: HS <= 32 * this      */
    KG_ATT_WARPS = 4,    /* warps (rows) per block                          */
};

/* The shape, passed by value to every kernel. */
struct KgAttn {
    int B, T, NH, NKV, HS, ld_q, ld_kv;
    float scale;
};

/* Element offsets of (b, t, head) in the q-strided, kv-strided and packed layouts. */
__device__ __forceinline__ int64_t kg_qoff(const KgAttn &s, int b, int t, int h)
{
    return ((int64_t)b * s.T + t) * s.ld_q + (int64_t)h * s.HS;
}
__device__ __forceinline__ int64_t kg_kvoff(const KgAttn &s, int b, int t, int g)
{
    return ((int64_t)b * s.T + t) * s.ld_kv + (int64_t)g * s.HS;
}
__device__ __forceinline__ int64_t kg_ooff(const KgAttn &s, int b, int t, int h)
{
    return (((int64_t)b * s.T + t) * s.NH + h) * s.HS;
}

/* x[r] := row[lane + 32 r] (0 past HS). */
__device__ __forceinline__ void kg_att_load(float *x, KgC t, int64_t off, int HS, int lane)
{
#pragma unroll
    for (int r = 0; r < KG_ATT_MAXR; r++) {
        int d = lane + 32 * r;
        x[r] = d < HS ? kg_ld(t.p, t.dt, off + d) : 0.0f;
    }
}

/* The dot product of x (registers) with row (memory), in every lane. */
__device__ __forceinline__ float kg_att_dot(const float *x, KgC t, int64_t off, int HS, int lane)
{
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < KG_ATT_MAXR; r++) {
        int d = lane + 32 * r;
        if (d < HS) s += x[r] * kg_ld(t.p, t.dt, off + d);
    }
    return kg_warp_sum(s);
}

/* acc += a * row. */
__device__ __forceinline__ void kg_att_axpy(float *acc, float a, KgC t, int64_t off, int HS, int lane)
{
#pragma unroll
    for (int r = 0; r < KG_ATT_MAXR; r++) {
        int d = lane + 32 * r;
        if (d < HS) acc[r] += a * kg_ld(t.p, t.dt, off + d);
    }
}

/* Forward: one warp per (b, h, i). */
__global__ void __launch_bounds__(32 * KG_ATT_WARPS)
kg_attn_fwd_kernel(KgT out, float *lse, KgC q, KgC k, KgC v, KgAttn s)
{
    int64_t row = (int64_t)blockIdx.x * KG_ATT_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= (int64_t)s.B * s.NH * s.T) return;   /* whole warps */
    int i = (int)(row % s.T), h = (int)(row / s.T % s.NH), b = (int)(row / ((int64_t)s.T * s.NH));
    int g = h / (s.NH / s.NKV);
    float qr[KG_ATT_MAXR], acc[KG_ATT_MAXR];
    kg_att_load(qr, q, kg_qoff(s, b, i, h), s.HS, lane);
#pragma unroll
    for (int r = 0; r < KG_ATT_MAXR; r++) acc[r] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j <= i; j++) {
        float sc = kg_att_dot(qr, k, kg_kvoff(s, b, j, g), s.HS, lane) * s.scale;
        float mnew = fmaxf(m, sc);
        float corr = expf(m - mnew);   /* 0 on the first key */
        float p = expf(sc - mnew);
        l = l * corr + p;
#pragma unroll
        for (int r = 0; r < KG_ATT_MAXR; r++) acc[r] *= corr;
        kg_att_axpy(acc, p, v, kg_kvoff(s, b, j, g), s.HS, lane);
        m = mnew;
    }
    float inv = 1.0f / l;
    int64_t o = kg_ooff(s, b, i, h);
#pragma unroll
    for (int r = 0; r < KG_ATT_MAXR; r++) {
        int d = lane + 32 * r;
        if (d < s.HS) kg_st(out.p, out.dt, o + d, acc[r] * inv);
    }
    if (lane == 0) lse[((int64_t)b * s.NH + h) * s.T + i] = m + logf(l);
}

/* Backward, dq: one warp per (b, h, i); dq += sum_j ds_ij * scale * k_j. */
__global__ void __launch_bounds__(32 * KG_ATT_WARPS)
kg_attn_dq_kernel(KgT dq, KgC dout, KgC out, const float *lse, KgC q, KgC k, KgC v, KgAttn s)
{
    int64_t row = (int64_t)blockIdx.x * KG_ATT_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= (int64_t)s.B * s.NH * s.T) return;
    int i = (int)(row % s.T), h = (int)(row / s.T % s.NH), b = (int)(row / ((int64_t)s.T * s.NH));
    int g = h / (s.NH / s.NKV);
    float qr[KG_ATT_MAXR], dor[KG_ATT_MAXR], acc[KG_ATT_MAXR];
    kg_att_load(qr, q, kg_qoff(s, b, i, h), s.HS, lane);
    kg_att_load(dor, dout, kg_ooff(s, b, i, h), s.HS, lane);
#pragma unroll
    for (int r = 0; r < KG_ATT_MAXR; r++) acc[r] = 0.0f;
    float D = kg_att_dot(dor, out, kg_ooff(s, b, i, h), s.HS, lane);
    float lse_i = lse[((int64_t)b * s.NH + h) * s.T + i];
    for (int j = 0; j <= i; j++) {
        int64_t kv = kg_kvoff(s, b, j, g);
        float p = expf(kg_att_dot(qr, k, kv, s.HS, lane) * s.scale - lse_i);
        float ds = p * (kg_att_dot(dor, v, kv, s.HS, lane) - D);
        kg_att_axpy(acc, ds * s.scale, k, kv, s.HS, lane);
    }
    int64_t o = kg_qoff(s, b, i, h);
#pragma unroll
    for (int r = 0; r < KG_ATT_MAXR; r++) {
        int d = lane + 32 * r;
        if (d < s.HS) kg_st(dq.p, dq.dt, o + d, kg_ld(dq.p, dq.dt, o + d) + acc[r]);
    }
}

/* Backward, dk and dv: one warp per (b, g, j), summing over the group's
 * heads and the queries i >= j in order. */
__global__ void __launch_bounds__(32 * KG_ATT_WARPS)
kg_attn_dkv_kernel(KgT dk, KgT dv, KgC dout, KgC out, const float *lse, KgC q, KgC k, KgC v, KgAttn s)
{
    int64_t row = (int64_t)blockIdx.x * KG_ATT_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= (int64_t)s.B * s.NKV * s.T) return;
    int j = (int)(row % s.T), g = (int)(row / s.T % s.NKV), b = (int)(row / ((int64_t)s.T * s.NKV));
    int rep = s.NH / s.NKV;
    float kr[KG_ATT_MAXR], vr[KG_ATT_MAXR], dka[KG_ATT_MAXR], dva[KG_ATT_MAXR];
    int64_t kv = kg_kvoff(s, b, j, g);
    kg_att_load(kr, k, kv, s.HS, lane);
    kg_att_load(vr, v, kv, s.HS, lane);
#pragma unroll
    for (int r = 0; r < KG_ATT_MAXR; r++) dka[r] = 0.0f, dva[r] = 0.0f;
    for (int h = g * rep; h < (g + 1) * rep; h++)
        for (int i = j; i < s.T; i++) {
            int64_t qo = kg_qoff(s, b, i, h), oo = kg_ooff(s, b, i, h);
            float lse_i = lse[((int64_t)b * s.NH + h) * s.T + i];
            /* the dot products read the other side from memory: q_i, dout_i, out_i */
            float sc = 0.0f, dp = 0.0f, D = 0.0f;
#pragma unroll
            for (int r = 0; r < KG_ATT_MAXR; r++) {
                int d = lane + 32 * r;
                if (d < s.HS) {
                    float dod = kg_ld(dout.p, dout.dt, oo + d);
                    sc += kr[r] * kg_ld(q.p, q.dt, qo + d);
                    dp += vr[r] * dod;
                    D += dod * kg_ld(out.p, out.dt, oo + d);
                }
            }
            sc = kg_warp_sum(sc), dp = kg_warp_sum(dp), D = kg_warp_sum(D);
            float p = expf(sc * s.scale - lse_i);
            float ds = p * (dp - D);
            kg_att_axpy(dva, p, dout, oo, s.HS, lane);
            kg_att_axpy(dka, ds * s.scale, q, qo, s.HS, lane);
        }
#pragma unroll
    for (int r = 0; r < KG_ATT_MAXR; r++) {
        int d = lane + 32 * r;
        if (d >= s.HS) continue;
        if (dk.p) kg_st(dk.p, dk.dt, kv + d, kg_ld(dk.p, dk.dt, kv + d) + dka[r]);
        if (dv.p) kg_st(dv.p, dv.dt, kv + d, kg_ld(dv.p, dv.dt, kv + d) + dva[r]);
    }
}

/* Checks a shape and the views q, k, v hold; fills *a. */
static cudaError_t kg_attn_shape(const char *fn, KgAttn *a, srt_t q, srt_t k, srt_t v, int B, int T,
                                 int NH, int NKV, int HS, int ld_q, int ld_kv)
{
    if (B < 0 || T < 0 || NH <= 0 || NKV <= 0 || NH % NKV || HS <= 0 || HS > 32 * KG_ATT_MAXR ||
        ld_q < NH * HS || ld_kv < NKV * HS)
        return kg_bad(fn, "unsupported shape B=%d T=%d NH=%d NKV=%d HS=%d ld_q=%d ld_kv=%d", B, T, NH,
                      NKV, HS, ld_q, ld_kv);
    int64_t bt = (int64_t)B * T;
    int64_t qspan = bt ? (bt - 1) * ld_q + (int64_t)NH * HS : 0;
    int64_t kvspan = bt ? (bt - 1) * ld_kv + (int64_t)NKV * HS : 0;
    KG_TRY(kg_arg(fn, "q", q, qspan, KG_FLOAT, 0));
    KG_TRY(kg_arg(fn, "k", k, kvspan, KG_FLOAT, 0));
    KG_TRY(kg_arg(fn, "v", v, kvspan, KG_FLOAT, 0));
    a->B = B, a->T = T, a->NH = NH, a->NKV = NKV, a->HS = HS, a->ld_q = ld_q, a->ld_kv = ld_kv;
    a->scale = 1.0f / sqrtf((float)HS);
    return cudaSuccess;
}

/* Blocks for `rows` warps. */
static unsigned kg_attn_blocks(int64_t rows)
{
    return (unsigned)((rows + KG_ATT_WARPS - 1) / KG_ATT_WARPS);
}

/* Causal GQA attention: out and the lse of every row. */
extern "C" cudaError_t kg_attention_forward(srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v, int B,
                                            int T, int NH, int NKV, int HS, int ld_q, int ld_kv,
                                            cudaStream_t s)
{
    KgAttn a;
    KG_TRY(kg_attn_shape(__func__, &a, q, k, v, B, T, NH, NKV, HS, ld_q, ld_kv));
    int64_t rows = (int64_t)B * NH * T;
    KG_ARG(out, rows * HS, KG_FLOAT, 0);
    KG_ARG(lse, rows, KG_F32, 0);
    if (rows == 0) return cudaSuccess;
    KG_LAUNCH(kg_attn_fwd_kernel, kg_attn_blocks(rows), 32 * KG_ATT_WARPS, s,
        kg_t(out), (float *)lse.p, kg_t(q), kg_t(k), kg_t(v), a);
    return kg_launched(__func__);
}

/* dq, dk, dv += the attention gradients (dq pass, then the dk/dv pass). */
extern "C" cudaError_t kg_attention_backward(srt_t dq, srt_t dk, srt_t dv, srt_t dout, srt_t out,
                                             srt_t lse, srt_t q, srt_t k, srt_t v, int B, int T,
                                             int NH, int NKV, int HS, int ld_q, int ld_kv,
                                             cudaStream_t s)
{
    KgAttn a;
    KG_TRY(kg_attn_shape(__func__, &a, q, k, v, B, T, NH, NKV, HS, ld_q, ld_kv));
    int64_t rows = (int64_t)B * NH * T, bt = (int64_t)B * T;
    KG_ARG(dq, bt ? (bt - 1) * ld_q + (int64_t)NH * HS : 0, KG_FLOAT, 1);
    KG_ARG(dk, bt ? (bt - 1) * ld_kv + (int64_t)NKV * HS : 0, KG_FLOAT, 1);
    KG_ARG(dv, bt ? (bt - 1) * ld_kv + (int64_t)NKV * HS : 0, KG_FLOAT, 1);
    KG_ARG(dout, rows * HS, KG_FLOAT, 0);
    KG_ARG(out, rows * HS, KG_FLOAT, 0);
    KG_ARG(lse, rows, KG_F32, 0);
    if (rows == 0) return cudaSuccess;
    if (dq.p) {
        KG_LAUNCH(kg_attn_dq_kernel, kg_attn_blocks(rows), 32 * KG_ATT_WARPS, s,
            kg_t(dq), kg_t(dout), kg_t(out), (const float *)lse.p, kg_t(q), kg_t(k), kg_t(v), a);
        KG_TRY(kg_launched(__func__));
    }
    if (dk.p || dv.p) {
        KG_LAUNCH(kg_attn_dkv_kernel, kg_attn_blocks((int64_t)B * NKV * T), 32 * KG_ATT_WARPS, s,
            kg_t(dk), kg_t(dv), kg_t(dout), kg_t(out), (const float *)lse.p, kg_t(q), kg_t(k),
            kg_t(v), a);
        KG_TRY(kg_launched(__func__));
    }
    return cudaSuccess;
}
