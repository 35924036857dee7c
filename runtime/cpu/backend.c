/* backend.c — the CPU backend's table, its state, streams and events, and the
 * fp32 staging of 16-bit operands (see cpu.h).
 *
 * Streams on the CPU: every op runs to completion when it is issued, in issue
 * order, so events need no work of their own.  The exception is point to
 * point: sends and receives are posted non-blocking (MPI_Isend / MPI_Irecv
 * into the destination view) and complete lazily, where a GPU's pp stream
 * would order a later op after them: before the next op of their stream
 * that is not a send or receive, at a wait for an event recorded on their
 * stream after them (the record notes how many the stream had issued), at a
 * sync of their stream, and before a later transfer that overlaps a receive's
 * bytes (or a receive that overlaps a send's).  So a stage's compute runs on
 * while its next input is in flight, and a send no longer waits for the
 * peer to take the message before the sender's next kernel (with messages
 * past MPI's eager limit that made every send synchronous: the measured
 * bubble of the interleaved schedule was 3x the planner's).  A race-free
 * program (the checker proves it) orders every cross-stream use of a
 * transfer's bytes through an event wait, so each op still sees the data
 * the issue order says.  Between ops the backend tests the pending requests,
 * so that MPI answers a peer's rendezvous while this rank computes.
 */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

/* ---- conversions -------------------------------------------------------------------- */

void cpu_to_f32(float *out, const void *in, srt_dtype dt, int64_t n)
{
    switch (dt) {
    case SRT_F32: if ((const void *)out != in) memmove(out, in, (size_t)n * 4); break;
    case SRT_BF16: kc_cast_bf16_to_f32(out, in, (size_t)n); break;
    case SRT_F16: kc_cast_fp16_to_f32(out, in, (size_t)n); break;
    default: abort();   /* ops.c admits only float dtypes here */
    }
}

/* n fp32 elements to dt (rounded to nearest even). */
void cpu_from_f32(void *out, const float *in, srt_dtype dt, int64_t n)
{
    switch (dt) {
    case SRT_F32: if (out != (const void *)in) memmove(out, in, (size_t)n * 4); break;
    case SRT_BF16: kc_cast_f32_to_bf16(out, in, (size_t)n); break;
    case SRT_F16: kc_cast_f32_to_fp16(out, in, (size_t)n); break;
    default: abort();
    }
}

/* ---- staging ------------------------------------------------------------------------- */

float *cpu_tmp(srt_ctx *c, const char *op, int64_t n)
{
    cpu_state *st = cpu_st(c);
    int64_t at = (st->scratch_top + 15) & ~(int64_t)15;   /* 64-byte aligned pieces */
    if (n < 0 || at + n > st->scratch_n)
        ctx_die(c, "%s needs %lld floats of fp32 scratch, the CPU backend planned %lld from the "
                "program's shapes", op, (long long)(at + n), (long long)st->scratch_n);
    st->scratch_top = at + n;
    return st->scratch + at;
}

/* Orders operand indices by address (a handful: insertion sort). */
static void cpu_sort_args(const cpu_arg *a, int *idx, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && (uintptr_t)a[idx[j]].t.p < (uintptr_t)a[idx[j - 1]].t.p; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1], idx[j - 1] = t;
        }
}

/* Stages the 16-bit operands in fp32 scratch (see cpu.h). */
void cpu_stage(srt_ctx *c, const char *op, cpu_arg *a, int n)
{
    cpu_state *st = cpu_st(c);
    st->scratch_top = 0;
    st->ngroups = 0;
    int idx[CPU_MAX_ARGS], m = 0;
    if (n > CPU_MAX_ARGS) ctx_die(c, "%s: %d operands", op, n);
    for (int i = 0; i < n; i++) {
        a[i].f = NULL;
        if (!a[i].t.p || a[i].span <= 0) continue;
        if (a[i].t.dt == SRT_F32) a[i].f = a[i].t.p;
        else if (a[i].t.dt == SRT_BF16 || a[i].t.dt == SRT_F16) idx[m++] = i;
    }
    cpu_sort_args(a, idx, m);
    /* overlapping operands (q, k, v in one qkv; out aliasing a) share a range */
    for (int i = 0; i < m;) {
        const cpu_arg *first = &a[idx[i]];
        uint8_t *lo = first->t.p, *hi = lo + first->span * 2;
        bool write = first->mode & CPU_W, read = first->mode != CPU_W;
        int j = i + 1;
        for (; j < m && (uint8_t *)a[idx[j]].t.p < hi; j++) {
            const cpu_arg *b = &a[idx[j]];
            if (b->t.dt != first->t.dt) ctx_die(c, "%s: a bf16 and an fp16 operand overlap", op);
            uint8_t *bhi = (uint8_t *)b->t.p + b->span * 2;
            if (bhi > hi) hi = bhi;
            write |= (b->mode & CPU_W) != 0;
            read |= b->mode != CPU_W;
        }
        cpu_group *g = &st->groups[st->ngroups++];
        g->p = lo, g->n = (hi - lo) / 2, g->dt = first->t.dt, g->write = write;
        g->f = cpu_tmp(c, op, g->n);
        if (read) cpu_to_f32(g->f, g->p, g->dt, g->n);
        for (int k = i; k < j; k++) a[idx[k]].f = g->f + ((uint8_t *)a[idx[k]].t.p - lo) / 2;
        i = j;
    }
}

/* Writes the staged ranges the op wrote back in 16 bits. */
void cpu_unstage(srt_ctx *c)
{
    cpu_state *st = cpu_st(c);
    for (int i = 0; i < st->ngroups; i++)
        if (st->groups[i].write) cpu_from_f32(st->groups[i].p, st->groups[i].f, st->groups[i].dt, st->groups[i].n);
    st->ngroups = 0;
}

/* Runs an elementwise kernel, chunked through the staging when 16-bit. */
void cpu_elementwise(srt_ctx *c, const char *op, cpu_arg *a, int na, int64_t n, cpu_ew_fn fn,
                     void *ud)
{
    bool all32 = true;
    for (int i = 0; i < na; i++) all32 &= !a[i].t.p || a[i].t.dt == SRT_F32;
    if (all32) {
        for (int i = 0; i < na; i++) a[i].f = a[i].t.p;
        fn(a, n, ud);
        return;
    }
    cpu_arg sub[CPU_MAX_ARGS];
    for (int64_t o = 0; o < n; o += CPU_CHUNK) {
        int64_t len = n - o < CPU_CHUNK ? n - o : CPU_CHUNK;
        for (int i = 0; i < na; i++) {
            sub[i] = a[i];
            sub[i].span = len;
            if (a[i].t.p) sub[i].t.p = (uint8_t *)a[i].t.p + o * ops_dtype_size(a[i].t.dt);
        }
        cpu_stage(c, op, sub, na);
        fn(sub, len, ud);
        cpu_unstage(c);
    }
}

/* ---- sizing the scratch from the program ----------------------------------------------- */

static int64_t cpu_max(int64_t a, int64_t b) { return a > b ? a : b; }

/* The largest fp32 scratch any op of the program needs, by op family, with
 * N = micro_batch * seq_len token rows per microbatch (the most any op sees):
 *  - a linear layer on weight p (shard rows x cols): w and dw (2·rows·cols),
 *    inp and dinp (2·N·cols), dout (N·rows), the bias;
 *  - attention: q, k, v (one N x (NH+2·NKV)·HS/tp range when fused) and
 *    their gradients, out and dout (N x NH·HS/tp each);
 *  - rope backward: dx and its copy; swiglu backward: a, b, da, db, dout;
 *  - layer norms: inp, dinp, dout (N x C) and three vectors;
 *  - the cross entropy: its logits (N x vocab/tp) and 3·N·(2·tp + 2) row
 *    statistics (the only part an fp32 program needs, with the rope copy,
 *    the optimizer's chunks and the fused head's);
 *  - the fused fp32 head, on the stage that has it (a parameter of layer
 *    `layers`: the final norm): those statistics and kc_head_scratch_floats;
 *  - elementwise ops: four chunks of CPU_CHUNK. */
int64_t cpu_scratch_floats(const srt_program *p, const srt_class *cls)
{
    int64_t N = p->micro_batch * p->seq_len, tp = p->tp, C = p->hidden;
    int64_t heads = p->heads > 0 ? p->heads : 1, kv = p->kv_heads > 0 ? p->kv_heads : heads;
    int64_t hs = C / heads;
    int64_t wqkv = (heads + 2 * kv) * hs / tp, wattn = heads * hs / tp;
    int64_t H = (p->ffn > 0 ? p->ffn : 4 * C) / tp, Vl = (p->vocab_pad > 0 ? p->vocab_pad : p->vocab) / tp;
    int64_t rows_stats = 3 * N * (2 * tp + 2);
    int64_t need = cpu_max(4 * (int64_t)CPU_CHUNK, rows_stats + 64);
    need = cpu_max(need, 2 * N * wqkv + 64);                          /* rope backward */
    bool head = false;
    for (int i = 0; i < cls->nparams; i++) head |= cls->params[i].layer == p->layers;
    if (head) {
        KcHeadShape sh = { (int)N, (int)C, (int)Vl, 0, (int)Vl };
        need = cpu_max(need, rows_stats + (int64_t)kc_head_scratch_floats(sh) + 5 * 16);
    }
    if (p->dtype == SRT_F32) return need;
    int64_t pmax = 0;
    for (int i = 0; i < cls->nparams; i++) {
        const srt_param *q = &cls->params[i];
        int64_t r = q->shard_rows > 0 ? q->shard_rows : q->rows_mem;
        int64_t cols = q->shard_cols > 0 ? q->shard_cols : q->cols;
        if (cols <= 0) continue;
        pmax = cpu_max(pmax, r * cols);
        need = cpu_max(need, 2 * r * cols + 2 * N * cols + N * r + r + 5 * 16);
    }
    need = cpu_max(need, 2 * pmax + (int64_t)p->seq_len * C + N * C + 64);   /* embedding */
    need = cpu_max(need, 2 * N * wqkv + 2 * N * wattn + 64);                /* attention */
    need = cpu_max(need, 5 * N * H + 64);                                   /* swiglu    */
    need = cpu_max(need, 3 * N * C + 3 * C + 64);                           /* norms     */
    need = cpu_max(need, N * Vl + rows_stats + 64);                         /* xent      */
    return need;
}

/* ---- the table's members ------------------------------------------------------------------ */

static void cpu_init(srt_ctx *c)
{
    cpu_state *st = ctx_alloc(c, (int64_t)sizeof *st, "the CPU backend's state");
    c->bs = st;
    kc_init();
    st->scratch_n = cpu_scratch_floats(c->prog, c->cls);
    st->scratch = ctx_alloc(c, st->scratch_n * 4, "the fp32 scratch of bf16 emulation");
    if (c->prog->family == 1 && c->prog->heads > 0) {   /* Llama: rope's angle tables */
        st->rope_npos = (int)c->prog->seq_len;
        st->rope_hs = (int)(c->prog->hidden / c->prog->heads);
        int64_t n = (int64_t)st->rope_npos * (st->rope_hs / 2);
        st->rope_cs = ctx_alloc(c, 2 * n * 4, "the rotary embedding's angle tables");
        st->rope_sn = st->rope_cs + n;
    }
    cpu_comm_init(c);
    cpu_threads_init(c);
    cpu_io_init(c);
}

/* Completes the transfers, then releases everything init made. */
static void cpu_fini(srt_ctx *c)
{
    cpu_state *st = cpu_st(c);
    if (!st) return;
    for (int s = 0; s < SRT_NSTREAMS; s++)
        cpu_p2p_complete(c, (srt_stream)s, cpu_p2p_issued(c, (srt_stream)s));
    cpu_io_fini(c);
    cpu_comm_fini(c);
    free(st->scratch);
    free(st->rope_cs);
    free(st);
    c->bs = NULL;
}

/* A pending transfer completes before the next op of its stream, except the
 * sends and receives that may pair with it; other ops only move MPI on. */
static void cpu_before_op(srt_ctx *c, srt_stream s, int op)
{
    cpu_state *st = cpu_st(c);
    if (!st->np2p_all) return;
    if (op != SRT_OP_send && op != SRT_OP_recv && st->np2p[s])
        cpu_p2p_complete(c, s, cpu_p2p_issued(c, s));
    if (st->np2p_all) cpu_p2p_progress(c);
}

/* Notes the transfers the event covers: those issued on s so far. */
static void cpu_event_record(srt_ctx *c, srt_stream s, int ev)
{
    cpu_state *st = cpu_st(c);
    st->ev_stream[ev] = (int8_t)s;
    st->ev_seq[ev] = cpu_p2p_issued(c, s);
}

/* Completes the transfers the event covers (every other op has run). */
static void cpu_event_wait(srt_ctx *c, srt_stream s, int ev)
{
    cpu_state *st = cpu_st(c);
    cpu_p2p_complete(c, (srt_stream)st->ev_stream[ev], st->ev_seq[ev]);
}

/* Completes the stream's transfers. */
static void cpu_stream_sync(srt_ctx *c, srt_stream s)
{
    cpu_p2p_complete(c, s, cpu_p2p_issued(c, s));
}

const srt_backend g_backend = {
    .name = "cpu",
    .start = cpu_start,
    .blas = kc_blas_core,
    .init = cpu_init,
    .fini = cpu_fini,
    .before_op = cpu_before_op,
    .event_record = cpu_event_record,
    .event_wait = cpu_event_wait,
    .stream_sync = cpu_stream_sync,
#define SRT_OP(name, arity, kind) .name = cpu_##name,
    SRT_OPS(SRT_OP)
#undef SRT_OP
};
