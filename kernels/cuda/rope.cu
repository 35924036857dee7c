/* rope.cu — rotary position embedding, Hugging Face's rotate-half.
 *
 * One thread per (token, head, i < HS/2) rotates the pair (x[i], x[i+HS/2])
 * by f_i = pos * (1 / theta^(2i/HS)), the angle computed in fp32 in the order
 * of LlamaRotaryEmbedding and of the CPU twin (powf, cosf, sinf: CUDA's are
 * within 2 ulp).  Each thread reads its pair before writing it, so the
 * forward works in place.  Backward adds the inverse rotation; the inverse
 * writes it (in place too).
 */
#include "common.cuh"

/* Rotates pair i of head h of token (b,t); sign +1 forward, -1 inverse;
 * accumulate: y += R x instead of y = R x. */
__global__ void kg_rope_kernel(KgT y, KgC x, int B, int T, int NH, int HS, int ld, int pos0,
                               float theta, float sign, int accumulate)
{
    int half = HS / 2;
    int64_t n = (int64_t)B * T * NH * half;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        int i = (int)(e % half);
        int64_t th = e / half;              /* (b*T + t)*NH + h */
        int h = (int)(th % NH);
        int64_t bt = th / NH;
        int t = (int)(bt % T);
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)HS);
        float f = (float)(pos0 + t) * inv_freq;
        float cs = cosf(f), sn = sign * sinf(f);
        int64_t j1 = bt * ld + (int64_t)h * HS + i, j2 = j1 + half;
        float a = kg_ld(x.p, x.dt, j1), b = kg_ld(x.p, x.dt, j2);
        float o1 = a * cs - b * sn, o2 = b * cs + a * sn;
        if (accumulate) {
            o1 += kg_ld(y.p, y.dt, j1);
            o2 += kg_ld(y.p, y.dt, j2);
        }
        kg_st(y.p, y.dt, j1, o1);
        kg_st(y.p, y.dt, j2, o2);
    }
}

/* The checks and the launch shared by forward and backward. */
static cudaError_t kg_rope(const char *fn, srt_t y, srt_t x, int B, int T, int NH, int HS, int ld,
                           int pos0, float theta, float sign, int accumulate, cudaStream_t s)
{
    if (B < 0 || T < 0 || NH < 0 || HS <= 0 || HS % 2 || ld < NH * HS || pos0 < 0)
        return kg_bad(fn, "bad shape B=%d T=%d NH=%d HS=%d ld=%d pos0=%d", B, T, NH, HS, ld, pos0);
    int64_t span = (int64_t)B * T > 0 ? ((int64_t)B * T - 1) * ld + (int64_t)NH * HS : 0;
    KG_TRY(kg_arg(fn, "out", y, span, KG_FLOAT, 0));
    KG_TRY(kg_arg(fn, "inp", x, span, KG_FLOAT, 0));
    int64_t n = (int64_t)B * T * NH * (HS / 2);
    if (n == 0) return cudaSuccess;
    KG_LAUNCH(kg_rope_kernel, kg_grid(n, 256), 256, s, kg_t(y), kg_t(x), B, T, NH, HS, ld, pos0, theta,
                                                  sign, accumulate);
    return kg_launched(fn);
}

/* out = R inp (in place allowed). */
extern "C" cudaError_t kg_rope_forward(srt_t out, srt_t inp, int B, int T, int NH, int HS, int ld,
                                       int pos0, float theta, cudaStream_t s)
{
    return kg_rope(__func__, out, inp, B, T, NH, HS, ld, pos0, theta, 1.0f, 0, s);
}

/* dinp += R^T dout. */
extern "C" cudaError_t kg_rope_backward(srt_t dinp, srt_t dout, int B, int T, int NH, int HS,
                                        int ld, int pos0, float theta, cudaStream_t s)
{
    if (dinp.p && dinp.p == dout.p) return kg_bad(__func__, "dinp must not alias dout");
    return kg_rope(__func__, dinp, dout, B, T, NH, HS, ld, pos0, theta, -1.0f, 1, s);
}

/* out = R^T inp (in place allowed). */
extern "C" cudaError_t kg_rope_inverse(srt_t out, srt_t inp, int B, int T, int NH, int HS, int ld,
                                       int pos0, float theta, cudaStream_t s)
{
    return kg_rope(__func__, out, inp, B, T, NH, HS, ld, pos0, theta, -1.0f, 0, s);
}
