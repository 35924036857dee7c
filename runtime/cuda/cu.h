/* cu.h — the CUDA backend's internals (prefix cu_): its state, the error
 * checks, and the prototypes of the backend table's members, one file per
 * family (backend.c streams/events/arenas, compute.c kg_* kernels, gemm.c
 * cuBLASLt, attention.c, optim.c norm/optimizer/loss scaling,
 * comm.c NCCL, io.c copies and NVMe, rtk.cu the few kernels kernels/cuda
 * does not provide).
 *
 * Memory.  The device arena is plain device memory (cudaMalloc): no page
 * faults, and NCCL and cuBLASLt see ordinary device pointers.  The host
 * never addresses it: the runtime's core (runtime/core/main.c: weight
 * initialisation, checkpoints, sampling) copies through the dev_read /
 * dev_write hooks (ctx_dev_read / ctx_dev_write: a device sync, then
 * cudaMemcpy).  The pinned host arena is cudaHostAlloc'd (mapped,
 * portable).  Both are allocated once, by the arena_alloc hook of the
 * backend table.
 *
 * Streams.  One cudaStream_t per srt_stream, created blocking (not
 * cudaStreamNonBlocking) so that a user op's kernels on the legacy default
 * stream are ordered after the runtime's earlier work and before its later
 * work (docs/custom-ops.md); one cudaEvent_t per event id.  SRT_HOST work
 * (host optimizer steps on the pinned arena) runs on a worker thread in
 * issue order (host.c, hostq.c), overlapped with the GPU work issued after
 * it; events recorded on SRT_HOST are tickets of that queue.
 */
#ifndef SHARDRT_CU_H
#define SHARDRT_CU_H

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>

#include "hostq.h"
#include "internal.h"
#include "nvme.h"
#include "../../kernels/cuda/kernels.h"

enum {
    CU_WORKSPACE = 32 << 20,    /* cuBLASLt's workspace on Hopper (the plan's cublaslt.workspace) */
    CU_GEMM_CACHE = 512,        /* matmul shapes cached (a model has a dozen or so)            */
    CU_BIAS_CHUNKS = 32,        /* row ranges of the bias gradient's partial sums              */
    CU_GATES = 256,             /* SRT_HOST's snapshots of device events in flight (host.c)    */
};

/* What kg_norm_finish writes (device) and the host reads after a sync. */
typedef struct cu_norm_out { double norm; float clip_scale; int overflow; } cu_norm_out;
typedef struct cu_norm { KgSumsq acc; cu_norm_out out; } cu_norm;

/* One cached cuBLASLt matmul: its key and its descriptors and algorithm. */
typedef struct cu_gemm {
    int64_t key[17];
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    bool failed;                /* no algorithm: a fused GELU op falls back    */
} cu_gemm;

/* The step's scalars a host op reads, taken when it is issued (the host
 * worker runs it later, while the trainer moves on). */
typedef struct cu_step_sc { double lr; int64_t step; float loss_scale; } cu_step_sc;

/* The collective in flight on a stream, for the watchdog. */
typedef struct cu_inflight {
    const char *op;             /* NULL: none                                      */
    srt_group g;
    double t0;                  /* seconds (CLOCK_MONOTONIC) when it was issued    */
} cu_inflight;

typedef struct cu_state {
    int device;
    char device_name[256];
    size_t free0, total;        /* cudaMemGetInfo before the arena                 */
    size_t used_arena;          /* device bytes the arena took (cudaMemGetInfo)    */
    size_t used_min;            /* device bytes in use after start-up (measured)   */
    size_t used_peak;           /* the most seen at a stream sync                  */
    int sm_major, sm_minor, nsm;
    cudaStream_t stream[SRT_NSTREAMS];
    cudaEvent_t event[SRT_MAX_EVENTS];
    /* the SRT_HOST stream (host.c): its worker, and per event whether its
     * last record was on SRT_HOST and the queue's ticket then */
    hq_queue hostq;
    bool ev_host[SRT_MAX_EVENTS];
    uint64_t ev_ticket[SRT_MAX_EVENTS];
    /* SRT_HOST's waits on device events: the record waited for, snapshotted
     * on the gate stream into a private event, and the ticket of the
     * closure that waits on it (the slot is free once that has passed) */
    cudaStream_t gate;
    cudaEvent_t gate_ev[CU_GATES];
    uint64_t gate_ticket[CU_GATES];
    int gate_next;
    /* the loss: pinned, mapped host memory a one-block kernel adds to and the
     * host reads after the stream's sync */
    double *loss_acc;           /* [SRT_NSTREAMS]                                  */
    bool loss_pending[SRT_NSTREAMS];
    /* the gradient norm: the exact bins and the results on the device, the
     * results copied to pinned memory and read after the stream's sync */
    cu_norm *norm;             /* device                                          */
    cu_norm_out *norm_host;        /* pinned                                       */
    int norm_pending;           /* stream + 1 of the last grad_norm_finish; 0: none */
    /* cuBLASLt */
    cublasLtHandle_t lt;
    void *ws;
    size_t ws_bytes;
    bool ws_planned;            /* the plan's cublaslt.workspace, not our own      */
    cu_gemm *gemm;              /* [CU_GEMM_CACHE]                                  */
    int ngemm;
    float *f32_tmp;             /* device scratch for the bias gradient (OC floats) */
    int64_t f32_tmp_n;
    /* cuDNN (attention.c) */
    cudnnHandle_t dnn;
    struct cu_attn *attn;       /* the program's attention graphs and plans; NULL: no attention */
    /* NCCL */
    bool nccl;                  /* world > 1                                        */
    ncclComm_t comm[SRT_NGROUPS];
    int p2p_open;               /* a ncclGroupStart of sends/recvs is open on stream p2p_open-1 */
    pthread_t watchdog;
    bool watchdog_on;
    atomic_bool stop;
    pthread_mutex_t mu;         /* guards inflight                                  */
    cu_inflight inflight[SRT_NSTREAMS];
    cudaEvent_t coll_done[SRT_NSTREAMS];
    double timeout_s;
    /* data and NVMe */
    int32_t *batch_stage;       /* pinned: nstages slots of tokens and targets     */
    cudaEvent_t *stage_done;    /* [nstages]: the slot's last copy                 */
    int nstages, stage_next;
    nvme_file nvme;             /* runtime/core/nvme.c; bounce slots pinned (cudaHostAlloc) */
    /* compute.c's device scratch (f32): the cross-entropy's row statistics,
     * rope backward's copy; sized from the program's shapes */
    float *scratch;
    int64_t scratch_n, rows_max;
    /* the host optimizer's fp32 chunks (SRT_HOST) */
    float *host_tmp;
    int64_t host_tmp_n;
} cu_state;

static inline cu_state *cu_st(srt_ctx *c) { return (cu_state *)c->bs; }
static inline cudaStream_t cu_stream(srt_ctx *c, srt_stream s) { return cu_st(c)->stream[s]; }

/* Ends the job when a CUDA runtime call failed, naming the op. */
void cu_check_at(srt_ctx *c, cudaError_t e, const char *what, const char *file, int line);
#define CU_CHECK(c, call, what) cu_check_at((c), (call), (what), __FILE__, __LINE__)
/* The same after a kernel launch (cudaGetLastError). */
#define CU_LAUNCHED(c, what) cu_check_at((c), cudaGetLastError(), (what), __FILE__, __LINE__)
/* Ends the job when a kg_ launcher failed, with kg_error_detail's reason. */
void cu_kg(srt_ctx *c, cudaError_t e, const char *op);
/* Whether p lies in the pinned host arena. */
bool cu_is_host(const srt_ctx *c, const void *p);
/* Seconds on the monotonic clock. */
double cu_now(void);
/* The element bytes of dt. */
static inline int64_t cu_dsize(srt_dtype dt) { return ops_dtype_size(dt); }
/* The step's scalars now. */
static inline cu_step_sc cu_step_scalars(const srt_ctx *c)
{
    return (cu_step_sc){ c->lr, c->step, c->loss_scale };
}

/* ---- host.c: the SRT_HOST stream's worker ------------------------------------------------ */
void cu_host_init(srt_ctx *c);
void cu_host_fini(srt_ctx *c);
/* Whether an op issued on s is queued for the worker (s is SRT_HOST and the
 * caller is not the worker). */
bool cu_host_defer(srt_ctx *c, srt_stream s);
/* Whether op may be issued on SRT_HOST. */
bool cu_host_op_ok(int op);
void cu_host_grad_sumsq(srt_ctx *c, srt_t g);
void cu_host_grad_norm_finish(srt_ctx *c, srt_group g);
void cu_host_optimizer_step(srt_ctx *c, srt_t params, srt_t master, srt_t grads, srt_t m, srt_t v, bool decay);
void cu_host_record(srt_ctx *c, int ev);
void cu_host_wait(srt_ctx *c, int ev);
void cu_host_block(srt_ctx *c, int ev);
void cu_host_drain(srt_ctx *c);

/* ---- compute.c ------------------------------------------------------------------------ */
void cu_load_batch(srt_ctx *c, srt_stream s, int mb, srt_t tokens, srt_t targets);
void cu_loss_add(srt_ctx *c, srt_stream s, srt_t losses, int N);
void cu_layernorm_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t mean, srt_t rstd, srt_t inp,
                      srt_t w, srt_t b, int N, int C, float eps);
void cu_layernorm_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t db, srt_t dout,
                      srt_t inp, srt_t w, srt_t mean, srt_t rstd, int N, int C);
void cu_rmsnorm_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t rstd, srt_t inp, srt_t w,
                    int N, int C, float eps);
void cu_rmsnorm_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t dout, srt_t inp,
                    srt_t w, srt_t rstd, int N, int C);
void cu_gelu_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t inp);
void cu_gelu_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t inp, srt_t dout);
void cu_swiglu_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t a, srt_t b, int N, int H, int ld);
void cu_swiglu_bwd(srt_ctx *c, srt_stream s, srt_t da, srt_t db, srt_t dout, srt_t a, srt_t b,
                   int N, int H, int ld);
void cu_add_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t a, srt_t b);
void cu_add_bwd(srt_ctx *c, srt_stream s, srt_t da, srt_t db, srt_t dout);
void cu_rope_fwd(srt_ctx *c, srt_stream s, srt_t x, int B, int T, int NH, int HS, int ld,
                 float theta);
void cu_rope_bwd(srt_ctx *c, srt_stream s, srt_t dx, int B, int T, int NH, int HS, int ld,
                 float theta);
void cu_embed_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t tokens, srt_t wte, srt_t wpe,
                  int B, int T, int C, int v0, int v1);
void cu_embed_bwd(srt_ctx *c, srt_stream s, srt_t dwte, srt_t dwpe, srt_t dout, srt_t tokens,
                  int B, int T, int C, int v0, int v1);
void cu_xent_fwd_bwd(srt_ctx *c, srt_stream s, srt_t losses, srt_t logits, srt_t targets,
                     int N, int Vl, int v0, int V, float dloss);
void cu_head_xent(srt_ctx *c, srt_stream s, srt_t losses, srt_t dinp, srt_t dw, srt_t logits, srt_t inp, srt_t w,
                  srt_t targets, int N, int C, int Vl, int v0, int V, float dloss);
void cu_convert(srt_ctx *c, srt_stream s, srt_t dst, srt_t src);
void cu_zero(srt_ctx *c, srt_stream s, srt_t x);
/* Scratch of the compute kernels (allocated at init). */
void cu_compute_init(srt_ctx *c);
void cu_compute_fini(srt_ctx *c);

/* ---- gemm.c: cuBLASLt ------------------------------------------------------------------ */
void cu_gemm_init(srt_ctx *c);
void cu_gemm_fini(srt_ctx *c);
void cu_matmul_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t inp, srt_t w, srt_t bias,
                   int N, int C, int OC);
void cu_matmul_fwd_batched(srt_ctx *c, srt_stream s, srt_t out, srt_t inp, srt_t w, srt_t bias, int N, int C,
                           int OC, int batch, int64_t out_stride, int64_t inp_stride);
void cu_matmul_gelu_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t pre, srt_t inp, srt_t w, srt_t bias,
                        int N, int C, int OC);
void cu_matmul_gelu_fwd_batched(srt_ctx *c, srt_stream s, srt_t out, srt_t pre, srt_t inp, srt_t w, srt_t bias,
                                int N, int C, int OC, int batch, int64_t out_stride, int64_t inp_stride);
void cu_matmul_bwd_dgelu(srt_ctx *c, srt_stream s, srt_t dpre, srt_t dbias_pre, srt_t dout, srt_t w,
                         srt_t pre, int N, int C, int OC);
void cu_matmul_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t dbias, srt_t dout,
                   srt_t inp, srt_t w, int N, int C, int OC);

/* ---- attention.c --------------------------------------------------------------------------- */
void cu_attn_init(srt_ctx *c);
void cu_attn_fini(srt_ctx *c);
void cu_attention_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v,
                      int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv);
void cu_attention_bwd(srt_ctx *c, srt_stream s, srt_t dq, srt_t dk, srt_t dv, srt_t dout,
                      srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v,
                      int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv);

/* ---- optim.c ------------------------------------------------------------------------------ */
void cu_optim_init(srt_ctx *c);
void cu_optim_fini(srt_ctx *c);
/* After the sync of grad_norm_finish's stream: the norm, the clipping scale
 * and the overflow flag into the context. */
void cu_norm_settle(srt_ctx *c);
void cu_grad_sumsq(srt_ctx *c, srt_stream s, srt_t g);
void cu_grad_norm_finish(srt_ctx *c, srt_stream s, srt_group g);
void cu_grad_norm_finish_ls(srt_ctx *c, srt_stream s, srt_group g, float loss_scale);
void cu_optimizer_step(srt_ctx *c, srt_stream s, srt_t params, srt_t master, srt_t grads,
                       srt_t m, srt_t v, bool decay);
/* The same with the step's scalars given (the host worker's). */
void cu_optimizer_step_sc(srt_ctx *c, srt_stream s, srt_t params, srt_t master, srt_t grads,
                          srt_t m, srt_t v, bool decay, const cu_step_sc *sc);

/* ---- comm.c: NCCL ------------------------------------------------------------------------- */
void cu_comm_init(srt_ctx *c);
void cu_comm_fini(srt_ctx *c);
/* Closes an open group of sends and receives (ncclGroupEnd). */
void cu_p2p_close(srt_ctx *c);
/* Ends the job when a communicator reported an asynchronous error. */
void cu_comm_poll(srt_ctx *c);
void cu_all_reduce(srt_ctx *c, srt_stream s, srt_group g, srt_t x, srt_redop op);
void cu_all_gather(srt_ctx *c, srt_stream s, srt_group g, srt_t out, srt_t in);
void cu_reduce_scatter(srt_ctx *c, srt_stream s, srt_group g, srt_t out, srt_t in);
void cu_broadcast(srt_ctx *c, srt_stream s, srt_group g, srt_t x, int64_t root);
void cu_send(srt_ctx *c, srt_stream s, srt_t x, int64_t peer);
void cu_recv(srt_ctx *c, srt_stream s, srt_t x, int64_t peer);
/* The raw in-place all-reduce of n elements of type t at p over g on s
 * (the cross-entropy's row statistics, the norm's bins). */
void cu_allreduce_raw(srt_ctx *c, srt_stream s, srt_group g, void *p, int64_t n, ncclDataType_t t,
                      ncclRedOp_t op, const char *what);

/* ---- io.c: copies and NVMe ---------------------------------------------------------------- */
void cu_io_init(srt_ctx *c);
void cu_io_fini(srt_ctx *c);
void cu_copy(srt_ctx *c, srt_stream s, srt_t dst, srt_t src);
void cu_nvme_read(srt_ctx *c, srt_stream s, srt_t dst, int64_t offset);
void cu_nvme_write(srt_ctx *c, srt_stream s, srt_t src, int64_t offset);

/* ---- rtk.cu: the runtime's own kernels (C linkage) --------------------------------------- */
#ifdef __cplusplus
extern "C" {
#endif
/* acc[0] += (Σ x[0..n) in row order) / n * scale, one block (deterministic). */
cudaError_t cu_k_loss_add(double *acc, const float *x, int n, double scale, cudaStream_t s);
/* dbias[j] += Σ_i dout[i, j] (N rows of OC; dtypes 0 f32, 1 bf16, 2 f16):
 * fp32 partial sums of CU_BIAS_CHUNKS fixed row ranges into partials
 * (CU_BIAS_CHUNKS x OC floats), then summed in chunk order (deterministic). */
cudaError_t cu_k_bias_grad(void *dbias, int dbias_dt, const void *dout, int dt, int N, int OC,
                           float *partials, cudaStream_t s);
/* out[i][j] += bias[j] over N rows of OC (dtypes as above): the forward bias
 * when its pointer is less than 16-byte aligned for cuBLASLt's epilogue. */
cudaError_t cu_k_bias_add(void *out, int dt, const void *bias, int bias_dt, int N, int OC, cudaStream_t s);
/* d[i] = gelu'(pre[i]) · d[i] in place over n (tanh GELU, kg_'s formula):
 * matmul_bwd_dgelu's derivative where the DGELU epilogue cannot run. */
cudaError_t cu_k_dgelu_inplace(void *d, int dt, const void *pre, int pre_dt, int64_t n, cudaStream_t s);
#ifdef __cplusplus
}
#endif

#endif
