/* emit.c — the code generator: `shardc build`.
 *
 * From the memory plan (plan.h: per rank class the schedule's ops in order,
 * every buffer at its arena offset) it writes one C file that calls
 * runtime/include/shardrt.h, and compiles and links it with the system C
 * compiler into a trainer.  The generated file, per pipeline stage:
 *
 *  - const tables: the parameters (srt_param), the buffers (srt_buffer), the
 *    flat segments, where each layer's parameters and gradients are, and one
 *    table per kind of step call (its arguments: arena offsets, event ids);
 *  - one function per kind of call (a layer's forward, its backward, the
 *    head, a gather, a reduction, ...) whose body is straight calls into
 *    shardrt.h with the shapes written out;
 *  - the step: the schedule's ops in order, each a call of its kind's
 *    function on its table row, with runs that repeat (layers, microbatches)
 *    folded into loops so a 96-layer model stays small;
 *  - for every OP_WAIT, srt_event_record right after the op waited for and
 *    srt_event_wait at the wait.
 *
 * Every runtime call goes through rt_call(), which checks the op's name and
 * arity against the SRT_OPS X-macro list of shardrt.h: an op the runtime does
 * not declare cannot be emitted.  Activation buffers are carved into the
 * layer's tensors from model_layer_graph() exactly as part.c sized them; any
 * disagreement about a size is an internal error naming both numbers.
 */
#include "code.h"
#include "catalog.h"
#include "sim.h"

#include "../runtime/include/shardrt.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the runtime's ops, from the one X-macro list -------------------------- */

typedef struct RtOp { const char *name; int arity; } RtOp;

/* RT_matmul_fwd ...: the index of each op in the list. */
enum {
#define SRT_OP(name, arity, kind) RT_##name,
    SRT_OPS(SRT_OP)
#undef SRT_OP
    NRTOPS
};

static const RtOp rt_ops[NRTOPS] = {
#define SRT_OP(name, arity, kind) {#name, arity},
    SRT_OPS(SRT_OP)
#undef SRT_OP
};

/* ---- text ------------------------------------------------------------------------ */

/* A growing string (the generated file can be megabytes). */
typedef struct Str { char *p; size_t n, cap; } Str;

/* Appends formatted text (a va_list). */
static void vsf(Str *s, const char *fmt, va_list ap)
{
    for (;;) {
        size_t room = s->cap - s->n;
        va_list aq;
        va_copy(aq, ap);
        int k = vsnprintf(s->p ? s->p + s->n : NULL, room, fmt, aq);
        va_end(aq);
        if (k < 0) die("emit: vsnprintf failed");
        if ((size_t)k < room) {
            s->n += (size_t)k;
            return;
        }
        size_t cap = s->cap ? s->cap * 2 : 1 << 16;
        while (cap - s->n <= (size_t)k) cap *= 2;
        s->p = realloc(s->p, cap);
        if (!s->p) die("emit: out of memory");
        s->cap = cap;
    }
}

/* Appends formatted text. */
static void __attribute__((format(printf, 2, 3))) sf(Str *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsf(s, fmt, ap);
    va_end(ap);
}

/* Appends raw text. */
static void sput(Str *s, const char *t)
{
    sf(s, "%s", t);
}

/* Text as a C string literal (arena). */
static const char *c_string(const char *t)
{
    if (!t) return "NULL";
    Str s = {0};
    sput(&s, "\"");
    for (const unsigned char *q = (const unsigned char *)t; *q; q++) {
        if (*q == '\\' || *q == '"') sf(&s, "\\%c", *q);
        else if (*q == '\n') sput(&s, "\\n\"\n    \"");
        else if (*q == '\t') sput(&s, "\\t");
        else if (*q < 32 || *q >= 127) sf(&s, "\\%03o", *q);
        else sf(&s, "%c", *q);
    }
    sput(&s, "\"");
    const char *r = arena_strndup(&g_arena, s.p, s.n);
    free(s.p);
    return r;
}

/* Text safe inside a C comment: no comment ends, no trailing spaces. */
static void comment_text(Str *s, const char *prefix, const char *t)
{
    const char *line = t;
    while (*line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        while (len > 0 && (line[len - 1] == ' ' || line[len - 1] == '\t')) len--;
        sput(s, len ? prefix : " *");
        if (len) sput(s, " ");
        for (size_t i = 0; i < len; i++) {
            if (line[i] == '*' && i + 1 < len && line[i + 1] == '/') sput(s, "* ");
            else if (line[i] == '/' && i + 1 < len && line[i + 1] == '*') sput(s, "/ ");
            else sf(s, "%c", line[i]);
        }
        sput(s, "\n");
        if (!end) break;
        line = end + 1;
    }
}

/* A float literal that C reads back as the same float ("0.0f", "1e-05f"). */
static const char *flt(double v)
{
    char *t = arena_printf(&g_arena, "%.9g", v);
    if (!strpbrk(t, ".en")) t = arena_printf(&g_arena, "%s.0", t);
    return arena_printf(&g_arena, "%sf", t);
}

/* Everything fprintf'd to a memory stream by fn(out, arg), as a string. */
static char *capture_text(void (*fn)(FILE *, const void *), const void *arg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) die("emit: open_memstream failed");
    fn(f, arg);
    fclose(f);
    char *r = arena_strndup(&g_arena, buf ? buf : "", len);
    free(buf);
    return r;
}

/* The resolved spec's canonical text, for capture_text. */
static void canon_fn(FILE *f, const void *spec) { canon_print(f, spec); }
/* The plan's report, for capture_text. */
static void report_fn(FILE *f, const void *mp) { report_text(f, mp); }

/* The dimensions a GEMM of the generated code names: its enum constants. */
typedef enum Dim { D_N, D_C, D_QKV, D_QD, D_KVD, D_FF, D_VP, D_NR, NDIMS } Dim;    /* NR: a token-row chunk's */
static const char *const dim_c[NDIMS] = {"N", "C", "QKV", "QD", "KVD", "FF", "VP", "NR"};

/* An optional operand of a call: its text, on which ranks it is there, and
 * whether the call writes a parameter gradient through it (a PG place of the
 * part table: the layer's calls are checked against their schedule by it). */
typedef enum Presence { ABSENT, ON_ALL, ON_SOME } Presence;
typedef struct Opnd { const char *c; Presence on; bool grad; } Opnd;
static const Opnd NO_OPND = {"NONE", ABSENT, false};

/* An operand every rank has. */
static Opnd opnd(const char *c) { return (Opnd){c, ON_ALL, false}; }

/* The GEMM shapes the program's code calls (srt_program.gemms): every
 * srt_matmul_* call is written by mm_fwd, mm_gelu_fwd, mm_bwd or
 * mm_bwd_dgelu, which record its shape, so no path (eval, recompute, sequence
 * parallelism, a custom op's layer) can call a shape the table lacks; emit_c
 * resets them.  kind: shardrt.h's SRT_GEMM_*; batch and step: an
 * SRT_GEMM_FWD_(GELU_)BATCHED's batch, its input stride in (N, C) blocks
 * and its output stride in (N, OC) blocks, 0 for the other kinds. */
typedef struct EmGemm { int kind; Dim N, C, OC; bool bias; long long batch, step, out_step; } EmGemm;
static EmGemm *em_gemms;
static int em_ngemms, em_capgemms;

/* Adds one GEMM shape (a strided batch when batch > 0) to the program's
 * table unless it is there already. */
static void gemm_note_batch(int kind, Dim N, Dim C, Dim OC, bool bias, long long batch, long long step,
                            long long out_step)
{
    for (int i = 0; i < em_ngemms; i++) {
        const EmGemm *g = &em_gemms[i];
        if (g->kind == kind && g->bias == bias && g->N == N && g->C == C && g->OC == OC && g->batch == batch &&
            g->step == step && g->out_step == out_step)
            return;
    }
    if (em_ngemms == em_capgemms) {
        int cap = em_capgemms ? 2 * em_capgemms : 16;
        EmGemm *n = arena_alloc(&g_arena, sizeof(EmGemm) * (size_t)cap);
        if (em_ngemms) memcpy(n, em_gemms, sizeof(EmGemm) * (size_t)em_ngemms);
        em_gemms = n;
        em_capgemms = cap;
    }
    em_gemms[em_ngemms++] = (EmGemm){kind, N, C, OC, bias, batch, step, out_step};
}

/* Adds one GEMM shape of a single matrix. */
static void gemm_note(int kind, Dim N, Dim C, Dim OC, bool bias)
{
    gemm_note_batch(kind, N, C, OC, bias, 0, 0, 0);
}

/* A forward GEMM kind with its bias present on some ranks, all, or none:
 * each variant the ranks call. */
static void gemm_bias(int kind, Dim N, Dim C, Dim OC, Presence bias)
{
    if (bias != ABSENT) gemm_note(kind, N, C, OC, true);
    if (bias != ON_ALL) gemm_note(kind, N, C, OC, false);
}

/* A strided batch's stride in the generated code: step (rows, width) blocks,
 * "(int64_t)rows * width" for 1 (the same text in the call and in the GEMM table). */
static const char *stride_c(long long step, Dim rows, Dim width)
{
    return step == 1 ? arena_printf(&g_arena, "(int64_t)%s * %s", dim_c[rows], dim_c[width])
                     : arena_printf(&g_arena, "(int64_t)%lld * %s * %s", step, dim_c[rows], dim_c[width]);
}

/* The table of the recorded GEMM shapes (before the srt_program). */
static void gen_gemms(Str *o)
{
    static const char *const kind_c[7] = {[SRT_GEMM_FWD] = "SRT_GEMM_FWD", [SRT_GEMM_BWD_DATA] = "SRT_GEMM_BWD_DATA",
                                          [SRT_GEMM_BWD_WEIGHT] = "SRT_GEMM_BWD_WEIGHT",
                                          [SRT_GEMM_FWD_GELU] = "SRT_GEMM_FWD_GELU",
                                          [SRT_GEMM_BWD_DGELU] = "SRT_GEMM_BWD_DGELU",
                                          [SRT_GEMM_FWD_BATCHED] = "SRT_GEMM_FWD_BATCHED",
                                          [SRT_GEMM_FWD_GELU_BATCHED] = "SRT_GEMM_FWD_GELU_BATCHED"};
    if (!em_ngemms) return;
    sf(o, "/* every GEMM shape the code above calls: the CUDA backend plans them at start-up */\n"
          "static const srt_gemm_shape gemm_shapes[%d] = {\n", em_ngemms);
    for (int i = 0; i < em_ngemms; i++) {
        const EmGemm *g = &em_gemms[i];
        sf(o, "    {.kind = %s, .N = %s, .C = %s, .OC = %s, .bias = %s, .dt = WDT, .out_dt = %s", kind_c[g->kind],
           dim_c[g->N], dim_c[g->C], dim_c[g->OC], g->bias ? "true" : "false",
           g->kind == SRT_GEMM_BWD_WEIGHT ? "GDT" : "WDT");
        if (g->batch)   /* the strides as mm_fwd_batched writes them */
            sf(o, ", .batch = %lld, .out_stride = %s, .inp_stride = %s", g->batch, stride_c(g->out_step, g->N, g->OC),
               stride_c(g->step, g->N, g->C));
        sput(o, "},\n");
    }
    sput(o, "};\n\n");
}

/* Calls written so far with a parameter gradient operand (an Opnd whose grad
 * is set and which some rank has), so that gen_bwd_fn can check each split
 * data op's code against what its schedule declares (part_data_grads). */
static int em_grad_calls;

/* Counts a call whose gradient operands are a and b (NO_OPND where it has fewer). */
static void grad_call(Opnd a, Opnd b)
{
    em_grad_calls += (a.grad && a.on != ABSENT) || (b.grad && b.on != ABSENT);
}

/* Writes `srt_OP(c, STREAM, args...);` (indented, with a comment), checking OP
 * and the number of arguments against the SRT_OPS list. */
static void rt_call(Str *s, const char *ind, int op, const char *stream, const char *comment, ...)
{
    const RtOp *r = &rt_ops[op];
    va_list ap;
    va_start(ap, comment);
    int n = 0;
    sf(s, "%ssrt_%s(c, %s", ind, r->name, stream);
    for (const char *a = va_arg(ap, const char *); a; a = va_arg(ap, const char *), n++) sf(s, ", %s", a);
    va_end(ap);
    if (n != r->arity) die("emit: srt_%s takes %d arguments after the stream, %d emitted", r->name, r->arity, n);
    sput(s, ");");
    if (comment) sf(s, "  /* %s */", comment);
    sput(s, "\n");
}

/* srt_matmul_fwd: out (N,OC) = inp (N,C) · w^T (+ bias). */
static void mm_fwd(Str *s, const char *ind, const char *comment, const char *out, const char *inp, const char *w,
                   Opnd bias, Dim N, Dim C, Dim OC)
{
    rt_call(s, ind, RT_matmul_fwd, "SRT_COMPUTE", comment, out, inp, w, bias.c, dim_c[N], dim_c[C], dim_c[OC], NULL);
    gemm_bias(SRT_GEMM_FWD, N, C, OC, bias.on);
}

/* srt_matmul_fwd_batched: batch blocks out_b (N,OC) = inp_b (N,C) · w^T (+ bias),
 * the output blocks out_step (N,OC) blocks apart (1: contiguous), the input
 * blocks step (N,C) blocks apart; with pre, srt_matmul_gelu_fwd_batched:
 * pre_b that product, out_b = gelu(pre_b), pre's blocks as far apart as out's. */
static void mm_fwd_batched(Str *s, const char *ind, const char *comment, const char *out, const char *pre,
                           const char *inp, const char *w, Opnd bias, Dim N, Dim C, Dim OC, long long batch,
                           long long step, long long out_step)
{
    const char *nb = arena_printf(&g_arena, "%lld", batch), *os = stride_c(out_step, N, OC), *is = stride_c(step, N, C);
    if (pre)
        rt_call(s, ind, RT_matmul_gelu_fwd_batched, "SRT_COMPUTE", comment, out, pre, inp, w, bias.c, dim_c[N],
                dim_c[C], dim_c[OC], nb, os, is, NULL);
    else
        rt_call(s, ind, RT_matmul_fwd_batched, "SRT_COMPUTE", comment, out, inp, w, bias.c, dim_c[N], dim_c[C],
                dim_c[OC], nb, os, is, NULL);
    int kind = pre ? SRT_GEMM_FWD_GELU_BATCHED : SRT_GEMM_FWD_BATCHED;
    if (bias.on != ABSENT) gemm_note_batch(kind, N, C, OC, true, batch, step, out_step);
    if (bias.on != ON_ALL) gemm_note_batch(kind, N, C, OC, false, batch, step, out_step);
}

/* srt_matmul_gelu_fwd: pre = inp · w^T (+ bias), out = gelu(pre). */
static void mm_gelu_fwd(Str *s, const char *ind, const char *comment, const char *out, const char *pre,
                        const char *inp, const char *w, Opnd bias, Dim N, Dim C, Dim OC)
{
    rt_call(s, ind, RT_matmul_gelu_fwd, "SRT_COMPUTE", comment, out, pre, inp, w, bias.c, dim_c[N], dim_c[C], dim_c[OC],
            NULL);
    gemm_bias(SRT_GEMM_FWD_GELU, N, C, OC, bias.on);
}

/* srt_matmul_bwd: dinp += dout · w (the data GEMM), dw += dout^T · inp (the
 * weight GEMM), dbias += the column sums of dout. */
static void mm_bwd(Str *s, const char *ind, const char *comment, Opnd dinp, Opnd dw, Opnd dbias, const char *dout,
                   const char *inp, const char *w, Dim N, Dim C, Dim OC)
{
    rt_call(s, ind, RT_matmul_bwd, "SRT_COMPUTE", comment, dinp.c, dw.c, dbias.c, dout, inp, w, dim_c[N], dim_c[C],
            dim_c[OC], NULL);
    grad_call(dw, dbias);
    if (dinp.on != ABSENT) gemm_note(SRT_GEMM_BWD_DATA, N, C, OC, false);
    if (dw.on != ABSENT) gemm_note(SRT_GEMM_BWD_WEIGHT, N, C, OC, false);
}

/* srt_matmul_bwd_dgelu: dpre = (dout · w) ⊙ gelu'(pre), dbias += its column sums. */
static void mm_bwd_dgelu(Str *s, const char *ind, const char *comment, const char *dpre, Opnd dbias,
                         const char *dout, const char *w, const char *pre, Dim N, Dim C, Dim OC)
{
    rt_call(s, ind, RT_matmul_bwd_dgelu, "SRT_COMPUTE", comment, dpre, dbias.c, dout, w, pre, dim_c[N], dim_c[C],
            dim_c[OC], NULL);
    grad_call(dbias, NO_OPND);
    gemm_bias(SRT_GEMM_BWD_DGELU, N, C, OC, dbias.on);
}

/* A user op's call in place of a runtime op: the CPU backend runs each op when
 * it is issued, so a direct call is ordered after the compute stream's earlier
 * ops.  SRT_CHECK does not see its reads and writes: shardrt.h has no public
 * way to record them (all of them are on the compute stream's own buffers). */
static void ext_call(Str *s, const char *ind, const CatalogExtern *x, int fn, const char *comment,
                     const char *const *views, int nviews)
{
    sf(s, "%s%s  /* %s */\n", ind, catalog_extern_call(x, fn, views, nviews), comment);
}

/* ---- what the generator supports ------------------------------------------------- */

/* Reports one unsupported feature. */
static bool refuse(bool report, const Spec *s, const char *key, const char *what, const char *hint)
{
    if (report) {
        diag_error(sema_key_loc(s, key), "shardc build: %s is not supported by the code generator", what);
        if (hint) diag_hint("%s", hint);
    }
    return false;
}

/* Whether the code generator handles the spec (issue 5: the GPT family, data
 * parallelism with ZeRO 0-3, gradient accumulation, fp32 and bf16). */
bool emit_supported(const Spec *s, bool report)
{
    bool ok = true;
    /* tp > 1: Megatron, both families (GPT's fused c_attn split per head:
     * SPLIT_QKV); the Llama's kv heads, when fewer than tp, replicated on the
     * tp ranks sharing each (SPLIT_NONE for one, else SPLIT_KV).  GPT's fused
     * c_attn splits whole kv heads, as Megatron-LM's does (its
     * num_query_groups must be a multiple of tensor_model_parallel_size) */
    if (s->parallel.tp > 1 && s->model.family == FAM_GPT && s->model.kv_heads > 0 &&
        s->model.kv_heads % s->parallel.tp != 0) {
        Str tps = {0};
        for (int64_t t = 1; t <= s->model.kv_heads; t++)
            if (s->model.kv_heads % t == 0 && s->model.heads % t == 0) sf(&tps, "%s%lld", tps.p ? ", " : "", (long long)t);
        ok = refuse(report, s, "parallel.tp",
                    arena_printf(&g_arena, "the GPT family's fused QKV with kv_heads %lld not a multiple of tp %lld "
                                 "(a kv head replicated over tp ranks inside c_attn)",
                                 (long long)s->model.kv_heads, (long long)s->parallel.tp),
                    arena_printf(&g_arena, "c_attn splits whole kv heads over tp, as Megatron-LM's fused QKV does "
                                 "(num_query_groups a multiple of tp): use tp %s, or the Llama family, whose separate "
                                 "k and v are replicated when kv_heads < tp", tps.p));
        free(tps.p);
    }
    /* a user-defined activation (extern) replaces GELU's calls (CE.ext) */
    if (s->model.activation != ACT_GELU && s->model.activation != ACT_SWIGLU && s->model.activation != ACT_EXTERN)
        ok = refuse(report, s, "model.activation", "an activation other than GELU and SwiGLU (or a user-defined one)",
                    NULL);
    if (s->model.family == FAM_GPT && !s->model.bias)
        ok = refuse(report, s, "model.bias", "a GPT without biases (LayerNorm without a bias)", NULL);
    return ok;
}


/* The tensors a generated function sees: carved buffers (the plan's layout),
 * each at a field of the function's row ("saved", "scratch", "attn"). */
typedef struct Views { const Carve *cv[2]; const char *field[2]; int n; } Views;

/* The views of one carved buffer, or two (b NULL: one). */
static Views views(const Carve *a, const char *fa, const Carve *b, const char *fb)
{
    return (Views){{a, b}, {fa, fb}, b ? 2 : 1};
}

/* The offset of piece id (ActPiece) in a carved buffer. */
static int64_t carve_off(const Carve *cv, int id)
{
    const Piece *pc = act_piece(cv, id);
    if (!pc) die("emit: no tensor %d in the carved buffer", id);
    return pc->off;
}

/* A view of piece id from element byte at: "DV(a->field + off + at, n, dt)". */
static const char *piece(const Views *v, int id, int64_t at, const char *n, const char *dt)
{
    for (int k = 0; k < v->n; k++) {
        const Piece *pc = act_piece(v->cv[k], id);
        if (pc) return arena_printf(&g_arena, "DV(a->%s + %lld, %s, %s)", v->field[k], (long long)(pc->off + at), n, dt);
    }
    die("emit: no tensor %d in a function's buffers", id);
}

/* ---- the generated file: tables ------------------------------------------------------ */

/* C names of the roles (the generated file's indices into the group tables). */
static const char *const role_c[R_NROLES] = {
    [R_TOK_EMBED] = "WTE", [R_POS_EMBED] = "WPE", [R_NORM1_W] = "LN1_W", [R_NORM1_B] = "LN1_B",
    [R_QKV_W] = "QKV_W", [R_QKV_B] = "QKV_B", [R_Q_W] = "Q_W", [R_K_W] = "K_W", [R_V_W] = "V_W",
    [R_Q_B] = "Q_B", [R_K_B] = "K_B", [R_V_B] = "V_B", [R_ATTN_OUT_W] = "PROJ_W", [R_ATTN_OUT_B] = "PROJ_B",
    [R_NORM2_W] = "LN2_W", [R_NORM2_B] = "LN2_B", [R_FC1_W] = "FC1_W", [R_FC1_B] = "FC1_B",
    [R_GATE_W] = "GATE_W", [R_UP_W] = "UP_W", [R_GATE_B] = "GATE_B", [R_UP_B] = "UP_B",
    [R_FC2_W] = "FC2_W", [R_FC2_B] = "FC2_B", [R_NORMF_W] = "LNF_W", [R_NORMF_B] = "LNF_B", [R_HEAD_W] = "HEAD_W",
};

const char *emit_role_name(int role) { return role_c[role]; }

/* ZeRO-3 (lower_module_waits): a layer function waits for a module's
 * gathered unit just before the module's first kernel, as DeepSpeed waits
 * per module; role: the module's first tensor's (its weight). */
static void uwait(const CE *e, Str *o, const char *ind, int role)
{
    if (!e->modwaits || !e->unit_role[role]) return;
    const Model *m = e->m;
    const char *name = role_c[role];
    for (int i = m->layer_first[1]; i < m->layer_first[2]; i++)
        if (m->t[i].role == role) name = m->t[i].local;
    sf(o, "%sUWAIT(%s);  /* %s: wait for its gathered unit (ZeRO-3) */\n", ind, role_c[role], name);
}

/* The initialisation of a parameter: N(0, std), ones or zeros (GPT-2's: the
 * residual projections scaled by 1/sqrt(2·layers)). */
static void param_init(const CE *e, const Tensor *t, double *std, bool *one)
{
    *one = t->role == R_NORM1_W || t->role == R_NORM2_W || t->role == R_NORMF_W;
    *std = 0;
    if (!t->cols) return;
    *std = e->spec->model.init_std;
    if (t->role == R_ATTN_OUT_W || t->role == R_FC2_W) *std /= sqrt(2.0 * (double)e->m->l);
}

static const char *const split_c[] = {"SRT_SPLIT_NONE", "SRT_SPLIT_ROWS", "SRT_SPLIT_COLS", "SRT_SPLIT_QKV",
                                      "SRT_SPLIT_KV"};

/* The class's srt_param, segment and tensor tables. */
/* A tensor's srt_param fields but its name, layer and flat offset (a
 * layer's: the same for a role in every layer). */
typedef struct ParamShape {
    int64_t rows, cols, rows_mem, srows, scols;
    int split;
    bool decay, one;
    double std;
} ParamShape;

static ParamShape param_shape(const CE *e, const ClassTensor *ct)
{
    const Tensor *t = &e->m->t[ct->tensor];
    ParamShape ps = {t->rows, t->cols, t->rows_mem, ct->rows, ct->cols, t->split, t->decay, false, 0};
    param_init(e, t, &ps.std, &ps.one);
    return ps;
}

static bool same_shape(const ParamShape *a, const ParamShape *b)
{
    return a->rows == b->rows && a->cols == b->cols && a->rows_mem == b->rows_mem && a->srows == b->srows &&
           a->scols == b->scols && a->split == b->split && a->decay == b->decay && a->one == b->one && a->std == b->std;
}

/* The fields before the flat offset ("shape…") and after it (*after). */
static const char *param_fields(const ParamShape *ps, const char **after)
{
    *after = arena_printf(&g_arena, "%s, %s, %s", ps->decay ? "true" : "false", flt(ps->std), ps->one ? "true" : "false");
    return arena_printf(&g_arena, "%lld, %lld, %lld, %s, %lld, %lld", (long long)ps->rows, (long long)ps->cols,
                        (long long)ps->rows_mem, split_c[ps->split], (long long)ps->srows, (long long)ps->scols);
}

/* Per role of a layer tensor: its srt_param row as a macro P_ROLE(l, flat)
 * when the role's fields agree in every layer of every class (else NULL:
 * rows written out). */
static const char *em_param_row[R_NROLES];

/* Works out em_param_row and writes its macros. */
static void gen_param_macros(const CE *cls, int n, Str *o)
{
    ParamShape shape[R_NROLES];
    bool seen[R_NROLES] = {false}, bad[R_NROLES] = {false};
    for (int c = 0; c < n; c++)
        for (int i = 0; i < cls[c].rc->ntensors; i++) {
            const ClassTensor *ct = &cls[c].rc->tensors[i];
            const Tensor *t = &cls[c].m->t[ct->tensor];
            if (!t->local || ct->copy) continue;
            ParamShape ps = param_shape(&cls[c], ct);
            if (!seen[t->role]) seen[t->role] = true, shape[t->role] = ps;
            else if (!same_shape(&shape[t->role], &ps)) bad[t->role] = true;
        }
    bool any = false;
    for (int r = 0; r < R_NROLES; r++) {
        em_param_row[r] = NULL;
        if (!seen[r] || bad[r]) continue;
        const Tensor *t = NULL;
        for (int i = 0; i < cls[0].m->nt && !t; i++)
            if (cls[0].m->t[i].role == r && cls[0].m->t[i].local) t = &cls[0].m->t[i];
        if (!any) sput(o, "/* The srt_param row of each layer's tensor of a role: its name, layer l and\n"
                          " * flat offset; its shape, tp split, shard, weight decay and initialization. */\n");
        any = true;
        const char *after, *before = param_fields(&shape[r], &after);
        sf(o, "#define P_%s(l, flat) {%s #l %s, l, %s, flat, %s}\n", role_c[r], c_string(cls[0].m->layer_prefix),
           c_string(arena_printf(&g_arena, ".%s", t->local)), before, after);
        em_param_row[r] = role_c[r];
    }
    if (any) sput(o, "\n");
}

static void gen_class_tables(CE *e, Str *o)
{
    const RankClass *rc = e->rc;
    if (e->ci == 0)
        sput(o, "/* The parameter tensors of stage 0 in flat order (flat: element offset in the\n"
                " * stage's flat parameter space; ZeRO splits each segment below over dp). */\n");
    else
        sf(o, "/* Stage %d's tables, as stage 0's. */\n", e->ci);
    sf(o, "static const srt_param %s_params[%d] = {\n", e->px, rc->ntensors);
    for (int i = 0; i < rc->ntensors; i++) {
        const ClassTensor *ct = &rc->tensors[i];
        const Tensor *t = &e->m->t[ct->tensor];
        if (t->local && !ct->copy && em_param_row[t->role]) {
            sf(o, "    P_%s(%d, %lld),\n", em_param_row[t->role], t->layer, (long long)ct->offset);
            continue;
        }
        ParamShape ps = param_shape(e, ct);
        const char *after, *before = param_fields(&ps, &after);
        sf(o, "    {%s, %d, %s, %lld, %s},\n", c_string(t->name), ct->copy ? (int)e->m->l : t->layer, before,
           (long long)ct->offset, after);
    }
    sput(o, "};\n\n");
    if (e->ci == 0)
        sf(o, "/* The flat segments (ZeRO-3 fetch units, ZeRO 0-2 buckets): each padded to a\n"
              " * multiple of %lld elements and split into dp shards of `shard` elements; a\n"
              " * rank's shard space is its shards one after the other. */\n", (long long)e->p->pad_unit);
    sf(o, "static const trainer_seg %s_segs[%d] = {\n", e->px, rc->nsegs);
    for (int i = 0; i < rc->nsegs; i++) {
        const Segment *sg = &rc->segs[i];
        sf(o, "    {%lld, %lld, %lld, %lld, %d, %d, %s},  /* seg%d: %s%s%s */\n", (long long)sg->offset,
           (long long)sg->padded, (long long)sg->shard, (long long)sg->shard_offset, sg->first, sg->n, sg->persistent ? "true" : "false", i,
           sg->layer == LAYER_PRE ? "embeddings" : sg->layer == e->m->l ? "head" : arena_printf(&g_arena, "from layer %d", sg->layer),
           sg->persistent ? ", persistent" : "", sg->tied ? ", tied" : "");
    }
    sput(o, "};\n\n");
}

/* ---- the generated file: the kinds' functions --------------------------------------------- */

/* "PW(ROLE, n)" (grad: PG) when the layers have the role (a bias), else none. */
static Opnd opt_w(const Group *g, int role, Dim n, bool grad)
{
    if (g->ct[role] < 0) return NO_OPND;
    return (Opnd){arena_printf(&g_arena, "%s(%s, %s)", grad ? "PG" : "PW", role_c[role], dim_c[n]), ON_ALL, grad};
}

/* The gradient place of parameter role, n elements (a C expression). */
static Opnd pgrad(int role, const char *n)
{
    return (Opnd){arena_printf(&g_arena, "PG(%s, %s)", role_c[role], n), ON_ALL, true};
}

/* tp > 1: an operand only tp rank 0 has (a row-parallel bias or its gradient). */
static Opnd on_tp0(Opnd x)
{
    return x.on == ABSENT ? x : (Opnd){arena_printf(&g_arena, "tp0 ? %s : NONE", x.c), ON_SOME, x.grad};
}

/* Declares a norm's statistics from a carved piece: layernorm mean + rstd, or rmsnorm rstd. */
static void norm_stats(const CE *e, Str *o, const Views *vs, int id, const char *v)
{
    if (e->m->layernorm)
        sf(o, "    srt_t %s_mean = %s, %s_rstd = %s;  /* (B,T) */\n", v, piece(vs, id, 0, "N", "SRT_F32"), v,
           piece(vs, id, e->p->T * 4, "N", "SRT_F32"));
    else
        sf(o, "    srt_t %s_rstd = %s;  /* (B,T) */\n", v, piece(vs, id, 0, "N", "SRT_F32"));
}

/* A norm's forward over `rows` tokens: out = norm(in) with weight role w
 * (and bias role b). */
static void norm_fwd_rows(const CE *e, Str *o, const Group *g, const char *v, const char *out, const char *in, int w,
                          int b, const char *rows, const char *comment)
{
    const char *pw = arena_printf(&g_arena, "PW(%s, C)", role_c[w]);
    if (e->m->layernorm)
        rt_call(o, "    ", RT_layernorm_fwd, "SRT_COMPUTE", comment, out, arena_printf(&g_arena, "%s_mean", v),
                arena_printf(&g_arena, "%s_rstd", v), in, pw, opt_w(g, b, D_C, false).c, rows, "C", "EPS", NULL);
    else
        rt_call(o, "    ", RT_rmsnorm_fwd, "SRT_COMPUTE", comment, out, arena_printf(&g_arena, "%s_rstd", v), in, pw,
                rows, "C", "EPS", NULL);
}

/* A norm's forward over the microbatch's N tokens. */
static void norm_fwd(const CE *e, Str *o, const Group *g, const char *v, const char *out, const char *in, int w, int b,
                     const char *comment)
{
    norm_fwd_rows(e, o, g, v, out, in, w, b, "N", comment);
}

/* A norm's backward over `rows` tokens: din += ..., the weight's (and
 * bias's) gradients. */
static void norm_bwd_rows(const CE *e, Str *o, const Group *g, const char *v, const char *din, const char *dout,
                          const char *in, int w, int b, const char *rows, const char *comment)
{
    const char *pw = arena_printf(&g_arena, "PW(%s, C)", role_c[w]);
    Opnd gw = pgrad(w, "C"), gb = e->m->layernorm ? opt_w(g, b, D_C, true) : NO_OPND;
    if (e->m->layernorm)
        rt_call(o, "    ", RT_layernorm_bwd, "SRT_COMPUTE", comment, din, gw.c, gb.c, dout, in, pw,
                arena_printf(&g_arena, "%s_mean", v), arena_printf(&g_arena, "%s_rstd", v), rows, "C", NULL);
    else
        rt_call(o, "    ", RT_rmsnorm_bwd, "SRT_COMPUTE", comment, din, gw.c, dout, in, pw,
                arena_printf(&g_arena, "%s_rstd", v), rows, "C", NULL);
    grad_call(gw, gb);
}

/* A norm's backward over the microbatch's N tokens. */
static void norm_bwd(const CE *e, Str *o, const Group *g, const char *v, const char *din, const char *dout,
                     const char *in, int w, int b, const char *comment)
{
    norm_bwd_rows(e, o, g, v, din, dout, in, w, b, "N", comment);
}

/* The saved tensors of a layer as views (forward and backward share them;
 * sv: where they are, by activation checkpointing: carve_merge's pieces).
 * Under sequence parallelism the norms run in ops of their own on this
 * rank's tokens (gen_fwd_norm_fn) and a part reads its norm's output
 * gathered over tp: the forward's r1, the backward's regathered x (each part
 * has one, ln1 or ln2); the forward's x is this rank's shard of the part's
 * input (the MLP part's: x2), x2 this rank's shard of the attention
 * residual, and own the element offset of this rank's tokens in a (B,T,C)
 * tensor. */
static void saved_views(const CE *e, Str *o, const Views *sv, bool fwd)
{
    const Model *m = e->m;
    bool sp = lower_sp(e);
    if (sp && fwd)
        sf(o, "    const int64_t NS = N / %lld;  /* this rank's tokens (sequence parallel) */\n"
              "    const int64_t own = srt_group_rank(c, SRT_TP) * NS * C;  /* where they are in (B,T,C) */\n"
              "    srt_t x = DV(a->x, NS * C, WDT);  /* (B,T/tp,C) this rank's tokens of the part's input */\n",
           (long long)e->p->tp);
    else    /* under SP the split backward's data op runs while the norm output is regathered: none */
        sf(o, "    srt_t x = %sDV(a->x, (int64_t)N * C, WDT);  /* (B,T,C) the %s */\n",
           sp && e->p->wsplit ? "a->x < 0 ? NONE : " : "", sp ? "part's norm output, gathered again over tp" : "layer's input");
    const char *lnsp = !fwd ? "x" : e->p->tpc > 1 ? "a->r1 < 0 ? NONE : DV(a->r1, (int64_t)N * C, WDT)"  /* none: a chunk */
                                                 : "DV(a->r1, (int64_t)N * C, WDT)";
    if (sp) {
        sf(o, "    srt_t ln1 = %s;  /* (B,T,C) the part's norm output, gathered */\n", lnsp);
    } else {
        norm_stats(e, o, sv, AP_NORM1_STATS, "ln1");
        sf(o, "    srt_t ln1 = %s;  /* (B,T,C) */\n", piece(sv, AP_NORM1_OUT, 0, "(int64_t)N * C", "WDT"));
    }
    if (m->family == FAM_GPT) {   /* one fused projection: q, k, v side by side in each row */
        sf(o, "    srt_t qkv = %s;  /* (B,T,QKV) */\n", piece(sv, AP_QKV, 0, "(int64_t)N * QKV", "WDT"));
        sput(o, "    srt_t q = qkv, k = AT(qkv, QD), v = AT(qkv, QD + KVD);  /* rows QKV apart */\n");
    } else {                      /* three projections, each its own (B,T,·) array */
        int64_t T = e->p->T, w = e->wb, qd = m->h / e->p->tp, kvd = model_kv_rank(m) * m->hd;
        sf(o, "    srt_t q = %s;  /* (B,T,QD) */\n", piece(sv, AP_QKV, 0, "(int64_t)N * QD", "WDT"));
        sf(o, "    srt_t k = %s;  /* (B,T,KVD) */\n", piece(sv, AP_QKV, T * qd * w, "(int64_t)N * KVD", "WDT"));
        sf(o, "    srt_t v = %s;  /* (B,T,KVD) */\n",
           piece(sv, AP_QKV, T * (qd + kvd) * w, "(int64_t)N * KVD", "WDT"));
    }
    sf(o, "    srt_t att = %s;  /* (B,T,QD) attention output */\n", piece(sv, AP_ATTN_OUT, 0, "(int64_t)N * QD", "WDT"));
    sf(o, "    srt_t lse = %s;  /* (B,NH,T) */\n", piece(sv, AP_ATTN_LSE, 0, "(int64_t)N * NH", "SRT_F32"));
    if (!sp || fwd)     /* the backward under SP regathers x2 as the MLP part's x */
        sf(o, "    srt_t x2 = %s;  /* (B,T,C) after the attention residual%s */\n",
           piece(sv, AP_X2, 0, sp ? "NS * C" : "(int64_t)N * C", "WDT"), sp ? ": this rank's tokens" : "");
    if (sp) {
        sput(o, "    srt_t ln2 = ln1;  /* (B,T,C) the MLP part's */\n");
    } else {
        norm_stats(e, o, sv, AP_NORM2_STATS, "ln2");
        sf(o, "    srt_t ln2 = %s;  /* (B,T,C) */\n", piece(sv, AP_NORM2_OUT, 0, "(int64_t)N * C", "WDT"));
    }
    if (m->gated) {
        sf(o, "    srt_t gate = %s;  /* (B,T,FF) */\n", piece(sv, AP_FC1, 0, "(int64_t)N * FF", "WDT"));
        sf(o, "    srt_t up = %s;  /* (B,T,FF) */\n", piece(sv, AP_UP, 0, "(int64_t)N * FF", "WDT"));
        sf(o, "    srt_t act = %s;  /* (B,T,FF) silu(gate) * up */\n", piece(sv, AP_ACT, 0, "(int64_t)N * FF", "WDT"));
    } else {
        sf(o, "    srt_t fc1 = %s;  /* (B,T,FF) */\n", piece(sv, AP_FC1, 0, "(int64_t)N * FF", "WDT"));
        sf(o, "    srt_t act = %s;  /* (B,T,FF) gelu(fc1) */\n", piece(sv, AP_ACT, 0, "(int64_t)N * FF", "WDT"));
    }
}

/* The data and weight operands of a backward GEMM for the gradients `grads`
 * computes (OpGrads): the data op leaves the weight's and bias's out, the
 * weight op the input gradient. */
static void bwd_opnds(int grads, Opnd *dinp, Opnd *dw, Opnd *dbias)
{
    if (grads == GR_DATA) *dw = *dbias = NO_OPND;
    if (grads == GR_WEIGHT) *dinp = NO_OPND;
}

/* The attention's input projections, forward or backward (the gradients
 * `grads`, OpGrads). */
static void qkv_proj(const CE *e, Str *o, const Group *g, bool bwd, int grads)
{
    const char *I = "    ", *st = grads == GR_WEIGHT ? "9" : "8";
    if (e->m->family == FAM_GPT) {
        Opnd di = opnd("dln1"), dw = pgrad(R_QKV_W, "(int64_t)QKV * C"), db = opt_w(g, R_QKV_B, D_QKV, true);
        bwd_opnds(grads, &di, &dw, &db);
        uwait(e, o, I, R_QKV_W);
        if (!bwd)
            mm_fwd(o, I, "attn.c_attn: (B,T,C) -> (B,T,QKV)", "qkv", "ln1", "PW(QKV_W, (int64_t)QKV * C)",
                   opt_w(g, R_QKV_B, D_QKV, false), D_N, D_C, D_QKV);
        else
            mm_bwd(o, I, arena_printf(&g_arena, "%s: attn.c_attn%s", st, grads == GR_WEIGHT ? "'s weight gradient" : ""),
                   di, dw, db, "dqkv", "ln1", "PW(QKV_W, (int64_t)QKV * C)", D_N, D_C, D_QKV);
        return;
    }
    static const struct { int w, b; const char *out, *dout; Dim dim; const char *name; } pr[3] = {
        {R_Q_W, R_Q_B, "q", "dq", D_QD, "q_proj"}, {R_K_W, R_K_B, "k", "dk", D_KVD, "k_proj"},
        {R_V_W, R_V_B, "v", "dv", D_KVD, "v_proj"}};
    for (int i = 0; i < 3; i++) {
        const char *dim = dim_c[pr[i].dim];
        const char *w = arena_printf(&g_arena, "%s(%s, (int64_t)%s * C)", "PW", role_c[pr[i].w], dim);
        Opnd di = opnd("dln1"), dw = pgrad(pr[i].w, arena_printf(&g_arena, "(int64_t)%s * C", dim));
        Opnd db = opt_w(g, pr[i].b, pr[i].dim, true);
        bwd_opnds(grads, &di, &dw, &db);
        uwait(e, o, I, pr[i].w);
        if (!bwd)
            mm_fwd(o, I, arena_printf(&g_arena, "self_attn.%s: (B,T,C) -> (B,T,%s)", pr[i].name, dim), pr[i].out, "ln1", w,
                   opt_w(g, pr[i].b, pr[i].dim, false), D_N, D_C, pr[i].dim);
        else
            mm_bwd(o, I, arena_printf(&g_arena, "%s: self_attn.%s%s", st, pr[i].name,
                                      grads == GR_WEIGHT ? "'s weight gradient" : " (dln1 +=)"),
                   di, dw, db, pr[i].dout, "ln1", w, D_N, D_C, pr[i].dim);
    }
}

/* A sequence-parallel norm op's statistics in its scratch, NS rows: mean and
 * rstd (LayerNorm) or rstd (RMSNorm). */
static void sp_norm_stats(const CE *e, Str *o)
{
    if (e->m->layernorm)
        sput(o, "    srt_t ln_mean = DV(a->scratch, NS, SRT_F32), ln_rstd = DV(a->scratch + NS * 4, NS, SRT_F32);\n");
    else
        sput(o, "    srt_t ln_rstd = DV(a->scratch, NS, SRT_F32);\n");
}

/* Sequence parallelism: a part's norm on this rank's tokens (the forward's,
 * or full checkpointing's replay's, grads GR_NORM), before the all-gather of
 * its output (Megatron's layout): y = norm(x) on NS tokens, the statistics
 * in the scratch; the backward regathers y from where the forward kept it. */
static void gen_fwd_norm_fn(const CE *e, Str *o)
{
    const Group *g = &e->layer[0];
    const char *px = e->px;
    sf(o, "/* A part's norm on this rank's tokens (sequence parallel): x the part's\n"
          " * input, y the norm's output, gathered over tp next. */\n"
          "static void %s_fwd_norm(srt_ctx *c, const %s_fwd_t *a)\n{\n"
          "    const %s_part_t *w = a->p;\n"
          "    const int NS = N / %lld;  /* this rank's tokens */\n"
          "    srt_t x = DV(a->x, (int64_t)NS * C, WDT), y = DV(a->y, (int64_t)NS * C, WDT);  /* (B,T/tp,C) */\n",
       px, px, px, (long long)e->p->tp);
    sp_norm_stats(e, o);
    sput(o, "    if (a->part == 2) goto mlp;\n");
    norm_fwd_rows(e, o, g, "ln", "y", "x", R_NORM1_W, R_NORM1_B, "NS", "the input norm");
    sput(o, "    return;\nmlp:\n");
    norm_fwd_rows(e, o, g, "ln", "y", "x", R_NORM2_W, R_NORM2_B, "NS", "the post-attention norm");
    sput(o, "}\n\n");
}

/* tp_comm_overlap = full under sequence parallelism: token-row chunk a->rows
 * of a row-parallel GEMM (attention output projection, MLP down projection)
 * from its input `in` (width w, dim d) into the partial sums y, laid out
 * chunk by chunk: block (a->rows, r) holds tp rank r's token rows a->rows
 * of its NS (token rows (r·K + a->rows)·NR ..), so that the chunk's
 * reduce-scatter over its tp blocks leaves each rank its own rows; this
 * rank's block then gets its residual (x, its rows a->rows).  The tp blocks
 * are one strided-batched GEMM, as Transformer Engine's userbuffers run a
 * chunk: its input blocks (ROWS(in, r·K + a->rows, w)) are K blocks apart,
 * its output blocks contiguous. */
static void sp_rows_fwd(const CE *e, Str *o, const char *label, const char *in, const char *w, const char *wt, Opnd bias,
                        Dim d)
{
    long long tp = (long long)e->p->tp, k = (long long)e->p->tpc;
    sf(o, "%s:\n", label);
    mm_fwd_batched(o, "    ", "the chunk's partial sums: block r from rank r's token rows a->rows, one strided GEMM",
                   arena_printf(&g_arena, "AT(y, (int64_t)a->rows * %lld * NR * C)", tp),
                   NULL, arena_printf(&g_arena, "AT(%s, (int64_t)a->rows * NR * %s)", in, w), wt, bias, D_NR, d, D_C, tp,
                   k, 1);
    const char *mine = arena_printf(&g_arena, "ROWS(y, a->rows * %lld + srt_group_rank(c, SRT_TP), C)", tp);
    rt_call(o, "    ", RT_add_fwd, "SRT_COMPUTE", "this rank's block += its tokens' residual", mine, mine,
            "ROWS(x, a->rows, C)", NULL);
    sput(o, "    return;  /* the chunk's reduce-scatter next, while the next chunk computes */\n");
}

/* tp_comm_overlap = full without sequence parallelism: token-row chunk
 * a->rows of a row-parallel GEMM (the `part`'s, from its input `in` of width
 * w, dim d) into tmp, then the part's output `out` on those rows: tp rank 0
 * adds the residual `res`, the others copy their partial sums, all-reduced
 * next.  pre: what precedes the GEMM's line (its label, the indent). */
static void tp_rows_fwd(Str *o, const char *pre, const char *gemm, const char *in, const char *w, const char *wt,
                        Opnd bias, Dim d, const char *out, const char *res, const char *part)
{
    const char *rows = arena_printf(&g_arena, "ROWS(%s, a->rows, C)", out);
    mm_fwd(o, pre, gemm, "ROWS(tmp, a->rows, C)", arena_printf(&g_arena, "ROWS(%s, a->rows, %s)", in, w), wt, bias,
           D_NR, d, D_C);
    sput(o, "    if (tp0) {\n");
    rt_call(o, "        ", RT_add_fwd, "SRT_COMPUTE",
            arena_printf(&g_arena, "%s = %s + this rank's partial %s, the chunk's rows", out, res, part), rows,
            arena_printf(&g_arena, "ROWS(%s, a->rows, C)", res), "ROWS(tmp, a->rows, C)", NULL);
    sput(o, "    } else {\n");
    rt_call(o, "        ", RT_convert, "SRT_COMPUTE",
            arena_printf(&g_arena, "%s = this rank's partial %s, the chunk's rows", out, part), rows,
            "ROWS(tmp, a->rows, C)", NULL);
    sput(o, "    }\n");
}

/* tp_comm_overlap = full under sequence parallelism (part_tp_cols): the
 * column-parallel GEMMs of a part (label: attention's, or the MLP's with mlp)
 * on token-row chunk a->rows, as soon as that chunk of the norm's output is
 * gathered.  The gathered chunk is tp blocks of NR rows side by side (the
 * all-gather's layout), block r tp rank r's local rows a->rows, whose
 * outputs are token rows (r·K + a->rows)·NR ..: one strided-batched GEMM
 * per linear, its input blocks contiguous and its output blocks K blocks
 * apart, as Transformer Engine runs a chunk; GPT's c_fc with GELU in its
 * epilogue (srt_matmul_gelu_fwd_batched). */
static void cols_fwd(const CE *e, Str *o, const char *label, bool mlp)
{
    const Group *g = &e->layer[0];
    long long tp = (long long)e->p->tp, k = (long long)e->p->tpc;
    const char *in = arena_printf(&g_arena, "AT(%s, (int64_t)a->rows * %lld * NR * C)", mlp ? "ln2" : "ln1", tp);
    sf(o, "%s:  /* the %s column GEMMs on token-row chunk a->rows: block r of the gathered chunk is rank r's rows */\n",
       label, mlp ? "MLP's" : "attention's");
    static const struct { int w, b; const char *out, *name; Dim dim; } lin[] = {
        {R_QKV_W, R_QKV_B, "qkv", "attn.c_attn", D_QKV}, {R_Q_W, R_Q_B, "q", "self_attn.q_proj", D_QD},
        {R_K_W, R_K_B, "k", "self_attn.k_proj", D_KVD}, {R_V_W, R_V_B, "v", "self_attn.v_proj", D_KVD},
        {R_GATE_W, R_GATE_B, "gate", "mlp.gate_proj", D_FF}, {R_UP_W, R_UP_B, "up", "mlp.up_proj", D_FF},
        {R_FC1_W, R_FC1_B, "fc1", "mlp.c_fc", D_FF}};
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
        bool mine = mlp ? lin[i].dim == D_FF : lin[i].dim != D_FF;
        if (!mine || g->ct[lin[i].w] < 0) continue;    /* not this model's (GPT: c_attn, c_fc; Llama: q, k, v, gate, up) */
        const char *dim = dim_c[lin[i].dim];
        const char *out = arena_printf(&g_arena, "AT(%s, (int64_t)a->rows * NR * %s)", lin[i].out, dim);
        const char *w = arena_printf(&g_arena, "PW(%s, (int64_t)%s * C)", role_c[lin[i].w], dim);
        bool gelu = lin[i].w == R_FC1_W && !e->m->gated && !e->ext;    /* GELU in the epilogue into act, fc1 kept */
        mm_fwd_batched(o, "    ", arena_printf(&g_arena, "%s%s, token rows (r·%lld + a->rows)·NR of block r", lin[i].name,
                                               gelu ? " + gelu" : "", k),
                       gelu ? "AT(act, (int64_t)a->rows * NR * FF)" : out, gelu ? out : NULL, in, w,
                       opt_w(g, lin[i].b, lin[i].dim, false), D_NR, D_C, lin[i].dim, tp, 1, k);
    }
    sput(o, "    return;  /* the head runs the rest once every chunk is done */\n");
}

/* The layer's forward (kind "fwd"), or under full checkpointing its replay
 * (kind "recompute"): the same code keeping everything, so the recomputed
 * tensors are the forward's bit for bit; a group's last layer replays
 * without an output (y < 0).  kv: the layer's tensors; scr: the scratch. */
static void gen_fwd_fn(const CE *e, Str *o, bool replay, const Views *kv, const Carve *scr)
{
    const char *kind = replay ? "recompute" : "fwd";
    Views sc = views(scr, "scratch", NULL, NULL);
    const Model *m = e->m;
    const Group *g = &e->layer[0];
    const char *px = e->px, *I = "    ";
    sf(o, "/* One layer's forward for one microbatch: pre-%s attention%s and %s MLP,\n"
          " * each with a residual.  In: x (B,T,C); out: y (B,T,C); what backward needs\n"
          " * stays in the layer's saved buffer%s. */\n"
          "static void %s_%s(srt_ctx *c, const %s_fwd_t *a)\n{\n"
          "    const %s_part_t *w = a->p;\n",
       m->layernorm ? "LayerNorm" : "RMSNorm", m->family == FAM_LLAMA ? " (RoPE)" : "", m->gated ? "a SwiGLU"
       : e->ext ? arena_printf(&g_arena, "a user-defined %s", e->ext->name) : "a GELU",
       replay ? " (full checkpointing's recompute: its recomputed buffer)"
       : e->pol == CKPT_FULL ? " (full checkpointing: nothing, its tensors live in the scratch)"
       : e->pol == CKPT_SELECTIVE ? ", but for the attention core (selective checkpointing)" : "",
       px, kind, px, px);
    bool tp = e->p->tp > 1, sp = lower_sp(e);
    /* tp_comm_overlap full: a part's op up to its row-parallel GEMM (GR_HEAD),
       or one token-row chunk of that GEMM and its residual (GR_ROWS) */
    bool rows = tp && !replay && e->p->tpc > 1;
    /* ... and under sequence parallelism a token-row chunk of its column-parallel GEMMs (GR_COLS) */
    bool cols = rows && part_tp_cols(e->p);
    if (sp) sf(o, "    if (a->grads == %d) {  /* the part's norm on this rank's tokens */\n"
                  "        %s_fwd_norm(c, a);\n        return;\n    }\n", GR_NORM, px);
    saved_views(e, o, kv, true);
    sf(o, "    srt_t y = %sDV(a->y, (int64_t)N * C, WDT);  /* (B,T,C) the %s */\n",
       replay || rows ? "a->y < 0 ? NONE : " : "", sp ? "part's partial sums (reduce-scattered next)" : "layer's output");
    if (sp) {   /* each rank adds the residual of its own tokens: the reduce-scatter sums one copy */
        sf(o, "    srt_t y_own = %sDV(a->y + own * WB, NS * C, WDT);\n", replay || rows ? "a->y < 0 ? NONE : " : "");
        if (g->ct[R_ATTN_OUT_B] >= 0 || g->ct[R_FC2_B] >= 0)   /* the row-parallel biases */
            sput(o, "    bool tp0 = srt_group_rank(c, SRT_TP) == 0;\n");
        sput(o, "    if (a->part == 2) goto mlp;\n");
        if (rows)
            sf(o, "    if (a->grads == %d) goto attn_rows;  /* a token-row chunk of the output projection */\n", GR_ROWS);
        if (cols)
            sf(o, "    if (a->grads == %d) goto attn_cols;  /* a token-row chunk of the qkv projection */\n", GR_COLS);
    } else {
        sf(o, "    srt_t tmp = %s;  /* (B,T,C) a projection's output */\n",
           piece(&sc, AP_PROJ_PARTIAL, 0, "(int64_t)N * C", "WDT"));
    }
    if (tp && !sp) {   /* Megatron: this rank's heads and MLP columns; tp rank 0 adds the residuals and biases */
        sf(o, "    bool tp0 = srt_group_rank(c, SRT_TP) == 0;\n"
              "    srt_t r1 = %sDV(a->r1, (int64_t)N * C, WDT);  /* (B,T,C) the attention part's output */\n"
              "    if (a->part == 2) goto mlp;\n", rows ? "a->r1 < 0 ? NONE : " : "");
        if (rows)
            sf(o, "    if (a->grads == %d) goto attn_rows;  /* a token-row chunk of the output projection */\n", GR_ROWS);
    }
    uwait(e, o, I, R_NORM1_W);
    if (!sp) norm_fwd(e, o, g, "ln1", "ln1", "x", R_NORM1_W, R_NORM1_B, "input norm");
    if (!cols) qkv_proj(e, o, g, false, GR_ALL);    /* (cols: the chunks ran it) */
    if (m->family == FAM_LLAMA) {
        rt_call(o, I, RT_rope_fwd, "SRT_COMPUTE", "rotate q in place", "q", "B", "T", "NH", "HS", "LDQ", "THETA", NULL);
        rt_call(o, I, RT_rope_fwd, "SRT_COMPUTE", "rotate k in place", "k", "B", "T", "NKV", "HS", "LDKV", "THETA", NULL);
    }
    rt_call(o, I, RT_attention_fwd, "SRT_COMPUTE", "causal self-attention", "att", "lse", "q", "k", "v", "B", "T", "NH",
            "NKV", "HS", "LDQ", "LDKV", NULL);
    Opnd pb = opt_w(g, R_ATTN_OUT_B, D_C, false), fb = opt_w(g, R_FC2_B, D_C, false);
    if (tp) pb = on_tp0(pb), fb = on_tp0(fb);
    uwait(e, o, I, R_ATTN_OUT_W);
    if (rows)
        sf(o, "    if (a->grads == %d) return;  /* the output projection next, by token rows (all-reduced each) */\n",
           GR_HEAD);
    mm_fwd(o, I, tp ? "row-parallel attention output projection: partial sums" : "attention output projection",
           sp ? "y" : "tmp", "att", "PW(PROJ_W, (int64_t)C * QD)", pb, D_N, D_QD, D_C);
    if (sp) {
        rt_call(o, I, RT_add_fwd, "SRT_COMPUTE", "this rank's tokens += their residual x", "y_own", "y_own", "x", NULL);
        sput(o, "    return;  /* the reduce-scatter over tp makes this rank's tokens of x2 */\n");
        if (rows) sp_rows_fwd(e, o, "attn_rows", "att", "QD", "PW(PROJ_W, (int64_t)C * QD)", pb, D_QD);
        if (cols) cols_fwd(e, o, "attn_cols", false);
        sput(o, "mlp:\n");
        if (rows) sf(o, "    if (a->grads == %d) goto mlp_rows;  /* a token-row chunk of the down projection */\n", GR_ROWS);
        if (cols) sf(o, "    if (a->grads == %d) goto mlp_cols;  /* a token-row chunk of the MLP's input linears */\n", GR_COLS);
        rt_call(o, I, RT_convert, "SRT_COMPUTE", "x2 = this rank's tokens of x2 (kept for backward)", "x2", "x", NULL);
    } else if (tp) {
        sput(o, "    if (tp0) {\n");
        rt_call(o, "        ", RT_add_fwd, "SRT_COMPUTE", "r1 = x + this rank's partial attention", "r1", "x", "tmp", NULL);
        sput(o, "    } else {\n");
        rt_call(o, "        ", RT_convert, "SRT_COMPUTE", "r1 = this rank's partial attention", "r1", "tmp", NULL);
        sput(o, "    }\n    return;  /* the all-reduce over tp makes r1 = x2 */\n");
        if (rows) {     /* the same GEMM and residual on token rows a->rows · NR .. + NR */
            tp_rows_fwd(o, "attn_rows:\n    ", "the output projection's token-row chunk a->rows", "att", "QD",
                        "PW(PROJ_W, (int64_t)C * QD)", pb, D_QD, "r1", "x", "attention");
            sput(o, "    return;  /* the chunk's all-reduce next, while the next chunk computes */\n");
        }
        sput(o, "mlp:\n");
        if (rows) sf(o, "    if (a->grads == %d) goto mlp_rows;  /* a token-row chunk of the down projection */\n", GR_ROWS);
        rt_call(o, I, RT_convert, "SRT_COMPUTE", "x2 = the reduced r1 (kept for backward)", "x2", "r1", NULL);
    } else {
        rt_call(o, I, RT_add_fwd, "SRT_COMPUTE", "x2 = x + attention", "x2", "x", "tmp", NULL);
    }
    uwait(e, o, I, R_NORM2_W);
    if (!sp) norm_fwd(e, o, g, "ln2", "ln2", "x2", R_NORM2_W, R_NORM2_B, "post-attention norm");
    if (m->gated) {
        uwait(e, o, I, R_GATE_W);
        if (!cols)
            mm_fwd(o, I, "mlp.gate_proj: (B,T,C) -> (B,T,FF)", "gate", "ln2", "PW(GATE_W, (int64_t)FF * C)",
                   opt_w(g, R_GATE_B, D_FF, false), D_N, D_C, D_FF);
        uwait(e, o, I, R_UP_W);
        if (!cols)
            mm_fwd(o, I, "mlp.up_proj", "up", "ln2", "PW(UP_W, (int64_t)FF * C)", opt_w(g, R_UP_B, D_FF, false), D_N,
                   D_C, D_FF);
        rt_call(o, I, RT_swiglu_fwd, "SRT_COMPUTE", "silu(gate) * up", "act", "gate", "up", "N", "FF", "FF", NULL);
    } else if (e->ext) {   /* a user-defined activation: the GEMM, then its call */
        const CatalogExtern *x = e->ext;
        uwait(e, o, I, R_FC1_W);
        if (!cols)
            mm_fwd(o, I, "mlp.c_fc: (B,T,C) -> (B,T,FF)", "fc1", "ln2", "PW(FC1_W, (int64_t)FF * C)",
                   opt_w(g, R_FC1_B, D_FF, false), D_N, D_C, D_FF);
        ext_call(o, I, x, 0, arena_printf(&g_arena, "%s (user-defined, overwrites act)", x->name),
                 (const char *[]){"act", "fc1"}, 2);
    } else if (!cols) {     /* GELU in the GEMM's epilogue; fc1 (its input) kept for the backward (cols: the chunks') */
        uwait(e, o, I, R_FC1_W);
        mm_gelu_fwd(o, I, "mlp.c_fc + gelu: fc1 = (B,T,C) -> (B,T,FF), act = gelu(fc1)", "act", "fc1", "ln2",
                    "PW(FC1_W, (int64_t)FF * C)", opt_w(g, R_FC1_B, D_FF, false), D_N, D_C, D_FF);
    }
    uwait(e, o, I, R_FC2_W);    /* (before a recompute's return: its wait is the call's) */
    if (replay)
        sput(o, "    if (a->y < 0) return;  /* the last layer of a recompute group: no output needed */\n");
    bool apart = !sp && carve_off(scr, AP_FC2_PARTIAL) != carve_off(scr, AP_PROJ_PARTIAL);
    if (apart)  /* apart under full checkpointing's packing */
        sf(o, "    tmp = %s;  /* (B,T,C) */\n", piece(&sc, AP_FC2_PARTIAL, 0, "(int64_t)N * C", "WDT"));
    if (rows)
        sf(o, "    if (a->grads == %d) return;  /* the down projection next, by token rows (all-reduced each) */\n",
           GR_HEAD);
    mm_fwd(o, I, "MLP down projection: (B,T,FF) -> (B,T,C)", sp ? "y" : "tmp", "act", "PW(FC2_W, (int64_t)C * FF)", fb,
           D_N, D_FF, D_C);
    if (sp) {
        rt_call(o, I, RT_add_fwd, "SRT_COMPUTE", "this rank's tokens += their residual x2", "y_own", "y_own", "x", NULL);
        if (rows) {
            sput(o, "    return;\n");
            sp_rows_fwd(e, o, "mlp_rows", "act", "FF", "PW(FC2_W, (int64_t)C * FF)", fb, D_FF);
        }
        if (cols) cols_fwd(e, o, "mlp_cols", true);
    } else if (tp) {
        sput(o, "    if (tp0) {\n");
        rt_call(o, "        ", RT_add_fwd, "SRT_COMPUTE", "y = x2 + this rank's partial mlp", "y", "x2", "tmp", NULL);
        sput(o, "    } else {\n");
        rt_call(o, "        ", RT_convert, "SRT_COMPUTE", "y = this rank's partial mlp (all-reduced next)", "y", "tmp",
                NULL);
        sput(o, "    }\n");
        if (rows) {
            sput(o, "    return;\nmlp_rows:\n");
            if (apart) sf(o, "    tmp = %s;  /* (B,T,C) */\n", piece(&sc, AP_FC2_PARTIAL, 0, "(int64_t)N * C", "WDT"));
            tp_rows_fwd(o, I, "the down projection's token-row chunk a->rows", "act", "FF", "PW(FC2_W, (int64_t)C * FF)", fb,
                        D_FF, "y", "x2", "mlp");
        }
    } else {
        rt_call(o, I, RT_add_fwd, "SRT_COMPUTE", "y = x2 + mlp", "y", "x2", "tmp", NULL);
    }
    sput(o, "}\n\n");
}

/* The attention output projection's backward GEMMs for the gradients
 * `grads` (OpGrads): datt at step 6 and, unless split, the weight and bias
 * gradients; split, those in the weight op at step 9. */
static void proj_bwd(Str *o, Opnd pbg, int grads)
{
    Opnd di = opnd("datt"), dw = pgrad(R_ATTN_OUT_W, "(int64_t)C * QD"), db = pbg;
    bwd_opnds(grads, &di, &dw, &db);
    mm_bwd(o, "    ", grads == GR_WEIGHT ? "9: attention output projection's weight gradient" : "6: attention output projection",
           di, dw, db, "dx2", "att", "PW(PROJ_W, (int64_t)C * QD)", D_N, D_QD, D_C);
}

/* The MLP's down projection's backward GEMMs for the gradients `grads`
 * (OpGrads): step 1, dact (none with GELU's fused dgelu) and, unless split,
 * the weight and bias gradients; split, those in the weight op at step 4. */
static void mlp_out_bwd(const CE *e, Str *o, Opnd fbg, int grads)
{
    bool dgelu = e->m->dgelu, w = grads == GR_WEIGHT;
    Opnd di = dgelu ? NO_OPND : opnd("dact"), dw = pgrad(R_FC2_W, "(int64_t)C * FF"), db = fbg;
    bwd_opnds(grads, &di, &dw, &db);
    if (di.on == ABSENT && dw.on == ABSENT) return;
    mm_bwd(o, "    ", w ? "4: MLP down projection's weight gradient"
                      : dgelu ? "1: MLP down projection's weight and bias" : "1: MLP down projection",
           di, dw, db, "dy", "act", "PW(FC2_W, (int64_t)C * FF)", D_N, D_FF, D_C);
}

/* The MLP's input linears' backward GEMMs (c_fc, or SwiGLU's up and gate) for
 * the gradients `grads`: step 3 (dln2 +=, and unless split the weights'),
 * or the weight op's at step 4 from dfc1 / dup, dgate and ln2. */
static void mlp_in_bwd(const CE *e, Str *o, int grads)
{
    const Model *m = e->m;
    const Group *g = &e->layer[0];
    bool dgelu = m->dgelu, w = grads == GR_WEIGHT;
    const char *st = w ? "4" : "3", *wg = w ? "'s weight gradient" : "";
    if (m->gated) {
        static const struct { int w, b; const char *dout, *name, *note; } pr[2] = {
            {R_UP_W, R_UP_B, "dup", "up_proj", ""}, {R_GATE_W, R_GATE_B, "dgate", "gate_proj", " (dln2 +=)"}};
        for (int i = 0; i < 2; i++) {
            Opnd di = opnd("dln2"), dw = pgrad(pr[i].w, "(int64_t)FF * C");
            Opnd db = opt_w(g, pr[i].b, D_FF, true);
            bwd_opnds(grads, &di, &dw, &db);
            uwait(e, o, "    ", pr[i].w);
            mm_bwd(o, "    ", arena_printf(&g_arena, "%s: mlp.%s%s", st, pr[i].name, w ? wg : pr[i].note), di, dw, db,
                   pr[i].dout, "ln2", arena_printf(&g_arena, "PW(%s, (int64_t)FF * C)", role_c[pr[i].w]), D_N, D_C, D_FF);
        }
        return;
    }
    Opnd di = opnd("dln2"), dw = pgrad(R_FC1_W, "(int64_t)FF * C"), db = dgelu ? NO_OPND : opt_w(g, R_FC1_B, D_FF, true);
    bwd_opnds(grads, &di, &dw, &db);
    uwait(e, o, "    ", R_FC1_W);
    mm_bwd(o, "    ", arena_printf(&g_arena, "%s: mlp.c_fc%s%s", st, wg, dgelu ? " (its bias gradient came with dfc1)" : ""),
           di, dw, db, "dfc1", "ln2", "PW(FC1_W, (int64_t)FF * C)", D_N, D_C, D_FF);
}

/* Sequence parallelism: a part's norm backward on this rank's tokens (the
 * layer backward's grads GR_NORM), after the reduce-scatter of the norm
 * output's gradient: its statistics again from the part's input shard, then
 * dx = dy (the residual) + the norm's input gradient; the norm weights'
 * gradients get this rank's tokens' share (tp_grads sums the ranks'). */
static void gen_bwd_norm_fn(const CE *e, Str *o)
{
    const Group *g = &e->layer[0];
    const char *px = e->px, *I = "    ";
    sf(o, "/* A part's norm backward on this rank's tokens (sequence parallel): d1 the\n"
          " * reduced gradient of the norm's output, x the part's input, dy its output\n"
          " * gradient (the residual), dx = dy + the norm's input gradient. */\n"
          "static void %s_bwd_norm(srt_ctx *c, const %s_bwd_t *a)\n{\n"
          "    const %s_part_t *w = a->p;\n"
          "    const int NS = N / %lld;  /* this rank's tokens */\n"
          "    srt_t x = DV(a->x, (int64_t)NS * C, WDT), dn = DV(a->d1, (int64_t)NS * C, WDT);  /* (B,T/tp,C) */\n"
          "    srt_t dy = DV(a->dy, (int64_t)NS * C, WDT), dx = DV(a->dx, (int64_t)NS * C, WDT);  /* (B,T/tp,C) */\n",
       px, px, px, (long long)e->p->tp);
    sp_norm_stats(e, o);
    sput(o, "    if (a->part == 1) goto attn;\n");
    for (int k = 0; k < 2; k++) {
        bool mlp = k == 0;
        int nw = mlp ? R_NORM2_W : R_NORM1_W, nb = mlp ? R_NORM2_B : R_NORM1_B;
        const char *name = mlp ? "post-attention norm" : "input norm";
        if (!mlp) sput(o, "attn:\n");
        norm_fwd_rows(e, o, g, "ln", "dx", "x", nw, nb, "NS",
                      arena_printf(&g_arena, "the %s's statistics (its output into dx, overwritten next)", name));
        rt_call(o, I, RT_convert, "SRT_COMPUTE",
                mlp ? "dx = dy (the MLP residual)" : "dx = dy (the attention residual)", "dx", "dy", NULL);
        norm_bwd_rows(e, o, g, "ln", "dx", "dn", "x", nw, nb, "NS", arena_printf(&g_arena, "%s (dx +=)", name));
        if (mlp) sput(o, "    return;\n");
    }
    sput(o, "}\n\n");
}

/* Split (wsplit): whether the code of part sub's data op writes weight
 * gradients (writes: a call of its path has a PG operand) must be what the
 * schedule declares of it (part_data_grads): an undeclared write is invisible
 * to the verifier and to the bucket's zeroing and reduction (a ZeRO-2 bucket
 * zeroed after GPT's data op added c_fc's bias gradient under SP lost it). */
static void data_grads_check(const CE *e, int sub, bool writes)
{
    if (writes == part_data_grads(e->p, sub)) return;
    die("emit: the split %s data op's code writes %sweight gradients, its schedule says it writes %s "
        "(part_data_grads)", sub == SUB_MLP ? "MLP" : "attention", writes ? "" : "no ", writes ? "none" : "some");
}

/* The layer's backward; its numbered steps are the lifetimes carve_bwd packs.
 * With tp_comm_overlap (wsplit) each part runs as two calls: a->grads
 * GR_DATA, the input gradient the tp collective then reduces, and GR_WEIGHT,
 * the part's weight gradients, while the collective runs. */
static void gen_bwd_fn(const CE *e, Str *o, const Views *kv)
{
    const Model *m = e->m;
    const Group *g = &e->layer[0];
    Views bsv = views(&e->bscr, "scratch", NULL, NULL), *bs = &bsv;
    const char *px = e->px, *I = "    ";
    bool ws = e->p->wsplit;
    int gd = ws ? GR_DATA : GR_ALL;     /* what the data path's GEMMs compute */
    bool tp = e->p->tp > 1, sp = lower_sp(e);
    sf(o, "/* One layer's backward for one microbatch: dy (B,T,C) in, dx (B,T,C) out,\n"
          " * weight gradients accumulated (+=) where the part table says%s%s. */\n"
          "static void %s_bwd(srt_ctx *c, const %s_bwd_t *a)\n{\n",
       ws ? ";\n * grads 1: a part's input gradient, 2: its weight gradients (no dx: the\n"
            " * tp collective is reducing it meanwhile)" : "",
       sp ? ";\n * sequence parallel: a part's dx is the partial gradient of its norm's\n"
            " * output, reduce-scattered, then grads 3 runs the norm's backward" : "", px, px);
    if (sp) sf(o, "    if (a->grads == %d) {  /* the norm's backward on this rank's tokens */\n"
                  "        %s_bwd_norm(c, a);\n        return;\n    }\n", GR_NORM, px);
    sf(o, "    const %s_part_t *w = a->p;\n", px);
    saved_views(e, o, kv, false);
    /* the weight op has no input gradient (-1): no view of it */
    const char *nodx = ws ? "a->dx < 0 ? NONE : " : "", *nod1 = ws ? "a->d1 < 0 ? NONE : " : "";
    sf(o, "    srt_t dy = DV(a->dy, (int64_t)N * C, WDT), dx = %sDV(a->dx, (int64_t)N * C, WDT);  /* (B,T,C) */\n"
          "    /* the gradients inside the layer share the scratch by lifetime */\n", nodx);
    if (sp) {   /* dy, x (the part's norm output) and d1 gathered over tp; dx and the MLP part's d1 full partial sums */
        if (g->ct[R_ATTN_OUT_B] >= 0 || g->ct[R_FC2_B] >= 0)   /* the row-parallel biases */
            sput(o, "    bool tp0 = srt_group_rank(c, SRT_TP) == 0;\n");
        sf(o, "    srt_t dx2 = %sDV(a->d1, (int64_t)N * C, WDT);"
              "  /* (B,T,C) the MLP part's partial, then gathered */\n", nod1);
    } else if (tp)
        sf(o, "    bool tp0 = srt_group_rank(c, SRT_TP) == 0;\n"
              "    srt_t dx2 = %sDV(a->d1, (int64_t)N * C, WDT);  /* (B,T,C) the MLP part's partial, then reduced */\n", nod1);
    else
        sf(o, "    srt_t dx2 = %s;  /* (B,T,C) */\n", piece(bs, AP_DX2, 0, "(int64_t)N * C", "WDT"));
    if (!m->dgelu)   /* GELU's backward fuses it away (matmul_bwd_dgelu) */
        sf(o, "    srt_t dact = %s;  /* (B,T,FF) */\n", piece(bs, AP_DACT, 0, "(int64_t)N * FF", "WDT"));
    if (m->gated)
        sf(o, "    srt_t dgate = %s, dup = %s;  /* (B,T,FF) */\n", piece(bs, AP_DGATE, 0, "(int64_t)N * FF", "WDT"),
           piece(bs, AP_DUP, 0, "(int64_t)N * FF", "WDT"));
    else
        sf(o, "    srt_t dfc1 = %s;  /* (B,T,FF) */\n", piece(bs, AP_DFC1, 0, "(int64_t)N * FF", "WDT"));
    if (sp)     /* the norms' output gradients are the parts' partial sums, reduce-scattered next */
        sput(o, "    srt_t dln2 = dx2, dln1 = dx;  /* (B,T,C) */\n");
    else
        sf(o, "    srt_t dln2 = %s, dln1 = %s;  /* (B,T,C) */\n", piece(bs, AP_DLN2, 0, "(int64_t)N * C", "WDT"),
           piece(bs, AP_DLN1, 0, "(int64_t)N * C", "WDT"));
    sf(o, "    srt_t datt = %s;  /* (B,T,QD) */\n", piece(bs, AP_DATT, 0, "(int64_t)N * QD", "WDT"));
    sf(o, "    srt_t dqkv = %s;  /* (B,T,QKV): dq, dk, dv laid out as q, k, v */\n",
       piece(bs, AP_DQKV, 0, "(int64_t)N * QKV", "WDT"));
    if (m->family == FAM_GPT)
        sput(o, "    srt_t dq = dqkv, dk = AT(dqkv, QD), dv = AT(dqkv, QD + KVD);\n");
    else
        sput(o, "    srt_t dq = AT(dqkv, 0), dk = AT(dqkv, (int64_t)N * QD), dv = AT(dqkv, (int64_t)N * (QD + KVD));\n"
                "    dq.n = (int64_t)N * QD, dk.n = dv.n = (int64_t)N * KVD;\n");
    Opnd fbg = opt_w(g, R_FC2_B, D_C, true), pbg = opt_w(g, R_ATTN_OUT_B, D_C, true);
    if (tp) fbg = on_tp0(fbg), pbg = on_tp0(pbg);   /* a row-parallel bias sees its whole gradient on every rank */
    if (tp) sput(o, "    if (a->part == 1) goto attn;\n");
    if (ws) sf(o, "    if (a->grads == %d) goto mlp_wgrad;  /* the MLP's weight gradients */\n", GR_WEIGHT);
    int before = em_grad_calls;     /* the MLP part's data path from here to its return */
    if (sp) {   /* the residual joins on this rank's tokens, after the reduce-scatter (the norm op) */
    } else if (tp) {
        sput(o, "    if (tp0) {\n");
        rt_call(o, "        ", RT_convert, "SRT_COMPUTE", "0: dx2 = dy (the MLP residual, on tp rank 0)", "dx2", "dy", NULL);
        sput(o, "    } else {\n");
        rt_call(o, "        ", RT_zero, "SRT_COMPUTE", "0", "dx2", NULL);
        sput(o, "    }\n");
    } else {
        rt_call(o, I, RT_convert, "SRT_COMPUTE", "0: dx2 = dy (the MLP residual)", "dx2", "dy", NULL);
    }
    /* GELU: the down projection's data gradient fused with gelu' (and c_fc's
     * bias gradient) in one op; a user-defined activation or SwiGLU: dact */
    bool dgelu = m->dgelu;
    if (!dgelu) rt_call(o, I, RT_zero, "SRT_COMPUTE", "1", "dact", NULL);
    uwait(e, o, I, R_FC2_W);
    mlp_out_bwd(e, o, fbg, gd);
    if (dgelu) {
        mm_bwd_dgelu(o, I, "2: dfc1 = (dy·W2) * gelu'(fc1); c_fc's bias gradient +=", "dfc1", opt_w(g, R_FC1_B, D_FF, true),
                     "dy", "PW(FC2_W, (int64_t)C * FF)", "fc1", D_N, D_FF, D_C);
    } else if (m->gated) {
        rt_call(o, I, RT_zero, "SRT_COMPUTE", "2", "dgate", NULL);
        rt_call(o, I, RT_zero, "SRT_COMPUTE", "2", "dup", NULL);
        rt_call(o, I, RT_swiglu_bwd, "SRT_COMPUTE", "2: swiglu", "dgate", "dup", "dact", "gate", "up", "N", "FF", "FF", NULL);
    } else {
        rt_call(o, I, RT_zero, "SRT_COMPUTE", "2", "dfc1", NULL);
        const CatalogExtern *x = e->ext;
        ext_call(o, I, x, 1, arena_printf(&g_arena, "2: %s (user-defined, dfc1 +=)", x->name),
                 (const char *[]){"dfc1", "fc1", "dact"}, 3);
    }
    rt_call(o, I, RT_zero, "SRT_COMPUTE", "3", "dln2", NULL);
    mlp_in_bwd(e, o, gd);
    uwait(e, o, I, R_NORM2_W);
    if (!sp) norm_bwd(e, o, g, "ln2", "dx2", "dln2", "x2", R_NORM2_W, R_NORM2_B, "4: post-attention norm (dx2 +=)");
    if (tp)
        sf(o, "    return;  /* the %s over tp completes %s */\n", sp ? "reduce-scatter" : "all-reduce",
           sp ? "this rank's tokens of dln2 (dx2)" : "dx2");
    if (ws) data_grads_check(e, SUB_MLP, em_grad_calls > before);
    if (ws) {
        sput(o, "mlp_wgrad:\n");
        mlp_out_bwd(e, o, fbg, GR_WEIGHT);
        mlp_in_bwd(e, o, GR_WEIGHT);
        sput(o, "    return;\n");
    }
    if (tp) sput(o, "attn:\n");
    if (ws) sf(o, "    if (a->grads == %d) goto attn_wgrad;  /* the attention's weight gradients */\n", GR_WEIGHT);
    before = em_grad_calls;         /* the attention part's data path from here to its return */
    if (sp) {   /* the residual joins on this rank's tokens, after the reduce-scatter (the norm op) */
    } else if (tp) {
        sput(o, "    if (tp0) {\n");
        rt_call(o, "        ", RT_convert, "SRT_COMPUTE", "5: dx = dx2 (the attention residual, on tp rank 0)", "dx", "dx2",
                NULL);
        sput(o, "    } else {\n");
        rt_call(o, "        ", RT_zero, "SRT_COMPUTE", "5", "dx", NULL);
        sput(o, "    }\n");
    } else {
        rt_call(o, I, RT_convert, "SRT_COMPUTE", "5: dx = dx2 (the attention residual)", "dx", "dx2", NULL);
    }
    rt_call(o, I, RT_zero, "SRT_COMPUTE", "6", "datt", NULL);
    uwait(e, o, I, R_ATTN_OUT_W);
    proj_bwd(o, pbg, gd);
    rt_call(o, I, RT_zero, "SRT_COMPUTE", "7", "dqkv", NULL);
    rt_call(o, I, RT_attention_bwd, "SRT_COMPUTE", "7: attention", "dq", "dk", "dv", "datt", "att", "lse", "q", "k", "v",
            "B", "T", "NH", "NKV", "HS", "LDQ", "LDKV", NULL);
    if (m->family == FAM_LLAMA) {
        rt_call(o, I, RT_rope_bwd, "SRT_COMPUTE", "7: un-rotate dq", "dq", "B", "T", "NH", "HS", "LDQ", "THETA", NULL);
        rt_call(o, I, RT_rope_bwd, "SRT_COMPUTE", "7: un-rotate dk", "dk", "B", "T", "NKV", "HS", "LDKV", "THETA", NULL);
    }
    rt_call(o, I, RT_zero, "SRT_COMPUTE", "8", "dln1", NULL);
    qkv_proj(e, o, g, true, gd);
    uwait(e, o, I, R_NORM1_W);
    if (!sp) norm_bwd(e, o, g, "ln1", "dx", "dln1", "x", R_NORM1_W, R_NORM1_B, "9: input norm (dx +=)");
    if (ws) {
        data_grads_check(e, SUB_ATTN, em_grad_calls > before);
        sf(o, "    return;  /* the %s over tp completes %s */\nattn_wgrad:\n", sp ? "reduce-scatter" : "all-reduce",
           sp ? "this rank's tokens of dln1 (dx)" : "dx");
        proj_bwd(o, pbg, GR_WEIGHT);
        qkv_proj(e, o, g, true, GR_WEIGHT);
    }
    sput(o, "}\n\n");
}

/* srt_head_xent: losses of logits = inp · w^T against the targets, and (when
 * dinp and dw are given) dinp, dw += their gradients, in one op: the GEMMs of
 * a matmul_fwd and a matmul_bwd, which it records. */
static void head_xent(Str *s, const char *ind, const char *comment, const char *losses, Opnd dinp, Opnd dw,
                      const char *logits, const char *inp, const char *w, const char *tgt, const char *v0,
                      const char *dloss)
{
    rt_call(s, ind, RT_head_xent, "SRT_COMPUTE", comment, losses, dinp.c, dw.c, logits, inp, w, tgt, dim_c[D_N],
            dim_c[D_C], dim_c[D_VP], v0, "V", dloss, NULL);
    gemm_note(SRT_GEMM_FWD, D_N, D_C, D_VP, false);
    if (dinp.on != ABSENT) gemm_note(SRT_GEMM_BWD_DATA, D_N, D_C, D_VP, false);
    if (dw.on != ABSENT) gemm_note(SRT_GEMM_BWD_WEIGHT, D_N, D_C, D_VP, false);
}

/* The head for one microbatch (train: with its backward; eval: the loss only). */
static void gen_head_fn(const CE *e, Str *o, bool eval)
{
    Views hsv = views(&e->hscr, "scratch", NULL, NULL), *hs = &hsv;
    const Group *g = &e->post;
    const char *px = e->px, *I = "    ";
    if (!eval)
        sf(o, "/* The head for one microbatch: the final norm, then one fused op for the\n"
              " * logits against the %s, the cross-entropy and their\n"
              " * backward, then the norm's backward, leaving dy (B,T,C) for the last layer. */\n"
              "static void %s_head(srt_ctx *c, const %s_head_t *a)\n{\n",
           e->m->tied ? "tied token embedding" : "output embedding", px, px);
    else
        sf(o, "/* The head's forward only (evaluation): the loss of the microbatch. */\n"
              "static void %s_head_eval(srt_ctx *c, const %s_head_t *a)\n{\n", px, px);
    sf(o, "    const %s_part_t *w = a->p;\n", px);
    sput(o, "    srt_t y = DV(a->y, (int64_t)N * C, WDT);  /* (B,T,C) the last layer's output */\n");
    norm_stats(e, o, hs, AP_LNF_STATS, "lnf");
    sf(o, "    srt_t lnf = %s;  /* (B,T,C) */\n", piece(hs, AP_LNF, 0, "(int64_t)N * C", "WDT"));
    sf(o, "    srt_t losses = %s;  /* (B,T) */\n", piece(hs, AP_LOSSES, 0, "N", "SRT_F32"));
    sput(o, "    srt_t logits = DV(a->logits, (int64_t)N * VP, WDT);  /* (B,T,VP), then their gradient */\n");
    norm_fwd(e, o, g, "lnf", "lnf", "y", R_NORMF_W, R_NORMF_B, "final norm");
    if (!eval) {
        sf(o, "    srt_t dlnf = %s;  /* (B,T,C) */\n", piece(hs, AP_DLNF, 0, "(int64_t)N * C", "WDT"));
        sput(o, "    srt_t dy = DV(a->dy, (int64_t)N * C, WDT);  /* (B,T,C) */\n");
        rt_call(o, I, RT_zero, "SRT_COMPUTE", NULL, "dlnf", NULL);
        rt_call(o, I, RT_zero, "SRT_COMPUTE", NULL, "dy", NULL);
    }
    head_xent(o, I,
              eval ? "losses of logits = lnf · head^T" : "losses of logits = lnf · head^T; dlnf, dhead += their gradients",
              "losses", eval ? NO_OPND : opnd("dlnf"), eval ? NO_OPND : opnd("PG(HEAD_W, (int64_t)VP * C)"), "logits",
              "lnf", "PW(HEAD_W, (int64_t)VP * C)", "DV(a->tgt, N, SRT_I32)",
              e->p->tp > 1 ? "(int)srt_group_rank(c, SRT_TP) * VP" : "0",
              e->spec->precision.dtype == DT_FP16 ? "DLOSS * srt_loss_scale(c)" : "DLOSS");
    rt_call(o, I, RT_loss_add, "SRT_COMPUTE", "the step's loss", "losses", "N", NULL);
    if (!eval) norm_bwd(e, o, g, "lnf", "dy", "dlnf", "y", R_NORMF_W, R_NORMF_B, "dy, the final norm's gradients");
    sput(o, "}\n\n");
}

/* The embedding's forward and backward. */
static void gen_embed_fns(const CE *e, Str *o)
{
    const char *px = e->px, *I = "    ";
    bool wpe = e->pre.ct[R_POS_EMBED] >= 0, tp = e->p->tp > 1;
    const char *v0 = tp ? "    int v0 = (int)srt_group_rank(c, SRT_TP) * VP;\n" : "";
    if (e->uses[K_EMBED_FWD]) {
        sf(o, "/* The embedding: x (B,T,C) = wte[tokens]%s. */\n"
              "static void %s_embed_fwd(srt_ctx *c, const %s_embed_fwd_t *a)\n{\n"
              "    const %s_part_t *w = a->p;\n%s", wpe ? " + wpe[t]" : "", px, px, px, v0);
        if (tp)     /* vocab-parallel: this rank's rows, zeros elsewhere; all-reduced next */
            rt_call(o, I, RT_embed_fwd, "SRT_COMPUTE", "(B,T,C), this rank's vocabulary rows [v0, v0 + VP)",
                    "DV(a->x, (int64_t)N * C, WDT)", "DV(a->tok, N, SRT_I32)", "PW(WTE, (int64_t)VP * C)",
                    wpe ? "v0 == 0 ? PW(WPE, (int64_t)T * C) : NONE" : "NONE", "B", "T", "C", "v0", "v0 + VP", NULL);
        else
            rt_call(o, I, RT_embed_fwd, "SRT_COMPUTE", "(B,T,C)", "DV(a->x, (int64_t)N * C, WDT)", "DV(a->tok, N, SRT_I32)",
                    "PW(WTE, (int64_t)VP * C)", wpe ? "PW(WPE, (int64_t)T * C)" : "NONE", "B", "T", "C", "0", "VP", NULL);
        sput(o, "}\n\n");
    }
    if (e->uses[K_EMBED_BWD]) {
        sf(o, "/* The embedding's backward: scatter-add dx (B,T,C) into dwte%s. */\n"
              "static void %s_embed_bwd(srt_ctx *c, const %s_embed_bwd_t *a)\n{\n"
              "    const %s_part_t *w = a->p;\n%s", wpe ? ", sum into dwpe" : "", px, px, px, v0);
        if (tp)
            rt_call(o, I, RT_embed_bwd, "SRT_COMPUTE", "this rank's vocabulary rows; positions on tp rank 0",
                    "PG(WTE, (int64_t)VP * C)", wpe ? "v0 == 0 ? PG(WPE, (int64_t)T * C) : NONE" : "NONE",
                    "DV(a->dx, (int64_t)N * C, WDT)", "DV(a->tok, N, SRT_I32)", "B", "T", "C", "v0", "v0 + VP", NULL);
        else
            rt_call(o, I, RT_embed_bwd, "SRT_COMPUTE", NULL, "PG(WTE, (int64_t)VP * C)",
                    wpe ? "PG(WPE, (int64_t)T * C)" : "NONE", "DV(a->dx, (int64_t)N * C, WDT)", "DV(a->tok, N, SRT_I32)",
                    "B", "T", "C", "0", "VP", NULL);
        sput(o, "}\n\n");
    }
}

/* Selective checkpointing's recompute: a layer's attention core again. */
static void gen_attn_fn(const CE *e, Str *o)
{
    const Model *m = e->m;
    Views kv = views(&e->kept, "saved", &e->attn, "attn");
    sf(o, "/* Selective checkpointing: a layer's attention core again, from the q, k, v\n"
          " * its forward kept (RoPE applied), into the buffer its backward reads it\n"
          " * from: the forward's kernel on the forward's inputs, so the same bits. */\n"
          "static void %s_attn(srt_ctx *c, const %s_attn_t *a)\n{\n", e->px, e->px);
    if (m->family == FAM_GPT) {
        sf(o, "    srt_t qkv = %s;  /* (B,T,QKV) */\n", piece(&kv, AP_QKV, 0, "(int64_t)N * QKV", "WDT"));
        sput(o, "    srt_t q = qkv, k = AT(qkv, QD), v = AT(qkv, QD + KVD);  /* rows QKV apart */\n");
    } else {
        int64_t T = e->p->T, w = e->wb, qd = m->h / e->p->tp, kvd = model_kv_rank(m) * m->hd;
        sf(o, "    srt_t q = %s, k = %s, v = %s;\n", piece(&kv, AP_QKV, 0, "(int64_t)N * QD", "WDT"),
           piece(&kv, AP_QKV, T * qd * w, "(int64_t)N * KVD", "WDT"),
           piece(&kv, AP_QKV, T * (qd + kvd) * w, "(int64_t)N * KVD", "WDT"));
    }
    sf(o, "    srt_t att = %s;  /* (B,T,QD) */\n", piece(&kv, AP_ATTN_OUT, 0, "(int64_t)N * QD", "WDT"));
    sf(o, "    srt_t lse = %s;  /* (B,NH,T) */\n", piece(&kv, AP_ATTN_LSE, 0, "(int64_t)N * NH", "SRT_F32"));
    rt_call(o, "    ", RT_attention_fwd, "SRT_COMPUTE", "causal self-attention", "att", "lse", "q", "k", "v", "B", "T",
            "NH", "NKV", "HS", "LDQ", "LDKV", NULL);
    sput(o, "}\n\n");
}

/* The layer forwards of the spec's activation checkpointing: the forward
 * (keeping what carve_ckpt says), the full recompute (the forward keeping
 * everything), the selective recompute (the attention core). */
static void gen_layer_fwd_fns(const CE *e, Str *o)
{
    if (lower_sp(e) && (e->uses[K_FWD] || e->uses[K_RECOMPUTE])) gen_fwd_norm_fn(e, o);
    if (e->uses[K_FWD]) {
        Views kv = views(&e->kept, "saved", &e->fscr, "scratch");
        gen_fwd_fn(e, o, false, &kv, &e->fscr);
    }
    if (e->uses[K_RECOMPUTE]) {
        Views kv = views(&e->saved, "saved", &e->rscr, "scratch");
        gen_fwd_fn(e, o, true, &kv, &e->rscr);
    }
    if (e->uses[K_ATTN]) gen_attn_fn(e, o);
}

/* Activation checkpoints: cpu checkpointing's copies, the partitioned
 * checkpoint's slice and its gather. */
static void gen_ckpt_fn(const CE *e, Str *o)
{
    const char *px = e->px, *I = "        ";
    sf(o, "/* Activation checkpoints.  mode 0: to the pinned host arena, 1: back to the\n"
          " * device (cpu checkpointing); 2: all-gather of the tp ranks' slices, 3: this tp\n"
          " * rank's slice of a layer input (partitioned activations). */\n"
          "static void %s_ckpt(srt_ctx *c, const %s_ckpt_t *a)\n{\n    if (a->mode == 0) {\n", px, px);
    rt_call(o, I, RT_copy, "a->st", NULL, "srt_hview(c, a->dst, a->n, WDT)", "DV(a->src, a->n, WDT)", NULL);
    sput(o, "    } else if (a->mode == 1) {\n");
    rt_call(o, I, RT_copy, "a->st", NULL, "DV(a->dst, a->n, WDT)", "srt_hview(c, a->src, a->n, WDT)", NULL);
    sput(o, "    } else if (a->mode == 2) {\n");
    rt_call(o, I, RT_all_gather, "a->st", NULL, "SRT_TP", "DV(a->dst, a->n * srt_group_size(c, SRT_TP), WDT)",
            "DV(a->src, a->n, WDT)", NULL);
    sput(o, "    } else {\n");
    rt_call(o, I, RT_convert, "a->st", NULL, "DV(a->dst, a->n, WDT)",
            "DV(a->src + srt_group_rank(c, SRT_TP) * a->n * WB, a->n, WDT)", NULL);
    sput(o, "    }\n}\n\n");
}

/* The embedding, the layers, the head: the compute kinds this class calls. */
static void gen_compute_fns(CE *e, Str *o)
{
    gen_embed_fns(e, o);
    gen_layer_fwd_fns(e, o);
    if (e->uses[K_CKPT]) gen_ckpt_fn(e, o);
    if (e->uses[K_HEAD]) gen_head_fn(e, o, false);
    if (e->uses[K_HEAD_EVAL]) gen_head_fn(e, o, true);
    if (e->uses[K_BWD]) {     /* full: the recomputed tensors; selective: the attention core apart */
        Views kv = views(e->pol == CKPT_FULL ? &e->saved : &e->kept, "saved", &e->attn, "attn");
        if (lower_sp(e)) gen_bwd_norm_fn(e, o);
        gen_bwd_fn(e, o, &kv);
    }
}

/* The data movement, collective and event kinds. */
static void gen_comm_fns(CE *e, Str *o)
{
    const char *px = e->px, *I = "    ";
    if (e->uses[K_LOAD]) {
    sf(o, "/* A microbatch's tokens and targets (B,T) to the device. */\n"
          "static void %s_load(srt_ctx *c, const %s_load_t *a)\n{\n", px, px);
    rt_call(o, I, RT_load_batch, "a->st", NULL, "a->mb", "a->tok < 0 ? NONE : DV(a->tok, N, SRT_I32)",
            "a->tgt < 0 ? NONE : DV(a->tgt, N, SRT_I32)", NULL);
    sput(o, "}\n\n");
    }
    if (e->uses[K_GATHER]) {
    sf(o, "/* ZeRO-3: all-gather a fetch unit from every dp rank's shard. */\n"
          "static void %s_gather(srt_ctx *c, const %s_gather_t *a)\n{\n", px, px);
    rt_call(o, I, RT_all_gather, "a->st", NULL, "SRT_DP", "DV(a->out, a->n, WDT)", "DV(a->in, a->shard, WDT)", NULL);
    sput(o, "}\n\n");
    }
    if (e->uses[K_REDUCE]) {
    sf(o, "/* A gradient reduction over dp.  mode 0: all-reduce in place (ZeRO 0);\n"
          " * 1: reduce-scatter into this rank's shard; 2: the same in place (this\n"
          " * rank's slice of the bucket) and added to the shard (accumulation);\n"
          " * 3: in place into this rank's slice only (ZeRO 1's distributed optimizer). */\n"
          "static void %s_reduce(srt_ctx *c, const %s_reduce_t *a)\n{\n", px, px);
    sput(o, "    if (a->mode == 0) {\n");
    rt_call(o, "        ", RT_all_reduce, "a->st", NULL, "SRT_DP", "DV(a->in, a->n, GDT)", "SRT_SUM", NULL);
    sput(o, "    } else if (a->mode == 1) {\n");
    rt_call(o, "        ", RT_reduce_scatter, "a->st", NULL, "SRT_DP", "DV(a->out, a->shard, GDT)", "DV(a->in, a->n, GDT)",
            NULL);
    sput(o, "    } else {  /* mode 3: in place only (offload: the caller moves the slice) */\n"
            "        srt_t mine = DV(a->in + srt_group_rank(c, SRT_DP) * a->shard * GB, a->shard, GDT);\n");
    rt_call(o, "        ", RT_reduce_scatter, "a->st", NULL, "SRT_DP", "mine", "DV(a->in, a->n, GDT)", NULL);
    sput(o, "        if (a->mode == 2) {\n"
            "            srt_t acc = DV(a->out, a->shard, GDT);\n");
    rt_call(o, "            ", RT_add_fwd, "a->st", NULL, "acc", "acc", "mine", NULL);
    sput(o, "        }\n    }\n}\n\n");
    }
    if (e->uses[K_PARAM_GATHER]) {
    sf(o, "/* Updated parameters to every dp rank: ZeRO 1-2 in place from this rank's\n"
          " * slice of the segment (in < 0), ZeRO 3 the persistent ones from the shard. */\n"
          "static void %s_param_gather(srt_ctx *c, const %s_param_gather_t *a)\n{\n"
          "    int64_t in = a->in >= 0 ? a->in : a->out + srt_group_rank(c, SRT_DP) * a->shard * WB;\n", px, px);
    rt_call(o, I, RT_all_gather, "a->st", NULL, "SRT_DP", "DV(a->out, a->n, WDT)", "DV(in, a->shard, WDT)", NULL);
    sput(o, "}\n\n");
    }
    if (e->uses[K_ZERO]) {
    sf(o, "/* A gradient bucket starts each microbatch at zero. */\n"
          "static void %s_zero(srt_ctx *c, const %s_zero_t *a)\n{\n", px, px);
    rt_call(o, I, RT_zero, "a->st", NULL, "DV(a->off, a->n, GDT)", NULL);
    sput(o, "}\n\n");
    }
    if (e->uses[K_TP]) {
    sf(o, "/* A collective over the tp group: kind 0 an all-reduce (sum) in place of\n"
          " * partial activations (Megatron's f and g) or of replicated tensors'\n"
          " * gradients; sequence parallelism: kind 1 all-gathers the sequence shards\n"
          " * (n / tp elements each) into n, kind 2 reduce-scatters n partial sums;\n"
          " * kind 3 sums a shared kv head's gradients over its tp ranks (SRT_TP_KV). */\n"
          "static void %s_tp(srt_ctx *c, const %s_tp_t *a)\n{\n", px, px);
    if (e->m->kv > 1 && e->m->kv < e->p->tp) {
        sput(o, "    if (a->kind == 3) {\n");
        rt_call(o, "        ", RT_all_reduce, "a->st", NULL, "SRT_TP_KV", "DV(a->out, a->n, GDT)", "SRT_SUM", NULL);
        sput(o, "        return;\n    }\n");
    }
    if (e->p->act.boundary_slices > 1) {
        sf(o, "    if (a->kind == 4) {  /* a received stage boundary's tp slices, in place */\n"
              "        int64_t ns = a->n / %lld;\n", (long long)e->p->tp);
        rt_call(o, "        ", RT_all_gather, "a->st", NULL, "SRT_TP", "DV(a->out, a->n, WDT)",
                "DV(a->out + srt_group_rank(c, SRT_TP) * ns * WB, ns, WDT)", NULL);
        sput(o, "        return;\n    }\n");
    }
    if (lower_sp(e)) {
        sf(o, "    int64_t ns = a->n / %lld;  /* a sequence shard */\n    if (a->kind == 1) {\n", (long long)e->p->tp);
        rt_call(o, "        ", RT_all_gather, "a->st", NULL, "SRT_TP", "DV(a->out, a->n, WDT)", "DV(a->in, ns, WDT)", NULL);
        sput(o, "        return;\n    }\n    if (a->kind == 2) {\n");
        rt_call(o, "        ", RT_reduce_scatter, "a->st", NULL, "SRT_TP", "DV(a->out, ns, WDT)", "DV(a->in, a->n, WDT)",
                NULL);
        sput(o, "        return;\n    }\n");
    }
    rt_call(o, I, RT_all_reduce, "a->st", NULL, "SRT_TP", "DV(a->out, a->n, a->grad ? GDT : WDT)", "SRT_SUM", NULL);
    sput(o, "}\n\n");
    }
    if (e->uses[K_PP]) {
    sf(o, "/* Pipeline transfers on the pp stream: kind 0 sends a stage boundary (B,T,C)\n"
          " * to pp rank peer, 1 receives one from it; 2 sums the tied embedding's\n"
          " * gradient between the first and the last stage (SRT_EMBED); 3 and 4 send\n"
          " * and receive this tp rank's slice of n elements of a boundary (Megatron's\n"
          " * scatter/gather: the receiver then all-gathers it over tp). */\n"
          "static void %s_pp(srt_ctx *c, const %s_pp_t *a)\n{\n", px, px);
    if (e->p->act.boundary_slices > 1)
        sput(o, "    int64_t off = a->kind >= 3 ? a->off + srt_group_rank(c, SRT_TP) * a->n * WB : a->off;\n");
    else
        sput(o, "    int64_t off = a->off;\n");
    sput(o, "    if (a->kind == 0 || a->kind == 3) {\n");
    rt_call(o, "        ", RT_send, "a->st", NULL, "DV(off, a->n, WDT)", "a->peer", NULL);
    sput(o, "    } else if (a->kind == 1 || a->kind == 4) {\n");
    rt_call(o, "        ", RT_recv, "a->st", NULL, "DV(off, a->n, WDT)", "a->peer", NULL);
    sput(o, "    } else {\n");
    rt_call(o, "        ", RT_all_reduce, "a->st", NULL, "SRT_EMBED", "DV(a->off, a->n, GDT)", "SRT_SUM", NULL);
    sput(o, "    }\n}\n\n");
    }
    sput(o, "\n");
}

/* Offload: the owned helper's start: a range across the device/host boundary
 * is visited as its two parts. */
static void gen_owned_host_head(CE *e, Str *o)
{
    sf(o, "    if (lo < %lld && hi > %lld) {  /* the device's part, then the host's */\n"
          "        %s_owned(c, st, what, lo, %lld, staging, pstage);\n"
          "        %s_owned(c, st, what, %lld, hi, staging, pstage);\n"
          "        return;\n"
          "    }\n"
          "    bool host = lo >= %lld;\n",
       (long long)e->S_dev, (long long)e->S_dev, e->px, (long long)e->S_dev, e->px, (long long)e->S_dev,
       (long long)e->S_dev);
}

/* Offload: a piece in the host's range (h: its index in the host arrays). */
static void gen_owned_host_piece(CE *e, Str *o, const char *grad, const char *param)
{
    const char *I = "                ";
    bool nvme = e->b_nvme >= 0;
    const char *hparam = e->b_hstage >= 0 ? arena_printf(&g_arena, "HV(%lld + (j - lo) * WB, n, WDT)", (long long)lower_off(e, e->b_hstage))
                       : e->params_space == SPACE_HOST ? arena_printf(&g_arena, "HV(%lld + j * WB, n, WDT)", (long long)lower_off(e, e->b_pshard))
                       : e->b_hswap >= 0 ? arena_printf(&g_arena, "HV(%lld + (j - lo) * WB, n, WDT)", (long long)lower_off(e, e->b_hswap))
                                         : NULL;
    if (!hparam) die("emit: the host optimizer has nowhere to write the parameters");
    if (e->params_space == SPACE_NVME && e->s->bufs[e->b_hswap].bytes < e->spec->zero.sub_group_size * e->wb &&
        e->s->bufs[e->b_hswap].bytes < e->S_host * e->wb)
        die("emit: a host sub-group's parameters do not fit the NVMe staging %s", e->s->bufs[e->b_hswap].name);
    const char *st[3];
    int hb[3] = {e->b_hmaster, e->b_hmom1, e->b_hmom2};
    for (int k = 0; k < 3; k++)
        st[k] = nvme ? (k < e->nstates ? arena_printf(&g_arena, "HV(staging + (%d * (hi - lo) + j - lo) * 4, n, SRT_F32)", k)
                                       : "NONE")
                     : hb[k] >= 0 ? arena_printf(&g_arena, "HV(%lld + h * 4, n, SRT_F32)", (long long)lower_off(e, hb[k]))
                                  : "NONE";
    sf(o, "            if (host) {\n"
          "                int64_t h = j - %lld;\n"
          "                srt_t g = HV(%lld + h * 4, n, SRT_F32);  /* fp32 on the host */\n",
       (long long)e->S_dev, (long long)lower_off(e, e->b_hgrads));
    if (e->p->zero < 2) {
        sput(o, "                if (what == OWN_D2H) {\n");
        rt_call(o, "                    ", e->gb == 4 ? RT_copy : RT_convert, "st", NULL, "g", grad, NULL);
        sput(o, "                    continue;\n"
                "                }\n");
    }
    if (e->b_hstage >= 0) {
        sput(o, "                if (what == OWN_H2D) {\n");
        rt_call(o, "                    ", RT_copy, "st", NULL, param, hparam, NULL);
        sput(o, "                    continue;\n"
                "                }\n");
    }
    sput(o, "                if (what == OWN_SUMSQ) {\n"
            "                    if (!copy && (!replicated || (replicated == 1 ? tp0 : kv0))) srt_grad_sumsq(c, st, g);\n"
            "                    continue;\n"
            "                }\n");
    rt_call(o, I, RT_optimizer_step, "st", NULL, hparam, st[0], "g", st[1], st[2], "tt->decay", NULL);
    sput(o, "                continue;\n"
            "            }\n");
}

/* The shard-part helper (offload): see part_call. */
static void gen_part_fn(CE *e, Str *o)
{
    sf(o, "/* Offload: n elements of this rank's reduced slice of a segment (at in,\n"
          " * shard elements a rank), from element skip on, into the device gradient\n"
          " * shard or (host) the host's fp32 gradients at out: copied, or added (acc). */\n"
          "static void %s_part(srt_ctx *c, srt_stream st, int64_t in, int64_t shard, int64_t skip, int64_t n, int host,\n"
          "                    int64_t out, int acc)\n{\n"
          "    srt_t mine = DV(in + (srt_group_rank(c, SRT_DP) * shard + skip) * GB, n, GDT);\n"
          "    srt_t dst = host ? HV(out, n, SRT_F32) : DV(out, n, GDT);\n"
          "    if (acc) {\n", e->px);
    rt_call(o, "        ", RT_add_fwd, "st", NULL, "dst", "dst", "mine", NULL);
    sput(o, "    } else {\n");
    rt_call(o, "        ", RT_convert, "st", NULL, "dst", "mine", NULL);
    sput(o, "    }\n}\n\n");
}


/* The class tensor that is the head's copy of the tied embedding, or -1;
 * dies unless each tensor's elements are its shard's rows × cols (the
 * owned helper reads them from the srt_param table). */
static int copy_tensor(const CE *e)
{
    int copy = -1;
    for (int i = 0; i < e->rc->ntensors; i++) {
        const ClassTensor *ct = &e->rc->tensors[i];
        if (ct->numel != ct->rows * (ct->cols ? ct->cols : 1))
            die("emit: class tensor %d has %lld elements, not its shard's %lld x %lld", i, (long long)ct->numel,
                (long long)ct->rows, (long long)ct->cols);
        if (ct->copy && copy >= 0) die("emit: stage %d has two copies of the tied embedding", e->ci);
        if (ct->copy) copy = i;
    }
    return copy;
}
/* The owned-range helper: the gradient norm's sums and the optimizer step,
 * piece by piece of this rank's shard space (a piece: one tensor's part of
 * one segment's shard, so weight decay is per tensor and padding is skipped). */
/* The owned helper's comment was written (with the first stage's helper). */
static bool em_owned_said;

static void gen_owned_fn(CE *e, Str *o)
{
    const char *px = e->px;
    int z = e->p->zero;
    const char *grad = z < 2 ? arena_printf(&g_arena, "DV(%lld + f * GB, n, GDT)", (long long)lower_off(e, e->b_grads))
                      : e->b_gshard < 0 ? "NONE"     /* offload: every element is the host's */
                             : arena_printf(&g_arena, "DV(%lld + j * GB, n, GDT)", (long long)lower_off(e, e->b_gshard));
    bool away = e->params_space != SPACE_DEVICE;    /* offloaded parameters: updated into pstage */
    const char *param = z < 3 ? arena_printf(&g_arena, "DV(%lld + f * WB, n, WDT)", (long long)lower_off(e, e->b_params))
                      : away  ? "DV(pstage + (j - lo) * WB, n, WDT)"
                              : arena_printf(&g_arena, "DV(%lld + j * WB, n, WDT)", (long long)lower_off(e, e->b_pshard));
    const char *master = e->b_master >= 0 ? arena_printf(&g_arena, "DV(%lld + j * 4, n, SRT_F32)", (long long)lower_off(e, e->b_master))
                                          : "p";
    const char *m1 = e->b_mom1 >= 0 ? arena_printf(&g_arena, "DV(%lld + j * 4, n, SRT_F32)", (long long)lower_off(e, e->b_mom1)) : "NONE";
    const char *m2 = e->b_mom2 >= 0 ? arena_printf(&g_arena, "DV(%lld + j * 4, n, SRT_F32)", (long long)lower_off(e, e->b_mom2)) : "NONE";
    if ((e->spec->precision.dtype != DT_FP32 || away) && e->S_dev > 0 && e->b_master < 0)
        die("emit: a 16-bit model (or offloaded parameters) without master weights");
    if (e->b_master >= 0) lower_expect(e, e->b_master, e->S_dev * 4, "the master weights");
    if (e->b_mom1 >= 0) lower_expect(e, e->b_mom1, e->S_dev * 4, "the first moments");
    if (e->b_mom2 >= 0) lower_expect(e, e->b_mom2, e->S_dev * 4, "the second moments");
    if (em_owned_said)
        sf(o, "/* As the first stage's owned helper, over stage %d's tables; its host optimizer from %lld on. */\n",
           e->ci, (long long)e->S_dev);
    else
        sf(o, "/* Visits this rank's pieces of shard space [lo, hi) (a piece: one tensor's part\n"
          " * of one segment's shard; padding is skipped): OWN_SUMSQ adds their squared\n"
          " * gradients to the norm (each element counted once in the world: ZeRO 0 on\n"
          " * dp rank 0, replicated tp tensors on tp rank 0, a shared kv head on its\n"
          " * SRT_TP_KV rank 0, the tied embedding on the\n"
          " * first stage, not its copy on the last), OWN_OPT steps the optimizer\n"
          " * on them with the tensor's weight decay (through fp32 gradients at staging\n"
          " * when they are 16-bit).  j: the shard-space index, f: the flat one.\n"
          " * Offload: the host optimizer owns shard space from %lld on (its gradients\n"
          " * fp32 in the host arena); OWN_D2H copies the reduced gradients there\n"
          " * (ZeRO 0-1), OWN_H2D the updated parameters back from the host staging,\n"
          " * and OWN_OPT on a host range steps with the states in the host arena or,\n"
          " * NVMe, in the sub-group's slot at staging ([master][m][v], hi - lo each).\n"
          " * pstage: where the device step writes offloaded parameters. */\n", (long long)e->S_dev);
    em_owned_said = true;
    sf(o, "static void %s_owned(srt_ctx *c, srt_stream st, int what, int64_t lo, int64_t hi, int64_t staging,\n"
          "                     int64_t pstage)\n{\n"
          "    (void)pstage;\n", px);
    if (e->S_host > 0) gen_owned_host_head(e, o);
    sf(o, "    int64_t d = ZERO >= 1 ? srt_group_rank(c, SRT_DP) : 0;\n"
          "    if (what == OWN_SUMSQ && ZERO == 0 && srt_group_rank(c, SRT_DP) != 0) return;\n"
          "    bool tp0 = srt_group_rank(c, SRT_TP) == 0;\n"
          "    bool kv0 = srt_group_rank(c, SRT_TP_KV) == 0;  /* a shared kv head: once per head */\n"
          "    for (int k = 0; k < %d; k++) {\n"
          "        const trainer_seg *sg = &%s_segs[k];\n"
          "        int64_t a0 = lo > sg->shard_offset ? lo : sg->shard_offset;\n"
          "        int64_t a1 = hi < sg->shard_offset + sg->shard ? hi : sg->shard_offset + sg->shard;\n"
          "        if (a0 >= a1) continue;\n"
          "        int64_t f0 = sg->offset + d * sg->shard + (a0 - sg->shard_offset), f1 = f0 + (a1 - a0);\n"
          "        for (int t = sg->first; t < sg->first + sg->n; t++) {\n"
          "            const srt_param *tt = &%s_params[t];\n"
          "            int64_t numel = tt->shard_rows * (tt->shard_cols ? tt->shard_cols : 1);\n"
          "            int64_t f = f0 > tt->flat ? f0 : tt->flat;\n"
          "            int64_t fe = f1 < tt->flat + numel ? f1 : tt->flat + numel;\n"
          "            if (f >= fe) continue;\n"
          "            int64_t j = a0 + (f - f0), n = fe - f;\n"
          "            %s  /* 1: the same on every tp rank, 2: on the ranks of a kv head */\n"
          "            bool copy = t == %d;  /* the head's copy of the tied embedding */\n",
       e->rc->nsegs, px, px,
       e->p->tp < 2 ? "int replicated = 0;"
                    : "int replicated = tt->split == SRT_SPLIT_NONE ? 1 : tt->split == SRT_SPLIT_KV ? 2 : 0;",
       copy_tensor(e));
    if (e->S_host > 0) gen_owned_host_piece(e, o, grad, param);
    sf(o, "            srt_t g = %s;\n"
          "            if (what == OWN_SUMSQ) {\n"
          "                if (!copy && (!replicated || (replicated == 1 ? tp0 : kv0))) srt_grad_sumsq(c, st, g);\n"
          "                continue;\n"
          "            }\n"
          "            srt_t p = %s;\n"
          "            if (what == OWN_H2D) continue;  /* (no device piece in a host range) */\n"
          "            if (staging >= 0) {\n"
          "                srt_t g32 = DV(staging + (j - lo) * 4, n, SRT_F32);\n",
       grad, param);
    rt_call(o, "                ", RT_convert, "st", NULL, "g32", "g", NULL);
    sput(o, "                g = g32;\n"
            "            }\n");
    rt_call(o, "            ", RT_optimizer_step, "st", NULL, "p", master, "g", m1, m2, "tt->decay", NULL);
    sput(o, "        }\n    }\n}\n\n");
}

/* ---- the generated file: prologue, program ----------------------------------------- */

static const char *const dt_c[] = {"SRT_F32", "SRT_BF16", "SRT_F16"};

/* The header comment, the includes, the model constants and the helpers. */
static void gen_prologue(const Plan *mp, const CatalogExtern *x, const char *name, bool slots, Str *o)
{
    bool mw = lower_module_waits(mp);
    const Spec *s = mp->spec;
    const Model *m = &mp->model;
    const Partition *p = &mp->part;
    sf(o, "/* %s — a trainer generated by shardc %s (`shardc build`).  Do not edit:\n"
          " * change the spec and build again.  docs/codegen.md explains this file.\n *\n"
          " * The resolved spec (what `shardc check` prints) is program.spec_text, at the end.\n"
          " *\n * The plan (`shardc plan`):\n *\n", name, SHARDC_VERSION);
    comment_text(o, " *  ", capture_text(report_fn, mp));
    sput(o, " */\n#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n\n#include \"shardrt.h\"\n\n");
    if (x) sf(o, "/* the user-defined activation (docs/custom-ops.md) */\n#include \"%s\"\n\n", util_abs_path(x->header));
    double dloss = 1.0 / ((double)p->T * (double)p->m * (double)p->dp);
    sf(o, "/* The model and the microbatch, llm.c's names (per rank). */\n"
          "enum {\n"
          "    B = %lld,        /* sequences per microbatch */\n"
          "    T = %lld,        /* tokens per sequence */\n"
          "    N = B * T,       /* tokens per microbatch */\n"
          "    C = %lld,        /* hidden */\n"
          "    NH = %lld,       /* attention heads */\n"
          "    NKV = %lld,      /* key/value heads */\n"
          "    HS = %lld,       /* head size */\n"
          "    QD = NH * HS,    /* query width */\n"
          "    KVD = NKV * HS,  /* key (and value) width */\n"
          "    QKV = QD + 2 * KVD,\n"
          "    LDQ = %s,       /* elements between two tokens' queries */\n"
          "    LDKV = %s,      /* ... keys and values */\n"
          "    FF = %lld,       /* MLP width */\n"
          "    V = %lld,        /* vocabulary */\n"
          "    VP = %lld,       /* vocabulary rows in memory (padded) */\n"
          "    ZERO = %d,       /* ZeRO stage */\n"
          "    WB = %d,         /* bytes of a working-precision element */\n"
          "    GB = %d,         /* bytes of a gradient element */\n"
          "    NROLES = %d,     /* parameter roles (the part tables' columns) */\n"
          "};\n",
       (long long)p->b, (long long)m->s, (long long)m->h, (long long)(m->a / p->tp), (long long)model_kv_rank(m),
       (long long)m->hd, m->family == FAM_GPT ? "QKV" : "QD", m->family == FAM_GPT ? "QKV" : "KVD",
       (long long)(m->ffn / p->tp), (long long)m->V, (long long)(m->Vpad / p->tp), p->zero, p->wbytes,
       p->gbytes, R_NROLES);
    if (p->tpc > 1)     /* under sequence parallelism a chunk is NR rows of each tp rank's tokens */
        sf(o, "enum { NR = N / %lld };  /* tp_comm_overlap = full: the token rows of a chunk of a row-parallel GEMM%s */\n",
           (long long)(p->tpc * (p->T_sp < p->T ? p->tp : 1)), p->T_sp < p->T ? ", on one tp rank's tokens" : "");
    sput(o, "enum {");
    for (int r = 0; r < R_NROLES; r++) sf(o, "%s%s = %d", r ? ", " : " ", role_c[r], r);
    sput(o, " };\n");
    sf(o, "#define WDT %s      /* the working precision: parameters, activations */\n"
          "#define GDT %s      /* the gradients */\n"
          "#define EPS %s     /* the norms' epsilon */\n"
          "#define THETA %s   /* RoPE's base */\n"
          "#define DLOSS %.9ef  /* d(step loss)/d(token loss): 1 / (N · microbatches · dp) */\n\n",
       dt_c[s->precision.dtype], dt_c[s->precision.grad_reduce], flt(s->model.norm_eps),
       flt(s->model.rope_theta > 0 ? s->model.rope_theta : 10000.0), dloss);
    sf(o, "/* A view of n elements of dt at a device arena offset (bytes). */\n"
            "#define DV(off, n, dt) srt_dview(c, (off), (n), (dt))\n"
            "/* ... of the pinned host arena (offload). */\n"
            "#define HV(off, n, dt) srt_hview(c, (off), (n), (dt))\n"
            "/* No tensor (an absent bias, an unused gradient). */\n"
            "#define NONE ((srt_t){NULL, 0, SRT_F32})\n"
            "/* Parameter / gradient of role r of the part w (a tr_part_t). */\n"
            "#define PW(r, n) DV(w->w[r], (n), WDT)\n"
            "#define PG(r, n) DV(w->g[r]%s, (n), GDT)\n"
            "/* The view of t from element k on (q, k, v inside one buffer). */\n"
            "#define AT(t, k) ((srt_t){(char *)(t).p + (int64_t)(k) * WB, (t).n - (int64_t)(k), (t).dt})\n%s\n"
            "typedef srt_segment trainer_seg;  /* shardrt.h: the flat segments */\n"
            "/* Events: each stream's records take the ids of its ring (base, ring) in\n"
            " * turn; n counts the records so far.  REC(S): record stream S's next event;\n"
            " * WAIT(S, FROM, k): stream S waits for the k-th latest record on FROM. */\n"
            "typedef struct { int n[SRT_NSTREAMS], base[SRT_NSTREAMS], ring[SRT_NSTREAMS];%s } tr_count;\n"
            "#define EVENT(n, s, k) ((n)->base[s] + (k) %% (n)->ring[s])\n"
            "#define REC(s) srt_event_record(c, SRT_##s, EVENT(n, SRT_##s, n->n[SRT_##s]++))\n"
            "#define WAIT(s, from, k) srt_event_wait(c, SRT_##s, EVENT(n, SRT_##from, n->n[SRT_##from] - (k)))\n"
            "%s"

            "enum { OWN_SUMSQ, OWN_OPT, OWN_D2H, OWN_H2D };\n\n",
       slots ? " + (int64_t)(a->mb % w->gw[r]) * w->gs[r]" : "",
       p->tpc > 1 ? "/* Token-row chunk j of t, (NR, w) of (N, w) (tp_comm_overlap = full). */\n"
                    "#define ROWS(t, j, w) ((srt_t){(char *)(t).p + (int64_t)(j) * NR * (w) * WB, (int64_t)NR * (w), (t).dt})\n"
                  : "",
       mw ? " int ev[NROLES];" : "",
       mw ? "/* ZeRO-3 waits per module, as DeepSpeed: AWAIT(R, FROM, k) hands the next\n"
            " * layer call (its ev) the k-th latest record on FROM, the all-gather of the\n"
            " * module whose weight has role R; UWAIT(R) in the layer function waits for\n"
            " * it just before that module's first kernel (ev holds event + 1; 0: none). */\n"
            "#define AWAIT(r, from, k) (n->ev[r] = 1 + EVENT(n, SRT_##from, n->n[SRT_##from] - (k)))\n"
            "#define UWAIT(r) do { if (a->ev[r]) srt_event_wait(c, SRT_COMPUTE, a->ev[r] - 1), a->ev[r] = 0; } while (0)\n"
          : "");
}

/* The rows of a class's srt_buffer table: its persistent buffers, then a
 * block per kind of transient buffer. */
static int buffer_rows(const ClassMem *cm)
{
    int n = 0;
    for (int i = 0; i < cm->sched->nbufs; i++) n += cm->sched->bufs[i].persistent;
    for (int f = 0; f < cm->nfams; f++) n += cm->fams[f].ninst > 0;
    return n;
}

/* The srt_program and main. */
static void gen_program(const Plan *mp, const char *name, Str *o, bool *has_eval)
{
    const Spec *s = mp->spec;
    const Model *m = &mp->model;
    const Partition *p = &mp->part;
    sf(o, "static const srt_class classes[%d] = {\n", mp->mem.nclasses);
    for (int i = 0; i < mp->mem.nclasses; i++) {
        const ClassMem *cm = &mp->mem.classes[i];
        const RankClass *rc = cm->cls;
        sf(o, "    {%d, s%d_params, %d, %lld, %lld, s%d_buffers, %d, %lld, %lld, %lld, s%d_step, %s, s%d_segs, %d, %d},\n",
           rc->stage, i, rc->ntensors, (long long)rc->padded, (long long)rc->shard, i, buffer_rows(cm),
           (long long)cm->arena[SPACE_DEVICE], (long long)cm->arena[SPACE_HOST], (long long)cm->arena[SPACE_NVME], i,
           has_eval[i] ? arena_printf(&g_arena, "s%d_eval", i) : "NULL", i, rc->nsegs, cm->sched->nops);
    }
    sput(o, "};\n\n");
    gen_gemms(o);
    sf(o, "static const srt_program program = {\n"
          "    .abi = SRT_ABI_VERSION,\n"
          "    .name = %s,\n"
          "    .spec_text = %s,\n", c_string(name), c_string(capture_text(canon_fn, s)));
    sf(o, "    .family = %d, .layers = %lld, .hidden = %lld, .heads = %lld, .kv_heads = %lld,\n"
          "    .vocab = %lld, .vocab_pad = %lld, .seq_len = %lld, .ffn = %lld,\n",
       m->family, (long long)m->l, (long long)m->h, (long long)m->a, (long long)m->kv, (long long)m->V,
       (long long)m->Vpad, (long long)m->s, (long long)m->ffn);
    sf(o, "    .tp = %lld, .pp = %lld, .dp = %lld, .world = %lld, .rank_order = %d, .zero = %d, .dtype = %s,\n",
       (long long)p->tp, (long long)p->pp, (long long)p->dp, (long long)p->world, p->order, p->zero,
       dt_c[s->precision.dtype]);
    sf(o, "    .micro_batch = %lld, .microbatches = %lld, .global_batch = %lld,\n", (long long)p->b, (long long)p->m,
       (long long)s->train.global_batch);
    sf(o, "    .steps = %lld, .seed = %lld, .warmup = %lld, .decay_steps = %lld, .eval_every = %lld, .log_every = %lld,\n",
       (long long)s->train.steps, (long long)s->train.seed, (long long)s->train.warmup, (long long)s->train.decay_steps,
       (long long)s->train.eval_every, (long long)s->train.log_every);
    sf(o, "    .comm_timeout = %.17g,\n", s->train.comm_timeout);
    sf(o, "    .optimizer = %d, .lr = %.17g, .min_lr = %.17g, .beta1 = %.17g, .beta2 = %.17g, .eps = %.17g,\n"
          "    .weight_decay = %.17g, .momentum = %.17g, .grad_clip = %.17g, .lr_schedule = %d,\n",
       s->train.optimizer, s->train.lr, s->train.min_lr, s->train.beta1, s->train.beta2, s->train.eps,
       s->train.weight_decay, s->train.momentum, s->train.grad_clip, s->train.lr_schedule);
    sf(o, "    .data_train = %s, .data_val = %s, .data_format = %d,\n", c_string(s->data.train),
       s->data.val && *s->data.val ? c_string(s->data.val) : "NULL", s->data.format);
    if (s->precision.dtype == DT_FP16) {
        bool dyn = s->precision.loss_scale == LS_DYNAMIC;
        sf(o, "    .loss_scaling = %s, .ls_scale = %.17g, .ls_min = %.17g, .ls_window = %lld, .ls_hysteresis = %lld,\n",
           dyn ? "SRT_LOSS_SCALE_DYNAMIC" : "SRT_LOSS_SCALE_STATIC",
           dyn ? ldexp(1.0, (int)s->precision.initial_scale_power) : s->precision.static_scale,
           s->precision.min_scale, (long long)s->precision.window, (long long)s->precision.hysteresis);
    }
    const char *nvme_path = s->offload.optimizer == OFF_NVME ? s->offload.optimizer_path
                          : s->offload.params == OFF_NVME ? s->offload.params_path : NULL;
    sf(o, "    .aio_block_size = %lld, .aio_queue_depth = %lld, .nvme_path = %s,\n", (long long)s->offload.aio_block_size,
       (long long)s->offload.aio_queue_depth, nvme_path && *nvme_path ? c_string(nvme_path) : "NULL");
    sf(o, "    .model_flops_per_step = %.17g, .peak_flops = %.17g,\n    .classes = classes,\n",
       m->flops_model_step, cost_mfu_peak(s));
    sf(o, "    .gemms = %s, .ngemms = %d,\n};\n\n", em_ngemms ? "gemm_shapes" : "NULL", em_ngemms);
    sput(o, "int main(int argc, char **argv)\n{\n    return srt_main(argc, argv, &program);\n}\n");
}

/* ---- the generated file: types, part tables, names -------------------------------------- */

/* The srt_stream constant of a schedule stream. */
static const char *stream_c(int st)
{
    static const char *const names[NSTREAMS] = {"SRT_COMPUTE", "SRT_TP_COMM", "SRT_DP_COMM", "SRT_PP_COMM",
                                                "SRT_COPY", "SRT_HOST"};
    if (st < 0 || st >= NSTREAMS) die("emit: no stream %d", st);
    return names[st];
}

/* The argument types of the trainer's functions (one each, for every class). */
static void gen_types(const CE *e, Str *o)
{
    sput(o, "/* Where the parameters (w) and gradients (g) of a part of the model (the\n"
            " * embeddings, a layer, the head) are, by role: byte offsets in the device\n"
            " * arena, the plan's for the whole step (a gathered ZeRO-3 unit has one place;\n"
            " * a gradient bucket's places are gw, gs bytes apart: microbatch mb's, mb % gw). */\n");
    sf(o, "typedef struct { int64_t w[NROLES], g[NROLES];%s } tr_part_t;\n\n",
       e->grad_slots ? " int gw[NROLES]; int64_t gs[NROLES];" : "");
    sput(o, "/* The arguments of the trainer's functions (offsets are bytes in the device\n"
            " * arena; -1: none). */\n");
    if (e->uses[K_LOAD]) sput(o, "typedef struct { srt_stream st; int mb; int64_t tok, tgt; } tr_load_t;\n");
    if (e->uses[K_EMBED_FWD]) sput(o, "typedef struct { const tr_part_t *p; int64_t x, tok; } tr_embed_fwd_t;\n");
    if (e->uses[K_FWD] || e->uses[K_RECOMPUTE]) {
        if (lower_sp(e))    /* part: SUB_ATTN / SUB_MLP; r1: the part's gathered norm output; grads: GR_NORM
                               for the part's norm op on this rank's tokens */
            sf(o, "typedef struct { const tr_part_t *p; int64_t x, saved, y, scratch; int part; int64_t r1; int grads;%s } "
                  "tr_fwd_t;\n", e->p->tpc > 1 ? " int rows;" : "");   /* rows: tp_comm_overlap = full's chunk */
        else if (e->p->tpc > 1)  /* ... and grads: GR_HEAD / GR_ROWS, rows: the chunk (tp_comm_overlap = full) */
            sput(o, "typedef struct { const tr_part_t *p; int64_t x, saved, y, scratch; int part; int64_t r1; int grads, rows; } "
                    "tr_fwd_t;\n");
        else if (e->p->tp > 1)   /* part: SUB_ATTN / SUB_MLP; r1: the attention part's output (partial, then reduced) */
            sput(o, "typedef struct { const tr_part_t *p; int64_t x, saved, y, scratch; int part; int64_t r1; } tr_fwd_t;\n");
        else    /* ev: the events of its modules' gathers (ZeRO-3's per-module waits, tr_count) */
            sf(o, "typedef struct { const tr_part_t *p; int64_t x, saved, y, scratch;%s } tr_fwd_t;\n",
               e->modwaits ? " int *ev;" : "");
    }
    if (e->uses[K_HEAD] || e->uses[K_HEAD_EVAL])
        sput(o, "typedef struct { const tr_part_t *p; int mb; int64_t y, tgt, logits, scratch, dy; } tr_head_t;\n");
    if (e->uses[K_BWD])     /* part, d1: as the forward's (tp > 1); grads: OpGrads (tp_comm_overlap);
                               attn: selective checkpointing's recomputed core */
        sf(o, "typedef struct { const tr_part_t *p; int mb; int64_t dy, x, saved, dx, scratch;%s%s%s%s } tr_bwd_t;\n",
           e->p->tp > 1 ? " int part; int64_t d1;" : "", e->p->wsplit || lower_sp(e) ? " int grads;" : "",
           e->pol == CKPT_SELECTIVE ? " int64_t attn;" : "", e->modwaits ? " int *ev;" : "");
    if (e->uses[K_EMBED_BWD]) sput(o, "typedef struct { const tr_part_t *p; int mb; int64_t dx, tok; } tr_embed_bwd_t;\n");
    if (e->uses[K_GATHER]) sput(o, "typedef struct { srt_stream st; int64_t out, in, n, shard; } tr_gather_t;\n");
    if (e->uses[K_REDUCE]) sput(o, "typedef struct { srt_stream st; int mode; int64_t in, out, n, shard; } tr_reduce_t;\n");
    if (e->uses[K_PARAM_GATHER])
        sput(o, "typedef struct { srt_stream st; int64_t out, in, n, shard; } tr_param_gather_t;\n");
    if (e->uses[K_ZERO]) sput(o, "typedef struct { srt_stream st; int64_t off, n; } tr_zero_t;\n");
    if (e->uses[K_TP]) sput(o, "typedef struct { srt_stream st; int kind, grad; int64_t out, in, n; } tr_tp_t;\n");
    if (e->uses[K_ATTN]) sput(o, "typedef struct { int64_t saved, attn; } tr_attn_t;\n");
    if (e->uses[K_CKPT])    /* mode: tr_ckpt; dst, src: byte offsets (device or host arena); n: elements */
        sput(o, "typedef struct { srt_stream st; int mode; int64_t dst, src, n; } tr_ckpt_t;\n");
    if (e->uses[K_PP])      /* kind 0 send, 1 receive (activations, peer: a pp rank), 2 the tied all-reduce */
        sput(o, "typedef struct { srt_stream st; int kind; int64_t off, n, peer; } tr_pp_t;\n");
    if (e->uses[K_FETCH])   /* src: the shard's offset where it lives; swap: the host staging of NVMe */
        sput(o, "typedef struct { srt_stream st; int64_t dst, src, n, swap; } tr_fetch_t;\n");
    sput(o, "\n");
}

/* An offloaded parameter shard's slice to the device (ZeRO-3 parameter offload). */
static void gen_fetch_fn(const CE *e, Str *o)
{
    sput(o, "/* Parameter offload: a fetch unit's shard to the device before its gather. */\n"
            "static void tr_fetch(srt_ctx *c, const tr_fetch_t *a)\n{\n");
    if (e->params_space == SPACE_NVME) {
        rt_call(o, "    ", RT_nvme_read, "a->st", "from the NVMe shard to the host staging", "HV(a->swap, a->n, WDT)",
                "a->src", NULL);
        rt_call(o, "    ", RT_copy, "a->st", NULL, "DV(a->dst, a->n, WDT)", "HV(a->swap, a->n, WDT)", NULL);
    } else {
        rt_call(o, "    ", RT_copy, "a->st", NULL, "DV(a->dst, a->n, WDT)",
                e->params_space == SPACE_HOST ? "HV(a->src, a->n, WDT)" : "DV(a->src, a->n, WDT)", NULL);
    }
    sput(o, "}\n\n");
}

/* One group's row: parameter and gradient offsets by role; end: what
 * follows the closing brace (",\n" in a table, ";\n" alone). */
static void gen_group_at(Str *o, const Group *g, bool slots, const char *base, int64_t w0, int64_t g0,
                         const char *comment, const char *end);

static void gen_group_row(Str *o, const Group *g, bool slots, const char *comment, const char *end)
{
    gen_group_at(o, g, slots, NULL, 0, 0, comment, end);
}

/* The offset v as C: "123", or relative to a base: "(W) + 24576". */
static const char *rel_c(const char *base, int64_t v, int64_t at)
{
    if (!base) return arena_printf(&g_arena, "%lld", (long long)v);
    return v == at ? arena_printf(&g_arena, "(%s)", base) : arena_printf(&g_arena, "(%s) + %lld", base, (long long)(v - at));
}

/* A part row; base: its offsets relative to (W) at w0 and (G) at g0 (a macro's body), or NULL. */
static void gen_group_at(Str *o, const Group *g, bool slots, const char *base, int64_t w0, int64_t g0,
                         const char *comment, const char *end)
{
    Str w = {0}, gg = {0}, gw = {0}, gs = {0};
    for (int r = 0; r < R_NROLES; r++) {
        if (g->ct[r] < 0) continue;
        sf(&w, "%s[%s] = %s", w.n ? ", " : "", role_c[r], rel_c(base ? "W" : NULL, g->woff[r], w0));
        sf(&gg, "%s[%s] = %s", gg.n ? ", " : "", role_c[r], rel_c(base ? "G" : NULL, g->goff[r], g0));
        sf(&gw, "%s[%s] = %d", gw.n ? ", " : "", role_c[r], g->gw[r]);
        sf(&gs, "%s[%s] = %lld", gs.n ? ", " : "", role_c[r], (long long)g->gsize[r]);
    }
    sf(o, "{.w = {%s}, .g = {%s}", w.p ? w.p : "0", gg.p ? gg.p : "0");
    if (slots) sf(o, ", .gw = {%s}, .gs = {%s}", gw.p ? gw.p : "0", gs.p ? gs.p : "0");
    if (comment) sf(o, "}%s  /* %s */\n", end, comment);
    else sf(o, "}%s\n", end);
    free(w.p), free(gg.p), free(gw.p), free(gs.p);
}

/* Do the layers lay out their parameters and gradients alike (each at the
 * same distance from its first; with slots, the same places)?  Sets that
 * first one's role. */
static bool layers_alike(const CE *e, bool slots, int *first)
{
    *first = -1;
    for (int r = 0; r < R_NROLES && *first < 0; r++)
        if (e->layer[0].ct[r] >= 0) *first = r;
    if (*first < 0) return false;
    const Group *a = &e->layer[0];
    for (int li = 1; li < e->nl; li++) {
        const Group *b = &e->layer[li];
        for (int r = 0; r < R_NROLES; r++) {
            if ((a->ct[r] < 0) != (b->ct[r] < 0)) return false;
            if (a->ct[r] < 0) continue;
            if (b->woff[r] - b->woff[*first] != a->woff[r] - a->woff[*first] ||
                b->goff[r] - b->goff[*first] != a->goff[r] - a->goff[*first] ||
                (slots && (b->gw[r] != a->gw[r] || b->gsize[r] != a->gsize[r])))
                return false;
        }
    }
    return true;
}

/* The class's part tables: the embeddings, each layer, the head. */
static void gen_part_tables(const CE *e, bool slots, Str *o)
{
    if (e->ci == 0) sput(o, "/* Where stage 0's parameters and gradients are (tr_part_t). */\n");
    if (e->uses[K_EMBED_FWD] || e->uses[K_EMBED_BWD]) {
        sf(o, "static const tr_part_t %s_PRE = ", e->PX);
        gen_group_row(o, &e->pre, slots, "the embeddings", ";");
    }
    if (e->uses[K_HEAD]) {
        sf(o, "static const tr_part_t %s_POST = ", e->PX);
        gen_group_row(o, &e->post, slots, "the final norm and the head", ";");
    }
    if (e->nl && (e->uses[K_FWD] || e->uses[K_BWD])) {
        int r0;
        bool alike = layers_alike(e, slots, &r0);
        if (alike) {
            sf(o, "/* A layer's row: its parameters from W on, its gradients from G on (alike in every layer). */\n"
                  "#define %s_ROW(W, G) ", e->PX);
            gen_group_at(o, &e->layer[0], slots, "", e->layer[0].woff[r0], e->layer[0].goff[r0], NULL, "");
        }
        sf(o, "static const tr_part_t %s_LAYER[%d] = {\n", e->PX, e->nl);
        for (int li = 0; li < e->nl; li++) {
            const char *cmt = arena_printf(&g_arena, "layer %d", lower_slot_layer(e, li));
            if (alike)
                /* LL: an int constant plus the row's offsets could overflow int
                 * (past 2 GiB: Llama 1B's gradients on an H200, 2026-12-04) */
                sf(o, "    %s_ROW(%lldLL, %lldLL),  /* %s */\n", e->PX, (long long)e->layer[li].woff[r0],
                   (long long)e->layer[li].goff[r0], cmt);
            else
                sput(o, "    "), gen_group_row(o, &e->layer[li], slots, cmt, ",");
        }
        sput(o, "};\n");
    }
    sput(o, "\n");
}

/* "(l)" or "((l) % lm)": a macro's layer term. */
static const char *mod_term(const char *v, int mod, int limit)
{
    return mod >= limit ? arena_printf(&g_arena, "(%s)", v) : arena_printf(&g_arena, "((%s) %% %d)", v, mod);
}

/* The macros that turn a buffer's layer, microbatch, chunk or index into its
 * offset (the memory plan's arithmetic), with their tables, and the events'. */
static void gen_names(const CE *e, Str *o)
{
    int maxl = 0;
    for (int k = 0; k < e->rc->nchunks; k++)
        if (e->rc->chunks[k].nlayers > maxl) maxl = e->rc->chunks[k].nlayers;
    int m = (int)e->p->m;
    if (e->ci == 0)
        sput(o, "/* Stage 0's activations and other transient buffers, by layer l (of its\n"
                " * chunk), microbatch mb, chunk ch or index: each kind laid out by the memory\n"
                " * plan at a base, with a place for each of its layers and microbatches that\n"
                " * can be live at once (ch: a colouring of the chunks' microbatches). */\n");
    for (int k = 0; k < e->nnames; k++) {
        const BufName *nm = &e->names[k];
        if (nm->indexed) {      /* a table of bases; with several places, their count and size */
            int n = 0;
            for (int i = 0; i < nm->nidx; i++)
                if (nm->fams[i] >= 0) n = i + 1;
            for (int t = 0; t < (nm->uses_mb ? 3 : 1); t++) {
                sf(o, "static const int64_t %s_%s%s[%d] = {", e->PX, nm->c, t == 0 ? "" : t == 1 ? "_W" : "_SIZE", n);
                for (int i = 0; i < n; i++) {
                    const BufFamily *fa = nm->fams[i] >= 0 ? &e->cm->fams[nm->fams[i]] : NULL;
                    sf(o, "%s%lld", i ? ", " : "", (long long)(!fa ? (t == 1 ? 1 : -1) : t == 0 ? fa->base : t == 1 ? fa->w : fa->size));
                }
                sput(o, "};\n");
            }
            if (nm->uses_mb)
                sf(o, "#define %s(i, mb) (%s_%s[i] + ((mb) %% %s_%s_W[i]) * %s_%s_SIZE[i])\n", nm->c, e->PX, nm->c, e->PX,
                   nm->c, e->PX, nm->c);
            else
                sf(o, "#define %s(i) (%s_%s[i])\n", nm->c, e->PX, nm->c);
            continue;
        }
        const BufFamily *fa = &e->cm->fams[nm->fam];
        if (fa->slot) {     /* a colouring of the chunks' microbatches (one table per colouring) */
            const char *table = NULL;
            for (int j = 0; j < k && !table; j++) {
                const BufName *o2 = &e->names[j];
                const BufFamily *f2 = o2->indexed ? NULL : &e->cm->fams[o2->fam];
                if (f2 && f2->slot && !memcmp(f2->slot, fa->slot, sizeof(int) * (size_t)(e->rc->nchunks * m)))
                    table = arena_printf(&g_arena, "%s_%s_SLOT", e->PX, o2->c);
            }
            if (!table) {
                table = arena_printf(&g_arena, "%s_%s_SLOT", e->PX, nm->c);
                sf(o, "static const short %s[%d] = {", table, e->rc->nchunks * m);
                for (int i = 0; i < e->rc->nchunks * m; i++) sf(o, "%s%d", i ? ", " : "", fa->slot[i]);
                sput(o, "};\n");
            }
            sf(o, "#define %s(ch, l, mb) (%lldLL + ((int64_t)%s[(ch) * %d + (mb)] * %d + (l)) * %lldLL)\n", nm->c,
               (long long)fa->base, table, m, fa->lm, (long long)fa->size);
            continue;
        }
        Str args = {0}, body = {0};
        if (nm->cfams) {    /* a base per chunk */
            sf(o, "static const int64_t %s_%s[%d] = {", e->PX, nm->c, e->rc->nchunks);
            for (int c = 0; c < e->rc->nchunks; c++)
                sf(o, "%s%lld", c ? ", " : "", nm->cfams[c] >= 0 ? (long long)e->cm->fams[nm->cfams[c]].base : -1LL);
            sput(o, "};\n");
            sf(&args, "ch");
            sf(&body, "%s_%s[ch]", e->PX, nm->c);
        } else {
            sf(&body, "%lldLL", (long long)fa->base);
        }
        if (nm->uses_l) {
            sf(&args, "%sl", args.n ? ", " : "");
            sf(&body, " + %s * %lldLL", mod_term("l", fa->lm, maxl), (long long)(fa->w * fa->size));
        }
        if (nm->uses_mb) {
            sf(&args, "%smb", args.n ? ", " : "");
            sf(&body, " + %s * %lldLL", mod_term("mb", fa->w, m), (long long)fa->size);
        }
        if (args.n) sf(o, "#define %s(%s) (%s)\n", nm->c, args.p, body.p);
        else sf(o, "#define %s %s\n", nm->c, body.p);
        free(args.p), free(body.p);
    }
    sput(o, "\n");
}

/* Undefines the class's macros (the next class has its own). */
static void gen_undefs(const CE *e, Str *o)
{
    for (int k = 0; k < e->nnames; k++) sf(o, "#undef %s\n", e->names[k].c);
    sput(o, "\n");
}

/* ---- the generated file: calls and loops ----------------------------------------------- */

enum { MAX_DEPTH = 16 };

/* An integer of a call inside loops: c + Σ k[d] · (the variable of loop d). */
typedef struct Lin { int64_t c, k[MAX_DEPTH]; } Lin;

/* The printer's state: the enclosing loops' variables. */
typedef struct Printer {
    const CE *e;
    const Call *calls;
    int ncalls;
    const Folded *f;
    Str *out;
    int depth;
    const char *var[MAX_DEPTH];
    signed char base[MAX_DEPTH];    /* per variable: what it counts (IntType) */
    const char **unit_name;     /* per unit: its function's name */
    int params;                 /* the first variables are a unit function's parameters */
    bool flat;                  /* the straight-line form: every call says what it serves */
} Printer;

/* A Lin as C: "l + 1", "11 - l", "2 * mb + 3", "0". */
static const char *lin_c(const Printer *pr, const Lin *x)
{
    Str s = {0};
    bool lead_neg = false;
    for (int d = 0; d < pr->depth; d++) {
        int64_t k = x->k[d];
        if (!k) continue;
        /* int variables: a large step multiplies in 64 bits */
        const char *ll = k >= 65536 || k <= -65536 ? "LL" : "";
        if (!s.n) {
            lead_neg = k < 0;
            if (k == 1 || k == -1) sf(&s, "%s", pr->var[d]);
            else sf(&s, "%lld%s * %s", (long long)(k < 0 ? -k : k), ll, pr->var[d]);
        } else {
            if (k == 1 || k == -1) sf(&s, " %c %s", k < 0 ? '-' : '+', pr->var[d]);
            else sf(&s, " %c %lld%s * %s", k < 0 ? '-' : '+', (long long)(k < 0 ? -k : k), ll, pr->var[d]);
        }
    }
    const char *r;
    if (!s.n) r = arena_printf(&g_arena, "%lld", (long long)x->c);
    else if (lead_neg && x->c) r = arena_printf(&g_arena, "%lld - %s", (long long)x->c, s.p);
    else if (lead_neg) r = arena_printf(&g_arena, "-%s", s.p);
    else if (x->c) r = arena_printf(&g_arena, "%s %c %lld", s.p, x->c < 0 ? '-' : '+', (long long)(x->c < 0 ? -x->c : x->c));
    else r = arena_strdup(&g_arena, s.p);
    free(s.p);
    return r;
}

/* Is a Lin identically zero? */
static bool lin_zero(const Printer *pr, const Lin *x)
{
    for (int d = 0; d < pr->depth; d++)
        if (x->k[d]) return false;
    return x->c == 0;
}

/* One argument as C; its integers' Lins from *at on. */
static const char *arg_c(const Printer *pr, const Arg *a, const Lin *lin, int *at)
{
    const CE *e = pr->e;
    switch (a->kind) {
    case A_INT: return lin_c(pr, &lin[(*at)++]);
    case A_TEXT: return a->text;
    case A_ROW:
        if (a->name == 0) return arena_printf(&g_arena, "&%s_PRE", e->PX);
        if (a->name == 1) return arena_printf(&g_arena, "&%s_POST", e->PX);
        return arena_printf(&g_arena, "&%s_LAYER[%s]", e->PX, lin_c(pr, &lin[(*at)++]));
    case A_EVENT:   /* a record: its stream; a wait: its record's stream, how many back */
        if (a->v[1] < 0) return stream_c(a->name) + 4;
        return arena_printf(&g_arena, "%s, %s", stream_c(a->name) + 4, lin_c(pr, &lin[(*at)++]));
    case A_BUF: {
        const BufName *nm = &e->names[a->name];
        Str s = {0};
        sput(&s, nm->c);
        if (nm->indexed && nm->uses_mb) {
            const char *i = lin_c(pr, &lin[(*at)++]);
            sf(&s, "(%s, %s)", i, lin_c(pr, &lin[(*at)++]));
        } else if (nm->indexed) {
            sf(&s, "(%s)", lin_c(pr, &lin[(*at)++]));
        } else if (nm->uses_c || nm->uses_l || nm->uses_mb) {
            sput(&s, "(");
            int n = 0;
            if (nm->uses_c) sf(&s, "%s%s", n++ ? ", " : "", lin_c(pr, &lin[(*at)++]));
            if (nm->uses_l) sf(&s, "%s%s", n++ ? ", " : "", lin_c(pr, &lin[(*at)++]));
            if (nm->uses_mb) sf(&s, "%s%s", n++ ? ", " : "", lin_c(pr, &lin[(*at)++]));
            sput(&s, ")");
        }
        const Lin *extra = &lin[(*at)++];
        if (!lin_zero(pr, extra)) sf(&s, " + %s", lin_c(pr, extra));
        const char *r = arena_strndup(&g_arena, s.p, s.n);
        free(s.p);
        return r;
    }
    default: die("emit: argument kind %d", a->kind);
    }
}

/* The trainer's functions by call kind, and the row type each takes. */
static const char *const fn_name[NFNKINDS] = {
    [K_LOAD] = "load", [K_EMBED_FWD] = "embed_fwd", [K_FWD] = "fwd", [K_RECOMPUTE] = "recompute", [K_ATTN] = "attn",
    [K_HEAD] = "head", [K_HEAD_EVAL] = "head_eval", [K_BWD] = "bwd", [K_EMBED_BWD] = "embed_bwd", [K_GATHER] = "gather",
    [K_REDUCE] = "reduce", [K_PARAM_GATHER] = "param_gather", [K_ZERO] = "zero", [K_TP] = "tp", [K_PP] = "pp",
    [K_CKPT] = "ckpt", [K_FETCH] = "fetch",
};
static const char *const fn_type[NFNKINDS] = {
    [K_LOAD] = "load", [K_EMBED_FWD] = "embed_fwd", [K_FWD] = "fwd", [K_RECOMPUTE] = "fwd", [K_ATTN] = "attn",
    [K_HEAD] = "head", [K_HEAD_EVAL] = "head", [K_BWD] = "bwd", [K_EMBED_BWD] = "embed_bwd", [K_GATHER] = "gather",
    [K_REDUCE] = "reduce", [K_PARAM_GATHER] = "param_gather", [K_ZERO] = "zero", [K_TP] = "tp", [K_PP] = "pp",
    [K_CKPT] = "ckpt", [K_FETCH] = "fetch",
};

/* Indentation for a depth. */
static const char *indent(int depth)
{
    static const char sp[] = "                                                                ";
    int n = 4 * (depth + 1);
    return sp + (int)sizeof sp - 1 - (n < (int)sizeof sp - 1 ? n : (int)sizeof sp - 1);
}

/* One call (its integers' Lins): outside loops with a comment naming what it
 * touches (in a loop the code says it); guard: a condition it runs under, or NULL. */
static void print_call(Printer *pr, const Call *c, const Lin *lin, const char *guard)
{
    const char *ind = indent(pr->depth - pr->params);
    Str *o = pr->out;
    /* outside loops and units, what the call serves (an event call says it,
     * but in the straight-line form) */
    bool event = c->kind == K_RECORD || c->kind == K_WAIT;
    const char *cmt = pr->depth || (event && !pr->flat) ? "" : arena_printf(&g_arena, "  /* %s */", c->label);
    const char *g = guard ? arena_printf(&g_arena, "if (%s) ", guard) : "";
    if (c->kind == K_CODE) {
        sf(o, "%s%s%s  /* %s */\n", ind, g, c->code, c->label);
        return;
    }
    int at = 0;
    const char *a[MAX_ARGS];
    for (int i = 0; i < c->nargs; i++) a[i] = arg_c(pr, &c->args[i], lin, &at);
    if (c->kind == K_RECORD) {
        sf(o, "%s%sREC(%s);%s\n", ind, g, a[1], cmt);
        return;
    }
    if (c->kind == K_WAIT && c->nargs > 2) {    /* an inner wait: the next layer call's module's */
        sf(o, "%s%sAWAIT(%s, %s);%s\n", ind, g, a[2], a[1], cmt);
        return;
    }
    if (c->kind == K_WAIT) {
        sf(o, "%s%sWAIT(%s, %s);%s\n", ind, g, a[0] + 4, a[1], cmt);
        return;
    }
    if (c->kind == K_PART) sf(o, "%s%s%s_part(c", ind, g, pr->e->px);
    else sf(o, "%s%str_%s(c, &(tr_%s_t){", ind, g, fn_name[c->kind], fn_type[c->kind]);
    for (int i = 0; i < c->nargs; i++) sf(o, "%s%s", i || c->kind == K_PART ? ", " : "", a[i]);
    sf(o, "%s);%s\n", c->kind == K_PART ? "" : "}", cmt);
}

static void print_elems(Printer *pr, const Elem *els, int n, const Lin *lin, const char *const *guard);

/* Names variable d (a loop's or a unit's parameter) after what it counts:
 * l, mb, ch or i, numbered when an enclosing one counts the same. */
static const char *var_name(Printer *pr, int d, int base)
{
    static const char *const letters[] = {[IT_LAYER] = "l", [IT_MB] = "mb", [IT_CHUNK] = "ch", [IT_OTHER] = "i"};
    int uses = 0;
    for (int k = 0; k < d; k++) uses += pr->base[k] == base;
    pr->base[d] = (signed char)base;
    return uses ? arena_printf(&g_arena, "%s%d", letters[base], uses + 1) : letters[base];
}

/* The loop variable of loop x (its integers' Lins at its first iteration):
 * named after what it counts when every integer that moves is a layer (or
 * every one a microbatch), each by +1 (or each by -1); else a counter i.
 * Sets the variable's start (a Lin) and direction. */
static const char *loop_var(Printer *pr, const Loop *x, const Elem *el, const Lin *lin, Lin *start, int *dir)
{
    int type = -1, d0 = 0, first = -1;
    bool named = true;
    for (int b = 0, j = 0; b < x->n; b++)
        for (int t = 0; t < x->body[b].nints; t++, j++) {
            int64_t d = x->delta[j];
            if (!d) continue;
            if (el->types[j] != IT_OTHER && (x->lo[b] || x->hi[b] != x->r)) continue;   /* counted from where it runs */
            if (first < 0) first = j, type = el->types[j], d0 = (int)d;
            if (el->types[j] != type || d != d0 || (d != 1 && d != -1) || type == IT_OTHER) named = false;
        }
    memset(start, 0, sizeof *start);
    *dir = 1;
    int base = IT_OTHER;
    if (named && first >= 0) *start = lin[first], *dir = d0, base = type;
    return var_name(pr, pr->depth, base);
}

/* The label of the op call i serves, or of the nearest call from i on in
 * direction dir that is no event (a wait's or a record's label names
 * another op). */
static const char *op_label(const Printer *pr, int i, int dir)
{
    for (int j = i; j >= 0 && j < pr->ncalls; j += dir)
        if (pr->calls[j].kind != K_RECORD && pr->calls[j].kind != K_WAIT) return pr->calls[j].label;
    return pr->calls[i].label;
}

/* The condition "iterations [lo, hi) of r" on variable v from start in direction dir, or NULL (all). */
static const char *guard_c(const Printer *pr, const char *v, const Lin *start, int dir, int lo, int hi, int r)
{
    Lin a = *start, b = *start;
    a.c += (int64_t)dir * lo, b.c += (int64_t)dir * hi;
    const char *ge = dir > 0 ? ">=" : "<=", *lt = dir > 0 ? "<" : ">";
    if (lo == 0 && hi == r) return NULL;
    if (hi == lo + 1) return arena_printf(&g_arena, "%s == %s", v, lin_c(pr, &a));
    if (lo == 0) return arena_printf(&g_arena, "%s %s %s", v, lt, lin_c(pr, &b));
    if (hi == r) return arena_printf(&g_arena, "%s %s %s", v, ge, lin_c(pr, &a));
    return arena_printf(&g_arena, "%s %s %s && %s %s %s", v, ge, lin_c(pr, &a), v, lt, lin_c(pr, &b));
}

/* A loop and its body (guard: a condition it runs under, or NULL). */
static void print_loop(Printer *pr, const Elem *el, const Lin *lin, const char *guard)
{
    const Loop *x = &pr->f->loops[el->id];
    if (pr->depth >= MAX_DEPTH) die("emit: loops nested too deep");
    Lin start;
    int dir;
    const char *v = loop_var(pr, x, el, lin, &start, &dir);
    const char *ind = indent(pr->depth - pr->params);
    Lin end = start;
    end.c += dir * x->r;
    /* a phase of the step (a loop at its top): the ops it runs from and to */
    const char *what = pr->depth ? "" : arena_printf(&g_arena, "  /* %s … %s */", op_label(pr, el->first, 1),
                                                     op_label(pr, el->last, -1));
    sf(pr->out, "%s%sfor (int %s = %s; %s %c %s; %s%s) {%s\n", ind, guard ? arena_printf(&g_arena, "if (%s) ", guard) : "",
       v, lin_c(pr, &start), v, dir > 0 ? '<' : '>', lin_c(pr, &end), v, dir > 0 ? "++" : "--", what);
    /* each integer: its value at the first iteration, advanced by delta per
     * iteration = delta·dir per unit of the variable, counted from start */
    Lin *in = arena_alloc(&g_arena, sizeof(Lin) * (size_t)(el->nints + 1));
    int d = pr->depth;
    for (int j = 0; j < el->nints; j++) {
        int64_t k = x->delta[j] * dir;
        in[j] = lin[j];
        in[j].c -= k * start.c;
        for (int t = 0; t < d; t++) in[j].k[t] -= k * start.k[t];
        in[j].k[d] = k;
    }
    /* the body's guards, in terms of the enclosing variables (as start is) */
    const char **g = arena_alloc(&g_arena, sizeof(char *) * (size_t)(x->n + 1));
    for (int j = 0; j < x->n; j++) g[j] = guard_c(pr, v, &start, dir, x->lo[j], x->hi[j], x->r);
    pr->var[pr->depth++] = v;
    print_elems(pr, x->body, x->n, in, g);
    pr->depth--;
    sf(pr->out, "%s}\n", ind);
}

/* Elements in order (lin: their integers' Lins, in order; guard: per element
 * the condition it runs under, or NULL). */
static void print_elems(Printer *pr, const Elem *els, int n, const Lin *lin, const char *const *guard)
{
    for (int i = 0, at = 0; i < n; at += els[i].nints, i++) {
        const char *g = guard ? guard[i] : NULL;
        if (els[i].loop) {
            print_loop(pr, &els[i], lin + at, g);
        } else if (els[i].unit) {
            sf(pr->out, "%s%s%s(c, n", indent(pr->depth - pr->params), g ? arena_printf(&g_arena, "if (%s) ", g) : "",
               pr->unit_name[els[i].id]);
            for (int j = 0; j < els[i].nints; j++) sf(pr->out, ", %s", lin_c(pr, &lin[at + j]));
            sput(pr->out, ");\n");
        } else {
            print_call(pr, &pr->calls[els[i].id], lin + at, g);
        }
    }
}

/* The name of a unit's function: what it does (a microbatch's forward, its
 * backward, both, or other work), its chunk where the stage has several,
 * made unique with a number. */
static const char *unit_fn_name(const CE *e, const Call *calls, const Unit *u, const char *what, int *code, int k)
{
    bool fwd = false, bwd = false, by_chunk = false;
    int chunk = -1;
    for (int i = u->first; i <= u->last; i++) {
        int k = calls[i].kind;
        bool f = k == K_FWD || k == K_EMBED_FWD, b = k == K_BWD || k == K_EMBED_BWD || k == K_HEAD;
        fwd |= f, bwd |= b;
        if (chunk < 0 && (f || b) && calls[i].op >= 0) chunk = e->s->ops[calls[i].op].chunk;
    }
    for (int q = 0; q < u->nparams; q++) by_chunk |= u->ptype[q] == IT_CHUNK;
    if (by_chunk) chunk = -1;   /* the chunk is a parameter */
    if (e->rc->nchunks < 2) chunk = -1;
    const char *base = arena_printf(&g_arena, "%s_%s%s%s", e->px, what, fwd && bwd ? "fwd_bwd" : fwd ? "fwd" : bwd ? "bwd" : "work",
                                    chunk >= 0 ? arena_printf(&g_arena, "_chunk%d", chunk) : "");
    /* numbered after the earlier units of the same name */
    code[k] = (fwd + 2 * bwd) * 1024 + chunk + 1;
    int same = 0;
    for (int j = 0; j < k; j++) same += code[j] == code[k];
    return same ? arena_printf(&g_arena, "%s_%d", base, same + 1) : base;
}

/* Writes calls [0, n) as code, folded into loops when asked: the body of a
 * function into body, the functions of its recurring units of work into
 * fns (what: their names' infix, "" for the step, "eval_"). */
static void gen_calls(const CE *e, Str *fns, Str *body, const Call *calls, int n, bool loops, const char *what)
{
    Folded f;
    loops_fold(e, calls, n, loops, &f);
    Printer pr = {.e = e, .calls = calls, .ncalls = n, .f = &f, .flat = !loops};
    pr.unit_name = arena_alloc(&g_arena, sizeof(char *) * (size_t)(f.nunits + 1));
    int *code = arena_alloc(&g_arena, sizeof(int) * (size_t)(f.nunits + 1));
    for (int k = 0; k < f.nunits; k++) {
        const Unit *u = &f.units[k];
        pr.unit_name[k] = unit_fn_name(e, calls, u, what, code, k);
        Str params = {0};
        bool events = false;
        for (int i = u->first; i <= u->last; i++) events |= calls[i].kind == K_RECORD || calls[i].kind == K_WAIT;
        pr.depth = 0;
        int vparam = u->nvar > 1 ? u->nparams - 1 : -1;   /* the variant */
        for (int q = 0; q < u->nparams; q++) {
            pr.var[q] = var_name(&pr, q, u->ptype[q]);
            if (q == vparam) pr.var[q] = "v", pr.base[q] = -1;
            sf(&params, ", int %s", pr.var[q]);
        }
        pr.depth = pr.params = u->nparams;
        sf(fns, "/* %s … %s, and the like (%d×%s) */\nstatic void %s(srt_ctx *c, tr_count *n%s)\n{\n",
           op_label(&pr, u->first, 1), op_label(&pr, u->last, -1), u->ninst,
           vparam >= 0 ? arena_printf(&g_arena, "; v: which of %d variants, differing in the calls it guards", u->nvar) : "",
           pr.unit_name[k], params.p ? params.p : "");
        if (!events) sput(fns, "    (void)n;\n");
        free(params.p);
        Lin *lin = arena_alloc(&g_arena, sizeof(Lin) * (size_t)(u->nints + 1));
        for (int j = 0; j < u->nints; j++) {
            lin[j].c = u->b[j];
            if (u->param[j] >= 0) lin[j].k[u->param[j]] = u->a[j];
        }
        pr.out = fns;
        const char **guard = NULL;
        if (vparam >= 0) {      /* an element in some variants only: the variants it is in */
            guard = arena_alloc(&g_arena, sizeof(char *) * (size_t)(u->n + 1));
            for (int b = 0; b < u->n; b++) {
                unsigned all = (1u << u->nvar) - 1, vm = u->vmask[b];
                if (vm == all) continue;
                Str c = {0};
                int in = __builtin_popcount(vm);
                for (int v = 0; v < u->nvar; v++)
                    if (in <= u->nvar - in ? vm >> v & 1 : !(vm >> v & 1))
                        sf(&c, "%sv %s %d", c.n ? (in <= u->nvar - in ? " || " : " && ") : "", in <= u->nvar - in ? "==" : "!=", v);
                guard[b] = arena_strndup(&g_arena, c.p, c.n);
                free(c.p);
            }
        }
        print_elems(&pr, u->body, u->n, lin, guard);
        sput(fns, "}\n\n");
    }
    int nints = 0;
    for (int i = 0; i < f.ntop; i++) nints += f.top[i].nints;
    Lin *lin = arena_alloc(&g_arena, sizeof(Lin) * (size_t)(nints + 1));
    for (int i = 0, at = 0; i < f.ntop; i++)
        for (int j = 0; j < f.top[i].nints; j++) lin[at++].c = f.top[i].ints[j];
    bool rec = false;
    for (int i = 0; i < n; i++) rec |= calls[i].kind == K_RECORD;
    if (rec) {
        Str base = {0}, ring = {0};
        for (int st = 0; st < NSTREAMS; st++)
            sf(&base, "%s%d", st ? ", " : "", e->ev_base[st]), sf(&ring, "%s%d", st ? ", " : "", e->ev_ring[st] ? e->ev_ring[st] : 1);
        sf(body, "    tr_count count = {.base = {%s}, .ring = {%s}}, *n = &count;  /* the events */\n", base.p, ring.p);
        free(base.p), free(ring.p);
    }
    pr.depth = pr.params = 0, pr.out = body;
    print_elems(&pr, f.top, f.ntop, lin, NULL);
}

/* ---- one class ------------------------------------------------------------------------- */

/* The class's srt_buffer table: its persistent buffers, then its kinds of
 * transient buffers, each the block the memory plan gave it. */
static void gen_buffers(const CE *e, Str *o)
{
    int n = buffer_rows(e->cm);
    if (e->ci == 0)
        sput(o, "/* Stage 0's memory plan: its persistent buffers, then each kind of transient\n"
                " * buffer's block; name, space (0 device, 1 host, 2 NVMe), offset, bytes. */\n");
    sf(o, "static const srt_buffer %s_buffers[%d] = {\n", e->px, n);
    for (int i = 0; i < e->s->nbufs; i++) {
        const Buffer *b = &e->s->bufs[i];
        if (b->persistent)
            sf(o, "    {%s, %d, %lld, %lld},\n", c_string(b->name), b->space, (long long)b->offset, (long long)b->bytes);
    }
    for (int f = 0; f < e->cm->nfams; f++) {
        const BufFamily *fa = &e->cm->fams[f];
        if (!fa->ninst) continue;
        const BufName *nm = &e->names[e->name_of_fam[f]];
        const char *name = nm->indexed ? arena_printf(&g_arena, "%s%d", nm->c, fa->idx)
                           : nm->cfams ? arena_printf(&g_arena, "%s%d", nm->c, fa->chunk)
                                       : nm->c;
        sf(o, "    {%s, %d, %lld, %lld},\n", c_string(name), fa->space, (long long)fa->base,
           (long long)((int64_t)fa->lm * fa->w * fa->size));
    }
    sput(o, "};\n\n");
}

/* One rank class: its tables, its names, its helpers, its step and evaluation. */
static void gen_class(const CE *e, bool slots, Str *o, bool loops)
{
    Str chunks = {0};   /* the layers of each chunk (several with interleaved virtual stages) */
    for (int k = 0; k < e->rc->nchunks; k++)
        sf(&chunks, "%s%d-%d", k ? ", " : "", e->rc->chunks[k].first_layer,
           e->rc->chunks[k].first_layer + e->rc->chunks[k].nlayers - 1);
    sf(o, "/* ==== stage %d: %lld ranks (tp %lld x dp %lld), layers %s%s%s ==== */\n\n", e->ci, (long long)e->rc->count,
       (long long)e->p->tp, (long long)e->p->dp, chunks.p ? chunks.p : "none", e->rc->chunks[0].embed ? ", the embedding" : "",
       e->rc->chunks[e->rc->nchunks - 1].head ? ", the head" : "");
    free(chunks.p);
    CE *w = (CE *)e;    /* the owned and part helpers are the class's own */
    gen_class_tables(w, o);
    gen_buffers(e, o);
    gen_part_tables(e, slots, o);
    gen_names(e, o);
    if (e->uses_owned) gen_owned_fn(w, o);
    if (e->uses[K_PART]) gen_part_fn(w, o);
    bool used[NSTREAMS] = {false};
    for (int i = 0; i < e->s->nops; i++) used[e->s->ops[i].stream] = true;
    Str body = {0};
    sf(o, "/* ---- stage %d's step: the functions of its recurring units of work, then the step ---- */\n\n", e->ci);
    gen_calls(e, o, &body, e->calls, e->ncalls, loops, "");
    sf(o, "/* One training step of stage %d: the schedule's %d ops in order (forward,\n"
          " * backward, gradient reductions, the gradient norm, the optimizer). */\n"
          "static void %s_step(srt_ctx *c)\n{\n", e->ci, e->s->nops, e->px);
    sput(o, body.p ? body.p : "");
    free(body.p);
    sput(o, "    /* the step ends when every stream has: the next one reuses the arena */\n");
    for (int st = 0; st < NSTREAMS; st++)
        if (used[st]) sf(o, "    srt_stream_sync(c, %s);\n", stream_c(st));
    sput(o, "}\n\n");
    if (e->has_eval) {
        Str ebody = {0}, efns = {0};
        gen_calls(e, &efns, &ebody, e->eval, e->neval, loops, "eval_");
        sput(o, efns.p ? efns.p : "");
        if (e->p->pp > 1)
            sf(o, "/* Evaluation on stage %d: the forward of microbatch 0 through the pipeline\n"
                  " * (the step's ops of it on this stage%s), no backward. */\n", e->ci,
               e->rc->chunks[e->rc->nchunks - 1].head ? "; the head's loss into srt_loss_add" : "");
        else
            sf(o, "/* Evaluation on stage %d: the forward of microbatch 0 (the step's ops up\n"
                  " * to its head, the head without backward), the loss into srt_loss_add. */\n", e->ci);
        sf(o, "static void %s_eval(srt_ctx *c)\n{\n", e->px);
        sput(o, ebody.p ? ebody.p : "");
        free(ebody.p), free(efns.p);
        for (int st = 0; st < NSTREAMS; st++)
            if (used[st]) sf(o, "    srt_stream_sync(c, %s);\n", stream_c(st));
        sput(o, "}\n\n");
    }
    gen_undefs(e, o);
}

/* The trainer's C source for a plan. */
char *emit_c(const Plan *mp, const CatalogExtern *x, const char *name, bool loops)
{
    Str o = {0};
    em_gemms = NULL;
    em_ngemms = em_capgemms = 0;
    em_owned_said = false;
    CE *cls = arena_alloc(&g_arena, sizeof(CE) * (size_t)(mp->mem.nclasses + 1));
    bool *has_eval = arena_alloc(&g_arena, sizeof(bool) * (size_t)(mp->mem.nclasses + 1));
    /* the program's functions serve every class: what they need of the model
     * is the same in each; the embeddings' and the head's parts are those
     * of the classes that have them */
    CE all = {0};
    for (int ci = 0; ci < mp->mem.nclasses; ci++) {
        lower_class(mp, x, ci, &cls[ci]);
        has_eval[ci] = cls[ci].has_eval;
        if (ci == 0) all = cls[0];
        for (int k = 0; k < NKINDS; k++) all.uses[k] |= cls[ci].uses[k];
        all.grad_slots |= cls[ci].grad_slots;
        for (int r = 0; r < R_NROLES; r++) all.unit_role[r] |= cls[ci].unit_role[r];
        if (cls[ci].uses[K_EMBED_FWD] || cls[ci].uses[K_EMBED_BWD]) all.pre = cls[ci].pre;
        if (cls[ci].uses[K_HEAD]) all.post = cls[ci].post;
        if (cls[ci].nl) all.layer = cls[ci].layer;
    }
    snprintf(all.px, sizeof all.px, "tr");
    gen_prologue(mp, x, name, all.grad_slots, &o);
    gen_types(&all, &o);
    gen_compute_fns(&all, &o);
    gen_comm_fns(&all, &o);
    if (all.uses[K_FETCH]) gen_fetch_fn(&all, &o);
    gen_param_macros(cls, mp->mem.nclasses, &o);
    for (int ci = 0; ci < mp->mem.nclasses; ci++) {
        gen_class(&cls[ci], all.grad_slots, &o, loops);
        lower_free(&cls[ci]);
    }
    gen_program(mp, name, &o, has_eval);
    char *r = arena_strndup(&g_arena, o.p, o.n);
    free(o.p);
    return r;
}
