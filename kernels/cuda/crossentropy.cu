/* crossentropy.cu — fused softmax cross-entropy, ready for a vocab split.
 *
 * The pieces of kernels/cpu/crossentropy.c, so that the tp all-reduces go
 * between them.  Phase 1 (partial): one block per row, a block max and then
 * a block sum of expf(x - max), each thread over a fixed strided subset and
 * the warps combined in warp order (deterministic).  Rescale, combine and
 * loss: one thread per row, ranks in order.  Phase 2 (backward): one thread
 * per logit overwrites it with (exp(x - gmax) / gsum - onehot) * dloss, so the
 * probabilities are never stored.  Columns whose global index is >= V are
 * vocabulary padding: logits of -inf, gradient 0.
 */
#include "common.cuh"

enum { KG_XENT_THREADS = 512 };

/* Number of real (unpadded) columns in a local slice [v0, v0+Vl). */
static __host__ __device__ int kg_xent_valid(int Vl, int v0, int V)
{
    int n = V - v0;
    if (n < 0) n = 0;
    return n < Vl ? n : Vl;
}

/* rowmax, rowsum, tlogit of one row per block. */
__global__ void __launch_bounds__(KG_XENT_THREADS)
kg_xent_partial_kernel(float *rowmax, float *rowsum, float *tlogit, KgC logits,
                       const int32_t *targets, int Vl, int v0, int nv)
{
    __shared__ float sh[32];
    int n = blockIdx.x;
    int64_t row = (int64_t)n * Vl;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < nv; j += blockDim.x) mx = fmaxf(mx, kg_ld(logits.p, logits.dt, row + j));
    mx = kg_block_reduce(mx, 1, sh);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < nv; j += blockDim.x) sum += expf(kg_ld(logits.p, logits.dt, row + j) - mx);
    sum = kg_block_reduce(sum, 0, sh);
    if (threadIdx.x == 0) {
        int tg = targets[n], tj = tg - v0;
        rowmax[n] = mx;
        rowsum[n] = sum;
        tlogit[n] = tg >= 0 && tj >= 0 && tj < nv ? kg_ld(logits.p, logits.dt, row + tj) : 0.0f;
    }
}

/* rowsum *= exp(rowmax - gmax) where rowsum is not 0. */
__global__ void kg_xent_rescale_kernel(float *rowsum, const float *rowmax, const float *gmax, int N)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N && rowsum[n] != 0.0f) rowsum[n] *= expf(rowmax[n] - gmax[n]);
}

/* The combine of R partials laid out [R][N], in rank order. */
__global__ void kg_xent_combine_kernel(float *gmax, float *gsum, float *gtlogit, const float *rowmax,
                                       const float *rowsum, const float *tlogit, int R, int N)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float mx = -INFINITY;
    for (int r = 0; r < R; r++) mx = fmaxf(mx, rowmax[(int64_t)r * N + n]);
    double sum = 0.0, tl = 0.0;
    for (int r = 0; r < R; r++) {
        float s = rowsum[(int64_t)r * N + n];
        if (s != 0.0f) sum += s * expf(rowmax[(int64_t)r * N + n] - mx);
        tl += tlogit[(int64_t)r * N + n];
    }
    gmax[n] = mx;   /* after every read: gmax may alias rowmax when R = 1 */
    gsum[n] = (float)sum;
    gtlogit[n] = (float)tl;
}

/* loss = log(gsum) + gmax - gtlogit; 0 for ignored rows. */
__global__ void kg_xent_loss_kernel(float *loss, const int32_t *targets, const float *gmax,
                                    const float *gsum, const float *gtlogit, int N)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) loss[n] = targets[n] < 0 ? 0.0f : logf(gsum[n]) + gmax[n] - gtlogit[n];
}

/* logits := (softmax - onehot) * dloss in place; 0 on padding and ignored rows. */
__global__ void kg_xent_bwd_kernel(KgT logits, const int32_t *targets, const float *gmax,
                                   const float *gsum, float dloss, int N, int Vl, int v0, int nv)
{
    int64_t total = (int64_t)N * Vl;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        int n = (int)(e / Vl), j = (int)(e - (int64_t)n * Vl);
        int tg = targets[n];
        float g = 0.0f;
        if (tg >= 0 && j < nv) {
            float p = expf(kg_ld(logits.p, logits.dt, e) - gmax[n]) * (1.0f / gsum[n]);
            g = (p - (j == tg - v0 ? 1.0f : 0.0f)) * dloss;
        }
        kg_st(logits.p, logits.dt, e, g);
    }
}

/* Phase 1: per-row local max, sum of exps and target logit. */
extern "C" cudaError_t kg_xent_partial(srt_t rowmax, srt_t rowsum, srt_t tlogit, srt_t logits,
                                       srt_t targets, int N, int Vl, int v0, int V, cudaStream_t s)
{
    KG_REQ(N >= 0 && Vl >= 0 && v0 >= 0 && V >= 0);
    KG_ARG(rowmax, N, KG_F32, 0);
    KG_ARG(rowsum, N, KG_F32, 0);
    KG_ARG(tlogit, N, KG_F32, 0);
    KG_ARG(logits, (int64_t)N * Vl, KG_FLOAT, 0);
    KG_ARG(targets, N, KG_I32, 0);
    if (N == 0) return cudaSuccess;
    KG_LAUNCH(kg_xent_partial_kernel, N, KG_XENT_THREADS, s,
        (float *)rowmax.p, (float *)rowsum.p, (float *)tlogit.p, kg_t(logits),
        (const int32_t *)targets.p, Vl, v0, kg_xent_valid(Vl, v0, V));
    return kg_launched(__func__);
}

/* Re-bases each local row sum on the global max. */
extern "C" cudaError_t kg_xent_rescale(srt_t rowsum, srt_t rowmax, srt_t gmax, int N, cudaStream_t s)
{
    KG_REQ(N >= 0);
    KG_ARG(rowsum, N, KG_F32, 0);
    KG_ARG(rowmax, N, KG_F32, 0);
    KG_ARG(gmax, N, KG_F32, 0);
    if (N == 0) return cudaSuccess;
    KG_LAUNCH(kg_xent_rescale_kernel, (N + 255) / 256, 256, s, (float *)rowsum.p, (const float *)rowmax.p,
                                                          (const float *)gmax.p, N);
    return kg_launched(__func__);
}

/* Combines R ranks' partials held in one process. */
extern "C" cudaError_t kg_xent_combine(srt_t gmax, srt_t gsum, srt_t gtlogit, srt_t rowmax,
                                       srt_t rowsum, srt_t tlogit, int R, int N, cudaStream_t s)
{
    KG_REQ(N >= 0 && R >= 1);
    KG_ARG(gmax, N, KG_F32, 0);
    KG_ARG(gsum, N, KG_F32, 0);
    KG_ARG(gtlogit, N, KG_F32, 0);
    KG_ARG(rowmax, (int64_t)R * N, KG_F32, 0);
    KG_ARG(rowsum, (int64_t)R * N, KG_F32, 0);
    KG_ARG(tlogit, (int64_t)R * N, KG_F32, 0);
    if (R > 1) KG_REQ(gmax.p != rowmax.p && gsum.p != rowsum.p && gtlogit.p != tlogit.p);
    if (N == 0) return cudaSuccess;
    KG_LAUNCH(kg_xent_combine_kernel, (N + 255) / 256, 256, s,
        (float *)gmax.p, (float *)gsum.p, (float *)gtlogit.p, (const float *)rowmax.p,
        (const float *)rowsum.p, (const float *)tlogit.p, R, N);
    return kg_launched(__func__);
}

/* Phase 2: the per-row loss. */
extern "C" cudaError_t kg_xent_loss(srt_t loss, srt_t targets, srt_t gmax, srt_t gsum,
                                    srt_t gtlogit, int N, cudaStream_t s)
{
    KG_REQ(N >= 0);
    KG_ARG(loss, N, KG_F32, 0);
    KG_ARG(targets, N, KG_I32, 0);
    KG_ARG(gmax, N, KG_F32, 0);
    KG_ARG(gsum, N, KG_F32, 0);
    KG_ARG(gtlogit, N, KG_F32, 0);
    if (N == 0) return cudaSuccess;
    KG_LAUNCH(kg_xent_loss_kernel, (N + 255) / 256, 256, s,
        (float *)loss.p, (const int32_t *)targets.p, (const float *)gmax.p, (const float *)gsum.p,
        (const float *)gtlogit.p, N);
    return kg_launched(__func__);
}

/* Phase 2: overwrites the logits with their gradient. */
extern "C" cudaError_t kg_xent_backward(srt_t logits, srt_t targets, srt_t gmax, srt_t gsum,
                                        float dloss, int N, int Vl, int v0, int V, cudaStream_t s)
{
    KG_REQ(N >= 0 && Vl >= 0 && v0 >= 0 && V >= 0);
    KG_ARG(logits, (int64_t)N * Vl, KG_FLOAT, 0);
    KG_ARG(targets, N, KG_I32, 0);
    KG_ARG(gmax, N, KG_F32, 0);
    KG_ARG(gsum, N, KG_F32, 0);
    int64_t total = (int64_t)N * Vl;
    if (total == 0) return cudaSuccess;
    KG_LAUNCH(kg_xent_bwd_kernel, kg_grid(total, 256), 256, s,
        kg_t(logits), (const int32_t *)targets.p, (const float *)gmax.p, (const float *)gsum.p,
        dloss, N, Vl, v0, kg_xent_valid(Vl, v0, V));
    return kg_launched(__func__);
}
