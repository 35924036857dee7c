/* cpu.h — the CPU backend's internals (prefix cpu_): its state, the fp32
 * staging of 16-bit operands, and the prototypes of the backend table's
 * members, one file per family (backend.c, compute.c, optim.c, comm.c, io.c).
 *
 * bf16 and fp16 are emulated: tensors are stored in 16 bits and every kernel
 * computes in fp32.  An op converts its 16-bit operands into fp32 scratch,
 * runs the kc_* kernel, and converts back the operands it wrote, so each
 * write rounds once, as a GPU kernel that loads bf16 and stores bf16 would.
 * The scratch is allocated once, at context creation, sized from the
 * program's shapes (cpu_scratch_floats in backend.c); an op that would need
 * more is an internal error naming the op.  Elementwise ops (and the
 * optimizer, casts, the norm) stream through fixed chunks of CPU_CHUNK
 * elements, so flat parameter and gradient buffers never need scratch of
 * their own size.
 */
#ifndef SHARDRT_CPU_H
#define SHARDRT_CPU_H

#include <mpi.h>

#include "internal.h"
#include "nvme.h"
#include "kernels.h"

enum {
    CPU_CHUNK = 1 << 16,        /* elements per chunk of an elementwise op         */
    CPU_MAX_ARGS = 12,          /* operands of one op                              */
    CPU_MAX_PENDING = 64,       /* non-blocking sends/receives in flight per stream */
    CPU_COMM_BYTES = 4 << 20,   /* receive scratch of the fixed-order reductions   */
};

/* How an op uses an operand. */
enum { CPU_R = 1, CPU_RW = 3, CPU_W = 2 };   /* CPU_W: every element overwritten */

/* One operand of an op, as the kernels see it. */
typedef struct cpu_arg {
    srt_t t;                    /* the operand (t.p NULL: absent)                  */
    int64_t span;               /* elements from t.p that the op touches           */
    int mode;                   /* CPU_R, CPU_RW or CPU_W                          */
    float *f;                   /* set by cpu_stage: fp32 elements (t.p for f32)   */
} cpu_arg;

/* A merged range of 16-bit operands in scratch, converted back on unstage. */
typedef struct cpu_group {
    uint8_t *p;                 /* first byte in the arena                         */
    int64_t n;                  /* elements                                        */
    srt_dtype dt;
    float *f;
    bool write;
} cpu_group;

typedef struct cpu_state {
    /* fp32 scratch for 16-bit operands and op temporaries, bump-allocated per op */
    float *scratch;
    int64_t scratch_n, scratch_top;
    cpu_group groups[CPU_MAX_ARGS];
    int ngroups;
    /* MPI: one communicator per group, split from the world */
    MPI_Comm comm[SRT_NGROUPS];
    uint8_t *comm_buf;          /* CPU_COMM_BYTES                                  */
    /* point to point: each stream's non-blocking sends and receives in issue
     * order, completed lazily (backend.c); entry k of stream s is request
     * number p2p_base[s] + k of that stream */
    MPI_Request p2p_req[SRT_NSTREAMS][CPU_MAX_PENDING];
    const uint8_t *p2p_lo[SRT_NSTREAMS][CPU_MAX_PENDING], *p2p_hi[SRT_NSTREAMS][CPU_MAX_PENDING];
    bool p2p_recv[SRT_NSTREAMS][CPU_MAX_PENDING];   /* a receive: it writes [lo, hi) */
    int p2p_peer[SRT_NSTREAMS][CPU_MAX_PENDING];    /* its peer's rank in the pp group */
    int np2p[SRT_NSTREAMS];
    int64_t p2p_base[SRT_NSTREAMS];
    int np2p_all;                       /* pending on all streams together         */
    /* per event: the stream of its last recording and the requests issued on
     * that stream by then, which a wait for the event completes */
    int8_t ev_stream[SRT_MAX_EVENTS];
    int64_t ev_seq[SRT_MAX_EVENTS];
    /* the gradient norm of this step, exact */
    KcSumsq sumsq, sumsq_all;
    /* the NVMe swap file (runtime/core/nvme.c; bounce slots from ctx_alloc) */
    nvme_file nvme;
    /* a Llama's rotary angles, cos and sin of positions 0 .. seq_len - 1 (each
       (seq_len, HS/2)), computed at the first rope op for its theta; NULL for GPT */
    float *rope_cs, *rope_sn;
    int rope_npos, rope_hs;
    float rope_theta;
} cpu_state;

static inline cpu_state *cpu_st(srt_ctx *c) { return (cpu_state *)c->bs; }

/* An operand for cpu_stage. */
static inline cpu_arg cpu_arg_of(srt_t t, int64_t span, int mode)
{
    cpu_arg a = { t, span, mode, NULL };
    return a;
}

/* ---- backend.c: state, staging ---------------------------------------------------- */
/* Converts the 16-bit operands of a[0..n) into fp32 scratch (overlapping
 * operands share one range) and sets every a[i].f; resets the scratch. */
void cpu_stage(srt_ctx *c, const char *op, cpu_arg *a, int n);
/* Converts the staged ranges that the op wrote back to 16 bits. */
void cpu_unstage(srt_ctx *c);
/* n floats of scratch after the staged operands, for this op only. */
float *cpu_tmp(srt_ctx *c, const char *op, int64_t n);
/* Runs fn over elementwise operands a[0..na) of n elements each: at once
 * when all are f32, else in staged chunks of CPU_CHUNK. */
typedef void (*cpu_ew_fn)(cpu_arg *a, int64_t n, void *ud);
void cpu_elementwise(srt_ctx *c, const char *op, cpu_arg *a, int na, int64_t n, cpu_ew_fn fn,
                     void *ud);
/* The fp32 scratch (floats) that program p's ops need on one rank. */
int64_t cpu_scratch_floats(const srt_program *p, const srt_class *cls);
/* fp32 -> dt and dt -> fp32 for the float dtypes. */
void cpu_to_f32(float *out, const void *in, srt_dtype dt, int64_t n);
void cpu_from_f32(void *out, const float *in, srt_dtype dt, int64_t n);

/* ---- compute.c ----------------------------------------------------------------------- */
void cpu_load_batch(srt_ctx *c, srt_stream s, int mb, srt_t tokens, srt_t targets);
void cpu_loss_add(srt_ctx *c, srt_stream s, srt_t losses, int N);
void cpu_matmul_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t inp, srt_t w, srt_t bias,
                    int N, int C, int OC);
void cpu_matmul_fwd_batched(srt_ctx *c, srt_stream s, srt_t out, srt_t inp, srt_t w, srt_t bias, int N, int C,
                            int OC, int batch, int64_t out_stride, int64_t inp_stride);
void cpu_matmul_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t dbias, srt_t dout,
                    srt_t inp, srt_t w, int N, int C, int OC);
void cpu_matmul_gelu_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t pre, srt_t inp, srt_t w,
                         srt_t bias, int N, int C, int OC);
void cpu_matmul_gelu_fwd_batched(srt_ctx *c, srt_stream s, srt_t out, srt_t pre, srt_t inp, srt_t w, srt_t bias,
                                 int N, int C, int OC, int batch, int64_t out_stride, int64_t inp_stride);
void cpu_matmul_bwd_dgelu(srt_ctx *c, srt_stream s, srt_t dpre, srt_t dbias_pre, srt_t dout,
                          srt_t w, srt_t pre, int N, int C, int OC);
void cpu_layernorm_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t mean, srt_t rstd, srt_t inp,
                       srt_t w, srt_t b, int N, int C, float eps);
void cpu_layernorm_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t db, srt_t dout,
                       srt_t inp, srt_t w, srt_t mean, srt_t rstd, int N, int C);
void cpu_rmsnorm_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t rstd, srt_t inp, srt_t w,
                     int N, int C, float eps);
void cpu_rmsnorm_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t dout, srt_t inp,
                     srt_t w, srt_t rstd, int N, int C);
void cpu_gelu_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t inp);
void cpu_gelu_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t inp, srt_t dout);
void cpu_swiglu_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t a, srt_t b, int N, int H, int ld);
void cpu_swiglu_bwd(srt_ctx *c, srt_stream s, srt_t da, srt_t db, srt_t dout, srt_t a, srt_t b,
                    int N, int H, int ld);
void cpu_add_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t a, srt_t b);
void cpu_add_bwd(srt_ctx *c, srt_stream s, srt_t da, srt_t db, srt_t dout);
void cpu_attention_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v,
                       int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv);
void cpu_attention_bwd(srt_ctx *c, srt_stream s, srt_t dq, srt_t dk, srt_t dv, srt_t dout,
                       srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v,
                       int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv);
void cpu_rope_fwd(srt_ctx *c, srt_stream s, srt_t x, int B, int T, int NH, int HS, int ld,
                  float theta);
void cpu_rope_bwd(srt_ctx *c, srt_stream s, srt_t dx, int B, int T, int NH, int HS, int ld,
                  float theta);
void cpu_embed_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t tokens, srt_t wte, srt_t wpe,
                   int B, int T, int C, int v0, int v1);
void cpu_embed_bwd(srt_ctx *c, srt_stream s, srt_t dwte, srt_t dwpe, srt_t dout, srt_t tokens,
                   int B, int T, int C, int v0, int v1);
void cpu_xent_fwd_bwd(srt_ctx *c, srt_stream s, srt_t losses, srt_t logits, srt_t targets,
                      int N, int Vl, int v0, int V, float dloss);
void cpu_head_xent(srt_ctx *c, srt_stream s, srt_t losses, srt_t dinp, srt_t dw, srt_t logits,
                   srt_t inp, srt_t w, srt_t targets, int N, int C, int Vl, int v0, int V,
                   float dloss);
void cpu_convert(srt_ctx *c, srt_stream s, srt_t dst, srt_t src);
void cpu_zero(srt_ctx *c, srt_stream s, srt_t x);

/* ---- optim.c ------------------------------------------------------------------------- */
void cpu_grad_sumsq(srt_ctx *c, srt_stream s, srt_t g);
void cpu_grad_norm_finish(srt_ctx *c, srt_stream s, srt_group g);
void cpu_optimizer_step(srt_ctx *c, srt_stream s, srt_t params, srt_t master, srt_t grads,
                        srt_t m, srt_t v, bool decay);

/* ---- comm.c: MPI ---------------------------------------------------------------------- */
void cpu_comm_init(srt_ctx *c);
void cpu_comm_fini(srt_ctx *c);
/* Completes stream s's sends and receives numbered below seq (all of them:
 * cpu_p2p_issued(c, s)). */
void cpu_p2p_complete(srt_ctx *c, srt_stream s, int64_t seq);
/* The sends and receives issued on s so far. */
int64_t cpu_p2p_issued(srt_ctx *c, srt_stream s);
/* Lets MPI move the pending transfers on, retiring the finished ones. */
void cpu_p2p_progress(srt_ctx *c);
void cpu_all_reduce(srt_ctx *c, srt_stream s, srt_group g, srt_t x, srt_redop op);
void cpu_all_gather(srt_ctx *c, srt_stream s, srt_group g, srt_t out, srt_t in);
void cpu_reduce_scatter(srt_ctx *c, srt_stream s, srt_group g, srt_t out, srt_t in);
void cpu_broadcast(srt_ctx *c, srt_stream s, srt_group g, srt_t x, int64_t root);
void cpu_send(srt_ctx *c, srt_stream s, srt_t x, int64_t peer);
void cpu_recv(srt_ctx *c, srt_stream s, srt_t x, int64_t peer);
/* The raw forms, on fp32 arrays, for ops that reduce inside (xent, the norm). */
void cpu_allgather_f32(srt_ctx *c, srt_group g, float *out, const float *in, int64_t n);
void cpu_allreduce_u64(srt_ctx *c, srt_group g, uint64_t *x, int64_t n);

/* ---- threads.c: OpenMP threads from the CPU affinity (threads.h) ----------------------- */
/* Sets this rank's OpenMP threads (OMP_NUM_THREADS, else its share of the
 * node's CPUs) and prints one line when the node's ranks leave CPUs idle or
 * share them.  Collective over the world (the node's ranks compare). */
void cpu_threads_init(srt_ctx *c);
/* The backend's start: unless the user set them, GOMP_SPINCOUNT=1000 (the
 * OpenMP wait) and, where OpenBLAS chose kernels below the CPU's,
 * OPENBLAS_CORETYPE; then executes this program again with argv, since both
 * libraries read them only when they are loaded (threads.c).  Returns if
 * there is nothing to set or it cannot. */
void cpu_start(char **argv);

/* ---- io.c: host copies and NVMe ------------------------------------------------------- */
void cpu_io_init(srt_ctx *c);
void cpu_io_fini(srt_ctx *c);
void cpu_copy(srt_ctx *c, srt_stream s, srt_t dst, srt_t src);
void cpu_nvme_read(srt_ctx *c, srt_stream s, srt_t dst, int64_t offset);
void cpu_nvme_write(srt_ctx *c, srt_stream s, srt_t src, int64_t offset);

#endif
