/* internal.h — what the runtime's own modules share and the generated code
 * never sees: struct srt_ctx, the backend interface, the context (ctx.c), the
 * race checker (check.c) and the op table (ops.c).
 *
 * The layering: ops.c holds the public srt_* ops.  Each one validates its
 * views, records its reads and writes with the checker when checking is on,
 * and calls the linked backend through `g_backend` (runtime/cpu: kc_*
 * kernels and MPI; runtime/cuda: the same table over CUDA and NCCL).  A
 * backend never sees the checker; the checker never sees a backend.
 */
#ifndef SHARDRT_INTERNAL_H
#define SHARDRT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lscale.h"
#include "shardrt.h"

struct data_loader;

/* ---- the op table: ids and names from the one X-macro (ops.c) ---------------- */

typedef enum srt_op_id {
#define SRT_OP(name, arity, kind) SRT_OP_##name,
    SRT_OPS(SRT_OP)
#undef SRT_OP
    SRT_NOPS
} srt_op_id;

/* "matmul_fwd" for SRT_OP_matmul_fwd. */
const char *ops_name(int op);
/* "compute", "tp_comm", ... for a stream. */
const char *ops_stream_name(srt_stream s);
/* "world", "tp", "dp", ... for a group. */
const char *ops_group_name(srt_group g);
/* The bytes of one element of dt. */
int64_t ops_dtype_size(srt_dtype dt);
/* Block b of a strided batch in t: n elements, stride elements after block b - 1's
 * start (srt_matmul_fwd_batched, srt_matmul_gelu_fwd_batched). */
static inline srt_t ops_block(srt_t t, int64_t b, int64_t stride, int64_t n)
{
    return (srt_t){ (char *)t.p + b * stride * ops_dtype_size(t.dt), n, t.dt };
}

/* The largest event number + 1 that srt_event_record / srt_event_wait accept. */
enum { SRT_MAX_EVENTS = 4096 };

/* ---- the backend interface ------------------------------------------------------
 * One table per backend; libshardrt_cpu.a links runtime/cpu's.  Every op member
 * has the srt_ signature of shardrt.h and the same semantics; ops.c has already
 * validated the views (dtypes, extents inside their arena) when it calls one.
 * init runs once in ctx_create, after the ranks are known and the arenas exist:
 * it makes the communicators and allocates the backend's scratch (through
 * ctx_alloc, so the allocation is counted), and sets c->bs. */
typedef struct srt_backend {
    const char *name;
    /* The arenas (space 0 device, 1 pinned host) when the backend allocates
     * them itself (the CUDA backend: cudaMalloc, cudaHostAlloc);
     * NULL: ctx_alloc's host memory (the CPU backend).  Called before init;
     * arena_free releases them after fini. */
    void *(*arena_alloc)(srt_ctx *c, int64_t bytes, int space);
    void (*arena_free)(srt_ctx *c, void *p, int space);
    /* The host's only way into the device arena when it cannot address it
     * (the CUDA backend's is cudaMalloc'd): copy bytes [off, off + bytes) of
     * the device arena to host memory dst / from host memory src, after the
     * device's queued work, returning when the copy is done.  NULL: the arena
     * is host memory and ctx_dev_read / ctx_dev_write memcpy (the CPU backend). */
    void (*dev_read)(srt_ctx *c, void *dst, int64_t off, int64_t bytes);
    void (*dev_write)(srt_ctx *c, int64_t off, const void *src, int64_t bytes);
    /* Called first by srt_main (and shardrt_calibrate), before MPI: a backend
     * whose libraries read their settings from the environment when they are
     * loaded sets its defaults there and executes the process again (the
     * CPU backend's OpenMP wait policy and OpenBLAS kernels, threads.c);
     * returns when nothing is to be done.  NULL: nothing. */
    void (*start)(char **argv);
    /* The BLAS kernels the backend's compute runs (OpenBLAS's core name), which
     * a calibration measures and its profile records.  NULL: not a CPU BLAS. */
    const char *(*blas)(void);
    void (*init)(srt_ctx *c);
    void (*fini)(srt_ctx *c);
    /* Called by ops.c before every op (after checking): a backend that
     * defers work (the CPU's non-blocking sends and receives) settles it here. */
    void (*before_op)(srt_ctx *c, srt_stream s, int op);
    void (*event_record)(srt_ctx *c, srt_stream s, int ev);
    void (*event_wait)(srt_ctx *c, srt_stream s, int ev);
    void (*stream_sync)(srt_ctx *c, srt_stream s);

    void (*load_batch)(srt_ctx *c, srt_stream s, int mb, srt_t tokens, srt_t targets);
    void (*loss_add)(srt_ctx *c, srt_stream s, srt_t losses, int N);
    void (*matmul_fwd)(srt_ctx *c, srt_stream s, srt_t out, srt_t inp, srt_t w, srt_t bias,
                       int N, int C, int OC);
    void (*matmul_fwd_batched)(srt_ctx *c, srt_stream s, srt_t out, srt_t inp, srt_t w, srt_t bias,
                               int N, int C, int OC, int batch, int64_t out_stride, int64_t inp_stride);
    void (*matmul_bwd)(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t dbias, srt_t dout,
                       srt_t inp, srt_t w, int N, int C, int OC);
    void (*matmul_gelu_fwd)(srt_ctx *c, srt_stream s, srt_t out, srt_t pre, srt_t inp, srt_t w,
                            srt_t bias, int N, int C, int OC);
    void (*matmul_gelu_fwd_batched)(srt_ctx *c, srt_stream s, srt_t out, srt_t pre, srt_t inp, srt_t w,
                                    srt_t bias, int N, int C, int OC, int batch, int64_t out_stride,
                                    int64_t inp_stride);
    void (*matmul_bwd_dgelu)(srt_ctx *c, srt_stream s, srt_t dpre, srt_t dbias_pre, srt_t dout,
                             srt_t w, srt_t pre, int N, int C, int OC);
    void (*layernorm_fwd)(srt_ctx *c, srt_stream s, srt_t out, srt_t mean, srt_t rstd,
                          srt_t inp, srt_t w, srt_t b, int N, int C, float eps);
    void (*layernorm_bwd)(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t db, srt_t dout,
                          srt_t inp, srt_t w, srt_t mean, srt_t rstd, int N, int C);
    void (*rmsnorm_fwd)(srt_ctx *c, srt_stream s, srt_t out, srt_t rstd, srt_t inp, srt_t w,
                        int N, int C, float eps);
    void (*rmsnorm_bwd)(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t dout, srt_t inp,
                        srt_t w, srt_t rstd, int N, int C);
    void (*gelu_fwd)(srt_ctx *c, srt_stream s, srt_t out, srt_t inp);
    void (*gelu_bwd)(srt_ctx *c, srt_stream s, srt_t dinp, srt_t inp, srt_t dout);
    void (*swiglu_fwd)(srt_ctx *c, srt_stream s, srt_t out, srt_t a, srt_t b, int N, int H,
                       int ld);
    void (*swiglu_bwd)(srt_ctx *c, srt_stream s, srt_t da, srt_t db, srt_t dout, srt_t a,
                       srt_t b, int N, int H, int ld);
    void (*add_fwd)(srt_ctx *c, srt_stream s, srt_t out, srt_t a, srt_t b);
    void (*add_bwd)(srt_ctx *c, srt_stream s, srt_t da, srt_t db, srt_t dout);
    void (*attention_fwd)(srt_ctx *c, srt_stream s, srt_t out, srt_t lse, srt_t q, srt_t k,
                          srt_t v, int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv);
    void (*attention_bwd)(srt_ctx *c, srt_stream s, srt_t dq, srt_t dk, srt_t dv, srt_t dout,
                          srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v, int B, int T, int NH,
                          int NKV, int HS, int ld_q, int ld_kv);
    void (*rope_fwd)(srt_ctx *c, srt_stream s, srt_t x, int B, int T, int NH, int HS, int ld,
                     float theta);
    void (*rope_bwd)(srt_ctx *c, srt_stream s, srt_t dx, int B, int T, int NH, int HS, int ld,
                     float theta);
    void (*embed_fwd)(srt_ctx *c, srt_stream s, srt_t out, srt_t tokens, srt_t wte, srt_t wpe,
                      int B, int T, int C, int v0, int v1);
    void (*embed_bwd)(srt_ctx *c, srt_stream s, srt_t dwte, srt_t dwpe, srt_t dout,
                      srt_t tokens, int B, int T, int C, int v0, int v1);
    void (*xent_fwd_bwd)(srt_ctx *c, srt_stream s, srt_t losses, srt_t logits, srt_t targets,
                         int N, int Vl, int v0, int V, float dloss);
    void (*head_xent)(srt_ctx *c, srt_stream s, srt_t losses, srt_t dinp, srt_t dw, srt_t logits,
                      srt_t inp, srt_t w, srt_t targets, int N, int C, int Vl, int v0, int V,
                      float dloss);
    void (*convert)(srt_ctx *c, srt_stream s, srt_t dst, srt_t src);
    void (*zero)(srt_ctx *c, srt_stream s, srt_t x);
    void (*grad_sumsq)(srt_ctx *c, srt_stream s, srt_t g);
    void (*grad_norm_finish)(srt_ctx *c, srt_stream s, srt_group g);
    void (*optimizer_step)(srt_ctx *c, srt_stream s, srt_t params, srt_t master, srt_t grads,
                           srt_t m, srt_t v, bool decay);
    void (*all_reduce)(srt_ctx *c, srt_stream s, srt_group g, srt_t x, srt_redop op);
    void (*all_gather)(srt_ctx *c, srt_stream s, srt_group g, srt_t out, srt_t in);
    void (*reduce_scatter)(srt_ctx *c, srt_stream s, srt_group g, srt_t out, srt_t in);
    void (*broadcast)(srt_ctx *c, srt_stream s, srt_group g, srt_t x, int64_t root);
    void (*send)(srt_ctx *c, srt_stream s, srt_t x, int64_t peer);
    void (*recv)(srt_ctx *c, srt_stream s, srt_t x, int64_t peer);
    void (*copy)(srt_ctx *c, srt_stream s, srt_t dst, srt_t src);
    void (*nvme_read)(srt_ctx *c, srt_stream s, srt_t dst, int64_t offset);
    void (*nvme_write)(srt_ctx *c, srt_stream s, srt_t src, int64_t offset);
} srt_backend;

/* The backend linked into this library (runtime/cpu/backend.c for libshardrt_cpu.a). */
extern const srt_backend g_backend;

/* ---- the context ---------------------------------------------------------------- */

/* Called with every race the checker finds (msg: one line, no newline). */
typedef void (*srt_race_fn)(void *ud, const char *msg);

typedef struct ctx_options {
    int check;                  /* 0: SRT_CHECK from the environment (so a zeroed
                                   struct follows it), 1 on, -1 off                    */
    const char *nvme_dir;       /* the swap file's folder; NULL: $SRT_NVME_DIR, else
                                   $TMPDIR, else /tmp                                  */
    srt_race_fn on_race;        /* NULL: print the race and end every rank (exit 3)   */
    void *race_ud;
} ctx_options;

/* Whether checking is on: o's check, else SRT_CHECK=1 in the environment
 * (o NULL: the environment alone). */
bool ctx_check_wanted(const ctx_options *o);

struct srt_ctx {
    const srt_program *prog;
    const srt_class *cls;       /* this rank's stage: prog->classes[pp_idx]           */
    /* ranks */
    bool mpi;                   /* MPI is initialised; false: a 1-rank run without it */
    int64_t rank, world, tp_idx, dp_idx, pp_idx;
    int64_t grank[SRT_NGROUPS]; /* this rank's index in each group (-1: not a member) */
    int64_t gsize[SRT_NGROUPS]; /* the group's size (0: not a member)                 */
    int64_t gcolor[SRT_NGROUPS];/* the group's id among its kind (-1: not a member):
                                   the colour of the backend's communicator split      */
    /* memory: allocated once, by ctx_create */
    uint8_t *dev, *host;        /* the device arena and the pinned host arena         */
    int64_t dev_bytes, host_bytes;
    uint8_t *bounce;            /* CTX_BOUNCE host bytes: srt_main's staging of the
                                   device arena (ctx_dev_read / ctx_dev_write)         */
    bool dev_guard;             /* SRT_DEV_GUARD=1 (CPU backend): the device arena is
                                   PROT_NONE while srt_main's host code runs          */
    int64_t nallocs;            /* allocations made by ctx_alloc, all at creation     */
    int64_t alloc_bytes;
    bool sealed;                /* creation is over: ctx_alloc now dies               */
    char nvme_path[512];        /* the rank's NVMe swap file (unlinked once open)     */
    bool nvme_untimed;          /* srt_main's own NVMe transfers (start-up, checkpoints):
                                 * not counted in the steps' NVMe statistics        */
    /* the collective watchdog (watchdog.c): seconds before a wait ends the job,
     * and the arrival counts */
    double comm_timeout;
    struct wd_state *wd;
    /* step state (srt_main sets step and lr through ctx_begin_step) */
    int64_t step;               /* from 1                                             */
    double lr;
    double loss;                /* Σ srt_loss_add of this step                        */
    double grad_norm;           /* set by srt_grad_norm_finish                        */
    float clip_scale;           /* min(1, grad_clip / norm), ditto                    */
    float loss_scale;           /* fp16 loss scale of this step (ls.scale); 1 otherwise */
    lscale ls;                  /* its state across steps (lscale.c; checkpointed)     */
    bool overflow;              /* the norm was not finite: optimizer steps skip      */
    struct data_loader *data;   /* srt_load_batch's source; set by srt_main           */
    struct metrics_trace *trace;/* --trace: every op's span is recorded (ops.c); NULL  */
    int64_t data_step;          /* the loader's step (from 0) srt_load_batch reads;
                                   ctx_begin_step sets step - 1, an evaluation its own */
    int64_t data_mb;            /* added by srt_load_batch to its microbatch: 0 in a step;
                                   an evaluation runs microbatch 0's code over each one */
    /* the checker's names for state that lives in the context, not an arena */
    char acc_sumsq, acc_clip, acc_loss;
    /* modules */
    ctx_options opt;
    struct chk_state *chk;      /* NULL when checking is off                          */
    const srt_backend *be;
    void *bs;                   /* the backend's state                                */
};

/* Creates the context of this process for program p: ranks and groups from
 * the layout and rank order, the arenas (once), the backend, the checker.
 * Uses MPI when it is initialised (the world size must equal p->world);
 * without MPI only a 1-rank program runs.  User errors end the process. */
srt_ctx *ctx_create(const srt_program *p, const ctx_options *o);
void ctx_destroy(srt_ctx *c);
/* Zeroed, page-aligned memory that lives as long as c; counted in
 * c->nallocs.  Only during ctx_create (the backend's init): dies after. */
void *ctx_alloc(srt_ctx *c, int64_t bytes, const char *what);
/* The bytes of c->bounce: srt_main stages the device arena through it. */
enum { CTX_BOUNCE = 1 << 20 };
/* Copies bytes [off, off + bytes) of the device arena to host memory dst,
 * or host memory src into them: through the backend's dev_read / dev_write
 * (after the device's queued work), else memcpy.  The host's only access to
 * the device arena (srt_main: initialisation, checkpoints, sampling). */
void ctx_dev_read(srt_ctx *c, void *dst, int64_t off, int64_t bytes);
void ctx_dev_write(srt_ctx *c, int64_t off, const void *src, int64_t bytes);
/* With SRT_DEV_GUARD=1 on the CPU backend: on, the device arena becomes
 * unreadable to the host (a direct access faults) but for ctx_dev_read /
 * ctx_dev_write; off, readable again for the ops.  A no-op otherwise. */
void ctx_dev_guard(srt_ctx *c, bool on);
/* Starts step `step` (from 1): sets the step, the learning rate from the
 * program's schedule, the loader's step (step - 1) and clears the step's loss. */
void ctx_begin_step(srt_ctx *c, int64_t step);
/* The (tp, dp, pp) coordinates of world rank r under p's rank order, and back. */
void ctx_coords(const srt_program *p, int64_t r, int64_t *tp, int64_t *dp, int64_t *pp);
int64_t ctx_rank_of(const srt_program *p, int64_t tp, int64_t dp, int64_t pp);
/* Prints "shardrt: rank R: error: MSG" to stderr and ends the job: every
 * rank through MPI_Abort when MPI runs, else exit(code).  code: 1 user error,
 * 3 internal error (a bug of shardc or of the runtime). */
_Noreturn void ctx_fatal(const srt_ctx *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An internal error naming the runtime's source file and line. */
_Noreturn void ctx_die_at(const srt_ctx *c, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define ctx_die(c, ...) ctx_die_at((c), __FILE__, __LINE__, __VA_ARGS__)

/* ---- the race checker (check.c) ---------------------------------------------------
 * Streams are treated as concurrent.  Each stream has a vector clock; an op
 * ticks its stream's own entry; an event record snapshots the stream's clock;
 * an event wait merges the snapshot into the waiting stream's; a stream sync
 * merges the stream's clock into every stream's (the host waited).  Every
 * byte range remembers its last write and, per stream, its last read since;
 * an access from stream X conflicts with one from Y != X at tick t unless
 * clock[X][Y] >= t.  A conflict is reported to c->opt.on_race. */

/* Allocates the checker's tables (through ctx_alloc). */
void chk_create(srt_ctx *c);
/* Starts op `op` on stream s: the accesses that follow belong to it. */
void chk_op(srt_ctx *c, int op, srt_stream s);
/* The current op reads / writes bytes [p, p + bytes) of memory. */
void chk_read(srt_ctx *c, const void *p, int64_t bytes);
void chk_write(srt_ctx *c, const void *p, int64_t bytes);
/* The same for bytes [offset, offset + bytes) of the rank's NVMe file. */
void chk_nvme(srt_ctx *c, int64_t offset, int64_t bytes, bool write);
void chk_event_record(srt_ctx *c, srt_stream s, int ev);
void chk_event_wait(srt_ctx *c, srt_stream s, int ev);
void chk_stream_sync(srt_ctx *c, srt_stream s);
/* Races reported so far. */
int64_t chk_races(const srt_ctx *c);
/* Live ranges the checker tracks now (its table's fill). */
int64_t chk_ranges(const srt_ctx *c);

#endif
