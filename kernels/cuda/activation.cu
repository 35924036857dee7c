/* activation.cu — pointwise ops: GELU (tanh), SwiGLU, the residual add.
 * Each element is computed on its own with the CPU twin's formula (expf,
 * not __expf), so the grid changes no bit.
 */
#include "common.cuh"

#define KG_GELU_K 0.7978845608028654f   /* sqrt(2/pi) */

/* sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): gelu(x) = x * this. */
__device__ __forceinline__ float kg_gelu_sig(float x)
{
    float u = KG_GELU_K * (x + 0.044715f * x * x * x);
    return 1.0f / (1.0f + expf(-2.0f * u));
}

/* out = x * sigmoid(2u) (GPT-2's gelu, no cancellation for negative x). */
__global__ void kg_gelu_fwd_kernel(KgT out, KgC inp, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float x = kg_ld(inp.p, inp.dt, i);
        kg_st(out.p, out.dt, i, x * kg_gelu_sig(x));
    }
}

/* dinp += (s + x * 2 s (1 - s) du/dx) * dout, s = sigmoid(2u). */
__global__ void kg_gelu_bwd_kernel(KgT dinp, KgC inp, KgC dout, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float x = kg_ld(inp.p, inp.dt, i), sg = kg_gelu_sig(x);
        float du = KG_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        float local = sg + x * 2.0f * sg * (1.0f - sg) * du;
        kg_st(dinp.p, dinp.dt, i, kg_ld(dinp.p, dinp.dt, i) + local * kg_ld(dout.p, dout.dt, i));
    }
}

/* out(N,H) = silu(a) * b, a and b rows ld apart. */
__global__ void kg_swiglu_fwd_kernel(KgT out, KgC a, KgC b, int N, int H, int ld)
{
    int64_t n = (int64_t)N * H;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / H, j = r * ld + (i - r * H);
        float x = kg_ld(a.p, a.dt, j), sg = 1.0f / (1.0f + expf(-x));
        kg_st(out.p, out.dt, i, x * sg * kg_ld(b.p, b.dt, j));
    }
}

/* da += dout * b * s (1 + a (1 - s)), db += dout * a * s, s = sigmoid(a). */
__global__ void kg_swiglu_bwd_kernel(KgT da, KgT db, KgC dout, KgC a, KgC b, int N, int H, int ld)
{
    int64_t n = (int64_t)N * H;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / H, j = r * ld + (i - r * H);
        float x = kg_ld(a.p, a.dt, j), y = kg_ld(b.p, b.dt, j), d = kg_ld(dout.p, dout.dt, i);
        float sg = 1.0f / (1.0f + expf(-x));
        if (da.p) kg_st(da.p, da.dt, j, kg_ld(da.p, da.dt, j) + d * y * sg * (1.0f + x * (1.0f - sg)));
        if (db.p) kg_st(db.p, db.dt, j, kg_ld(db.p, db.dt, j) + d * x * sg);
    }
}

/* out = a + b (out may alias a or b: each element is read before written). */
__global__ void kg_add_fwd_kernel(KgT out, KgC a, KgC b, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        kg_st(out.p, out.dt, i, kg_ld(a.p, a.dt, i) + kg_ld(b.p, b.dt, i));
}

/* da += dout, db += dout. */
__global__ void kg_add_bwd_kernel(KgT da, KgT db, KgC dout, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float d = kg_ld(dout.p, dout.dt, i);
        if (da.p) kg_st(da.p, da.dt, i, kg_ld(da.p, da.dt, i) + d);
        if (db.p) kg_st(db.p, db.dt, i, kg_ld(db.p, db.dt, i) + d);
    }
}

/* out = gelu(inp). */
extern "C" cudaError_t kg_gelu_forward(srt_t out, srt_t inp, cudaStream_t s)
{
    KG_ARG(inp, 0, KG_FLOAT, 0);
    KG_ARG(out, inp.n, KG_FLOAT, 0);
    if (inp.n <= 0) return cudaSuccess;
    KG_LAUNCH(kg_gelu_fwd_kernel, kg_grid(inp.n, 256), 256, s, kg_t(out), kg_t(inp), inp.n);
    return kg_launched(__func__);
}

/* dinp += gelu'(inp) * dout. */
extern "C" cudaError_t kg_gelu_backward(srt_t dinp, srt_t inp, srt_t dout, cudaStream_t s)
{
    KG_ARG(inp, 0, KG_FLOAT, 0);
    KG_ARG(dinp, inp.n, KG_FLOAT, 0);
    KG_ARG(dout, inp.n, KG_FLOAT, 0);
    if (inp.n <= 0) return cudaSuccess;
    KG_LAUNCH(kg_gelu_bwd_kernel, kg_grid(inp.n, 256), 256, s, kg_t(dinp), kg_t(inp), kg_t(dout), inp.n);
    return kg_launched(__func__);
}

/* Elements a row-strided (N,H) view with rows ld apart spans. */
static int64_t kg_span(int N, int H, int ld)
{
    return N > 0 ? (int64_t)(N - 1) * ld + H : 0;
}

/* out = silu(a) * b over row-strided a, b. */
extern "C" cudaError_t kg_swiglu_forward(srt_t out, srt_t a, srt_t b, int N, int H, int ld,
                                         cudaStream_t s)
{
    KG_REQ(N >= 0 && H >= 0 && ld >= H);
    KG_ARG(out, (int64_t)N * H, KG_FLOAT, 0);
    KG_ARG(a, kg_span(N, H, ld), KG_FLOAT, 0);
    KG_ARG(b, kg_span(N, H, ld), KG_FLOAT, 0);
    if ((int64_t)N * H == 0) return cudaSuccess;
    KG_LAUNCH(kg_swiglu_fwd_kernel, kg_grid((int64_t)N * H, 256), 256, s, kg_t(out), kg_t(a), kg_t(b),
                                                                     N, H, ld);
    return kg_launched(__func__);
}

/* da, db += the gradients of silu(a) * b. */
extern "C" cudaError_t kg_swiglu_backward(srt_t da, srt_t db, srt_t dout, srt_t a, srt_t b,
                                          int N, int H, int ld, cudaStream_t s)
{
    KG_REQ(N >= 0 && H >= 0 && ld >= H);
    KG_ARG(da, kg_span(N, H, ld), KG_FLOAT, 1);
    KG_ARG(db, kg_span(N, H, ld), KG_FLOAT, 1);
    KG_ARG(dout, (int64_t)N * H, KG_FLOAT, 0);
    KG_ARG(a, kg_span(N, H, ld), KG_FLOAT, 0);
    KG_ARG(b, kg_span(N, H, ld), KG_FLOAT, 0);
    if ((int64_t)N * H == 0 || (!da.p && !db.p)) return cudaSuccess;
    KG_LAUNCH(kg_swiglu_bwd_kernel, kg_grid((int64_t)N * H, 256), 256, s,
        kg_t(da), kg_t(db), kg_t(dout), kg_t(a), kg_t(b), N, H, ld);
    return kg_launched(__func__);
}

/* out = a + b. */
extern "C" cudaError_t kg_residual_forward(srt_t out, srt_t a, srt_t b, cudaStream_t s)
{
    KG_ARG(out, 0, KG_FLOAT, 0);
    KG_ARG(a, out.n, KG_FLOAT, 0);
    KG_ARG(b, out.n, KG_FLOAT, 0);
    if (out.n <= 0) return cudaSuccess;
    KG_LAUNCH(kg_add_fwd_kernel, kg_grid(out.n, 256), 256, s, kg_t(out), kg_t(a), kg_t(b), out.n);
    return kg_launched(__func__);
}

/* da += dout, db += dout. */
extern "C" cudaError_t kg_residual_backward(srt_t da, srt_t db, srt_t dout, cudaStream_t s)
{
    KG_ARG(dout, 0, KG_FLOAT, 0);
    KG_ARG(da, dout.n, KG_FLOAT, 1);
    KG_ARG(db, dout.n, KG_FLOAT, 1);
    if (dout.n <= 0 || (!da.p && !db.p)) return cudaSuccess;
    KG_LAUNCH(kg_add_bwd_kernel, kg_grid(dout.n, 256), 256, s, kg_t(da), kg_t(db), kg_t(dout), dout.n);
    return kg_launched(__func__);
}
