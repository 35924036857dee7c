/* ops.c — the public srt_* ops of shardrt.h.
 *
 * Each op does the same three things: validate its views against its shape
 * (dtype, enough elements), record its reads and writes with the race
 * checker when checking is on, and call the linked backend.  The extents
 * recorded are the ones the shape implies, not the views' n: a strided
 * operand (q inside a fused qkv, rows ld apart) covers
 * (rows - 1)·ld + width elements from its pointer.
 */
#include "internal.h"
#include "metrics.h"

#include <stdio.h>
#include <string.h>

/* ---- names ------------------------------------------------------------------------ */

static const char *const ops_names[SRT_NOPS] = {
#define SRT_OP(name, arity, kind) #name,
    SRT_OPS(SRT_OP)
#undef SRT_OP
};

/* Every op of the X-macro has a member in the backend table. */
#define SRT_OP(name, arity, kind) \
    _Static_assert(offsetof(srt_backend, name) > 0, "backend lacks " #name);
SRT_OPS(SRT_OP)
#undef SRT_OP

/* The op's name from the X-macro. */
const char *ops_name(int op)
{
    return op >= 0 && op < SRT_NOPS ? ops_names[op] : "?";
}

/* A stream's name in reports. */
const char *ops_stream_name(srt_stream s)
{
    static const char *const names[SRT_NSTREAMS] = {
        "compute", "tp_comm", "dp_comm", "pp_comm", "copy", "host"
    };
    return (unsigned)s < SRT_NSTREAMS ? names[s] : "?";
}

/* A group's name in messages. */
const char *ops_group_name(srt_group g)
{
    static const char *const names[SRT_NGROUPS] = {"world", "tp", "dp", "pp", "embed", "tp_kv"};
    return (unsigned)g < SRT_NGROUPS ? names[g] : "?";
}

/* Bytes per element. */
int64_t ops_dtype_size(srt_dtype dt)
{
    switch (dt) {
    case SRT_F32: case SRT_I32: return 4;
    case SRT_BF16: case SRT_F16: return 2;
    case SRT_U8: return 1;
    }
    return 0;
}

/* A dtype's name in messages. */
static const char *ops_dtype_name(srt_dtype dt)
{
    switch (dt) {
    case SRT_F32: return "f32";
    case SRT_BF16: return "bf16";
    case SRT_F16: return "f16";
    case SRT_I32: return "i32";
    case SRT_U8: return "u8";
    }
    return "?";
}

/* ---- validation and recording ------------------------------------------------------- */

enum { OPS_FLOAT = 1, OPS_INT = 2, OPS_ANY = 3 };   /* dtype classes an operand accepts */
enum { OPS_READ = 1, OPS_WRITE = 2 };

typedef struct ops_frame { srt_ctx *c; int op; srt_stream s; } ops_frame;

/* Starts op `op` on stream s: checks the stream, ticks the checker. */
static ops_frame ops_begin(srt_ctx *c, int op, srt_stream s)
{
    if ((unsigned)s >= SRT_NSTREAMS) ctx_die(c, "%s: no stream %d", ops_name(op), (int)s);
    if (c->chk) chk_op(c, op, s);
    ops_frame f = { c, op, s };
    return f;
}

/* Checks operand `arg` of the op (extent elements; optional: may be NULL)
 * and records the access. */
static void ops_arg(ops_frame f, const char *arg, srt_t t, int64_t extent, int cls, int access,
                    bool optional)
{
    if (!t.p) {
        if (!optional) ctx_die(f.c, "%s: %s is NULL", ops_name(f.op), arg);
        return;
    }
    bool isf = t.dt == SRT_F32 || t.dt == SRT_BF16 || t.dt == SRT_F16;
    bool isi = t.dt == SRT_I32 || t.dt == SRT_U8;
    if ((cls == OPS_FLOAT && !isf) || (cls == OPS_INT && t.dt != SRT_I32) || (!isf && !isi))
        ctx_die(f.c, "%s: %s is %s, needs %s", ops_name(f.op), arg, ops_dtype_name(t.dt),
                cls == OPS_FLOAT ? "f32, bf16 or f16" : cls == OPS_INT ? "i32" : "a dtype");
    if (extent < 0 || t.n < extent)
        ctx_die(f.c, "%s: %s has %lld elements, the shape needs %lld", ops_name(f.op), arg,
                (long long)t.n, (long long)extent);
    if (!f.c->chk) return;
    int64_t bytes = extent * ops_dtype_size(t.dt);
    if (access & OPS_READ) chk_read(f.c, t.p, bytes);
    if (access & OPS_WRITE) chk_write(f.c, t.p, bytes);
}

#define IN(name, t, ext) ops_arg(f, name, t, ext, OPS_FLOAT, OPS_READ, false)
#define IN_OPT(name, t, ext) ops_arg(f, name, t, ext, OPS_FLOAT, OPS_READ, true)
#define OUT(name, t, ext) ops_arg(f, name, t, ext, OPS_FLOAT, OPS_WRITE, false)
#define ACC_OPT(name, t, ext) ops_arg(f, name, t, ext, OPS_FLOAT, OPS_READ | OPS_WRITE, true)
#define TOKENS(name, t, ext) ops_arg(f, name, t, ext, OPS_INT, OPS_READ, false)

/* Records an access to state the context keeps (the norm accumulator, the
 * clipping scale, the loss), so that it too must be ordered across streams. */
static void ops_state(ops_frame f, char *what, int access)
{
    if (!f.c->chk) return;
    if (access & OPS_READ) chk_read(f.c, what, 1);
    if (access & OPS_WRITE) chk_write(f.c, what, 1);
}

/* Checks that a shape argument is positive (or >= 0 when zero_ok). */
static void ops_dim(ops_frame f, const char *name, int64_t v, bool zero_ok)
{
    if (v < 0 || (v == 0 && !zero_ok))
        ctx_die(f.c, "%s: %s = %lld", ops_name(f.op), name, (long long)v);
}

/* Elements a strided operand covers: rows rows of width, ld apart. */
static int64_t ops_span(int64_t rows, int64_t width, int64_t ld)
{
    return rows > 0 ? (rows - 1) * ld + width : 0;
}

/* The group's members must include this rank. */
static void ops_group(ops_frame f, srt_group g)
{
    if ((unsigned)g >= SRT_NGROUPS) ctx_die(f.c, "%s: no group %d", ops_name(f.op), (int)g);
    if (f.c->gsize[g] == 0)
        ctx_die(f.c, "%s: rank %lld is not a member of group %d", ops_name(f.op),
                (long long)f.c->rank, (int)g);
}

/* Runs op on the backend; with a trace attached (srt_main's --trace) records
 * its measured span on its stream (the CPU runs an op when it is issued). */
#define RUN(op, ...)                                                                       \
    do {                                                                                   \
        double t0_ = c->trace ? metrics_now_us() : 0;                                      \
        c->be->before_op(c, s, SRT_OP_##op);                                               \
        c->be->op(c, s, __VA_ARGS__);                                                      \
        if (c->trace) metrics_trace_event(c->trace, ops_names[SRT_OP_##op], (int)s, t0_,   \
                                          metrics_now_us());                               \
    } while (0)

/* ---- streams and events --------------------------------------------------------------- */

static void ops_event(srt_ctx *c, const char *what, srt_stream s, int ev)
{
    if ((unsigned)s >= SRT_NSTREAMS) ctx_die(c, "%s: no stream %d", what, (int)s);
    if (ev < 0 || ev >= SRT_MAX_EVENTS)
        ctx_die(c, "%s: event %d is outside [0, %d)", what, ev, (int)SRT_MAX_EVENTS);
}

/* Records ev on s (checker snapshot, then the backend). */
void srt_event_record(srt_ctx *c, srt_stream s, int ev)
{
    ops_event(c, "srt_event_record", s, ev);
    if (c->chk) chk_event_record(c, s, ev);
    c->be->event_record(c, s, ev);
}

/* s waits for the last recording of ev. */
void srt_event_wait(srt_ctx *c, srt_stream s, int ev)
{
    ops_event(c, "srt_event_wait", s, ev);
    if (c->chk) chk_event_wait(c, s, ev);
    c->be->event_wait(c, s, ev);
}

/* The host waits for s. */
void srt_stream_sync(srt_ctx *c, srt_stream s)
{
    ops_event(c, "srt_stream_sync", s, 0);
    if (c->chk) chk_stream_sync(c, s);
    c->be->stream_sync(c, s);
}

/* ---- data and loss --------------------------------------------------------------------- */

void srt_load_batch(srt_ctx *c, srt_stream s, int mb, srt_t tokens, srt_t targets)
{
    ops_frame f = ops_begin(c, SRT_OP_load_batch, s);
    mb += (int)c->data_mb;      /* an evaluation walks the batch's microbatches through microbatch 0's code */
    if (mb < 0 || mb >= c->prog->microbatches)
        ctx_die(c, "load_batch: microbatch %d of %lld", mb, (long long)c->prog->microbatches);
    int64_t n = c->prog->micro_batch * c->prog->seq_len;
    /* the first stage needs only the tokens, the last only the targets */
    if (!tokens.p && !targets.p) ctx_die(c, "load_batch: neither tokens nor targets");
    ops_arg(f, "tokens", tokens, n, OPS_INT, OPS_WRITE, true);
    ops_arg(f, "targets", targets, n, OPS_INT, OPS_WRITE, true);
    RUN(load_batch, mb, tokens, targets);
}

/* Adds mean(losses) / microbatches to the step loss. */
void srt_loss_add(srt_ctx *c, srt_stream s, srt_t losses, int N)
{
    ops_frame f = ops_begin(c, SRT_OP_loss_add, s);
    ops_dim(f, "N", N, false);
    IN("losses", losses, N);
    ops_state(f, &c->acc_loss, OPS_READ | OPS_WRITE);
    RUN(loss_add, losses, N);
}

/* ---- compute ops --------------------------------------------------------------------------- */

void srt_matmul_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t inp, srt_t w, srt_t bias,
                    int N, int C, int OC)
{
    ops_frame f = ops_begin(c, SRT_OP_matmul_fwd, s);
    ops_dim(f, "N", N, true), ops_dim(f, "C", C, false), ops_dim(f, "OC", OC, false);
    IN("inp", inp, (int64_t)N * C);
    IN("w", w, (int64_t)OC * C);
    IN_OPT("bias", bias, OC);
    OUT("out", out, (int64_t)N * OC);
    RUN(matmul_fwd, out, inp, w, bias, N, C, OC);
}

/* Whether views a (na elements) and b (nb) share a byte. */
static bool ops_overlap(srt_t a, int64_t na, srt_t b, int64_t nb)
{
    if (!a.p || !b.p) return false;
    const uint8_t *a0 = a.p, *b0 = b.p;
    return a0 < b0 + nb * ops_dtype_size(b.dt) && b0 < a0 + na * ops_dtype_size(a.dt);
}

/* The checks and records of a strided-batched forward GEMM (srt_matmul_fwd_batched;
 * srt_matmul_gelu_fwd_batched, whose pre, its blocks as far apart as out's, is the
 * only other output; NULL for the first): each block's operands are checked and
 * recorded on their own, so that the race checker sees the rows the batch reads and
 * writes, not the rows between its strided blocks. */
static void ops_batched(ops_frame f, const char *what, srt_t out, const srt_t *pre, srt_t inp, srt_t w, srt_t bias,
                        int N, int C, int OC, int batch, int64_t out_stride, int64_t inp_stride)
{
    srt_ctx *c = f.c;
    ops_dim(f, "N", N, true), ops_dim(f, "C", C, false), ops_dim(f, "OC", OC, false);
    ops_dim(f, "batch", batch, false);
    /* blocks that overlap would make the output depend on the order the batch runs in */
    if (out_stride < (int64_t)N * OC || inp_stride < 0)
        ctx_die(c, "%s: out_stride %lld (the blocks are %lld elements), inp_stride %lld", what,
                (long long)out_stride, (long long)N * OC, (long long)inp_stride);
    IN("w", w, (int64_t)OC * C);
    IN_OPT("bias", bias, OC);
    int64_t span = ops_span(batch, (int64_t)N * OC, out_stride);
    ops_arg(f, "inp", inp, ops_span(batch, (int64_t)N * C, inp_stride), OPS_FLOAT, 0, false);
    if (pre) ops_arg(f, "pre", *pre, span, OPS_FLOAT, 0, false);
    ops_arg(f, "out", out, span, OPS_FLOAT, 0, false);
    if (pre && ops_overlap(out, span, *pre, span))    /* the backward needs pre intact */
        ctx_die(c, "%s: out and pre overlap", what);
    if (c->chk)   /* the blocks themselves, not the rows between them */
        for (int64_t b = 0; b < batch; b++) {
            srt_t i = ops_block(inp, b, inp_stride, (int64_t)N * C), o = ops_block(out, b, out_stride, (int64_t)N * OC);
            chk_read(c, i.p, i.n * ops_dtype_size(i.dt));
            if (pre) {
                srt_t p = ops_block(*pre, b, out_stride, (int64_t)N * OC);
                chk_write(c, p.p, p.n * ops_dtype_size(p.dt));
            }
            chk_write(c, o.p, o.n * ops_dtype_size(o.dt));
        }
}

/* The strided-batched forward GEMM. */
void srt_matmul_fwd_batched(srt_ctx *c, srt_stream s, srt_t out, srt_t inp, srt_t w, srt_t bias,
                            int N, int C, int OC, int batch, int64_t out_stride, int64_t inp_stride)
{
    ops_frame f = ops_begin(c, SRT_OP_matmul_fwd_batched, s);
    ops_batched(f, "matmul_fwd_batched", out, NULL, inp, w, bias, N, C, OC, batch, out_stride, inp_stride);
    RUN(matmul_fwd_batched, out, inp, w, bias, N, C, OC, batch, out_stride, inp_stride);
}

/* The linear layer's gradients (+=). */
void srt_matmul_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t dbias, srt_t dout,
                    srt_t inp, srt_t w, int N, int C, int OC)
{
    ops_frame f = ops_begin(c, SRT_OP_matmul_bwd, s);
    ops_dim(f, "N", N, true), ops_dim(f, "C", C, false), ops_dim(f, "OC", OC, false);
    IN("dout", dout, (int64_t)N * OC);
    ops_arg(f, "inp", inp, (int64_t)N * C, OPS_FLOAT, OPS_READ, !dw.p);
    ops_arg(f, "w", w, (int64_t)OC * C, OPS_FLOAT, OPS_READ, !dinp.p);
    ACC_OPT("dinp", dinp, (int64_t)N * C);
    ACC_OPT("dw", dw, (int64_t)OC * C);
    ACC_OPT("dbias", dbias, OC);
    RUN(matmul_bwd, dinp, dw, dbias, dout, inp, w, N, C, OC);
}

/* pre = inp·w^T + bias, out = gelu(pre): the GELU MLP's first layer. */
void srt_matmul_gelu_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t pre, srt_t inp, srt_t w,
                         srt_t bias, int N, int C, int OC)
{
    ops_frame f = ops_begin(c, SRT_OP_matmul_gelu_fwd, s);
    ops_dim(f, "N", N, true), ops_dim(f, "C", C, false), ops_dim(f, "OC", OC, false);
    IN("inp", inp, (int64_t)N * C);
    IN("w", w, (int64_t)OC * C);
    IN_OPT("bias", bias, OC);
    OUT("pre", pre, (int64_t)N * OC);
    OUT("out", out, (int64_t)N * OC);
    if (ops_overlap(out, (int64_t)N * OC, pre, (int64_t)N * OC))   /* the backward needs pre intact */
        ctx_die(c, "matmul_gelu_fwd: out and pre overlap");
    RUN(matmul_gelu_fwd, out, pre, inp, w, bias, N, C, OC);
}

/* srt_matmul_gelu_fwd on a strided batch (tp_comm_overlap = full's column
 * chunks under sequence parallelism): checked and recorded block by block,
 * as srt_matmul_fwd_batched. */
void srt_matmul_gelu_fwd_batched(srt_ctx *c, srt_stream s, srt_t out, srt_t pre, srt_t inp, srt_t w,
                                 srt_t bias, int N, int C, int OC, int batch, int64_t out_stride,
                                 int64_t inp_stride)
{
    ops_frame f = ops_begin(c, SRT_OP_matmul_gelu_fwd_batched, s);
    ops_batched(f, "matmul_gelu_fwd_batched", out, &pre, inp, w, bias, N, C, OC, batch, out_stride, inp_stride);
    RUN(matmul_gelu_fwd_batched, out, pre, inp, w, bias, N, C, OC, batch, out_stride, inp_stride);
}

/* dpre = (dout·w) ⊙ gelu'(pre) (overwritten), dbias_pre += Σ rows of dpre. */
void srt_matmul_bwd_dgelu(srt_ctx *c, srt_stream s, srt_t dpre, srt_t dbias_pre, srt_t dout,
                          srt_t w, srt_t pre, int N, int C, int OC)
{
    ops_frame f = ops_begin(c, SRT_OP_matmul_bwd_dgelu, s);
    ops_dim(f, "N", N, true), ops_dim(f, "C", C, false), ops_dim(f, "OC", OC, false);
    IN("dout", dout, (int64_t)N * OC);
    IN("w", w, (int64_t)OC * C);
    IN("pre", pre, (int64_t)N * C);
    OUT("dpre", dpre, (int64_t)N * C);
    ACC_OPT("dbias_pre", dbias_pre, C);
    /* the GEMM's result lands in dpre before GELU's derivative reads pre */
    if (ops_overlap(dpre, (int64_t)N * C, pre, (int64_t)N * C) ||
        ops_overlap(dpre, (int64_t)N * C, dout, (int64_t)N * OC))
        ctx_die(c, "matmul_bwd_dgelu: dpre overlaps pre or dout");
    RUN(matmul_bwd_dgelu, dpre, dbias_pre, dout, w, pre, N, C, OC);
}

/* LayerNorm, saving mean and rstd. */
void srt_layernorm_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t mean, srt_t rstd, srt_t inp,
                       srt_t w, srt_t b, int N, int C, float eps)
{
    ops_frame f = ops_begin(c, SRT_OP_layernorm_fwd, s);
    ops_dim(f, "N", N, true), ops_dim(f, "C", C, false);
    IN("inp", inp, (int64_t)N * C);
    IN("w", w, C);
    IN("b", b, C);
    OUT("out", out, (int64_t)N * C);
    OUT("mean", mean, N);
    OUT("rstd", rstd, N);
    RUN(layernorm_fwd, out, mean, rstd, inp, w, b, N, C, eps);
}

/* LayerNorm's gradients (+=). */
void srt_layernorm_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t db, srt_t dout,
                       srt_t inp, srt_t w, srt_t mean, srt_t rstd, int N, int C)
{
    ops_frame f = ops_begin(c, SRT_OP_layernorm_bwd, s);
    ops_dim(f, "N", N, true), ops_dim(f, "C", C, false);
    IN("dout", dout, (int64_t)N * C);
    IN("inp", inp, (int64_t)N * C);
    IN("w", w, C);
    IN("mean", mean, N);
    IN("rstd", rstd, N);
    ACC_OPT("dinp", dinp, (int64_t)N * C);
    ACC_OPT("dw", dw, C);
    ACC_OPT("db", db, C);
    RUN(layernorm_bwd, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

/* RMSNorm, saving rstd. */
void srt_rmsnorm_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t rstd, srt_t inp, srt_t w,
                     int N, int C, float eps)
{
    ops_frame f = ops_begin(c, SRT_OP_rmsnorm_fwd, s);
    ops_dim(f, "N", N, true), ops_dim(f, "C", C, false);
    IN("inp", inp, (int64_t)N * C);
    IN("w", w, C);
    OUT("out", out, (int64_t)N * C);
    OUT("rstd", rstd, N);
    RUN(rmsnorm_fwd, out, rstd, inp, w, N, C, eps);
}

/* RMSNorm's gradients (+=). */
void srt_rmsnorm_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t dw, srt_t dout, srt_t inp,
                     srt_t w, srt_t rstd, int N, int C)
{
    ops_frame f = ops_begin(c, SRT_OP_rmsnorm_bwd, s);
    ops_dim(f, "N", N, true), ops_dim(f, "C", C, false);
    IN("dout", dout, (int64_t)N * C);
    IN("inp", inp, (int64_t)N * C);
    IN("w", w, C);
    IN("rstd", rstd, N);
    ACC_OPT("dinp", dinp, (int64_t)N * C);
    ACC_OPT("dw", dw, C);
    RUN(rmsnorm_bwd, dinp, dw, dout, inp, w, rstd, N, C);
}

/* out = gelu(inp). */
void srt_gelu_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t inp)
{
    ops_frame f = ops_begin(c, SRT_OP_gelu_fwd, s);
    IN("inp", inp, out.n);
    OUT("out", out, out.n);
    RUN(gelu_fwd, out, inp);
}

/* dinp += gelu'(inp) · dout. */
void srt_gelu_bwd(srt_ctx *c, srt_stream s, srt_t dinp, srt_t inp, srt_t dout)
{
    ops_frame f = ops_begin(c, SRT_OP_gelu_bwd, s);
    IN("inp", inp, dinp.n);
    IN("dout", dout, dinp.n);
    ops_arg(f, "dinp", dinp, dinp.n, OPS_FLOAT, OPS_READ | OPS_WRITE, false);
    RUN(gelu_bwd, dinp, inp, dout);
}

/* out = silu(a) · b, rows ld apart. */
void srt_swiglu_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t a, srt_t b, int N, int H, int ld)
{
    ops_frame f = ops_begin(c, SRT_OP_swiglu_fwd, s);
    ops_dim(f, "N", N, true), ops_dim(f, "H", H, false), ops_dim(f, "ld - H", (int64_t)ld - H, true);
    IN("a", a, ops_span(N, H, ld));
    IN("b", b, ops_span(N, H, ld));
    OUT("out", out, (int64_t)N * H);
    RUN(swiglu_fwd, out, a, b, N, H, ld);
}

/* SwiGLU's gradients (+=). */
void srt_swiglu_bwd(srt_ctx *c, srt_stream s, srt_t da, srt_t db, srt_t dout, srt_t a, srt_t b,
                    int N, int H, int ld)
{
    ops_frame f = ops_begin(c, SRT_OP_swiglu_bwd, s);
    ops_dim(f, "N", N, true), ops_dim(f, "H", H, false), ops_dim(f, "ld - H", (int64_t)ld - H, true);
    IN("dout", dout, (int64_t)N * H);
    IN("a", a, ops_span(N, H, ld));
    IN("b", b, ops_span(N, H, ld));
    ACC_OPT("da", da, ops_span(N, H, ld));
    ACC_OPT("db", db, ops_span(N, H, ld));
    RUN(swiglu_bwd, da, db, dout, a, b, N, H, ld);
}

/* out = a + b. */
void srt_add_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t a, srt_t b)
{
    ops_frame f = ops_begin(c, SRT_OP_add_fwd, s);
    IN("a", a, out.n);
    IN("b", b, out.n);
    OUT("out", out, out.n);
    RUN(add_fwd, out, a, b);
}

/* da, db += dout. */
void srt_add_bwd(srt_ctx *c, srt_stream s, srt_t da, srt_t db, srt_t dout)
{
    ops_frame f = ops_begin(c, SRT_OP_add_bwd, s);
    IN("dout", dout, dout.n);
    ACC_OPT("da", da, dout.n);
    ACC_OPT("db", db, dout.n);
    RUN(add_bwd, da, db, dout);
}

/* Checks the shape of an attention op. */
static void ops_attn_shape(ops_frame f, int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv)
{
    ops_dim(f, "B", B, true), ops_dim(f, "T", T, true), ops_dim(f, "NH", NH, false);
    ops_dim(f, "NKV", NKV, false), ops_dim(f, "HS", HS, false);
    if (NH % NKV) ctx_die(f.c, "%s: NH %d is not a multiple of NKV %d", ops_name(f.op), NH, NKV);
    if ((int64_t)ld_q < (int64_t)NH * HS || (int64_t)ld_kv < (int64_t)NKV * HS)
        ctx_die(f.c, "%s: row strides ld_q %d / ld_kv %d below the rows' widths %d / %d",
                ops_name(f.op), ld_q, ld_kv, NH * HS, NKV * HS);
}

/* Causal attention, saving lse. */
void srt_attention_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v,
                       int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv)
{
    ops_frame f = ops_begin(c, SRT_OP_attention_fwd, s);
    ops_attn_shape(f, B, T, NH, NKV, HS, ld_q, ld_kv);
    int64_t rows = (int64_t)B * T;
    IN("q", q, ops_span(rows, (int64_t)NH * HS, ld_q));
    IN("k", k, ops_span(rows, (int64_t)NKV * HS, ld_kv));
    IN("v", v, ops_span(rows, (int64_t)NKV * HS, ld_kv));
    OUT("out", out, rows * NH * HS);
    OUT("lse", lse, rows * NH);
    RUN(attention_fwd, out, lse, q, k, v, B, T, NH, NKV, HS, ld_q, ld_kv);
}

/* Attention's gradients (+=). */
void srt_attention_bwd(srt_ctx *c, srt_stream s, srt_t dq, srt_t dk, srt_t dv, srt_t dout,
                       srt_t out, srt_t lse, srt_t q, srt_t k, srt_t v,
                       int B, int T, int NH, int NKV, int HS, int ld_q, int ld_kv)
{
    ops_frame f = ops_begin(c, SRT_OP_attention_bwd, s);
    ops_attn_shape(f, B, T, NH, NKV, HS, ld_q, ld_kv);
    int64_t rows = (int64_t)B * T;
    int64_t sq = ops_span(rows, (int64_t)NH * HS, ld_q), skv = ops_span(rows, (int64_t)NKV * HS, ld_kv);
    IN("dout", dout, rows * NH * HS);
    IN("out", out, rows * NH * HS);
    IN("lse", lse, rows * NH);
    IN("q", q, sq);
    IN("k", k, skv);
    IN("v", v, skv);
    ACC_OPT("dq", dq, sq);
    ACC_OPT("dk", dk, skv);
    ACC_OPT("dv", dv, skv);
    RUN(attention_bwd, dq, dk, dv, dout, out, lse, q, k, v, B, T, NH, NKV, HS, ld_q, ld_kv);
}

/* Checks the shape of a rope op. */
static void ops_rope_shape(ops_frame f, int B, int T, int NH, int HS, int ld)
{
    ops_dim(f, "B", B, true), ops_dim(f, "T", T, true), ops_dim(f, "NH", NH, false);
    ops_dim(f, "HS", HS, false);
    if (HS % 2) ctx_die(f.c, "%s: head size %d is odd", ops_name(f.op), HS);
    if ((int64_t)ld < (int64_t)NH * HS)
        ctx_die(f.c, "%s: row stride %d below the row width %d", ops_name(f.op), ld, NH * HS);
}

/* Rotary embedding in place. */
void srt_rope_fwd(srt_ctx *c, srt_stream s, srt_t x, int B, int T, int NH, int HS, int ld,
                  float theta)
{
    ops_frame f = ops_begin(c, SRT_OP_rope_fwd, s);
    ops_rope_shape(f, B, T, NH, HS, ld);
    ops_arg(f, "x", x, ops_span((int64_t)B * T, (int64_t)NH * HS, ld), OPS_FLOAT,
            OPS_READ | OPS_WRITE, false);
    RUN(rope_fwd, x, B, T, NH, HS, ld, theta);
}

/* dx := R^T dx in place. */
void srt_rope_bwd(srt_ctx *c, srt_stream s, srt_t dx, int B, int T, int NH, int HS, int ld,
                  float theta)
{
    ops_frame f = ops_begin(c, SRT_OP_rope_bwd, s);
    ops_rope_shape(f, B, T, NH, HS, ld);
    ops_arg(f, "dx", dx, ops_span((int64_t)B * T, (int64_t)NH * HS, ld), OPS_FLOAT,
            OPS_READ | OPS_WRITE, false);
    RUN(rope_bwd, dx, B, T, NH, HS, ld, theta);
}

/* Token (+ position) embedding of a vocabulary slice. */
void srt_embed_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t tokens, srt_t wte, srt_t wpe,
                   int B, int T, int C, int v0, int v1)
{
    ops_frame f = ops_begin(c, SRT_OP_embed_fwd, s);
    ops_dim(f, "B", B, true), ops_dim(f, "T", T, true), ops_dim(f, "C", C, false);
    ops_dim(f, "v0", v0, true), ops_dim(f, "v1 - v0", (int64_t)v1 - v0, true);
    TOKENS("tokens", tokens, (int64_t)B * T);
    IN("wte", wte, (int64_t)(v1 - v0) * C);
    IN_OPT("wpe", wpe, (int64_t)T * C);
    OUT("out", out, (int64_t)B * T * C);
    RUN(embed_fwd, out, tokens, wte, wpe, B, T, C, v0, v1);
}

/* The embedding's gradients (+=). */
void srt_embed_bwd(srt_ctx *c, srt_stream s, srt_t dwte, srt_t dwpe, srt_t dout, srt_t tokens,
                   int B, int T, int C, int v0, int v1)
{
    ops_frame f = ops_begin(c, SRT_OP_embed_bwd, s);
    ops_dim(f, "B", B, true), ops_dim(f, "T", T, true), ops_dim(f, "C", C, false);
    ops_dim(f, "v0", v0, true), ops_dim(f, "v1 - v0", (int64_t)v1 - v0, true);
    TOKENS("tokens", tokens, (int64_t)B * T);
    IN("dout", dout, (int64_t)B * T * C);
    ACC_OPT("dwte", dwte, (int64_t)(v1 - v0) * C);
    ACC_OPT("dwpe", dwpe, (int64_t)T * C);
    RUN(embed_bwd, dwte, dwpe, dout, tokens, B, T, C, v0, v1);
}

/* Losses, and the logits overwritten with their gradient. */
void srt_xent_fwd_bwd(srt_ctx *c, srt_stream s, srt_t losses, srt_t logits, srt_t targets,
                      int N, int Vl, int v0, int V, float dloss)
{
    ops_frame f = ops_begin(c, SRT_OP_xent_fwd_bwd, s);
    ops_dim(f, "N", N, true), ops_dim(f, "Vl", Vl, false), ops_dim(f, "v0", v0, true);
    ops_dim(f, "V", V, false);
    if (c->gsize[SRT_TP] > 1) ops_group(f, SRT_TP);
    TOKENS("targets", targets, N);
    ops_arg(f, "logits", logits, (int64_t)N * Vl, OPS_FLOAT, OPS_READ | OPS_WRITE, false);
    OUT("losses", losses, N);
    RUN(xent_fwd_bwd, losses, logits, targets, N, Vl, v0, V, dloss);
}

/* The head's logits, losses and (when asked) gradients in one op. */
void srt_head_xent(srt_ctx *c, srt_stream s, srt_t losses, srt_t dinp, srt_t dw, srt_t logits,
                   srt_t inp, srt_t w, srt_t targets, int N, int C, int Vl, int v0, int V,
                   float dloss)
{
    ops_frame f = ops_begin(c, SRT_OP_head_xent, s);
    ops_dim(f, "N", N, true), ops_dim(f, "C", C, false), ops_dim(f, "Vl", Vl, false);
    ops_dim(f, "v0", v0, true), ops_dim(f, "V", V, false);
    if (c->gsize[SRT_TP] > 1) ops_group(f, SRT_TP);
    TOKENS("targets", targets, N);
    IN("inp", inp, (int64_t)N * C);
    IN("w", w, (int64_t)Vl * C);
    OUT("logits", logits, (int64_t)N * Vl);
    OUT("losses", losses, N);
    ACC_OPT("dinp", dinp, (int64_t)N * C);
    ACC_OPT("dw", dw, (int64_t)Vl * C);
    RUN(head_xent, losses, dinp, dw, logits, inp, w, targets, N, C, Vl, v0, V, dloss);
}

/* dst = src in dst's dtype. */
void srt_convert(srt_ctx *c, srt_stream s, srt_t dst, srt_t src)
{
    ops_frame f = ops_begin(c, SRT_OP_convert, s);
    if (src.n != dst.n)
        ctx_die(c, "convert: dst has %lld elements, src %lld", (long long)dst.n, (long long)src.n);
    bool fd = dst.dt != SRT_I32 && dst.dt != SRT_U8, fs = src.dt != SRT_I32 && src.dt != SRT_U8;
    if (dst.dt != src.dt && !(fd && fs))
        ctx_die(c, "convert: %s to %s", ops_dtype_name(src.dt), ops_dtype_name(dst.dt));
    ops_arg(f, "src", src, src.n, OPS_ANY, OPS_READ, false);
    ops_arg(f, "dst", dst, dst.n, OPS_ANY, OPS_WRITE, false);
    RUN(convert, dst, src);
}

/* x = 0. */
void srt_zero(srt_ctx *c, srt_stream s, srt_t x)
{
    ops_frame f = ops_begin(c, SRT_OP_zero, s);
    ops_arg(f, "x", x, x.n, OPS_ANY, OPS_WRITE, false);
    RUN(zero, x);
}

/* ---- optimizer ------------------------------------------------------------------------ */

void srt_grad_sumsq(srt_ctx *c, srt_stream s, srt_t g)
{
    ops_frame f = ops_begin(c, SRT_OP_grad_sumsq, s);
    IN("g", g, g.n);
    ops_state(f, &c->acc_sumsq, OPS_READ | OPS_WRITE);
    RUN(grad_sumsq, g);
}

/* The norm over group g and the clipping scale. */
void srt_grad_norm_finish(srt_ctx *c, srt_stream s, srt_group g)
{
    ops_frame f = ops_begin(c, SRT_OP_grad_norm_finish, s);
    ops_group(f, g);
    ops_state(f, &c->acc_sumsq, OPS_READ | OPS_WRITE);
    ops_state(f, &c->acc_clip, OPS_WRITE);
    RUN(grad_norm_finish, g);
}

/* One optimizer step on a flat range. */
void srt_optimizer_step(srt_ctx *c, srt_stream s, srt_t params, srt_t master, srt_t grads,
                        srt_t m, srt_t v, bool decay)
{
    ops_frame f = ops_begin(c, SRT_OP_optimizer_step, s);
    int64_t n = master.n;
    bool sgd = c->prog->optimizer == 2;
    if (master.p && master.dt != SRT_F32) ctx_die(c, "optimizer_step: master is not f32");
    if (m.p && m.dt != SRT_F32) ctx_die(c, "optimizer_step: m is not f32");
    if (v.p && v.dt != SRT_F32) ctx_die(c, "optimizer_step: v is not f32");
    IN("grads", grads, n);
    ops_arg(f, "master", master, n, OPS_FLOAT, OPS_READ | OPS_WRITE, false);
    ops_arg(f, "m", m, n, OPS_FLOAT, OPS_READ | OPS_WRITE, sgd && c->prog->momentum == 0.0);
    ops_arg(f, "v", v, n, OPS_FLOAT, OPS_READ | OPS_WRITE, sgd);
    if (params.p != master.p)
        ops_arg(f, "params", params, n, OPS_FLOAT, OPS_WRITE, true);
    ops_state(f, &c->acc_clip, OPS_READ);
    RUN(optimizer_step, params, master, grads, m, v, decay);
}

/* ---- collectives ----------------------------------------------------------------------- */

/* Collectives move any dtype; in and out of one op share it. */
static void ops_same_dtype(ops_frame f, srt_t a, srt_t b)
{
    if (a.p && b.p && a.dt != b.dt)
        ctx_die(f.c, "%s: out is %s, in is %s", ops_name(f.op), ops_dtype_name(a.dt),
                ops_dtype_name(b.dt));
}

/* x = the reduction over group g. */
void srt_all_reduce(srt_ctx *c, srt_stream s, srt_group g, srt_t x, srt_redop op)
{
    ops_frame f = ops_begin(c, SRT_OP_all_reduce, s);
    ops_group(f, g);
    if (op != SRT_SUM && op != SRT_MAX) ctx_die(c, "all_reduce: no reduction %d", (int)op);
    ops_arg(f, "x", x, x.n, OPS_ANY, OPS_READ | OPS_WRITE, false);
    RUN(all_reduce, g, x, op);
}

/* out = every member's in, in group-rank order. */
void srt_all_gather(srt_ctx *c, srt_stream s, srt_group g, srt_t out, srt_t in)
{
    ops_frame f = ops_begin(c, SRT_OP_all_gather, s);
    ops_group(f, g);
    ops_same_dtype(f, out, in);
    ops_arg(f, "in", in, in.n, OPS_ANY, OPS_READ, false);
    ops_arg(f, "out", out, in.n * c->gsize[g], OPS_ANY, OPS_WRITE, false);
    RUN(all_gather, g, out, in);
}

/* out = this member's slice of the sum of every in. */
void srt_reduce_scatter(srt_ctx *c, srt_stream s, srt_group g, srt_t out, srt_t in)
{
    ops_frame f = ops_begin(c, SRT_OP_reduce_scatter, s);
    ops_group(f, g);
    ops_same_dtype(f, out, in);
    ops_arg(f, "in", in, out.n * c->gsize[g], OPS_ANY, OPS_READ, false);
    ops_arg(f, "out", out, out.n, OPS_ANY, OPS_WRITE, false);
    RUN(reduce_scatter, g, out, in);
}

/* x = root's x. */
void srt_broadcast(srt_ctx *c, srt_stream s, srt_group g, srt_t x, int64_t root)
{
    ops_frame f = ops_begin(c, SRT_OP_broadcast, s);
    ops_group(f, g);
    if (root < 0 || root >= c->gsize[g])
        ctx_die(c, "broadcast: root %lld outside a group of %lld", (long long)root,
                (long long)c->gsize[g]);
    ops_arg(f, "x", x, x.n, OPS_ANY, c->grank[g] == root ? OPS_READ : OPS_WRITE, false);
    RUN(broadcast, g, x, root);
}

/* The peer of a send or recv: another member of this pipeline. */
static void ops_peer(ops_frame f, int64_t peer)
{
    if (peer < 0 || peer >= f.c->gsize[SRT_PP] || peer == f.c->grank[SRT_PP])
        ctx_die(f.c, "%s: peer %lld is not another stage of a pipeline of %lld (this is %lld)",
                ops_name(f.op), (long long)peer, (long long)f.c->gsize[SRT_PP],
                (long long)f.c->grank[SRT_PP]);
}

/* x to pipeline stage peer. */
void srt_send(srt_ctx *c, srt_stream s, srt_t x, int64_t peer)
{
    ops_frame f = ops_begin(c, SRT_OP_send, s);
    ops_peer(f, peer);
    ops_arg(f, "x", x, x.n, OPS_ANY, OPS_READ, false);
    RUN(send, x, peer);
}

/* x from pipeline stage peer. */
void srt_recv(srt_ctx *c, srt_stream s, srt_t x, int64_t peer)
{
    ops_frame f = ops_begin(c, SRT_OP_recv, s);
    ops_peer(f, peer);
    ops_arg(f, "x", x, x.n, OPS_ANY, OPS_WRITE, false);
    RUN(recv, x, peer);
}

/* ---- host memory and NVMe ------------------------------------------------------------ */

void srt_copy(srt_ctx *c, srt_stream s, srt_t dst, srt_t src)
{
    ops_frame f = ops_begin(c, SRT_OP_copy, s);
    if (dst.dt != src.dt || dst.n != src.n)
        ctx_die(c, "copy: dst %lld x %s, src %lld x %s (srt_convert converts)", (long long)dst.n,
                ops_dtype_name(dst.dt), (long long)src.n, ops_dtype_name(src.dt));
    ops_arg(f, "src", src, src.n, OPS_ANY, OPS_READ, false);
    ops_arg(f, "dst", dst, dst.n, OPS_ANY, OPS_WRITE, false);
    RUN(copy, dst, src);
}

/* An NVMe transfer stays inside the rank's planned swap file. */
static void ops_nvme(ops_frame f, srt_t t, int64_t offset, bool write)
{
    int64_t bytes = t.n * ops_dtype_size(t.dt);
    if (offset < 0 || bytes < 0 || offset > f.c->cls->nvme_bytes - bytes)
        ctx_die(f.c, "%s: bytes [%lld, %lld) outside the NVMe file of %lld bytes", ops_name(f.op),
                (long long)offset, (long long)(offset + bytes), (long long)f.c->cls->nvme_bytes);
    ops_arg(f, write ? "src" : "dst", t, t.n, OPS_ANY, write ? OPS_READ : OPS_WRITE, false);
    if (f.c->chk) chk_nvme(f.c, offset, bytes, write);
}

/* dst = bytes at offset of the swap file. */
void srt_nvme_read(srt_ctx *c, srt_stream s, srt_t dst, int64_t offset)
{
    ops_frame f = ops_begin(c, SRT_OP_nvme_read, s);
    ops_nvme(f, dst, offset, false);
    RUN(nvme_read, dst, offset);
}

/* Bytes at offset of the swap file = src. */
void srt_nvme_write(srt_ctx *c, srt_stream s, srt_t src, int64_t offset)
{
    ops_frame f = ops_begin(c, SRT_OP_nvme_write, s);
    ops_nvme(f, src, offset, true);
    RUN(nvme_write, src, offset);
}
