/* embedding.cu — token (+ position) embedding, forward and a deterministic
 * backward without atomics.
 *
 * Backward of wte: vocab row r is owned by block r % KG_EMB_GRID, which scans
 * every token in order and gathers the positions of the rows it owns into a
 * shared list (an ordered block compaction).  When the list is full, or the
 * tokens end, the block sorts it by (row, position) and every thread adds,
 * for its channels, each row's dout rows in increasing position into an
 * fp32 register, then stores the row once.  So each row sums its tokens in
 * b*T+t order (the CPU twin's order: fp32 results are bit-identical to it)
 * and a 16-bit dwte is rounded once per op, not once per token.  The grid is
 * a constant, so the bits do not depend on the GPU model either.
 */
#include "common.cuh"

enum {
    KG_EMB_GRID = 1024,    /* blocks of the dwte pass; row r -> block r % this  */
    KG_EMB_THREADS = 256,  /* threads per block (8 warps)                       */
    KG_EMB_CAP = 2048,     /* list entries per flush; a power of two            */
    KG_EMB_BATCH = 8,      /* dout loads in flight per thread in a flush        */
};

/* out[bt, c] = wte[tok - v0, c] (or 0) + wpe[t, c]. */
__global__ void kg_embed_fwd_kernel(KgT out, const int32_t *tokens, KgC wte, KgC wpe, int B,
                                    int T, int C, int v0, int v1)
{
    int64_t n = (int64_t)B * T * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t bt = i / C;
        int c = (int)(i - bt * C), t = (int)(bt % T), tok = tokens[bt];
        float o = tok >= v0 && tok < v1 ? kg_ld(wte.p, wte.dt, (int64_t)(tok - v0) * C + c) : 0.0f;
        if (wpe.p) o += kg_ld(wpe.p, wpe.dt, (int64_t)t * C + c);
        kg_st(out.p, out.dt, i, o);
    }
}

/* Sorts the first n keys of key[] ascending (bitonic, padded to a power of
 * two with UINT64_MAX); the whole block calls it. */
__device__ void kg_emb_sort(unsigned long long *key, int n)
{
    int p = 1;
    while (p < n) p <<= 1;
    for (int i = n + threadIdx.x; i < p; i += blockDim.x) key[i] = ~0ull;
    __syncthreads();
    for (int k = 2; k <= p; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < p; i += blockDim.x) {
                int ij = i ^ j;
                if (ij > i) {
                    unsigned long long a = key[i], b = key[ij];
                    bool up = (i & k) == 0;
                    if ((a > b) == up) key[i] = b, key[ij] = a;
                }
            }
            __syncthreads();
        }
}

/* Adds the n listed (row << 32 | position) tokens into dwte, one pass per
 * row.  Loads go out KG_EMB_BATCH at a time (a frequent token's row is a
 * long chain of adds, which would otherwise wait for one load at a time);
 * the adds stay in list order. */
__device__ void kg_emb_flush(KgT dwte, KgC dout, unsigned long long *key, int n, int C)
{
    kg_emb_sort(key, n);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        int k = 0;
        while (k < n) {
            uint32_t row = (uint32_t)(key[k] >> 32);
            int64_t w = (int64_t)row * C + c;
            float acc = kg_ld(dwte.p, dwte.dt, w);
            for (;;) {
                float v[KG_EMB_BATCH];
                int m = 0;
#pragma unroll
                for (int q = 0; q < KG_EMB_BATCH; q++) {
                    if (k + q >= n || (uint32_t)(key[k + q] >> 32) != row) break;
                    v[q] = kg_ld(dout.p, dout.dt, (int64_t)(uint32_t)key[k + q] * C + c);
                    m = q + 1;
                }
#pragma unroll
                for (int q = 0; q < KG_EMB_BATCH; q++)
                    if (q < m) acc += v[q];
                k += m;
                if (m < KG_EMB_BATCH) break;   /* the row's run ended */
            }
            kg_st(dwte.p, dwte.dt, w, acc);
        }
    }
    __syncthreads();   /* the list is refilled next */
}

/* dwte rows owned by this block += their tokens' dout rows (see the top). */
__global__ void __launch_bounds__(KG_EMB_THREADS)
kg_embed_bwd_wte_kernel(KgT dwte, KgC dout, const int32_t *tokens, int BT, int C, int v0, int v1)
{
    __shared__ unsigned long long key[KG_EMB_CAP];
    __shared__ int warp_count[KG_EMB_THREADS / 32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int n = 0;   /* entries in the list, the same in every thread */
    for (int base = 0; base < BT; base += blockDim.x) {
        int i = base + threadIdx.x;
        int tok = i < BT ? tokens[i] : -1;
        bool mine = i < BT && tok >= v0 && tok < v1 && (tok - v0) % (int)gridDim.x == (int)blockIdx.x;
        unsigned ball = __ballot_sync(0xffffffffu, mine);
        if (lane == 0) warp_count[warp] = __popc(ball);
        __syncthreads();
        int before = 0, total = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
            before += w < warp ? warp_count[w] : 0;
            total += warp_count[w];
        }
        if (n + total > KG_EMB_CAP) {   /* full: add what is listed, start over */
            kg_emb_flush(dwte, dout, key, n, C);
            n = 0;
        }
        if (mine) {
            int pos = n + before + __popc(ball & ((1u << lane) - 1u));
            key[pos] = (unsigned long long)(uint32_t)(tok - v0) << 32 | (uint32_t)i;
        }
        n += total;
        __syncthreads();   /* warp_count is rewritten next round; key is complete */
    }
    if (n > 0) kg_emb_flush(dwte, dout, key, n, C);
}

/* dwpe[t, c] += sum over b (increasing) of dout[b, t, c]. */
__global__ void kg_embed_bwd_wpe_kernel(KgT dwpe, KgC dout, int B, int T, int C)
{
    int64_t n = (int64_t)T * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float acc = kg_ld(dwpe.p, dwpe.dt, i);
        for (int b = 0; b < B; b++) acc += kg_ld(dout.p, dout.dt, (int64_t)b * n + i);
        kg_st(dwpe.p, dwpe.dt, i, acc);
    }
}

/* out = wte[tok] (local rows) + wpe[t]. */
extern "C" cudaError_t kg_embedding_forward(srt_t out, srt_t tokens, srt_t wte, srt_t wpe,
                                            int B, int T, int C, int v0, int v1, cudaStream_t s)
{
    KG_REQ(B >= 0 && T >= 0 && C >= 0 && v0 >= 0 && v1 >= v0);
    int64_t n = (int64_t)B * T * C;
    KG_ARG(out, n, KG_FLOAT, 0);
    KG_ARG(tokens, (int64_t)B * T, KG_I32, 0);
    KG_ARG(wte, (int64_t)(v1 - v0) * C, KG_FLOAT, 0);
    KG_ARG(wpe, (int64_t)T * C, KG_FLOAT, 1);
    if (n == 0) return cudaSuccess;
    KG_LAUNCH(kg_embed_fwd_kernel, kg_grid(n, 256), 256, s, kg_t(out), (const int32_t *)tokens.p,
                                                        kg_t(wte), kg_t(wpe), B, T, C, v0, v1);
    return kg_launched(__func__);
}

/* dwte and dwpe += their gradients, deterministically. */
extern "C" cudaError_t kg_embedding_backward(srt_t dwte, srt_t dwpe, srt_t dout, srt_t tokens,
                                             int B, int T, int C, int v0, int v1, cudaStream_t s)
{
    KG_REQ(B >= 0 && T >= 0 && C >= 0 && v0 >= 0 && v1 >= v0);
    KG_REQ((int64_t)B * T < INT32_MAX);
    KG_ARG(dwte, (int64_t)(v1 - v0) * C, KG_FLOAT, 1);
    KG_ARG(dwpe, (int64_t)T * C, KG_FLOAT, 1);
    KG_ARG(dout, (int64_t)B * T * C, KG_FLOAT, 0);
    KG_ARG(tokens, (int64_t)B * T, KG_I32, 0);
    if ((int64_t)B * T * C == 0) return cudaSuccess;
    if (dwte.p && v1 > v0) {
        int grid = v1 - v0 < KG_EMB_GRID ? v1 - v0 : KG_EMB_GRID;
        KG_LAUNCH(kg_embed_bwd_wte_kernel, grid, KG_EMB_THREADS, s,
            kg_t(dwte), kg_t(dout), (const int32_t *)tokens.p, B * T, C, v0, v1);
        KG_TRY(kg_launched(__func__));
    }
    if (dwpe.p) {
        KG_LAUNCH(kg_embed_bwd_wpe_kernel, kg_grid((int64_t)T * C, 256), 256, s, kg_t(dwpe), kg_t(dout),
                                                                           B, T, C);
        KG_TRY(kg_launched(__func__));
    }
    return cudaSuccess;
}
