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
#include "emit.h"
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

static const RtOp rt_ops[] = {
#define SRT_OP(name, arity, kind) {#name, arity},
    SRT_OPS(SRT_OP)
#undef SRT_OP
};

/* The runtime op called name, or NULL. */
static const RtOp *rt_find(const char *name)
{
    for (size_t i = 0; i < sizeof rt_ops / sizeof rt_ops[0]; i++)
        if (strcmp(rt_ops[i].name, name) == 0) return &rt_ops[i];
    return NULL;
}

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

/* The GEMM shapes the program's code calls (srt_program.gemms), as the C
 * expressions of the calls' arguments: rt_call records every srt_matmul_fwd /
 * _bwd it writes, so no path (eval, recompute, sequence parallelism, a custom
 * op's layer) can call a shape the table lacks; emit_c resets them. */
typedef struct EmGemm { int kind; const char *N, *C, *OC; bool bias; } EmGemm;
static EmGemm *em_gemms;
static int em_ngemms, em_capgemms;

/* Adds one GEMM shape to the program's table unless it is there already. */
static void gemm_note(int kind, const char *N, const char *C, const char *OC, bool bias)
{
    for (int i = 0; i < em_ngemms; i++) {
        const EmGemm *g = &em_gemms[i];
        if (g->kind == kind && g->bias == bias && !strcmp(g->N, N) && !strcmp(g->C, C) && !strcmp(g->OC, OC)) return;
    }
    if (em_ngemms == em_capgemms) {
        int cap = em_capgemms ? 2 * em_capgemms : 16;
        EmGemm *n = arena_alloc(&g_arena, sizeof(EmGemm) * (size_t)cap);
        if (em_ngemms) memcpy(n, em_gemms, sizeof(EmGemm) * (size_t)em_ngemms);
        em_gemms = n;
        em_capgemms = cap;
    }
    em_gemms[em_ngemms++] = (EmGemm){kind, N, C, OC, bias};
}

/* The GEMMs of one srt_matmul_* call (args: its arguments after the stream;
 * kinds as shardrt.h's SRT_GEMM_*).  An optional operand is "NONE" (absent),
 * "COND ? X : NONE" (absent on some ranks: both variants) or present. */
static void gemm_record(const char *op, const char *const *args)
{
    bool fused = !strcmp(op, "matmul_gelu_fwd") || !strcmp(op, "matmul_bwd_dgelu");
    if (!strcmp(op, "matmul_fwd") || fused) {
        int kind = !fused ? 0 : op[7] == 'g' ? 3 : 4;
        const char *b = args[kind == 0 ? 3 : kind == 3 ? 4 : 1], *const *d = args + (kind == 0 ? 4 : 5);
        bool maybe = strstr(b, ": NONE") != NULL;
        if (strcmp(b, "NONE")) gemm_note(kind, d[0], d[1], d[2], true);
        if (!strcmp(b, "NONE") || maybe) gemm_note(kind, d[0], d[1], d[2], false);
    } else if (!strcmp(op, "matmul_bwd")) {
        if (strcmp(args[0], "NONE")) gemm_note(1, args[6], args[7], args[8], false);
        if (strcmp(args[1], "NONE")) gemm_note(2, args[6], args[7], args[8], false);
    }
}

/* The table of the recorded GEMM shapes (before the srt_program). */
static void gen_gemms(Str *o)
{
    static const char *const kind_c[5] = {"SRT_GEMM_FWD", "SRT_GEMM_BWD_DATA", "SRT_GEMM_BWD_WEIGHT", "SRT_GEMM_FWD_GELU",
                                          "SRT_GEMM_BWD_DGELU"};
    if (!em_ngemms) return;
    sf(o, "/* every GEMM shape the code above calls: the CUDA backend plans them at start-up */\n"
          "static const srt_gemm_shape gemm_shapes[%d] = {\n", em_ngemms);
    for (int i = 0; i < em_ngemms; i++) {
        const EmGemm *g = &em_gemms[i];
        sf(o, "    {.kind = %s, .N = %s, .C = %s, .OC = %s, .bias = %s, .dt = WDT, .out_dt = %s},\n", kind_c[g->kind],
           g->N, g->C, g->OC, g->bias ? "true" : "false", g->kind == 2 ? "GDT" : "WDT");
    }
    sput(o, "};\n\n");
}

/* Writes `srt_OP(c, STREAM, args...);` (indented, with a comment), checking OP
 * and the number of arguments against the SRT_OPS list; records its GEMMs. */
static void rt_call(Str *s, const char *ind, const char *op, const char *stream, const char *comment, ...)
{
    const RtOp *r = rt_find(op);
    if (!r) die("emit: srt_%s is not an op of shardrt.h's SRT_OPS", op);
    va_list ap;
    va_start(ap, comment);
    int n = 0;
    const char *args[24];
    sf(s, "%ssrt_%s(c, %s", ind, op, stream);
    for (const char *a = va_arg(ap, const char *); a; a = va_arg(ap, const char *), n++) {
        sf(s, ", %s", a);
        if (n < 24) args[n] = a;
    }
    va_end(ap);
    if (n != r->arity) die("emit: srt_%s takes %d arguments after the stream, %d emitted", op, r->arity, n);
    gemm_record(op, args);
    sput(s, ");");
    if (comment) sf(s, "  /* %s */", comment);
    sput(s, "\n");
}

/* The spec's user-defined activation, checked once per spec (libclang parses
 * its header; emit_build_main reports the errors, so a failure here is a bug),
 * or NULL when the model uses a built-in one. */
static const CatalogExtern *ext_of(const Spec *s)
{
    static const Spec *done;
    static CatalogExtern x;
    if (s->model.activation != ACT_EXTERN) return NULL;
    if (done != s) {
        if (!catalog_check_extern(s, &x) || !x.abi) die("emit: the user-defined activation failed its check");
        done = s;
    }
    return &x;
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

/* The location of a key the user (or -D) set, or none. */
static Loc key_loc(const Spec *s, const char *path)
{
    const SchemaKey *k = schema_find(path);
    if (!k) return (Loc){0};
    int i = schema_index(k);
    return s->set[i] ? s->loc[i] : (Loc){0};
}

/* Reports one unsupported feature. */
static bool refuse(bool report, const Spec *s, const char *key, const char *what, const char *hint)
{
    if (report) {
        diag_error(key_loc(s, key), "shardc build: %s is not supported by the code generator", what);
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
    /* a user-defined activation (extern) replaces GELU's calls: see ext_of */
    if (s->model.activation != ACT_GELU && s->model.activation != ACT_SWIGLU && s->model.activation != ACT_EXTERN)
        ok = refuse(report, s, "model.activation", "an activation other than GELU and SwiGLU (or a user-defined one)",
                    NULL);
    if (s->model.family == FAM_GPT && !s->model.bias)
        ok = refuse(report, s, "model.bias", "a GPT without biases (LayerNorm without a bias)", NULL);
    return ok;
}

/* ---- buffers: what each of a class's buffers is, from its name ---------------------- */

typedef enum BufKind {
    BK_OTHER, BK_PARAMS, BK_PSHARD, BK_PERSIST, BK_GATHERED, BK_GRADS, BK_GSHARD, BK_GWHOLE, BK_BUCKET,
    BK_MASTER, BK_MOM1, BK_MOM2, BK_STAGE32, BK_MISC, BK_SCRATCH, BK_TOKENS, BK_TARGETS, BK_X, BK_SAVED,
    BK_Y, BK_DY, BK_DX, BK_LOGITS,
} BufKind;

/* Does t end with suffix? */
static bool ends_with(const char *t, const char *suffix)
{
    size_t a = strlen(t), b = strlen(suffix);
    return a >= b && strcmp(t + a - b, suffix) == 0;
}

/* The kind of a buffer, from the names sched.c gives them. */
static int buf_kind(const Buffer *b)
{
    const char *n = b->name;
    static const struct { const char *name; int kind; } exact[] = {
        {"params", BK_PARAMS}, {"params.shard", BK_PSHARD}, {"params.persistent", BK_PERSIST},
        {"grads", BK_GRADS}, {"grads.shard", BK_GSHARD}, {"grads.whole", BK_GWHOLE},
        {"optimizer.master", BK_MASTER}, {"optimizer.exp_avg", BK_MOM1}, {"optimizer.momentum", BK_MOM1},
        {"optimizer.exp_avg_sq", BK_MOM2}, {"optimizer.grads_fp32", BK_STAGE32}, {"step.scalars", BK_MISC},
        {"scratch", BK_SCRATCH},
    };
    if (b->space != SPACE_DEVICE) return BK_OTHER;
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (strcmp(n, exact[i].name) == 0) return exact[i].kind;
    if (strncmp(n, "params.gathered.", 16) == 0) return BK_GATHERED;
    if (strncmp(n, "grads.bucket", 12) == 0) return BK_BUCKET;
    if (strncmp(n, "batch.tokens.", 13) == 0) return BK_TOKENS;
    if (strncmp(n, "batch.targets.", 14) == 0) return BK_TARGETS;
    if (strncmp(n, "logits.", 7) == 0) return BK_LOGITS;
    /* a stage's boundary: its last layer's output to send, its output gradient received */
    if (strncmp(n, "pp.send_fwd.", 12) == 0) return BK_Y;
    if (strncmp(n, "pp.recv_bwd.", 12) == 0) return BK_DY;
    if (strncmp(n, "pp.send_bwd.", 12) == 0) return BK_DX;   /* its first layer's input gradient */
    /* "act.y.mb3" and "act.dy.mb3", not their tp variants ("act.dy.mb3.partial") */
    if (strncmp(n, "act.y.", 6) == 0) return strchr(n + 6, '.') ? BK_OTHER : BK_Y;
    if (strncmp(n, "act.dy.", 7) == 0) return strchr(n + 7, '.') ? BK_OTHER : BK_DY;
    if (strncmp(n, "act.", 4) == 0) {
        if (ends_with(n, ".saved")) return BK_SAVED;
        if (ends_with(n, ".dx")) return BK_DX;
        if (ends_with(n, ".x")) return BK_X;
    }
    return BK_OTHER;
}

/* ---- carving a buffer into tensors ------------------------------------------------ */

enum { MAX_PIECES = 32 };

/* A named tensor inside a buffer: bytes at an offset, live over [born, dies]
 * (steps of the emitted sequence, for the backward scratch's packing). */
typedef struct Piece {
    const char *name;
    int64_t off, bytes;
    int born, dies;
    const char *base;           /* its row field when merged from several buffers (carve_merge), else NULL */
} Piece;
typedef struct Carve { Piece p[MAX_PIECES]; int n; int64_t total; } Carve;

/* Appends a piece after the others. */
static void carve_add(Carve *cv, const char *name, int64_t bytes)
{
    if (cv->n == MAX_PIECES) die("emit: too many pieces in one buffer");
    cv->p[cv->n++] = (Piece){name, cv->total, bytes, 0, 0, NULL};
    cv->total += bytes;
}

/* Declares a piece with a lifetime, placed later by carve_pack. */
static void carve_live(Carve *cv, const char *name, int64_t bytes, int born, int dies)
{
    if (cv->n == MAX_PIECES) die("emit: too many pieces in one buffer");
    cv->p[cv->n++] = (Piece){name, -1, bytes, born, dies, NULL};
}

/* The offset of the piece called name. */
static int64_t carve_off(const Carve *cv, const char *name)
{
    for (int i = 0; i < cv->n; i++)
        if (strcmp(cv->p[i].name, name) == 0) return cv->p[i].off;
    die("emit: no tensor %s in the carved buffer", name);
}

/* First fit of the pieces in the order given; returns the top. */
static int64_t pack_in_order(Carve *cv, const int *order)
{
    int64_t top = 0;
    for (int k = 0; k < cv->n; k++) {
        Piece *a = &cv->p[order[k]];
        int64_t at = 0;
        for (bool moved = true; moved;) {   /* bump past every placed piece it meets */
            moved = false;
            for (int j = 0; j < k; j++) {
                const Piece *b = &cv->p[order[j]];
                bool together = a->born <= b->dies && b->born <= a->dies;
                if (together && at < b->off + b->bytes && b->off < at + a->bytes) at = b->off + b->bytes, moved = true;
            }
        }
        a->off = at;
        if (at + a->bytes > top) top = at + a->bytes;
    }
    return top;
}

/* Places pieces with lifetimes so that live ones never overlap, within limit
 * bytes: first fit, largest first, else in birth order.  The planner sized the
 * buffer as the peak of the live pieces; if no order fits, the two disagree. */
static void carve_pack(Carve *cv, int64_t limit, const char *what)
{
    int order[MAX_PIECES] = {0};
    for (int i = 0; i < cv->n; i++) order[i] = i;
    for (int i = 1; i < cv->n; i++)     /* largest first, then born first (stable) */
        for (int j = i; j > 0; j--) {
            const Piece *a = &cv->p[order[j]], *b = &cv->p[order[j - 1]];
            if (a->bytes > b->bytes || (a->bytes == b->bytes && a->born < b->born)) {
                int t = order[j];
                order[j] = order[j - 1], order[j - 1] = t;
            }
        }
    int64_t top = pack_in_order(cv, order);
    if (top > limit) {
        for (int i = 0; i < cv->n; i++) order[i] = i;
        top = pack_in_order(cv, order);
    }
    if (top > limit) die("emit: %s needs %lld bytes, the plan gives it %lld", what, (long long)top, (long long)limit);
    cv->total = top;
}

/* ---- the class being emitted ------------------------------------------------------- */

/* The kinds of step calls, each one function of the generated file and one table. */
typedef enum Fn {
    FN_LOAD, FN_EMBF, FN_FWD, FN_HEAD, FN_BWD, FN_EMBB, FN_GATHER, FN_REDUCE, FN_PGATHER, FN_ZERO,
    FN_REC, FN_WAIT, FN_TP, FN_HEAD_EVAL, FN_PP, FN_RECOMP, FN_ATTN, FN_CKPT, NFN,
    FN_INLINE = NFN,            /* a statement with its own code (once per step)   */
} Fn;

static const char *const fn_names[NFN] = {
    "load", "embed_fwd", "fwd", "head", "bwd", "embed_bwd", "gather", "reduce", "param_gather", "zero",
    "record", "wait", "tp", "head_eval", "pp", "recompute", "attn", "ckpt",
};
/* The table each kind's rows live in (head_eval reads the head's, a full
 * recompute the forward's). */
static const int fn_table[NFN] = {
    FN_LOAD, FN_EMBF, FN_FWD, FN_HEAD, FN_BWD, FN_EMBB, FN_GATHER, FN_REDUCE, FN_PGATHER, FN_ZERO,
    FN_REC, FN_WAIT, FN_TP, FN_HEAD, FN_PP, FN_FWD, FN_ATTN, FN_CKPT,
};

/* One statement of a step: a call of a kind's function on a row, or code. */
typedef struct Stmt {
    int fn;                     /* Fn                                              */
    int row;                    /* in the kind's table                             */
    const char *label;          /* "fwd L3 mb0"                                    */
    const char *code;           /* FN_INLINE                                       */
    int op;                     /* the schedule op it comes from, or -1            */
} Stmt;

enum { MAX_UNITS = 2, MAX_SLOTS = R_NROLES, MAX_EVENTS = 4096 };
enum { ROW_COMMENTS_MAX = 1024 };   /* a table's rows carry comments up to this many */

/* The parameters of one part of the model (embeddings, a layer, the head):
 * for each role its class tensor and where its parameter and gradient are.
 * Offsets are bytes: absolute in the device arena (slot 0) or relative to
 * the call's gathered unit / gradient bucket (slot k + 1). */
typedef struct Group {
    int ct[R_NROLES];
    int64_t woff[R_NROLES], goff[R_NROLES];
    int wslot[R_NROLES], gslot[R_NROLES];
    int unit_seg[MAX_UNITS], nunits;        /* ZeRO 3: the segments gathered for it */
    int slot_bucket[MAX_SLOTS], nslots;     /* ZeRO 2-3: the buckets its gradients go to */
} Group;

typedef struct CE {
    const Spec *spec;
    MemPlan *mp;
    const Model *m;
    const Partition *p;
    const ClassMem *cm;
    const Sched *s;
    const RankClass *rc;
    int ci;
    char px[16], PX[16];        /* "s0", "S0"                                      */
    int wb, gb;                 /* bytes of a working / gradient element           */
    /* the persistent buffers (-1 none) */
    int b_params, b_pshard, b_persist, b_grads, b_gshard, b_gwhole, b_master, b_mom1, b_mom2;
    /* offload (-1 none): the host's fp32 gradients and optimizer states, the
     * NVMe states, the parameters' host staging (h2d, NVMe); where params.shard is */
    int b_hgrads, b_hmaster, b_hmom1, b_hmom2, b_nvme, b_hstage, b_hswap, params_space;
    int64_t S_host;             /* optimizer elements on the host: shard space [S_dev, S_dev + S_host) */
    int nstates;                /* fp32 states per host element: master, then the moments */
    bool *hreduced;             /* per segment: its host part reached grads.fp32 this step */
    int64_t dev_lo, dev_hi;     /* the last device optimizer sub-group (for its param_d2h) */
    bool uses_part;             /* the step calls the shard-part helper (offload)   */
    int64_t *whole_rel;         /* per segment: element offset in grads.whole, or -1 */
    int64_t *persist_rel;       /* per segment: element offset in params.persistent  */
    int *seg_bucket;
    int *ct_of_tensor;          /* model tensor -> class tensor (not the head copy) */
    /* the model's parts */
    int nl;                     /* layers on this class                            */
    int first_layer;
    Group *layer, pre, post;
    int nu, ng;                 /* unit and gradient slots in a row                */
    /* carved buffers */
    Carve saved, fscr, bscr, hscr;
    /* activation checkpointing (carve_ckpt): the policy, what the forward keeps,
     * the selectively recomputed attention core, a full recompute's scratch */
    int pol;
    Carve kept, attn, rscr;
    /* the step */
    Stmt *st;
    int nst, capst;
    Str rows[NFN];              /* each kind's rows, one a line, without comments */
    int nrows[NFN];
    const char **row_label[NFN];    /* each row's op, for the rows' comments */
    int row_cap[NFN];
    int head_stmt;              /* the first head's statement (eval), or -1       */
    int cur_op;                 /* the op build_stmts is turning into statements, or -1 */
    int64_t S_dev;              /* optimizer elements on the device               */
    bool has_sumsq_op, has_norm_op;
    int *gbuf;                  /* per segment: the gathered buffer now, or -1     */
    bool *reduced;              /* per segment: reduce-scattered once this step    */
    int prev_pgather;           /* the last segment of the previous param gather   */
    bool uses_owned;            /* the step calls the owned-range helper           */
    bool has_eval;              /* an evaluation function is emitted               */
} CE;

/* The buffer's arena offset. */
static int64_t boff(const CE *e, int id)
{
    if (id < 0 || id >= e->s->nbufs) die("emit: buffer %d out of range", id);
    return e->s->bufs[id].offset;
}

/* The one buffer of kind k among an op's reads (rd) or writes, or -1. */
static int op_buf(const CE *e, const Op *o, bool rd, int k)
{
    const int *ids = rd ? o->rd : o->wr;
    int n = rd ? o->nrd : o->nwr, found = -1;
    for (int i = 0; i < n; i++)
        if (buf_kind(&e->s->bufs[ids[i]]) == k) {
            if (found >= 0 && found != ids[i])
                die("emit: op %s has two buffers of one kind: %s and %s", sched_op_label(e->s, (int)(o - e->s->ops)),
                    e->s->bufs[found].name, e->s->bufs[ids[i]].name);
            found = ids[i];
        }
    return found;
}

/* Like op_buf, but the buffer must be there. */
static int op_need(const CE *e, const Op *o, bool rd, int k, const char *what)
{
    int id = op_buf(e, o, rd, k);
    if (id < 0) die("emit: op %s has no %s buffer", sched_op_label(e->s, (int)(o - e->s->ops)), what);
    return id;
}

/* The first buffer of a class with kind k, or -1. */
static int class_buf(const CE *e, int k)
{
    for (int i = 0; i < e->s->nbufs; i++)
        if (e->s->bufs[i].persistent && buf_kind(&e->s->bufs[i]) == k) return i;
    return -1;
}

/* Sequence parallelism: the layers' activations are sequence shards (this
 * rank's N/tp tokens) between the collectives, full (B,T,C) inside them. */
static bool sp_on(const CE *e)
{
    return e->p->tp > 1 && e->p->T_sp < e->p->T;
}

/* Dies unless buffer id holds exactly bytes (a planner/emitter disagreement). */
static void expect_bytes(const CE *e, int id, int64_t bytes, const char *what)
{
    if (e->s->bufs[id].bytes != bytes)
        die("emit: %s needs %lld bytes, the plan's %s has %lld", what, (long long)bytes, e->s->bufs[id].name,
            (long long)e->s->bufs[id].bytes);
}

/* ---- the layer's tensors ----------------------------------------------------------- */

/* Bytes of a layer-graph tensor for one microbatch (as part.c counts them). */
static int64_t graph_bytes(const CE *e, const ActTensor *t)
{
    int64_t rows = t->shard == AS_SEQ ? e->p->T_sp : e->p->T;
    int64_t w = t->shard == AS_TP ? t->width / e->p->tp : t->width;
    return rows * w * (t->fp32 ? 4 : e->wb);
}

/* The saved buffer: the graph's kept tensors, fp32 statistics first (so they
 * stay 4-byte aligned), each a piece named after the graph. */
static void carve_saved(CE *e)
{
    LayerGraph g;
    model_layer_graph(e->m, false, &g);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < g.nt; i++) {
            const ActTensor *t = &g.t[i];
            bool kept = t->kind == AK_SAVED || t->kind == AK_SAVED_ATTN;
            if (kept && t->fp32 == (pass == 0)) carve_add(&e->saved, t->name, graph_bytes(e, t));
        }
    if (e->saved.total != e->p->act.saved[CKPT_NONE])
        die("emit: the layer's saved tensors take %lld bytes, the plan keeps %lld", (long long)e->saved.total,
            (long long)e->p->act.saved[CKPT_NONE]);
}

/* The step of the layer graph producing tensor i (-1: the layer input). */
static int graph_producer(const LayerGraph *g, int i)
{
    for (int k = 0; k < g->nst; k++)
        for (int j = 0; j < g->st[k].nout; j++)
            if (g->st[k].out[j] == i) return k;
    return -1;
}

/* The last step of the layer graph reading tensor i (its producer if none does). */
static int graph_last_use(const LayerGraph *g, int i, int prod)
{
    int last = prod;
    for (int k = 0; k < g->nst; k++)
        for (int j = 0; j < g->st[k].nin; j++)
            if (g->st[k].in[j] == i && k > last) last = k;
    return last;
}

/* Does the forward keep graph tensor t for backward under checkpoint policy
 * pol?  part.c's rule: full keeps nothing (a recompute replays the layer),
 * selective all but the attention core. */
static bool graph_kept(const ActTensor *t, int pol)
{
    if (pol == CKPT_FULL) return false;
    return t->kind == AK_SAVED || (t->kind == AK_SAVED_ATTN && pol == CKPT_NONE);
}

/* A forward's transients under policy pol: each graph tensor it does not keep
 * (not the input or output), live from its step to its last reader's, packed
 * into the limit part.c computed as their peak.  The row-parallel outputs are
 * the generated forward's tmp (attention projection) and tmp2 (MLP).  Under
 * sequence parallelism (part.c's sp_fwd_scratch, rule for rule) the forward
 * writes the row-parallel outputs into y, so they have no piece, and each
 * norm runs on the gathered input into the scratch (norm1.sp, norm2.sp and
 * their statistics, on all tokens, whatever the policy keeps: the plan's kept
 * norm shards stay unused), with the graph norm's lifetime. */
static void carve_fwd_scratch(CE *e, const LayerGraph *g, int pol, Carve *cv, int64_t limit)
{
    bool sp = sp_on(e);
    for (int i = 0; i < g->nt; i++) {
        const ActTensor *t = &g->t[i];
        bool norm = sp && t->role == AR_NORM;
        if (t->kind == AK_INPUT || t->kind == AK_OUTPUT || (sp && t->shard == AS_FULL)) continue;
        if (!norm && graph_kept(t, pol)) continue;
        int prod = graph_producer(g, i);
        const char *name = strcmp(t->name, "proj.partial") == 0 ? "tmp"
                         : strcmp(t->name, "fc2.partial") == 0 ? "tmp2" : t->name;
        int64_t bytes = graph_bytes(e, t);
        if (norm) {     /* "norm1.out" -> "norm1.sp", "norm1.stats" -> "norm1.sp.stats", all T tokens */
            name = arena_printf(&g_arena, "%.5s.sp%s", t->name, t->fp32 ? ".stats" : "");
            bytes = e->p->T * t->width * (t->fp32 ? 4 : e->wb);
        }
        carve_live(cv, name, bytes, prod, graph_last_use(g, i, prod));
    }
    carve_pack(cv, limit, "a layer's forward");
    for (int i = 0; i < cv->n; i++)     /* fp32 statistics among working-dtype tensors */
        if (cv->p[i].off % 4) die("emit: %s at byte %lld of a layer's forward scratch is not 4-byte aligned",
                                  cv->p[i].name, (long long)cv->p[i].off);
}

/* The layer's tensors under the spec's activation checkpointing: what the
 * forward keeps (kept: everything without checkpointing, all but the attention
 * core under selective, nothing under full), the selectively recomputed
 * attention core (attn: the buffer the backward reads it from), the forward's
 * transients (fscr), and under full the transients of the recompute (rscr),
 * which keeps everything as a forward without checkpointing does (saved). */
static void carve_ckpt(CE *e)
{
    const ActBytes *a = &e->p->act;
    LayerGraph g;
    model_layer_graph(e->m, false, &g);
    e->pol = e->spec->checkpointing.activations;
    if (e->pol == CKPT_NONE) e->kept = e->saved;
    for (int pass = 0; pass < 2 && e->pol != CKPT_NONE; pass++)    /* fp32 statistics first, as carve_saved */
        for (int i = 0; i < g.nt; i++) {
            const ActTensor *t = &g.t[i];
            if (t->fp32 != (pass == 0)) continue;
            if (graph_kept(t, e->pol)) carve_add(&e->kept, t->name, graph_bytes(e, t));
            if (e->pol == CKPT_SELECTIVE && t->kind == AK_SAVED_ATTN) carve_add(&e->attn, t->name, graph_bytes(e, t));
        }
    if (e->pol != CKPT_NONE &&
        (e->kept.total != a->saved[e->pol] || e->attn.total != (e->pol == CKPT_SELECTIVE ? a->attn : 0)))
        die("emit: a layer keeps %lld + %lld bytes under checkpointing, the plan %lld + %lld", (long long)e->kept.total,
            (long long)e->attn.total, (long long)a->saved[e->pol], (long long)(e->pol == CKPT_SELECTIVE ? a->attn : 0));
    carve_fwd_scratch(e, &g, e->pol, &e->fscr, a->fwd_scratch[e->pol]);
    if (e->pol == CKPT_FULL) carve_fwd_scratch(e, &g, CKPT_NONE, &e->rscr, a->fwd_scratch[CKPT_NONE]);
}

/* The backward's internal gradients with their lifetimes over the steps of
 * the generated backward (gen_bwd_fn: the numbers are its steps), packed
 * into the plan's scratch. */
static void carve_bwd(CE *e, int64_t limit)
{
    const Model *m = e->m;
    int64_t tp = e->p->tp, T = e->p->T, h = m->h, ff = m->ffn / tp, w = e->wb;
    int64_t qkv = m->h / tp + 2 * model_kv_rank(m) * m->hd;
    Carve *cv = &e->bscr;
    if (tp == 1) carve_live(cv, "dx2", T * h * w, 0, 6);   /* tp > 1: the row's d1 */
    if (m->gated || ext_of(e->spec))    /* GELU's backward fuses it away (matmul_bwd_dgelu) */
        carve_live(cv, "dact", T * ff * w, 1, 2);
    if (m->gated) {
        carve_live(cv, "dgate", T * ff * w, 2, 3);
        carve_live(cv, "dup", T * ff * w, 2, 3);
    } else {
        carve_live(cv, "dfc1", T * ff * w, 2, 3);
    }
    carve_live(cv, "dln2", T * h * w, 3, 4);
    carve_live(cv, "datt", T * (h / tp) * w, 6, 7);
    carve_live(cv, "dqkv", T * qkv * w, 7, 8);
    carve_live(cv, "dln1", T * h * w, 8, 9);
    if (sp_on(e)) {     /* each part's norm recomputed on its gathered input */
        carve_live(cv, "norm2.sp", T * h * w, 3, 4);
        carve_live(cv, "norm2.sp.stats", T * 4 * (m->layernorm ? 2 : 1), 3, 4);
        carve_live(cv, "norm1.sp", T * h * w, 8, 9);
        carve_live(cv, "norm1.sp.stats", T * 4 * (m->layernorm ? 2 : 1), 8, 9);
    }
    carve_pack(cv, limit, "a layer's backward");
}

/* The head's scratch: final-norm statistics, the losses, the normalised
 * input and its gradient. */
static void carve_head(CE *e, int64_t limit)
{
    int64_t T = e->p->T, x = T * e->m->h * e->wb;
    Carve *cv = &e->hscr;
    carve_add(cv, "lnf.stats", T * 4 * (e->m->layernorm ? 2 : 1));
    carve_add(cv, "losses", T * 4);
    carve_add(cv, "lnf", x);
    carve_add(cv, "dlnf", x);
    if (cv->total > limit)
        die("emit: the head needs %lld bytes of scratch, the plan gives it %lld", (long long)cv->total, (long long)limit);
}

/* ---- where parameters and gradients are ----------------------------------------------- */

/* Offsets of every segment inside grads.whole (ZeRO 2-3: tied and persistent
 * segments, in flat order) and inside params.persistent (ZeRO 3). */
static void plan_whole(CE *e)
{
    const RankClass *rc = e->rc;
    e->whole_rel = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(rc->nsegs + 1));
    e->persist_rel = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(rc->nsegs + 1));
    e->seg_bucket = arena_alloc(&g_arena, sizeof(int) * (size_t)(rc->nsegs + 1));
    int64_t w = 0, q = 0;
    for (int i = 0; i < rc->nsegs; i++) {
        const Segment *sg = &rc->segs[i];
        e->whole_rel[i] = e->persist_rel[i] = -1;
        if (sg->tied || sg->persistent) e->whole_rel[i] = w, w += sg->padded;
        if (sg->persistent) e->persist_rel[i] = q, q += sg->padded;
    }
    for (int k = 0; k < rc->nbuckets; k++)
        for (int i = rc->buckets[k].first_seg; i < rc->buckets[k].first_seg + rc->buckets[k].nseg; i++)
            e->seg_bucket[i] = k;
    if (e->b_gwhole >= 0) expect_bytes(e, e->b_gwhole, w * e->gb, "the tied and persistent gradients");
    if (e->b_persist >= 0) expect_bytes(e, e->b_persist, q * e->wb, "the persistent parameters");
}

/* Fills role r of group g with class tensor i: where its parameter is when
 * computing, and where its gradient goes. */
static void group_role(CE *e, Group *g, int r, int i)
{
    const ClassTensor *ct = &e->rc->tensors[i];
    const Segment *sg = &e->rc->segs[ct->seg];
    int64_t rel = ct->offset - sg->offset;
    g->ct[r] = i;
    if (e->p->zero < 3) {
        g->wslot[r] = 0, g->woff[r] = boff(e, e->b_params) + ct->offset * e->wb;
    } else if (sg->persistent && e->p->dp == 1 && e->params_space == SPACE_DEVICE) {
        /* one rank, the shard on the device: it is the whole segment */
        g->wslot[r] = 0, g->woff[r] = boff(e, e->b_pshard) + (sg->shard_offset + rel) * e->wb;
    } else if (sg->persistent) {
        g->wslot[r] = 0, g->woff[r] = boff(e, e->b_persist) + (e->persist_rel[ct->seg] + rel) * e->wb;
    } else {
        int k = 0;
        while (k < g->nunits && g->unit_seg[k] != ct->seg) k++;
        if (k == g->nunits) {
            if (k == MAX_UNITS) die("emit: tensors of one part span more than %d fetch units", MAX_UNITS);
            g->unit_seg[g->nunits++] = ct->seg;
        }
        g->wslot[r] = k + 1, g->woff[r] = rel * e->wb;
    }
    if (e->p->zero < 2) {
        g->gslot[r] = 0, g->goff[r] = boff(e, e->b_grads) + ct->offset * e->gb;
    } else if (sg->tied || sg->persistent) {
        g->gslot[r] = 0, g->goff[r] = boff(e, e->b_gwhole) + (e->whole_rel[ct->seg] + rel) * e->gb;
    } else {
        int bk = e->seg_bucket[ct->seg], k = 0;
        while (k < g->nslots && g->slot_bucket[k] != bk) k++;
        if (k == g->nslots) g->slot_bucket[g->nslots++] = bk;
        const Segment *first = &e->rc->segs[e->rc->buckets[bk].first_seg];
        g->gslot[r] = k + 1, g->goff[r] = (ct->offset - first->offset) * e->gb;
    }
}

/* An empty group. */
static void group_init(Group *g)
{
    memset(g, 0, sizeof *g);
    for (int r = 0; r < R_NROLES; r++) g->ct[r] = -1;
}

/* The index of model layer L among the class's layers (its chunks' layers in
 * chunk order: with interleaved virtual stages they are not contiguous), or -1. */
static int layer_slot(const CE *e, int L)
{
    int base = 0;
    for (int k = 0; k < e->rc->nchunks; k++) {
        const Chunk *ch = &e->rc->chunks[k];
        if (L >= ch->first_layer && L < ch->first_layer + ch->nlayers) return base + L - ch->first_layer;
        base += ch->nlayers;
    }
    return -1;
}

/* The model layer of slot li (layer_slot's inverse). */
static int slot_layer(const CE *e, int li)
{
    for (int k = 0; k < e->rc->nchunks; k++) {
        if (li < e->rc->chunks[k].nlayers) return e->rc->chunks[k].first_layer + li;
        li -= e->rc->chunks[k].nlayers;
    }
    die("emit: layer slot out of range");
}

/* The groups: embeddings, each layer, the head (the tied embedding is its
 * weight when the model ties them; on a last stage without the embedding, its
 * copy, which the tied reduction keeps equal). */
static void plan_groups(CE *e)
{
    const Model *m = e->m;
    const RankClass *rc = e->rc;
    e->ct_of_tensor = arena_alloc(&g_arena, sizeof(int) * (size_t)(m->nt + 1));
    for (int i = 0; i < m->nt; i++) e->ct_of_tensor[i] = -1;
    for (int i = 0; i < rc->ntensors; i++)
        if (!rc->tensors[i].copy) e->ct_of_tensor[rc->tensors[i].tensor] = i;
    e->first_layer = rc->chunks[0].first_layer;
    e->nl = 0;
    for (int k = 0; k < rc->nchunks; k++) e->nl += rc->chunks[k].nlayers;
    e->layer = arena_alloc(&g_arena, sizeof(Group) * (size_t)(e->nl + 1));
    group_init(&e->pre);
    group_init(&e->post);
    for (int li = 0; li < e->nl; li++) group_init(&e->layer[li]);
    for (int i = 0; i < m->nt; i++) {
        const Tensor *t = &m->t[i];
        int ci = e->ct_of_tensor[i];
        if (ci < 0) continue;
        if (t->layer == LAYER_PRE) group_role(e, &e->pre, t->role, ci);
        else if (t->layer == m->l) group_role(e, &e->post, t->role, ci);
        else group_role(e, &e->layer[layer_slot(e, t->layer)], t->role, ci);
    }
    if (m->tied && e->pre.ct[R_TOK_EMBED] >= 0) group_role(e, &e->post, R_HEAD_W, e->pre.ct[R_TOK_EMBED]);
    for (int i = 0; i < rc->ntensors; i++)
        if (rc->tensors[i].copy) group_role(e, &e->post, R_HEAD_W, i);
    e->nu = e->ng = 1;
    Group *all[3] = {&e->pre, &e->post, NULL};
    for (int li = -2; li < e->nl; li++) {
        const Group *g = li < 0 ? all[li + 2] : &e->layer[li];
        if (g->nunits > e->nu) e->nu = g->nunits;
        if (g->nslots > e->ng) e->ng = g->nslots;
    }
}

/* ---- statements ---------------------------------------------------------------------- */

/* Appends a statement. */
static void stmt(CE *e, int fn, int row, const char *label, const char *code)
{
    if (e->nst == e->capst) {
        int cap = e->capst ? 2 * e->capst : 1024;
        Stmt *n = arena_alloc(&g_arena, sizeof(Stmt) * (size_t)cap);
        if (e->nst) memcpy(n, e->st, sizeof(Stmt) * (size_t)e->nst);
        e->st = n, e->capst = cap;
    }
    e->st[e->nst++] = (Stmt){fn, row, label, code, e->cur_op};
}

/* Appends a row to kind fn's table (its text: "{...}, comment") and a
 * statement calling fn on it. */
static void __attribute__((format(printf, 4, 5))) row(CE *e, int fn, const char *label, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsf(&e->rows[fn], fmt, ap);
    va_end(ap);
    sput(&e->rows[fn], "\n");
    if (e->nrows[fn] == e->row_cap[fn]) {
        int cap = e->row_cap[fn] ? 2 * e->row_cap[fn] : 256;
        const char **n = arena_alloc(&g_arena, sizeof(char *) * (size_t)cap);
        if (e->nrows[fn]) memcpy(n, e->row_label[fn], sizeof(char *) * (size_t)e->nrows[fn]);
        e->row_label[fn] = n, e->row_cap[fn] = cap;
    }
    e->row_label[fn][e->nrows[fn]] = label;
    stmt(e, fn, e->nrows[fn]++, label, NULL);
}

/* The srt_stream constant of a schedule stream. */
static const char *stream_name(int st)
{
    static const char *const names[NSTREAMS] = {"SRT_COMPUTE", "SRT_TP_COMM", "SRT_DP_COMM", "SRT_PP_COMM",
                                                "SRT_COPY", "SRT_HOST"};
    if (st < 0 || st >= NSTREAMS) die("emit: no stream %d", st);
    return names[st];
}

/* "{a, b}": the offsets of a group's gathered units for op o. */
static const char *units_of(CE *e, const Group *g, const Op *o)
{
    Str s = {0};
    sput(&s, "{");
    for (int k = 0; k < e->nu; k++) {
        int64_t off = 0;
        if (k < g->nunits) {
            int seg = g->unit_seg[k];
            if (o->unit[0] != seg && o->unit[1] != seg)
                die("emit: op %s computes with segment %d but does not name it as a unit",
                    sched_op_label(e->s, (int)(o - e->s->ops)), seg);
            if (e->gbuf[seg] < 0)
                die("emit: op %s uses unit %d before it is gathered", sched_op_label(e->s, (int)(o - e->s->ops)), seg);
            off = boff(e, e->gbuf[seg]);
        }
        sf(&s, "%s%lld", k ? ", " : "", (long long)off);
    }
    sput(&s, "}");
    const char *r = arena_strndup(&g_arena, s.p, s.n);
    free(s.p);
    return r;
}

/* "{a, b}": the offsets of the gradient buckets op o writes for group g. */
static const char *buckets_of(CE *e, const Group *g, const Op *o)
{
    Str s = {0};
    sput(&s, "{");
    for (int k = 0; k < e->ng; k++) {
        int64_t off = 0;
        if (k < g->nslots) {
            int found = -1;
            for (int i = 0; i < o->nwr; i++) {
                const Buffer *b = &e->s->bufs[o->wr[i]];
                if (buf_kind(b) == BK_BUCKET && atoi(b->name + 12) == g->slot_bucket[k]) found = o->wr[i];
            }
            if (found < 0)
                die("emit: op %s writes no buffer for gradient bucket %d", sched_op_label(e->s, (int)(o - e->s->ops)),
                    g->slot_bucket[k]);
            off = boff(e, found);
        }
        sf(&s, "%s%lld", k ? ", " : "", (long long)off);
    }
    sput(&s, "}");
    const char *r = arena_strndup(&g_arena, s.p, s.n);
    free(s.p);
    return r;
}

/* ZeRO 2-3: zeroes each gradient bucket op o is the first to write (they
 * accumulate over the layers that share them). */
static void zero_buckets(CE *e, const Op *o, bool *zeroed, const char *label)
{
    for (int i = 0; i < o->nwr; i++) {
        int id = o->wr[i];
        const Buffer *b = &e->s->bufs[id];
        if (buf_kind(b) != BK_BUCKET || zeroed[id]) continue;
        zeroed[id] = true;
        int k = atoi(b->name + 12);
        expect_bytes(e, id, e->rc->buckets[k].padded * e->gb, "a gradient bucket");
        row(e, FN_ZERO, arena_printf(&g_arena, "zero %s for %s", b->name, label), "{SRT_COMPUTE, %lld, %lld}",
            (long long)b->offset, (long long)e->rc->buckets[k].padded);
    }
}

/* The compute ops must be on the compute stream (their functions say so). */
static void need_compute(const CE *e, const Op *o)
{
    if (o->stream != ST_COMPUTE)
        die("emit: %s is on stream %s; the generated code runs it on compute", sched_op_label(e->s, (int)(o - e->s->ops)),
            sched_stream_name(o->stream));
}

/* The group of a layer op. */
static const Group *layer_group(const CE *e, const Op *o)
{
    int li = layer_slot(e, o->layer);
    if (li < 0) die("emit: op of layer %d outside the class", o->layer);
    return &e->layer[li];
}

/* The inline code of the owned-range helper for shard space [lo, hi). */
static const char *owned_call(CE *e, int stream, const char *what, int64_t lo, int64_t hi, int64_t staging,
                              int64_t pstage)
{
    e->uses_owned = true;
    return arena_printf(&g_arena, "%s_owned(c, %s, %s, %lld, %lld, %lld, %lld);", e->px, stream_name(stream), what,
                        (long long)lo, (long long)hi, (long long)staging, (long long)pstage);
}

/* Offload: the call of the shard-part helper: n elements of this rank's
 * reduced slice of a segment (at device offset in, shard elements a rank)
 * from element skip, into the device shard or the host's fp32 gradients at
 * out, copied or (acc) added. */
static const char *part_call(CE *e, int stream, int64_t in, int64_t shard, int64_t skip, int64_t n, bool host,
                             int64_t out, bool acc)
{
    e->uses_part = true;
    return arena_printf(&g_arena, "%s_part(c, %s, %lld, %lld, %lld, %lld, %d, %lld, %d);", e->px, stream_name(stream),
                        (long long)in, (long long)shard, (long long)skip, (long long)n, host ? 1 : 0, (long long)out,
                        acc ? 1 : 0);
}

/* The buffer among an op's reads (rd) or writes whose name starts with prefix, or -1. */
static int op_prefix(const CE *e, const Op *o, bool rd, const char *prefix)
{
    const int *ids = rd ? o->rd : o->wr;
    int n = rd ? o->nrd : o->nwr;
    for (int i = 0; i < n; i++)
        if (strncmp(e->s->bufs[ids[i]].name, prefix, strlen(prefix)) == 0) return ids[i];
    return -1;
}

/* Elements of a segment's shard (at shard_offset so) that stay on the device:
 * the host optimizer owns shard space from S_dev on. */
static int64_t dev_part(const CE *e, int64_t so, int64_t shard)
{
    return so >= e->S_dev ? 0 : so + shard <= e->S_dev ? shard : e->S_dev - so;
}

/* One NVMe optimizer transfer of host sub-group o->chunk: read (OP_OPT_READ)
 * its master weights and moments into its staging slot, or write them back
 * (OP_OPT_WRITE, with the updated parameters when those live on NVMe).  The
 * file holds the states one after the other: [master S_host][m S_host][v S_host]. */
static void nvme_opt_op(CE *e, const Op *o, const char *label)
{
    bool rd = o->kind == OP_OPT_READ;
    int64_t sub = e->spec->zero.sub_group_size, h0 = (int64_t)o->chunk * sub;
    int64_t n = e->S_host - h0 < sub ? e->S_host - h0 : sub;
    if (o->chunk < 0 || n <= 0) die("emit: %s names no host sub-group", label);
    const char *st = stream_name(o->stream);
    int slot = op_prefix(e, o, !rd, "optimizer.nvme_staging");
    if (e->b_nvme >= 0 && slot >= 0) {
        if (e->s->bufs[slot].bytes < n * 4 * e->nstates)
            die("emit: %s stages %lld bytes, the plan's %s has %lld", label, (long long)(n * 4 * e->nstates),
                e->s->bufs[slot].name, (long long)e->s->bufs[slot].bytes);
        for (int k = 0; k < e->nstates; k++)
            stmt(e, FN_INLINE, 0, label,
                 arena_printf(&g_arena, "srt_nvme_%s(c, %s, srt_hview(c, %lld, %lld, SRT_F32), %lld);",
                              rd ? "read" : "write", st, (long long)(boff(e, slot) + k * n * 4), (long long)n,
                              (long long)(boff(e, e->b_nvme) + ((int64_t)k * e->S_host + h0) * 4)));
    } else if (rd) {
        die("emit: %s reads no NVMe optimizer state", label);
    }
    if (!rd && e->b_hswap >= 0 && op_prefix(e, o, false, "params.shard") >= 0) {
        if (e->s->bufs[e->b_hswap].bytes < n * e->wb)
            die("emit: %s writes %lld parameter bytes through %s of %lld", label, (long long)(n * e->wb),
                e->s->bufs[e->b_hswap].name, (long long)e->s->bufs[e->b_hswap].bytes);
        stmt(e, FN_INLINE, 0, label,
             arena_printf(&g_arena, "srt_nvme_write(c, %s, srt_hview(c, %lld, %lld, WDT), %lld);", st,
                          (long long)boff(e, e->b_hswap), (long long)n,
                          (long long)(boff(e, e->b_pshard) + (e->S_dev + h0) * e->wb)));
    }
}

/* The view of a parameter shard slice (elements [j, j + n) of params.shard)
 * where it is read from: the device, the host arena, or, for NVMe, the host
 * swap staging after a read into it (returned in *pre). */
static const char *shard_src(CE *e, const char *st, int64_t j, int64_t n, const char **pre)
{
    int64_t off = boff(e, e->b_pshard) + j * e->wb;
    *pre = NULL;
    if (e->params_space == SPACE_DEVICE) return arena_printf(&g_arena, "DV(%lld, %lld, WDT)", (long long)off, (long long)n);
    if (e->params_space == SPACE_HOST) return arena_printf(&g_arena, "HV(%lld, %lld, WDT)", (long long)off, (long long)n);
    if (e->b_hswap < 0 || e->s->bufs[e->b_hswap].bytes < n * e->wb)
        die("emit: a parameter shard slice of %lld elements does not fit the NVMe staging", (long long)n);
    const char *v = arena_printf(&g_arena, "HV(%lld, %lld, WDT)", (long long)boff(e, e->b_hswap), (long long)n);
    *pre = arena_printf(&g_arena, "srt_nvme_read(c, %s, %s, %lld);", st, v, (long long)off);
    return v;
}

/* One OP_GRAD_REDUCE: per segment of the bucket, an all-reduce in place
 * (ZeRO 0-1), or a reduce-scatter into the shard (ZeRO 2-3; from the second
 * microbatch on, in place and added to the shard, since gradients accumulate). */
static void reduce_op(CE *e, const Op *o, const char *label)
{
    const RankClass *rc = e->rc;
    if (o->aux < 0 || o->aux >= rc->nbuckets) die("emit: %s names no bucket", label);
    const Bucket *bk = &rc->buckets[o->aux];
    const Segment *first = &rc->segs[bk->first_seg];
    const char *st = stream_name(o->stream);
    if (e->p->zero < 2) {
        row(e, FN_REDUCE, label, "{%s, 0, %lld, 0, %lld, 0}", st,
            (long long)(boff(e, e->b_grads) + first->offset * e->gb), (long long)bk->padded);
        return;
    }
    bool whole = first->tied || first->persistent;
    int src = whole ? e->b_gwhole : op_need(e, o, true, BK_BUCKET, "gradient bucket");
    if (!whole) expect_bytes(e, src, bk->padded * e->gb, "a gradient bucket");
    for (int i = bk->first_seg; i < bk->first_seg + bk->nseg; i++) {
        const Segment *sg = &rc->segs[i];
        int64_t in = whole ? boff(e, src) + e->whole_rel[i] * e->gb : boff(e, src) + (sg->offset - first->offset) * e->gb;
        int64_t dn = dev_part(e, sg->shard_offset, sg->shard);
        if (dn < sg->shard) {
            /* offload: part of this shard is the host optimizer's: reduce in
             * place (mode 3), the device's part to the shard; a bucket's host
             * part goes to the host in its grad_d2h, a whole segment's here */
            bool acc = e->reduced[i];
            e->reduced[i] = true;
            row(e, FN_REDUCE, arena_printf(&g_arena, "%s seg%d", label, i), "{%s, 3, %lld, -1, %lld, %lld}", st,
                (long long)in, (long long)sg->padded, (long long)sg->shard);
            if (dn > 0)
                stmt(e, FN_INLINE, 0, label,
                     part_call(e, o->stream, in, sg->shard, 0, dn, false, boff(e, e->b_gshard) + sg->shard_offset * e->gb,
                               acc));
            if (whole)
                stmt(e, FN_INLINE, 0, label,
                     part_call(e, o->stream, in, sg->shard, dn, sg->shard - dn, true,
                               boff(e, e->b_hgrads) + (sg->shard_offset + dn - e->S_dev) * 4, false));
            continue;
        }
        int mode = e->reduced[i] ? 2 : 1;
        e->reduced[i] = true;
        row(e, FN_REDUCE, arena_printf(&g_arena, "%s seg%d", label, i), "{%s, %d, %lld, %lld, %lld, %lld}", st, mode,
            (long long)in, (long long)(boff(e, e->b_gshard) + sg->shard_offset * e->gb), (long long)sg->padded,
            (long long)sg->shard);
    }
}

/* One OP_PARAM_GATHER: ZeRO 1-2 all-gather the updated shards of the
 * segments since the previous one in place; ZeRO 3 gather the persistent
 * segment into params.persistent. */
static void param_gather_op(CE *e, const Op *o, const char *label)
{
    const RankClass *rc = e->rc;
    int last = o->aux;
    if (last < 0 || last >= rc->nsegs) die("emit: %s names no segment", label);
    for (int i = e->prev_pgather + 1; i <= last; i++) {
        const Segment *sg = &rc->segs[i];
        if (e->p->zero == 3 && sg->persistent && e->params_space != SPACE_DEVICE) {
            /* the shard is on the host or on NVMe: gather from there */
            const char *pre, *in = shard_src(e, stream_name(o->stream), sg->shard_offset, sg->shard, &pre);
            if (pre) stmt(e, FN_INLINE, 0, label, pre);
            /* one dp rank: the shard is the whole segment, a copy to the device */
            stmt(e, FN_INLINE, 0, label,
                 arena_printf(&g_arena, e->p->dp == 1 ? "srt_copy(c, %s, DV(%lld, %lld, WDT), %s);"
                                                      : "srt_all_gather(c, %s, SRT_DP, DV(%lld, %lld, WDT), %s);",
                              stream_name(o->stream), (long long)(boff(e, e->b_persist) + e->persist_rel[i] * e->wb),
                              (long long)sg->padded, in));
        } else if (e->p->zero == 3) {
            if (!sg->persistent) continue;
            row(e, FN_PGATHER, arena_printf(&g_arena, "%s seg%d", label, i), "{%s, %lld, %lld, %lld, %lld}",
                stream_name(o->stream), (long long)(boff(e, e->b_persist) + e->persist_rel[i] * e->wb),
                (long long)(boff(e, e->b_pshard) + sg->shard_offset * e->wb), (long long)sg->padded,
                (long long)sg->shard);
        } else {
            row(e, FN_PGATHER, arena_printf(&g_arena, "%s seg%d", label, i), "{%s, %lld, -1, %lld, %lld}",
                stream_name(o->stream), (long long)(boff(e, e->b_params) + sg->offset * e->wb), (long long)sg->padded,
                (long long)sg->shard);
        }
    }
    e->prev_pgather = last;
}


/* The one buffer among an op's reads (rd) or writes whose name ends with
 * suffix (the tp transients: ".resid1", ".dresid1"). */
static int op_suffix(const CE *e, const Op *o, bool rd, const char *suffix)
{
    const int *ids = rd ? o->rd : o->wr;
    int n = rd ? o->nrd : o->nwr;
    for (int i = 0; i < n; i++)
        if (ends_with(e->s->bufs[ids[i]].name, suffix)) return ids[i];
    die("emit: op %s has no %s buffer", sched_op_label(e->s, (int)(o - e->s->ops)), suffix);
}

/* tp > 1: the all-reduce over tp that completes the partial gradients of the
 * replicated tensors of the op's layer (norms, row-parallel biases,
 * positions) in the gradient buffers the op writes: one row per tensor,
 * exactly the elements the schedule counts.  A kv head shared by some tp
 * ranks (SPLIT_KV) is summed over just those (kind 3: SRT_TP_KV). */
static void tp_grads_op(CE *e, const Op *o, const char *label)
{
    const RankClass *rc = e->rc;
    int64_t total = 0;
    for (int w = 0; w < o->nwr; w++) {
        const Buffer *b = &e->s->bufs[o->wr[w]];
        int kind = buf_kind(b);
        for (int i = 0; i < rc->nsegs; i++) {
            const Segment *sg = &rc->segs[i];
            int64_t base;
            if (kind == BK_GRADS) {
                base = b->offset + sg->offset * e->gb;
            } else if (kind == BK_GWHOLE) {
                if (e->whole_rel[i] < 0) continue;
                base = b->offset + e->whole_rel[i] * e->gb;
            } else if (kind == BK_BUCKET) {
                int k = atoi(b->name + 12);
                if (e->seg_bucket[i] != k || e->whole_rel[i] >= 0) continue;
                base = b->offset + (sg->offset - rc->segs[rc->buckets[k].first_seg].offset) * e->gb;
            } else {
                die("emit: %s writes %s, not a gradient buffer", label, b->name);
            }
            for (int j = sg->first; j < sg->first + sg->n; j++) {
                const ClassTensor *ct = &rc->tensors[j];
                const Tensor *t = &e->m->t[ct->tensor];
                if (t->layer != o->layer || (t->split != SPLIT_NONE && t->split != SPLIT_KV) || ct->copy) continue;
                total += ct->numel;
                row(e, FN_TP, arena_printf(&g_arena, "%s %s", label, t->name), "{%s, %d, 1, %lld, %lld, %lld}",
                    stream_name(o->stream), t->split == SPLIT_KV ? 3 : 0,
                    (long long)(base + (ct->offset - sg->offset) * e->gb),
                    (long long)(base + (ct->offset - sg->offset) * e->gb), (long long)ct->numel);
            }
        }
    }
    if (total * e->gb != o->bytes)
        die("emit: %s all-reduces %lld gradient bytes, the schedule says %lld", label, (long long)(total * e->gb),
            (long long)o->bytes);
}

/* A TP collective of activations: all-reduce in place (Megatron's f and g),
 * or under sequence parallelism an all-gather of a sequence shard (the
 * layer's input, a gradient, or the x2 shard of a saved buffer) into a full
 * (B,T,C) buffer, or a reduce-scatter of full partial sums into a shard.
 * Rows: kind 0 all-reduce, 1 all-gather, 2 reduce-scatter; n: the full
 * tensor's elements. */
static void tp_comm_op(CE *e, const Op *o, const char *label)
{
    if (o->sub == SUB_GRADS) {
        tp_grads_op(e, o, label);
        return;
    }
    if (o->kind == OP_TP_ALLGATHER || o->kind == OP_TP_REDUCE_SCATTER) {
        bool ag = o->kind == OP_TP_ALLGATHER;
        if (!sp_on(e) || o->nrd != 1 || o->nwr != 1)
            die("emit: %s: a sequence-parallel collective without sequence parallelism", label);
        const Buffer *in = &e->s->bufs[o->rd[0]], *out = &e->s->bufs[o->wr[0]];
        int64_t full = e->p->act.full, shard = full / e->p->tp, at = boff(e, o->rd[0]);
        bool rec = ag && ends_with(in->name, ".recomputed");    /* full checkpointing's replayed tensors */
        bool inside = rec && in->bytes == e->p->act.x + e->saved.total;    /* after the layer's input shard */
        if (ag && (buf_kind(in) == BK_SAVED || rec) && o->sub == SUB_MLP)  /* the MLP's input shard */
            at += (inside ? e->p->act.x : 0) + carve_off(rec ? &e->saved : &e->kept, "x2");
        else if (inside && o->sub == SUB_ATTN) (void)0;                  /* the layer's input shard, first */
        else if (in->bytes != (ag ? shard : full))
            die("emit: %s reads %lld bytes, not a %s", label, (long long)in->bytes,
                ag ? "sequence shard" : "full tensor");
        bool into = !ag && ends_with(out->name, ".recomputed") && out->bytes == shard + e->saved.total;
        if (!into && out->bytes != (ag ? full : shard))     /* into: the next layer's replayed input, first */
            die("emit: %s writes %lld bytes, not a %s", label, (long long)out->bytes,
                ag ? "full tensor" : "sequence shard");
        row(e, FN_TP, label, "{%s, %d, 0, %lld, %lld, %lld}", stream_name(o->stream), ag ? 1 : 2,
            (long long)boff(e, o->wr[0]), (long long)at, (long long)(full / e->wb));
        return;
    }
    if (o->kind != OP_TP_ALLREDUCE || o->nrd != 1 || o->nwr != 1 || o->rd[0] != o->wr[0])
        die("emit: the code generator has no code for %s", label);
    const Buffer *b = &e->s->bufs[o->wr[0]];
    if (b->bytes != e->p->act.x) die("emit: %s reduces %lld bytes, a [T, C] activation has %lld", label,
                                     (long long)b->bytes, (long long)e->p->act.x);
    row(e, FN_TP, label, "{%s, 0, 0, %lld, %lld, %lld}", stream_name(o->stream), (long long)b->offset,
        (long long)b->offset, (long long)(b->bytes / e->wb));
}

/* A transfer between pipeline stages on the pp stream: a send of a stage
 * boundary (the last layer's output forward, the first layer's input gradient
 * backward) to the next / previous stage, or a receive from it.  Interleaved
 * virtual stages wrap around: the last stage's chunk feeds the first's next. */
static void pp_msg_op(CE *e, const Op *o, const char *label)
{
    bool send = o->kind == OP_SEND_FWD || o->kind == OP_SEND_BWD;
    bool fwd = o->kind == OP_SEND_FWD || o->kind == OP_RECV_FWD;
    if (send ? o->nrd != 1 : o->nwr != 1) die("emit: %s moves %d buffers, not one", label, send ? o->nrd : o->nwr);
    int id = send ? o->rd[0] : o->wr[0];
    expect_bytes(e, id, e->p->act.boundary, "a stage boundary");
    if (e->p->act.boundary != o->bytes) die("emit: %s moves %lld bytes, the boundary has %lld", label,
                                            (long long)o->bytes, (long long)e->p->act.boundary);
    int64_t pp = e->p->pp, st = e->rc->stage;
    int64_t peer = send == fwd ? (st + 1) % pp : (st + pp - 1) % pp;   /* send fwd / recv bwd: the next stage */
    row(e, FN_PP, label, "{%s, %d, %lld, %lld, %lld}", stream_name(o->stream), send ? 0 : 1, (long long)boff(e, id),
        (long long)(e->s->bufs[id].bytes / e->wb), (long long)peer);
}

/* The tied embedding's gradient summed between the first stage (the embedding)
 * and the last (the head's copy) over SRT_EMBED: one row per tied tensor, in
 * the gradient buffer it accumulates in (grads, or grads.whole for ZeRO 2-3). */
static void tied_reduce_op(CE *e, const Op *o, const char *label)
{
    const RankClass *rc = e->rc;
    int64_t total = 0;
    for (int i = 0; i < rc->ntensors; i++) {
        const ClassTensor *ct = &rc->tensors[i];
        const Segment *sg = &rc->segs[ct->seg];
        if (!ct->copy && !(e->m->tied && e->m->t[ct->tensor].role == R_TOK_EMBED)) continue;
        int64_t at = e->p->zero < 2 ? boff(e, e->b_grads) + ct->offset * e->gb
                                    : boff(e, e->b_gwhole) + (e->whole_rel[ct->seg] + ct->offset - sg->offset) * e->gb;
        if (e->p->zero >= 2 && e->whole_rel[ct->seg] < 0) die("emit: %s: the tied tensor is not in grads.whole", label);
        total += ct->numel;
        row(e, FN_PP, arena_printf(&g_arena, "%s %s", label, e->m->t[ct->tensor].name), "{%s, 2, %lld, %lld, -1}",
            stream_name(o->stream), (long long)at, (long long)ct->numel);
    }
    if (total * e->gb != o->bytes)
        die("emit: %s all-reduces %lld gradient bytes, the schedule says %lld", label, (long long)(total * e->gb),
            (long long)o->bytes);
}

/* ---- activation checkpointing: the layer's buffers as sched.c names them ------------------ */

/* The buffer "act.L<layer>.mb<mb>.<what>" among an op's reads (rd) or writes, or -1. */
static int act_of(const CE *e, const Op *o, bool rd, int layer, const char *what)
{
    const char *name = arena_printf(&g_arena, "act.L%d.mb%d.%s", layer, o->mb, what);
    const int *ids = rd ? o->rd : o->wr;
    int n = rd ? o->nrd : o->nwr;
    for (int i = 0; i < n; i++)
        if (strcmp(e->s->bufs[ids[i]].name, name) == 0) return ids[i];
    return -1;
}

/* The input of layer `layer` (B,T,C) among an op's reads (rd) or writes, or -1:
 * x, or under full checkpointing the group's checkpoint (ckpt, unless it is a
 * partitioned slice) or a transient (x.transient). */
static int layer_input(const CE *e, const Op *o, bool rd, int layer)
{
    static const char *const what[] = {"x", "ckpt", "x.transient"};
    for (size_t i = 0; i < sizeof what / sizeof what[0]; i++) {
        int id = act_of(e, o, rd, layer, what[i]);
        if (id >= 0 && e->s->bufs[id].bytes == e->p->act.x) return id;
    }
    return -1;
}

/* The embedding's output: the first layer's input (its checkpoint under full
 * checkpointing). */
static int embed_output(const CE *e, const Op *o)
{
    int x = layer_input(e, o, false, 0);
    if (x < 0) die("emit: op %s has no output buffer", sched_op_label(e->s, (int)(o - e->s->ops)));
    return x;
}

/* Partitioned activations: a group's first layer keeps only its tp rank's
 * slice of its input (ckpt, which the forward writes), all-gathered again
 * before the recompute.  Emitted with the forward (its attention part) that
 * reads the input x. */
static void ckpt_slice(CE *e, const Op *o, int x, const char *label)
{
    int sl = act_of(e, o, false, o->layer, "ckpt");
    if (sl < 0 || e->s->bufs[sl].bytes == e->p->act.x) return;
    if (e->s->bufs[sl].bytes * e->p->tp != e->p->act.x || e->s->bufs[sl].bytes % e->wb)
        die("emit: %s keeps a checkpoint slice of %lld bytes, not 1/%lld of the input's %lld", label,
            (long long)e->s->bufs[sl].bytes, (long long)e->p->tp, (long long)e->p->act.x);
    row(e, FN_CKPT, arena_printf(&g_arena, "%s (checkpoint slice)", label), "{%s, 3, %lld, %lld, %lld}",
        stream_name(o->stream), (long long)boff(e, sl), (long long)boff(e, x), (long long)(e->s->bufs[sl].bytes / e->wb));
}

/* The tp collectives of activation checkpointing: the all-gather of a
 * partitioned checkpoint (ckpt -> ckpt.gathered), and a full recompute's
 * all-reduce in place of a layer's output, which is the start of the next
 * layer's recomputed buffer.  False for any other tp collective. */
static bool ckpt_tp_op(CE *e, const Op *o, const char *label)
{
    if (o->kind == OP_TP_ALLREDUCE && o->nrd == 1 && o->nwr == 1 && o->rd[0] == o->wr[0] &&
        ends_with(e->s->bufs[o->wr[0]].name, ".recomputed")) {
        const Buffer *b = &e->s->bufs[o->wr[0]];
        if (o->bytes != e->p->act.x || b->bytes != e->p->act.x + e->saved.total)
            die("emit: %s reduces %lld bytes of %s (%lld bytes)", label, (long long)o->bytes, b->name,
                (long long)b->bytes);
        row(e, FN_TP, label, "{%s, 0, 0, %lld, %lld, %lld}", stream_name(o->stream), (long long)b->offset,
            (long long)b->offset, (long long)(e->p->act.x / e->wb));
        return true;
    }
    if (o->kind != OP_TP_ALLGATHER || o->nrd != 1 || o->nwr != 1 || !ends_with(e->s->bufs[o->wr[0]].name, ".ckpt.gathered"))
        return false;
    const Buffer *in = &e->s->bufs[o->rd[0]], *out = &e->s->bufs[o->wr[0]];
    if (!ends_with(in->name, ".ckpt") || in->bytes * e->p->tp != out->bytes || out->bytes != e->p->act.x)
        die("emit: %s gathers %s (%lld bytes) into %lld", label, in->name, (long long)in->bytes, (long long)out->bytes);
    row(e, FN_CKPT, label, "{%s, 2, %lld, %lld, %lld}", stream_name(o->stream), (long long)out->offset,
        (long long)in->offset, (long long)(in->bytes / e->wb));
    return true;
}

/* cpu checkpointing: a checkpoint to the pinned host arena after its
 * forward, and back before its recompute, on the stream the schedule says. */
static void ckpt_copy_op(CE *e, const Op *o, const char *label)
{
    bool d2h = o->kind == OP_CKPT_D2H;
    if (o->nrd != 1 || o->nwr != 1) die("emit: %s copies %d buffers to %d", label, o->nrd, o->nwr);
    const Buffer *src = &e->s->bufs[o->rd[0]], *dst = &e->s->bufs[o->wr[0]];
    if (src->space != (d2h ? SPACE_DEVICE : SPACE_HOST) || dst->space != (d2h ? SPACE_HOST : SPACE_DEVICE) ||
        src->bytes != dst->bytes || src->bytes % e->wb)
        die("emit: %s copies %s (%lld bytes) to %s (%lld)", label, src->name, (long long)src->bytes, dst->name,
            (long long)dst->bytes);
    row(e, FN_CKPT, label, "{%s, %d, %lld, %lld, %lld}", stream_name(o->stream), d2h ? 0 : 1, (long long)dst->offset,
        (long long)src->offset, (long long)(src->bytes / e->wb));
}

/* Where a layer backward's tensors are: returns the layer input's buffer (its
 * offset is the input's), the saved tensors' offset in *so and the selectively
 * recomputed attention core's in *ao (-1 without).  Full checkpointing: the
 * layer's recomputed buffer holds its saved tensors, after its input when the
 * previous layer's recompute wrote the input there; else the input is the
 * group's checkpoint (gathered when partitioned). */
static int bwd_state(const CE *e, const Op *o, int64_t *so, int64_t *ao)
{
    const char *label = sched_op_label(e->s, (int)(o - e->s->ops));
    *ao = -1;
    if (e->pol != CKPT_FULL) {
        int saved = op_need(e, o, true, BK_SAVED, "saved");
        expect_bytes(e, saved, e->kept.total, "a layer's saved tensors");
        *so = boff(e, saved);
        if (e->pol == CKPT_SELECTIVE) {
            int at = act_of(e, o, true, o->layer, "attn");
            if (at < 0) die("emit: %s has no recomputed attention core", label);
            expect_bytes(e, at, e->attn.total, "the recomputed attention core");
            *ao = boff(e, at);
        }
        int x = layer_input(e, o, true, o->layer);
        if (x < 0 && !sp_on(e)) die("emit: %s has no input buffer", label);
        return x;
    }
    int rec = act_of(e, o, true, o->layer, "recomputed");
    if (rec < 0) die("emit: %s has no recomputed buffer", label);
    if (e->s->bufs[rec].bytes == e->p->act.x + e->saved.total) {
        *so = boff(e, rec) + e->p->act.x;
        return rec;
    }
    expect_bytes(e, rec, e->saved.total, "a layer's recomputed tensors");
    *so = boff(e, rec);
    int x = act_of(e, o, true, o->layer, "ckpt.gathered");
    if (x < 0) x = act_of(e, o, true, o->layer, "ckpt");
    if (x < 0) die("emit: %s has no checkpoint to read", label);
    expect_bytes(e, x, e->p->act.x, "a layer's checkpointed input");
    return x;
}

/* OP_RECOMPUTE.  Full: the layer's forward again into its recomputed buffer
 * (after its input when the previous layer's recompute wrote the input
 * there), its output into the next layer's, none for a group's last layer.
 * Selective: the attention core again. */
static void recompute_op(CE *e, const Op *o, const char *label)
{
    need_compute(e, o);
    const ActBytes *a = &e->p->act;
    if (e->pol == CKPT_SELECTIVE) {
        int saved = op_need(e, o, true, BK_SAVED, "saved"), at = act_of(e, o, false, o->layer, "attn");
        if (at < 0) die("emit: %s writes no attention core", label);
        expect_bytes(e, saved, e->kept.total, "a layer's kept tensors");
        expect_bytes(e, at, e->attn.total, "the recomputed attention core");
        row(e, FN_ATTN, label, "{%lld, %lld}", (long long)boff(e, saved), (long long)boff(e, at));
        return;
    }
    if (e->pol != CKPT_FULL) die("emit: %s: a recompute without checkpointing", label);
    int rec = act_of(e, o, false, o->layer, "recomputed");
    if (rec < 0) die("emit: %s writes no recomputed buffer", label);
    bool inside = e->s->bufs[rec].bytes == a->x + e->saved.total;
    if (!inside) expect_bytes(e, rec, e->saved.total, "a layer's recomputed tensors");
    int64_t so = boff(e, rec) + (inside ? a->x : 0), xo, yo, r1 = -1;
    int in = act_of(e, o, true, o->layer, "ckpt.gathered");
    if (in < 0) in = act_of(e, o, true, o->layer, "ckpt");
    if (in >= 0) expect_bytes(e, in, a->x, "a layer's checkpointed input");
    xo = inside ? boff(e, rec) : in >= 0 ? boff(e, in) : -1;
    int next = act_of(e, o, false, o->layer + 1, "recomputed");
    yo = next >= 0 ? boff(e, next) : -1;
    if (sp_on(e)) {     /* SP: the part's gathered input in, its full partial sums out (none: group's last) */
        xo = boff(e, r1 = op_suffix(e, o, true, ".gathered"));
        expect_bytes(e, r1, a->full, "a recompute's gathered input");
        int part = -1;
        for (int w = 0; w < o->nwr; w++)
            if (ends_with(e->s->bufs[o->wr[w]].name, ".partial")) part = o->wr[w];
        yo = part >= 0 ? boff(e, part) : -1;
        if (part >= 0) expect_bytes(e, part, a->full, "a recompute's partial sums");
    } else if (o->sub == SUB_MLP) {
        xo = boff(e, r1 = op_suffix(e, o, true, ".resid1"));
    } else if (o->sub == SUB_ATTN) {
        yo = boff(e, r1 = op_suffix(e, o, false, ".resid1"));
    }
    if (xo < 0) die("emit: %s has no input", label);
    int scr = op_need(e, o, false, BK_SCRATCH, "scratch");
    if (e->s->bufs[scr].bytes < e->rscr.total)
        die("emit: a layer's recompute needs %lld bytes of scratch, the plan gives it %lld", (long long)e->rscr.total,
            (long long)e->s->bufs[scr].bytes);
    if (e->p->tp > 1)
        row(e, FN_FWD, label, "{%d, %lld, %lld, %lld, %lld, %s, %d, %lld}", layer_slot(e, o->layer), (long long)xo,
            (long long)so, (long long)yo, (long long)boff(e, scr), units_of(e, layer_group(e, o), o), o->sub,
            (long long)(r1 >= 0 ? boff(e, r1) : -1));
    else
        row(e, FN_FWD, label, "{%d, %lld, %lld, %lld, %lld, %s}", layer_slot(e, o->layer), (long long)xo, (long long)so,
            (long long)yo, (long long)boff(e, scr), units_of(e, layer_group(e, o), o));
    e->st[e->nst - 1].fn = FN_RECOMP;   /* the forward's table, the recompute's function */
}

/* The statements of one op. */
static void op_stmts(CE *e, int i, bool *zeroed)
{
    const Op *o = &e->s->ops[i];
    const char *label = sched_op_label(e->s, i);
    switch (o->kind) {
    case OP_LOAD_BATCH: {
        int tok = op_buf(e, o, false, BK_TOKENS), tgt = op_buf(e, o, false, BK_TARGETS);
        if (tok >= 0) expect_bytes(e, tok, e->p->T * 4, "a microbatch's tokens");
        if (tgt >= 0) expect_bytes(e, tgt, e->p->T * 4, "a microbatch's targets");
        row(e, FN_LOAD, label, "{%s, %d, %lld, %lld}", stream_name(o->stream), o->mb,
            (long long)(tok >= 0 ? boff(e, tok) : -1), (long long)(tgt >= 0 ? boff(e, tgt) : -1));
        break;
    }
    case OP_EMBED_FWD: {
        need_compute(e, o);
        int tok = op_need(e, o, true, BK_TOKENS, "tokens");
        /* SP: the full partial sums, reduce-scattered into the first layer's shard */
        int x = sp_on(e) ? op_suffix(e, o, false, ".partial") : embed_output(e, o);
        expect_bytes(e, x, sp_on(e) ? e->p->act.full : e->p->act.x, "the embedding's output");
        row(e, FN_EMBF, label, "{%lld, %lld, %s}", (long long)boff(e, x), (long long)boff(e, tok),
            units_of(e, &e->pre, o));
        break;
    }
    case OP_LAYER_FWD: {
        need_compute(e, o);
        /* full checkpointing keeps nothing: no saved buffer (-1) */
        int saved = e->kept.total ? op_need(e, o, false, BK_SAVED, "saved") : -1, x, y, r1 = -1;
        if (sp_on(e)) {             /* SP: the gathered input in, the partial sums (full) out */
            x = r1 = op_suffix(e, o, true, ".gathered");
            y = op_suffix(e, o, false, ".partial");
        } else if (o->sub == SUB_MLP) {    /* the attention part's reduced output in, the layer's output out */
            r1 = op_suffix(e, o, true, ".resid1");
            x = r1;
        } else {
            x = layer_input(e, o, true, o->layer);
            if (x < 0) die("emit: op %s has no input buffer", label);
        }
        if (!sp_on(e) && o->sub == SUB_ATTN) {   /* out: the partial sums of the attention part */
            r1 = op_suffix(e, o, false, ".resid1");
            y = r1;
        } else if (!sp_on(e)) {
            y = layer_input(e, o, false, o->layer + 1);
            if (y < 0) y = op_need(e, o, false, BK_Y, "output");
        }
        int scr = op_need(e, o, false, BK_SCRATCH, "scratch");
        if (saved >= 0) expect_bytes(e, saved, e->kept.total, "a layer's saved tensors");
        expect_bytes(e, y, sp_on(e) ? e->p->act.full : e->p->act.x, "a layer's output");
        if (sp_on(e)) expect_bytes(e, x, e->p->act.full, "a layer's gathered input");
        if (e->s->bufs[scr].bytes < e->fscr.total)
            die("emit: a layer's forward needs %lld bytes of scratch, the plan gives it %lld",
                (long long)e->fscr.total, (long long)e->s->bufs[scr].bytes);
        if (e->p->tp > 1)
            row(e, FN_FWD, label, "{%d, %lld, %lld, %lld, %lld, %s, %d, %lld}", layer_slot(e, o->layer),
                (long long)boff(e, x), (long long)(saved >= 0 ? boff(e, saved) : -1), (long long)boff(e, y), (long long)boff(e, scr),
                units_of(e, layer_group(e, o), o), o->sub, (long long)boff(e, r1));
        else
            row(e, FN_FWD, label, "{%d, %lld, %lld, %lld, %lld, %s}", layer_slot(e, o->layer), (long long)boff(e, x),
                (long long)(saved >= 0 ? boff(e, saved) : -1), (long long)boff(e, y), (long long)boff(e, scr),
                units_of(e, layer_group(e, o), o));
        if (o->sub != SUB_MLP) ckpt_slice(e, o, x, label);
        break;
    }
    case OP_HEAD: {
        need_compute(e, o);
        int tgt = op_need(e, o, true, BK_TARGETS, "targets");
        int lg = op_need(e, o, false, BK_LOGITS, "logits"), scr = op_need(e, o, false, BK_SCRATCH, "scratch");
        /* SP: the gathered last output in, the full partial gradient out (reduce-scattered next) */
        int y = sp_on(e) ? op_suffix(e, o, true, ".gathered") : op_need(e, o, true, BK_Y, "input");
        int dy = sp_on(e) ? op_suffix(e, o, false, ".partial") : op_need(e, o, false, BK_DY, "output gradient");
        expect_bytes(e, lg, e->p->T * (e->m->Vpad / e->p->tp) * e->wb, "the logits");
        expect_bytes(e, y, sp_on(e) ? e->p->act.full : e->p->act.x, "the last layer's output");
        expect_bytes(e, dy, sp_on(e) ? e->p->act.full : e->p->act.x, "the last layer's output gradient");
        if (e->s->bufs[scr].bytes < e->hscr.total)
            die("emit: the head needs %lld bytes of scratch, the plan gives it %lld", (long long)e->hscr.total,
                (long long)e->s->bufs[scr].bytes);
        zero_buckets(e, o, zeroed, label);
        if (e->head_stmt < 0) e->head_stmt = e->nst;
        row(e, FN_HEAD, label, "{%lld, %lld, %lld, %lld, %lld, %s, %s}", (long long)boff(e, y),
            (long long)boff(e, tgt), (long long)boff(e, lg), (long long)boff(e, scr), (long long)boff(e, dy),
            units_of(e, &e->post, o), buckets_of(e, &e->post, o));
        break;
    }
    case OP_LAYER_BWD: {
        need_compute(e, o);
        int dy, dx, d1 = -1, x = -1;
        if (sp_on(e)) {             /* SP: gathered gradient and input in, the full partial sums out */
            dy = d1 = op_suffix(e, o, true, ".dy.gathered");
            x = op_suffix(e, o, true, ".regathered");
            dx = op_suffix(e, o, false, ".dpartial");
            if (o->sub == SUB_MLP) d1 = dx;
        } else if (o->sub == SUB_ATTN) {   /* the MLP part's reduced input gradient in */
            d1 = dy = op_suffix(e, o, true, ".dresid1");
        } else {
            dy = op_buf(e, o, true, BK_DY);
            if (dy < 0) dy = op_need(e, o, true, BK_DX, "output gradient");
        }
        if (!sp_on(e) && o->sub == SUB_MLP) {    /* out: the partial sums of its input gradient */
            d1 = dx = op_suffix(e, o, false, ".dresid1");
        } else if (!sp_on(e)) {
            dx = op_need(e, o, false, BK_DX, "input gradient");
        }
        int64_t so, ao;     /* the saved (or recomputed) tensors; selective: the attention core */
        int xs = bwd_state(e, o, &so, &ao);
        if (x < 0) x = xs;
        int scr = op_need(e, o, false, BK_SCRATCH, "scratch");
        expect_bytes(e, dx, sp_on(e) ? e->p->act.full : e->p->act.x, "a layer's input gradient");
        if (sp_on(e)) expect_bytes(e, x, e->p->act.full, "a layer's gathered input");
        if (e->s->bufs[scr].bytes < e->bscr.total)
            die("emit: a layer's backward needs %lld bytes of scratch, the plan gives it %lld",
                (long long)e->bscr.total, (long long)e->s->bufs[scr].bytes);
        const Group *g = layer_group(e, o);
        zero_buckets(e, o, zeroed, label);
        if (e->p->tp > 1)
            row(e, FN_BWD, label, "{%d, %lld, %lld, %lld, %lld, %lld, %s, %s, %d, %lld%s}", layer_slot(e, o->layer),
                (long long)boff(e, dy), (long long)boff(e, x), (long long)so, (long long)boff(e, dx),
                (long long)boff(e, scr), units_of(e, g, o), buckets_of(e, g, o), o->sub, (long long)boff(e, d1),
                ao >= 0 ? arena_printf(&g_arena, ", %lld", (long long)ao) : "");
        else
            row(e, FN_BWD, label, "{%d, %lld, %lld, %lld, %lld, %lld, %s, %s%s}", layer_slot(e, o->layer),
                (long long)boff(e, dy), (long long)boff(e, x), (long long)so, (long long)boff(e, dx),
                (long long)boff(e, scr), units_of(e, g, o), buckets_of(e, g, o),
                ao >= 0 ? arena_printf(&g_arena, ", %lld", (long long)ao) : "");
        break;
    }
    case OP_EMBED_BWD: {
        need_compute(e, o);
        int tok = op_need(e, o, true, BK_TOKENS, "tokens");
        int dx = sp_on(e) ? op_suffix(e, o, true, ".dx.gathered") : op_need(e, o, true, BK_DX, "gradient");
        expect_bytes(e, dx, sp_on(e) ? e->p->act.full : e->p->act.x, "the embedding's gradient");
        zero_buckets(e, o, zeroed, label);
        row(e, FN_EMBB, label, "{%lld, %lld, %s}", (long long)boff(e, dx), (long long)boff(e, tok),
            buckets_of(e, &e->pre, o));
        break;
    }
    case OP_GATHER: {
        const Segment *sg = &e->rc->segs[o->aux];
        int out = op_need(e, o, false, BK_GATHERED, "gathered");
        expect_bytes(e, out, sg->padded * e->wb, "a gathered fetch unit");
        e->gbuf[o->aux] = out;
        int fs = op_prefix(e, o, true, "params.fetch_staging");   /* offloaded parameters: fetched first */
        if (e->params_space != SPACE_DEVICE && fs < 0) die("emit: %s gathers an offloaded shard unfetched", label);
        row(e, FN_GATHER, label, "{%s, %lld, %lld, %lld, %lld}", stream_name(o->stream), (long long)boff(e, out),
            (long long)(fs >= 0 ? boff(e, fs) : boff(e, e->b_pshard) + sg->shard_offset * e->wb), (long long)sg->padded,
            (long long)sg->shard);
        break;
    }
    case OP_GRAD_REDUCE: reduce_op(e, o, label); break;
    case OP_RECV_FWD:
    case OP_SEND_FWD:
    case OP_RECV_BWD:
    case OP_SEND_BWD: pp_msg_op(e, o, label); break;
    case OP_TIED_REDUCE: tied_reduce_op(e, o, label); break;
    case OP_TP_ALLREDUCE:
    case OP_TP_ALLGATHER:
    case OP_TP_REDUCE_SCATTER:
        if (!ckpt_tp_op(e, o, label)) tp_comm_op(e, o, label);   /* a partitioned checkpoint's gather, or */
        break;
    case OP_RECOMPUTE: recompute_op(e, o, label); break;
    case OP_CKPT_D2H:
    case OP_CKPT_H2D: ckpt_copy_op(e, o, label); break;
    case OP_PARAM_GATHER: param_gather_op(e, o, label); break;
    case OP_GRAD_SUMSQ:
        stmt(e, FN_INLINE, 0, label, owned_call(e, o->stream, "OWN_SUMSQ", 0, e->S_dev + e->S_host, -1, -1));
        if (!e->has_norm_op)    /* one rank: no all-reduce, but the norm and the clipping scale */
            stmt(e, FN_INLINE, 0, "grad_norm (this rank alone)",
                 arena_printf(&g_arena, "srt_grad_norm_finish(c, %s, SRT_WORLD);", stream_name(o->stream)));
        break;
    case OP_GRAD_NORM:
        if (o->aux == 1) {  /* fp16's overflow flag: it travels in the sum of squares below */
            stmt(e, FN_INLINE, 0, label,
                 "/* fp16 overflow check: a non-finite gradient makes the norm non-finite (skip) */");
            break;
        }
        if (!e->has_sumsq_op) stmt(e, FN_INLINE, 0, label, owned_call(e, o->stream, "OWN_SUMSQ", 0, e->S_dev + e->S_host, -1, -1));
        stmt(e, FN_INLINE, 0, label,
             arena_printf(&g_arena, "srt_grad_norm_finish(c, %s, SRT_WORLD);", stream_name(o->stream)));
        break;
    case OP_OPT_STEP: {
        int64_t sub = e->spec->zero.sub_group_size;
        if (o->stream == ST_HOST) {     /* offload: a host sub-group, its states in the host arena or a slot */
            int64_t lo = e->S_dev + (int64_t)o->aux * sub, S = e->S_dev + e->S_host;
            int64_t hi = lo + sub < S ? lo + sub : S;
            int slot = e->b_nvme >= 0 ? op_prefix(e, o, false, "optimizer.nvme_staging") : -1;
            if (e->b_nvme >= 0 && slot < 0) die("emit: %s has no NVMe staging slot", label);
            stmt(e, FN_INLINE, 0, label, owned_call(e, o->stream, "OWN_OPT", lo, hi, slot >= 0 ? boff(e, slot) : -1, -1));
            break;
        }
        need_compute(e, o);
        int64_t lo = (int64_t)o->aux * sub;
        int64_t hi = lo + sub < e->S_dev ? lo + sub : e->S_dev;
        int stage = op_buf(e, o, false, BK_STAGE32);
        if (stage >= 0) expect_bytes(e, stage, (hi - lo) * 4, "the fp32 gradients of an optimizer sub-group");
        /* offloaded parameters: the updated ones go out through a device staging */
        int pst = e->params_space != SPACE_DEVICE ? op_prefix(e, o, false, "params.d2h_staging") : -1;
        if (pst >= 0) expect_bytes(e, pst, (hi - lo) * e->wb, "the updated parameters of a sub-group");
        e->dev_lo = lo, e->dev_hi = hi;
        stmt(e, FN_INLINE, 0, label,
             owned_call(e, o->stream, "OWN_OPT", lo, hi, stage >= 0 ? boff(e, stage) : -1, pst >= 0 ? boff(e, pst) : -1));
        break;
    }
    case OP_GRAD_D2H:
        if (e->S_host == 0) die("emit: %s but no host optimizer", label);
        if (e->p->zero < 2) {   /* the reduced gradients' host part, piece by piece */
            stmt(e, FN_INLINE, 0, label, owned_call(e, o->stream, "OWN_D2H", e->S_dev, e->S_dev + e->S_host, -1, -1));
        } else {                /* each segment's host part of this rank's reduced slice of the bucket */
            const Bucket *bk = &e->rc->buckets[o->aux];
            const Segment *first = &e->rc->segs[bk->first_seg];
            int src = op_need(e, o, true, BK_BUCKET, "gradient bucket");
            for (int i = bk->first_seg; i < bk->first_seg + bk->nseg; i++) {
                const Segment *sg = &e->rc->segs[i];
                int64_t dn = dev_part(e, sg->shard_offset, sg->shard);
                if (dn == sg->shard) continue;
                bool acc = e->hreduced[i];
                e->hreduced[i] = true;
                stmt(e, FN_INLINE, 0, label,
                     part_call(e, o->stream, boff(e, src) + (sg->offset - first->offset) * e->gb, sg->shard, dn,
                               sg->shard - dn, true, boff(e, e->b_hgrads) + (sg->shard_offset + dn - e->S_dev) * 4, acc));
            }
        }
        break;
    case OP_OPT_READ:
    case OP_OPT_WRITE: nvme_opt_op(e, o, label); break;
    case OP_PARAM_H2D: {    /* a host sub-group's updated parameters to the device */
        int64_t sub = e->spec->zero.sub_group_size, lo = e->S_dev + (int64_t)o->chunk * sub, S = e->S_dev + e->S_host;
        if (e->b_hstage < 0) die("emit: %s has no host staging", label);
        stmt(e, FN_INLINE, 0, label, owned_call(e, o->stream, "OWN_H2D", lo, lo + sub < S ? lo + sub : S, -1, -1));
        break;
    }
    case OP_PARAM_D2H: {    /* a device sub-group's updated parameters to the host or NVMe shard */
        int src = op_prefix(e, o, true, "params.d2h_staging");
        int64_t n = e->dev_hi - e->dev_lo, off = boff(e, e->b_pshard) + e->dev_lo * e->wb;
        if (src < 0 || n <= 0) die("emit: %s follows no device optimizer step", label);
        const char *st = stream_name(o->stream);
        stmt(e, FN_INLINE, 0, label,
             e->params_space == SPACE_HOST
                 ? arena_printf(&g_arena, "srt_copy(c, %s, HV(%lld, %lld, WDT), DV(%lld, %lld, WDT));", st,
                                (long long)off, (long long)n, (long long)boff(e, src), (long long)n)
                 : arena_printf(&g_arena, "srt_nvme_write(c, %s, DV(%lld, %lld, WDT), %lld);", st,
                                (long long)boff(e, src), (long long)n, (long long)off));
        break;
    }
    case OP_PARAM_FETCH: {  /* an offloaded shard slice of a fetch unit to the device */
        const Segment *sg = &e->rc->segs[o->aux];
        int dst = op_prefix(e, o, false, "params.fetch_staging");
        if (dst < 0) die("emit: %s has no fetch staging", label);
        expect_bytes(e, dst, sg->shard * e->wb, "a fetched parameter shard");
        const char *pre, *in = shard_src(e, stream_name(o->stream), sg->shard_offset, sg->shard, &pre);
        if (pre) stmt(e, FN_INLINE, 0, label, pre);
        stmt(e, FN_INLINE, 0, label,
             arena_printf(&g_arena, "srt_copy(c, %s, DV(%lld, %lld, WDT), %s);", stream_name(o->stream),
                          (long long)boff(e, dst), (long long)sg->shard, in));
        break;
    }
    default:
        die("emit: the code generator has no code for op %s (kind %s)", label, sched_op_kind_name(o->kind));
    }
}

/* Every op of the class in schedule order, with the events of its waits. */
static void build_stmts(CE *e)
{
    const Sched *s = e->s;
    int *nwaits = arena_alloc(&g_arena, sizeof(int) * (size_t)(s->nops + 1));
    int *ev = arena_alloc(&g_arena, sizeof(int) * (size_t)(s->nops + 1));
    bool *used = arena_alloc(&g_arena, sizeof(bool) * MAX_EVENTS);
    bool *zeroed = arena_alloc(&g_arena, sizeof(bool) * (size_t)(s->nbufs + 1));
    e->gbuf = arena_alloc(&g_arena, sizeof(int) * (size_t)(e->rc->nsegs + 1));
    e->reduced = arena_alloc(&g_arena, sizeof(bool) * (size_t)(e->rc->nsegs + 1));
    e->hreduced = arena_alloc(&g_arena, sizeof(bool) * (size_t)(e->rc->nsegs + 1));
    for (int i = 0; i < e->rc->nsegs; i++) e->gbuf[i] = -1;
    e->prev_pgather = -1;
    e->head_stmt = -1;
    e->cur_op = -1;
    for (int i = 0; i < s->nops; i++) {
        ev[i] = -1;
        const Op *o = &s->ops[i];
        if (o->kind == OP_GRAD_SUMSQ) e->has_sumsq_op = true;
        if (o->kind == OP_GRAD_NORM && o->aux == 0) e->has_norm_op = true;
        if (o->kind != OP_WAIT) continue;
        if (o->aux < 0 || o->aux >= i) die("emit: wait %d names op %d, not an earlier op", i, o->aux);
        nwaits[o->aux]++;
    }
    /* gradients accumulate over microbatches: the step starts from zero */
    if (e->b_grads >= 0)
        stmt(e, FN_INLINE, 0, "zero the gradients",
             arena_printf(&g_arena, "srt_zero(c, SRT_COMPUTE, DV(%lld, %lld, GDT));", (long long)boff(e, e->b_grads),
                          (long long)(s->bufs[e->b_grads].bytes / e->gb)));
    if (e->b_gwhole >= 0)
        stmt(e, FN_INLINE, 0, "zero the tied and persistent gradients",
             arena_printf(&g_arena, "srt_zero(c, SRT_COMPUTE, DV(%lld, %lld, GDT));", (long long)boff(e, e->b_gwhole),
                          (long long)(s->bufs[e->b_gwhole].bytes / e->gb)));
    for (int i = 0; i < s->nops; i++) {
        const Op *o = &s->ops[i];
        e->cur_op = i;
        if (o->kind == OP_WAIT) {
            int t = o->aux;
            row(e, FN_WAIT, sched_op_label(s, i), "{%s, %d}", stream_name(o->stream), ev[t]);
            if (--nwaits[t] == 0) used[ev[t]] = false;
            continue;
        }
        op_stmts(e, i, zeroed);
        if (nwaits[i] == 0) continue;
        int k = 0;
        while (k < MAX_EVENTS && used[k]) k++;
        if (k == MAX_EVENTS) die("emit: more than %d events outstanding", MAX_EVENTS);
        used[k] = true;
        ev[i] = k;
        row(e, FN_REC, arena_printf(&g_arena, "record %s", sched_op_label(s, i)), "{%s, %d}", stream_name(o->stream), k);
    }
}

/* ---- loops ------------------------------------------------------------------------- */

/* A statement sequence is folded bottom-up: a run of a block repeated r times
 * becomes one loop node.  Symbols: a table-driven statement is its kind (two
 * calls of one kind differ only in their row, and rows follow the statement
 * order), an inline statement is unique, a loop is its hash-consed node. */
enum { SYM_LOOP = 1 << 20, SYM_UNIQUE = 1 << 28, LOOP_MAX_PERIOD = 128, LOOP_MIN_SAVED = 12 };

typedef struct LNode { int r, n, *body; int64_t len; } LNode;
typedef struct Loops {
    LNode *nodes;
    int nnodes, cap;
    int *hash;                  /* open addressing over node ids + 1 */
    int hcap;
} Loops;

/* A node's hash. */
static uint64_t lhash(int r, const int *body, int n)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)r;
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)body[i]) * 1099511628211ull;
    return h;
}

/* The flattened statements of a symbol. */
static int64_t sym_len(const Loops *L, int sym)
{
    return sym >= SYM_LOOP && sym < SYM_UNIQUE ? L->nodes[sym - SYM_LOOP].len : 1;
}

/* The node (r × body), made once. */
static int lnode(Loops *L, int r, const int *body, int n)
{
    if (2 * (L->nnodes + 1) >= L->hcap) {     /* grow and rehash */
        int hcap = L->hcap ? 2 * L->hcap : 1024;
        int *h = arena_alloc(&g_arena, sizeof(int) * (size_t)hcap);
        for (int id = 0; id < L->nnodes; id++) {
            const LNode *x = &L->nodes[id];
            uint64_t k = lhash(x->r, x->body, x->n) & (uint64_t)(hcap - 1);
            while (h[k]) k = (k + 1) & (uint64_t)(hcap - 1);
            h[k] = id + 1;
        }
        L->hash = h, L->hcap = hcap;
    }
    uint64_t k = lhash(r, body, n) & (uint64_t)(L->hcap - 1);
    for (; L->hash[k]; k = (k + 1) & (uint64_t)(L->hcap - 1)) {
        const LNode *x = &L->nodes[L->hash[k] - 1];
        if (x->r == r && x->n == n && memcmp(x->body, body, sizeof(int) * (size_t)n) == 0) return SYM_LOOP + L->hash[k] - 1;
    }
    if (L->nnodes == L->cap) {
        int cap = L->cap ? 2 * L->cap : 256;
        LNode *nn = arena_alloc(&g_arena, sizeof(LNode) * (size_t)cap);
        if (L->nnodes) memcpy(nn, L->nodes, sizeof(LNode) * (size_t)L->nnodes);
        L->nodes = nn, L->cap = cap;
    }
    LNode *x = &L->nodes[L->nnodes];
    x->r = r, x->n = n;
    x->body = arena_alloc(&g_arena, sizeof(int) * (size_t)(n + 1));
    memcpy(x->body, body, sizeof(int) * (size_t)n);
    x->len = 0;
    for (int i = 0; i < n; i++) x->len += sym_len(L, body[i]);
    x->len *= r;
    L->hash[k] = ++L->nnodes;
    return SYM_LOOP + L->nnodes - 1;
}

/* One folding pass: at each position the period whose repeats cover the most
 * symbols; a loop must save at least LOOP_MIN_SAVED statements (short runs
 * read better written out).  Returns the new length. */
static int fold_pass(Loops *L, int *seq, int n)
{
    int *out = arena_alloc(&g_arena, sizeof(int) * (size_t)(n + 1));
    int m = 0;
    for (int i = 0; i < n;) {
        int bestP = 0, bestR = 0;
        int64_t best = 0;
        for (int P = 1; P <= LOOP_MAX_PERIOD && i + 2 * P <= n; P++) {
            int r = 1;
            while (i + (r + 1) * P <= n && memcmp(seq + i, seq + i + r * P, sizeof(int) * (size_t)P) == 0) r++;
            if (r < 2) continue;
            int64_t flat = 0;
            for (int k = 0; k < P; k++) flat += sym_len(L, seq[i + k]);
            if (flat * (r - 1) >= LOOP_MIN_SAVED && r * P > best) best = r * P, bestP = P, bestR = r;
        }
        if (bestR) {
            out[m++] = lnode(L, bestR, seq + i, bestP);
            i += bestR * bestP;
        } else {
            out[m++] = seq[i++];
        }
    }
    memcpy(seq, out, sizeof(int) * (size_t)m);
    return m;
}

/* Folds the symbols of statements [0, n) until nothing repeats. */
static int fold(Loops *L, int *seq, int n, bool loops)
{
    if (!loops) return n;
    for (;;) {
        int m = fold_pass(L, seq, n);
        if (m == n) return n;
        n = m;
    }
}

/* The emitter of a step's code from folded symbols. */
typedef struct Gen {
    CE *e;
    const Loops *L;
    const Stmt *st;             /* the flattened statements                       */
    int64_t pos;                /* the next flattened statement                   */
    int depth;
    int64_t stride[16][NFN];    /* per enclosing loop: rows of each table per iteration */
    int64_t last[16];           /* per enclosing loop: statements to its last iteration */
    Str *out;
} Gen;

/* Rows of each table one symbol consumes. */
static void sym_rows(const Gen *g, int sym, int64_t *cnt)
{
    if (sym >= SYM_LOOP && sym < SYM_UNIQUE) {
        const LNode *x = &g->L->nodes[sym - SYM_LOOP];
        int64_t inner[NFN] = {0};
        for (int i = 0; i < x->n; i++) sym_rows(g, x->body[i], inner);
        for (int f = 0; f < NFN; f++) cnt[f] += inner[f] * x->r;
    } else if (sym < NFN) {
        cnt[fn_table[sym]]++;
    }
}

/* Indentation for the current depth. */
static const char *indent(int depth)
{
    static const char sp[] = "                                                                ";
    int n = 4 * (depth + 1);
    return sp + (int)sizeof sp - 1 - (n < (int)sizeof sp - 1 ? n : (int)sizeof sp - 1);
}

static void gen_sym(Gen *g, int sym);

/* A loop: checks that every iteration's rows follow the first's by the
 * same stride (so the indices can be computed), then writes it. */
static void gen_loop(Gen *g, const LNode *x)
{
    int64_t per[NFN] = {0}, len = x->len / x->r;
    for (int i = 0; i < x->n; i++) sym_rows(g, x->body[i], per);
    const Stmt *base = g->st + g->pos;
    for (int64_t k = 1; k < x->r; k++)
        for (int64_t j = 0; j < len; j++) {
            const Stmt *a = &base[j], *b = &base[k * len + j];
            if (a->fn != b->fn || a->fn == FN_INLINE || b->row != a->row + k * per[fn_table[a->fn]])
                die("emit: a folded loop does not repeat (statement %lld)", (long long)(g->pos + k * len + j));
        }
    if (g->depth >= 16) die("emit: loops nested too deep");
    const char *ind = indent(g->depth);
    sf(g->out, "%sfor (int i%d = 0; i%d < %d; i%d++) {  /* %d×: %s … %s */\n", ind, g->depth, g->depth, x->r, g->depth,
       x->r, base[0].label, base[x->len - 1].label);
    for (int f = 0; f < NFN; f++) g->stride[g->depth][f] = per[f];
    g->last[g->depth] = (int64_t)(x->r - 1) * len;
    g->depth++;
    int64_t start = g->pos;
    for (int i = 0; i < x->n; i++) gen_sym(g, x->body[i]);
    g->depth--;
    g->pos = start + x->len;
    sf(g->out, "%s}\n", ind);
}

/* One symbol: a call of a kind's function on its row (an index expression
 * inside loops), inline code, or a loop. */
static void gen_sym(Gen *g, int sym)
{
    if (sym >= SYM_LOOP && sym < SYM_UNIQUE) {
        gen_loop(g, &g->L->nodes[sym - SYM_LOOP]);
        return;
    }
    const Stmt *s = &g->st[g->pos++];
    const char *ind = indent(g->depth);
    /* in a loop: what the call touches in the first and the last iteration */
    const char *label = g->depth ? arena_printf(&g_arena, "%s … %s", s->label, s[g->last[g->depth - 1]].label) : s->label;
    if (s->fn == FN_INLINE) {
        sf(g->out, "%s%s  /* %s */\n", ind, s->code, s->label);
        return;
    }
    int t = fn_table[s->fn];
    sf(g->out, "%s%s_%s(c, &%s_%s[%d", ind, g->e->px, fn_names[s->fn], g->e->PX, fn_names[t], s->row);
    for (int d = 0; d < g->depth; d++)
        if (g->stride[d][t]) sf(g->out, " + %lld * i%d", (long long)g->stride[d][t], d);
    sf(g->out, "]);  /* %s */\n", label);
}

/* Writes statements [0, n) as code, folded into loops when asked. */
static void gen_stmts(CE *e, Str *out, const Stmt *st, int n, bool loops)
{
    Loops L = {0};
    int *seq = arena_alloc(&g_arena, sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) seq[i] = st[i].fn == FN_INLINE ? SYM_UNIQUE + i : st[i].fn;
    int m = fold(&L, seq, n, loops);
    Gen g = {.e = e, .L = &L, .st = st, .out = out};
    for (int i = 0; i < m; i++) gen_sym(&g, seq[i]);
    if (g.pos != n) die("emit: %lld of %d statements written", (long long)g.pos, n);
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

/* The class's srt_param, srt_buffer, segment and tensor tables. */
static void gen_class_tables(CE *e, Str *o)
{
    const RankClass *rc = e->rc;
    sf(o, "/* The parameter tensors of stage %d in flat order (flat: element offset in the\n"
          " * stage's flat parameter space; ZeRO splits each segment below over dp). */\n", e->ci);
    sf(o, "static const srt_param %s_params[%d] = {\n", e->px, rc->ntensors);
    for (int i = 0; i < rc->ntensors; i++) {
        const ClassTensor *ct = &rc->tensors[i];
        const Tensor *t = &e->m->t[ct->tensor];
        double std;
        bool one;
        param_init(e, t, &std, &one);
        sf(o, "    {%s, %d, %lld, %lld, %lld, %s, %lld, %lld, %lld, %s, %s, %s},\n", c_string(t->name),
           ct->copy ? (int)e->m->l : t->layer, (long long)t->rows, (long long)t->cols, (long long)t->rows_mem,
           split_c[t->split], (long long)ct->rows, (long long)ct->cols, (long long)ct->offset,
           t->decay ? "true" : "false", flt(std), one ? "true" : "false");
    }
    sput(o, "};\n\n");
    sf(o, "/* Every buffer of stage %d's memory plan: name, space (0 device, 1 host,\n"
          " * 2 NVMe), offset, bytes. */\n", e->ci);
    sf(o, "static const srt_buffer %s_buffers[%d] = {\n", e->px, e->s->nbufs);
    for (int i = 0; i < e->s->nbufs; i++) {
        const Buffer *b = &e->s->bufs[i];
        sf(o, "    {%s, %d, %lld, %lld},\n", c_string(b->name), b->space, (long long)b->offset, (long long)b->bytes);
    }
    sput(o, "};\n\n");
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
    sput(o, "};\n");
    if (!e->uses_owned) return;
    sf(o, "static const trainer_tensor %s_tensors[%d] = {\n", e->px, rc->ntensors);
    for (int i = 0; i < rc->ntensors; i++) {
        const ClassTensor *ct = &rc->tensors[i];
        const Tensor *t = &e->m->t[ct->tensor];
        sf(o, "    {%lld, %lld, %s, %d, %s},  /* %s%s */\n", (long long)ct->offset, (long long)ct->numel,
           t->decay ? "true" : "false", e->p->tp < 2 ? 0 : t->split == SPLIT_NONE ? 1 : t->split == SPLIT_KV ? 2 : 0,
           ct->copy ? "true" : "false", t->name, ct->copy ? " (the head's copy)" : "");
    }
    sput(o, "};\n\n");
}

/* One group's row: parameter and gradient offsets by role; end: what
 * follows the closing brace (",\n" in a table, ";\n" alone). */
static void gen_group_row(Str *o, const Group *g, const char *ind, const char *comment, const char *end)
{
    Str w = {0}, ws = {0}, gg = {0}, gs = {0};
    for (int r = 0; r < R_NROLES; r++) {
        if (g->ct[r] < 0) continue;
        sf(&w, "%s[%s] = %lld", w.n ? ", " : "", role_c[r], (long long)g->woff[r]);
        if (g->wslot[r]) sf(&ws, "%s[%s] = %d", ws.n ? ", " : "", role_c[r], g->wslot[r]);
        sf(&gg, "%s[%s] = %lld", gg.n ? ", " : "", role_c[r], (long long)g->goff[r]);
        if (g->gslot[r]) sf(&gs, "%s[%s] = %d", gs.n ? ", " : "", role_c[r], g->gslot[r]);
    }
    sf(o, "{  /* %s */\n%s    .w = {%s},\n", comment, ind, w.p ? w.p : "0");
    if (ws.n) sf(o, "%s    .wu = {%s},\n", ind, ws.p);
    sf(o, "%s    .g = {%s},\n", ind, gg.p ? gg.p : "0");
    if (gs.n) sf(o, "%s    .gu = {%s},\n", ind, gs.p);
    sf(o, "%s}%s", ind, end);
    free(w.p), free(ws.p), free(gg.p), free(gs.p);
}

/* The row types and every table of the step's calls. */
static void gen_step_tables(CE *e, Str *o)
{
    const char *px = e->px, *PX = e->PX;
    sf(o, "/* Where the parameters (w) and gradients (g) of each part of stage %d are:\n"
          " * byte offsets in the device arena, or, where wu / gu is k > 0, relative to\n"
          " * the call's u[k-1] (a gathered ZeRO-3 fetch unit) / g[k-1] (a gradient bucket). */\n", e->ci);
    sf(o, "typedef struct { int64_t w[NROLES], g[NROLES]; signed char wu[NROLES], gu[NROLES]; } %s_part_t;\n", px);
    if (e->nrows[FN_EMBF] || e->nrows[FN_EMBB]) {
        sf(o, "static const %s_part_t %s_PRE = ", px, PX);
        gen_group_row(o, &e->pre, "", "the embeddings", ";\n");
    }
    if (e->nrows[FN_HEAD]) {
        sf(o, "static const %s_part_t %s_POST = ", px, PX);
        gen_group_row(o, &e->post, "", "the final norm and the head", ";\n");
    }
    if (e->nrows[FN_FWD] || e->nrows[FN_BWD]) {
        sf(o, "static const %s_part_t %s_LAYER[%d] = {\n", px, PX, e->nl);
        for (int li = 0; li < e->nl; li++) {
            sput(o, "    ");
            gen_group_row(o, &e->layer[li], "    ", arena_printf(&g_arena, "layer %d", slot_layer(e, li)), ",\n");
        }
        sput(o, "};\n");
    }
    sput(o, "\n");
    sput(o, "/* The arguments of the step's calls, one table per kind, in step order\n"
            " * (offsets are bytes in the device arena; -1: none). */\n");
    sf(o, "typedef struct { srt_stream st; int mb; int64_t tok, tgt; } %s_load_t;\n", px);
    sf(o, "typedef struct { int64_t x, tok, u[%d]; } %s_embed_fwd_t;\n", e->nu, px);
    if (e->p->tp > 1)   /* part: SUB_ATTN / SUB_MLP; r1: the attention part's output (partial, then reduced) */
        sf(o, "typedef struct { int layer; int64_t x, saved, y, scratch, u[%d]; int part; int64_t r1; } %s_fwd_t;\n",
           e->nu, px);
    else
        sf(o, "typedef struct { int layer; int64_t x, saved, y, scratch, u[%d]; } %s_fwd_t;\n", e->nu, px);
    sf(o, "typedef struct { int64_t y, tgt, logits, scratch, dy, u[%d], g[%d]; } %s_head_t;\n", e->nu, e->ng, px);
    if (e->p->tp > 1)   /* part: SUB_MLP / SUB_ATTN; d1: the MLP part's input gradient (partial, then reduced) */
        sf(o, "typedef struct { int layer; int64_t dy, x, saved, dx, scratch, u[%d], g[%d]; int part; int64_t d1;%s } "
              "%s_bwd_t;\n", e->nu, e->ng, e->pol == CKPT_SELECTIVE ? " int64_t attn;" : "", px);
    else    /* attn: selective checkpointing's recomputed attention core */
        sf(o, "typedef struct { int layer; int64_t dy, x, saved, dx, scratch, u[%d], g[%d];%s } %s_bwd_t;\n", e->nu,
           e->ng, e->pol == CKPT_SELECTIVE ? " int64_t attn;" : "", px);
    sf(o, "typedef struct { int64_t dx, tok, g[%d]; } %s_embed_bwd_t;\n", e->ng, px);
    sf(o, "typedef struct { srt_stream st; int64_t out, in, n, shard; } %s_gather_t;\n", px);
    sf(o, "typedef struct { srt_stream st; int mode; int64_t in, out, n, shard; } %s_reduce_t;\n", px);
    sf(o, "typedef struct { srt_stream st; int64_t out, in, n, shard; } %s_param_gather_t;\n", px);
    sf(o, "typedef struct { srt_stream st; int64_t off, n; } %s_zero_t;\n", px);
    sf(o, "typedef struct { srt_stream st; int ev; } %s_record_t;\n", px);
    sf(o, "typedef struct { srt_stream st; int ev; } %s_wait_t;\n", px);
    sf(o, "typedef struct { srt_stream st; int kind, grad; int64_t out, in, n; } %s_tp_t;\n", px);
    if (e->nrows[FN_ATTN])  /* selective checkpointing: a layer's kept tensors, its recomputed attention core */
        sf(o, "typedef struct { int64_t saved, attn; } %s_attn_t;\n", px);
    if (e->nrows[FN_CKPT])  /* mode: gen_ckpt_fn; dst, src: byte offsets (device or host arena); n: elements */
        sf(o, "typedef struct { srt_stream st; int mode; int64_t dst, src, n; } %s_ckpt_t;\n", px);
    if (e->nrows[FN_PP])    /* kind 0 send, 1 receive (activations, peer: a pp rank), 2 the tied all-reduce */
        sf(o, "typedef struct { srt_stream st; int kind; int64_t off, n, peer; } %s_pp_t;\n", px);
    sput(o, "\n");
    for (int f = 0; f < NFN; f++) {
        if (fn_table[f] != f || e->nrows[f] == 0) continue;
        bool big = e->nrows[f] > ROW_COMMENTS_MAX;   /* the calls' comments name the ops */
        if (big) sf(o, "/* %d rows, in the order of the %s calls of the step. */\n", e->nrows[f], fn_names[f]);
        sf(o, "static const %s_%s_t %s_%s[%d] = {\n", px, fn_names[f], PX, fn_names[f], e->nrows[f]);
        const char *line = e->rows[f].p;
        for (int r = 0; r < e->nrows[f]; r++) {
            const char *end = strchr(line, '\n');
            if (big) sf(o, "    %.*s,\n", (int)(end - line), line);
            else sf(o, "    %.*s,  /* [%d] %s */\n", (int)(end - line), line, r, e->row_label[f][r]);
            line = end + 1;
        }
        sput(o, "};\n");
    }
    sput(o, "\n");
}

/* ---- the generated file: the kinds' functions --------------------------------------------- */

/* A view of a piece of a carved buffer: "DV(a->base + off + at, n, dt)". */
static const char *piece(const Carve *cv, const char *base, const char *name, int64_t at, const char *n,
                         const char *dt)
{
    for (int i = 0; i < cv->n; i++)     /* a merged carve names each piece's buffer */
        if (strcmp(cv->p[i].name, name) == 0 && cv->p[i].base) base = cv->p[i].base;
    return arena_printf(&g_arena, "DV(a->%s + %lld, %s, %s)", base, (long long)(carve_off(cv, name) + at), n, dt);
}

/* Appends src's pieces to dst as pieces of the buffer at row field base
 * (a function's layer tensors from several buffers: saved, scratch, attn). */
static void carve_merge(Carve *dst, const Carve *src, const char *base)
{
    for (int i = 0; i < src->n; i++) {
        if (dst->n == MAX_PIECES) die("emit: too many pieces in one buffer");
        dst->p[dst->n] = src->p[i];
        dst->p[dst->n++].base = base;
    }
}

/* "PW(ROLE, n)" when the layers have the role (a bias), else "NONE". */
static const char *opt_w(const CE *e, const Group *g, int role, const char *n, bool grad)
{
    if (g->ct[role] < 0) return "NONE";
    return arena_printf(&g_arena, "%s(%s, %s)", grad ? "PG" : "PW", role_c[role], n);
}

/* Declares a norm's statistics from a carved piece: layernorm mean + rstd, or rmsnorm rstd. */
static void norm_stats(const CE *e, Str *o, const Carve *cv, const char *base, const char *piece_name, const char *v)
{
    if (e->m->layernorm)
        sf(o, "    srt_t %s_mean = %s, %s_rstd = %s;  /* (B,T) */\n", v, piece(cv, base, piece_name, 0, "N", "SRT_F32"),
           v, piece(cv, base, piece_name, e->p->T * 4, "N", "SRT_F32"));
    else
        sf(o, "    srt_t %s_rstd = %s;  /* (B,T) */\n", v, piece(cv, base, piece_name, 0, "N", "SRT_F32"));
}

/* A norm's forward: out = norm(in) with weight role w (and bias role b). */
static void norm_fwd(const CE *e, Str *o, const Group *g, const char *v, const char *out, const char *in, int w, int b,
                     const char *comment)
{
    const char *pw = arena_printf(&g_arena, "PW(%s, C)", role_c[w]);
    if (e->m->layernorm)
        rt_call(o, "    ", "layernorm_fwd", "SRT_COMPUTE", comment, out, arena_printf(&g_arena, "%s_mean", v),
                arena_printf(&g_arena, "%s_rstd", v), in, pw, opt_w(e, g, b, "C", false), "N", "C", "EPS", NULL);
    else
        rt_call(o, "    ", "rmsnorm_fwd", "SRT_COMPUTE", comment, out, arena_printf(&g_arena, "%s_rstd", v), in, pw,
                "N", "C", "EPS", NULL);
}

/* A norm's backward: din += ..., the weight's (and bias's) gradients. */
static void norm_bwd(const CE *e, Str *o, const Group *g, const char *v, const char *din, const char *dout,
                     const char *in, int w, int b, const char *comment)
{
    const char *pw = arena_printf(&g_arena, "PW(%s, C)", role_c[w]), *gw = arena_printf(&g_arena, "PG(%s, C)", role_c[w]);
    if (e->m->layernorm)
        rt_call(o, "    ", "layernorm_bwd", "SRT_COMPUTE", comment, din, gw, opt_w(e, g, b, "C", true), dout, in, pw,
                arena_printf(&g_arena, "%s_mean", v), arena_printf(&g_arena, "%s_rstd", v), "N", "C", NULL);
    else
        rt_call(o, "    ", "rmsnorm_bwd", "SRT_COMPUTE", comment, din, gw, dout, in, pw,
                arena_printf(&g_arena, "%s_rstd", v), "N", "C", NULL);
}

/* The saved tensors of a layer as views (forward and backward share them;
 * sv: where they are, by activation checkpointing: carve_merge's pieces).
 * Under sequence parallelism (scr: the function's scratch) x is the gathered
 * input of the part (the MLP part's: x2), the norms run on it into the
 * scratch (norm1.sp, norm2.sp: each part has one), recomputed in backward
 * rather than gathered from the plan's saved norm shards, which stay unused;
 * x2 is this rank's shard of the attention residual, and own the element
 * offset of this rank's tokens in a (B,T,C) tensor. */
static void saved_views(const CE *e, Str *o, const Carve *scr, const Carve *sv)
{
    const Model *m = e->m;
    bool sp = sp_on(e);
    sf(o, "    srt_t x = DV(a->x, (int64_t)N * C, WDT);  /* (B,T,C) the %s */\n",
       sp ? "part's input, gathered over tp" : "layer's input");
    if (sp)
        sf(o, "    const int64_t NS = N / %lld;  /* this rank's tokens (sequence parallel) */\n"
              "    const int64_t own = srt_group_rank(c, SRT_TP) * NS * C;  /* where they are in (B,T,C) */\n",
           (long long)e->p->tp);
    /* norm1.sp, norm2.sp: one per part (the forward's share space by lifetime) */
    bool one = scr != &e->bscr;
    const char *nb = sp ? "scratch" : "saved", *n1 = sp ? "norm1.sp" : "norm1.out", *n2 = sp ? "norm2.sp" : "norm2.out";
    const Carve *nc = sp ? scr : sv;
    norm_stats(e, o, nc, nb, !sp ? "norm1.stats" : arena_printf(&g_arena, "%s.stats", n1), "ln1");
    sf(o, "    srt_t ln1 = %s;  /* (B,T,C) */\n", piece(nc, nb, n1, 0, "(int64_t)N * C", "WDT"));
    if (m->family == FAM_GPT) {   /* one fused projection: q, k, v side by side in each row */
        sf(o, "    srt_t qkv = %s;  /* (B,T,QKV) */\n", piece(sv, "saved", "qkv", 0, "(int64_t)N * QKV", "WDT"));
        sput(o, "    srt_t q = qkv, k = AT(qkv, QD), v = AT(qkv, QD + KVD);  /* rows QKV apart */\n");
    } else {                      /* three projections, each its own (B,T,·) array */
        int64_t T = e->p->T, w = e->wb, qd = m->h / e->p->tp, kvd = model_kv_rank(m) * m->hd;
        sf(o, "    srt_t q = %s;  /* (B,T,QD) */\n", piece(sv, "saved", "qkv", 0, "(int64_t)N * QD", "WDT"));
        sf(o, "    srt_t k = %s;  /* (B,T,KVD) */\n", piece(sv, "saved", "qkv", T * qd * w, "(int64_t)N * KVD", "WDT"));
        sf(o, "    srt_t v = %s;  /* (B,T,KVD) */\n",
           piece(sv, "saved", "qkv", T * (qd + kvd) * w, "(int64_t)N * KVD", "WDT"));
    }
    sf(o, "    srt_t att = %s;  /* (B,T,QD) attention output */\n", piece(sv, "saved", "attn.out", 0, "(int64_t)N * QD", "WDT"));
    sf(o, "    srt_t lse = %s;  /* (B,NH,T) */\n", piece(sv, "saved", "attn.lse", 0, "(int64_t)N * NH", "SRT_F32"));
    if (!sp || one)     /* the backward under SP regathers x2 as the MLP part's x */
        sf(o, "    srt_t x2 = %s;  /* (B,T,C) after the attention residual%s */\n",
           piece(sv, "saved", "x2", 0, sp ? "NS * C" : "(int64_t)N * C", "WDT"), sp ? ": this rank's tokens" : "");
    norm_stats(e, o, nc, nb, !sp ? "norm2.stats" : arena_printf(&g_arena, "%s.stats", n2), "ln2");
    sf(o, "    srt_t ln2 = %s;  /* (B,T,C) */\n", piece(nc, nb, n2, 0, "(int64_t)N * C", "WDT"));
    if (m->gated) {
        sf(o, "    srt_t gate = %s;  /* (B,T,FF) */\n", piece(sv, "saved", "gate", 0, "(int64_t)N * FF", "WDT"));
        sf(o, "    srt_t up = %s;  /* (B,T,FF) */\n", piece(sv, "saved", "up", 0, "(int64_t)N * FF", "WDT"));
        sf(o, "    srt_t act = %s;  /* (B,T,FF) silu(gate) * up */\n", piece(sv, "saved", "act", 0, "(int64_t)N * FF", "WDT"));
    } else {
        sf(o, "    srt_t fc1 = %s;  /* (B,T,FF) */\n", piece(sv, "saved", "fc1", 0, "(int64_t)N * FF", "WDT"));
        sf(o, "    srt_t act = %s;  /* (B,T,FF) gelu(fc1) */\n", piece(sv, "saved", "act", 0, "(int64_t)N * FF", "WDT"));
    }
}

/* The attention's input projections, forward or backward. */
static void qkv_proj(const CE *e, Str *o, const Group *g, bool bwd)
{
    const char *I = "    ";
    if (e->m->family == FAM_GPT) {
        if (!bwd)
            rt_call(o, I, "matmul_fwd", "SRT_COMPUTE", "attn.c_attn: (B,T,C) -> (B,T,QKV)", "qkv", "ln1",
                    "PW(QKV_W, (int64_t)QKV * C)", opt_w(e, g, R_QKV_B, "QKV", false), "N", "C", "QKV", NULL);
        else
            rt_call(o, I, "matmul_bwd", "SRT_COMPUTE", "8: attn.c_attn", "dln1", "PG(QKV_W, (int64_t)QKV * C)",
                    opt_w(e, g, R_QKV_B, "QKV", true), "dqkv", "ln1", "PW(QKV_W, (int64_t)QKV * C)", "N", "C", "QKV", NULL);
        return;
    }
    static const struct { int w, b; const char *out, *dout, *dim, *name; } pr[3] = {
        {R_Q_W, R_Q_B, "q", "dq", "QD", "q_proj"}, {R_K_W, R_K_B, "k", "dk", "KVD", "k_proj"},
        {R_V_W, R_V_B, "v", "dv", "KVD", "v_proj"}};
    for (int i = 0; i < 3; i++) {
        const char *w = arena_printf(&g_arena, "%s(%s, (int64_t)%s * C)", "PW", role_c[pr[i].w], pr[i].dim);
        if (!bwd)
            rt_call(o, I, "matmul_fwd", "SRT_COMPUTE", arena_printf(&g_arena, "self_attn.%s: (B,T,C) -> (B,T,%s)", pr[i].name, pr[i].dim),
                    pr[i].out, "ln1", w, opt_w(e, g, pr[i].b, pr[i].dim, false), "N", "C", pr[i].dim, NULL);
        else
            rt_call(o, I, "matmul_bwd", "SRT_COMPUTE", arena_printf(&g_arena, "8: self_attn.%s (dln1 +=)", pr[i].name), "dln1",
                    arena_printf(&g_arena, "PG(%s, (int64_t)%s * C)", role_c[pr[i].w], pr[i].dim),
                    opt_w(e, g, pr[i].b, pr[i].dim, true), pr[i].dout, "ln1", w, "N", "C", pr[i].dim, NULL);
    }
}

/* The layer's forward (kind "fwd"), or under full checkpointing its replay
 * (kind "recompute"): the same code keeping everything, so the recomputed
 * tensors are the forward's bit for bit; a group's last layer replays
 * without an output (y < 0).  kv: the layer's tensors; scr: the scratch. */
static void gen_fwd_fn(const CE *e, Str *o, const char *kind, const Carve *kv, const Carve *scr)
{
    bool replay = strcmp(kind, "recompute") == 0;
    const Model *m = e->m;
    const Group *g = &e->layer[0];
    const char *px = e->px, *I = "    ";
    sf(o, "/* One layer's forward for one microbatch: pre-%s attention%s and %s MLP,\n"
          " * each with a residual.  In: x (B,T,C); out: y (B,T,C); what backward needs\n"
          " * stays in the layer's saved buffer%s. */\n"
          "static void %s_%s(srt_ctx *c, const %s_fwd_t *a)\n{\n"
          "    const %s_part_t *w = &%s_LAYER[a->layer];\n",
       m->layernorm ? "LayerNorm" : "RMSNorm", m->family == FAM_LLAMA ? " (RoPE)" : "", m->gated ? "a SwiGLU"
       : ext_of(e->spec) ? arena_printf(&g_arena, "a user-defined %s", ext_of(e->spec)->name) : "a GELU",
       replay ? " (full checkpointing's recompute: its recomputed buffer)"
       : e->pol == CKPT_FULL ? " (full checkpointing: nothing, its tensors live in the scratch)"
       : e->pol == CKPT_SELECTIVE ? ", but for the attention core (selective checkpointing)" : "",
       px, kind, px, px, e->PX);
    saved_views(e, o, scr, kv);
    bool tp = e->p->tp > 1, sp = sp_on(e);
    sf(o, "    srt_t y = %sDV(a->y, (int64_t)N * C, WDT);  /* (B,T,C) the %s */\n",
       replay ? "a->y < 0 ? NONE : " : "", sp ? "part's partial sums (reduce-scattered next)" : "layer's output");
    if (sp) {   /* each rank adds the residual of its own tokens: the reduce-scatter sums one copy */
        sf(o, "    srt_t x_own = DV(a->x + own * WB, NS * C, WDT), y_own = %sDV(a->y + own * WB, NS * C, WDT);\n",
           replay ? "a->y < 0 ? NONE : " : "");
        if (g->ct[R_ATTN_OUT_B] >= 0 || g->ct[R_FC2_B] >= 0)   /* the row-parallel biases */
            sput(o, "    bool tp0 = srt_group_rank(c, SRT_TP) == 0;\n");
        sput(o, "    if (a->part == 2) goto mlp;\n");
    } else {
        sf(o, "    srt_t tmp = %s;  /* (B,T,C) a projection's output */\n",
           piece(scr, "scratch", "tmp", 0, "(int64_t)N * C", "WDT"));
    }
    if (tp && !sp) {   /* Megatron: this rank's heads and MLP columns; tp rank 0 adds the residuals and biases */
        sput(o, "    bool tp0 = srt_group_rank(c, SRT_TP) == 0;\n"
                "    srt_t r1 = DV(a->r1, (int64_t)N * C, WDT);  /* (B,T,C) the attention part's output */\n"
                "    if (a->part == 2) goto mlp;\n");
    }
    norm_fwd(e, o, g, "ln1", "ln1", "x", R_NORM1_W, R_NORM1_B, "input norm");
    qkv_proj(e, o, g, false);
    if (m->family == FAM_LLAMA) {
        rt_call(o, I, "rope_fwd", "SRT_COMPUTE", "rotate q in place", "q", "B", "T", "NH", "HS", "LDQ", "THETA", NULL);
        rt_call(o, I, "rope_fwd", "SRT_COMPUTE", "rotate k in place", "k", "B", "T", "NKV", "HS", "LDKV", "THETA", NULL);
    }
    rt_call(o, I, "attention_fwd", "SRT_COMPUTE", "causal self-attention", "att", "lse", "q", "k", "v", "B", "T", "NH",
            "NKV", "HS", "LDQ", "LDKV", NULL);
    const char *pb = opt_w(e, g, R_ATTN_OUT_B, "C", false), *fb = opt_w(e, g, R_FC2_B, "C", false);
    if (tp) {
        pb = strcmp(pb, "NONE") ? arena_printf(&g_arena, "tp0 ? %s : NONE", pb) : pb;
        fb = strcmp(fb, "NONE") ? arena_printf(&g_arena, "tp0 ? %s : NONE", fb) : fb;
    }
    rt_call(o, I, "matmul_fwd", "SRT_COMPUTE", tp ? "row-parallel attention output projection: partial sums" :
            "attention output projection", sp ? "y" : "tmp", "att", "PW(PROJ_W, (int64_t)C * QD)", pb, "N", "QD", "C",
            NULL);
    if (sp) {
        rt_call(o, I, "add_fwd", "SRT_COMPUTE", "this rank's tokens += their residual x", "y_own", "y_own", "x_own", NULL);
        sput(o, "    return;  /* the reduce-scatter over tp makes this rank's tokens of x2 */\nmlp:\n");
        rt_call(o, I, "convert", "SRT_COMPUTE", "x2 = this rank's tokens of the gathered x2 (kept for backward)", "x2",
                "x_own", NULL);
    } else if (tp) {
        sput(o, "    if (tp0) {\n");
        rt_call(o, "        ", "add_fwd", "SRT_COMPUTE", "r1 = x + this rank's partial attention", "r1", "x", "tmp", NULL);
        sput(o, "    } else {\n");
        rt_call(o, "        ", "convert", "SRT_COMPUTE", "r1 = this rank's partial attention", "r1", "tmp", NULL);
        sput(o, "    }\n    return;  /* the all-reduce over tp makes r1 = x2 */\nmlp:\n");
        rt_call(o, I, "convert", "SRT_COMPUTE", "x2 = the reduced r1 (kept for backward)", "x2", "r1", NULL);
    } else {
        rt_call(o, I, "add_fwd", "SRT_COMPUTE", "x2 = x + attention", "x2", "x", "tmp", NULL);
    }
    norm_fwd(e, o, g, "ln2", "ln2", sp ? "x" : "x2", R_NORM2_W, R_NORM2_B, "post-attention norm");
    if (m->gated) {
        rt_call(o, I, "matmul_fwd", "SRT_COMPUTE", "mlp.gate_proj: (B,T,C) -> (B,T,FF)", "gate", "ln2",
                "PW(GATE_W, (int64_t)FF * C)", opt_w(e, g, R_GATE_B, "FF", false), "N", "C", "FF", NULL);
        rt_call(o, I, "matmul_fwd", "SRT_COMPUTE", "mlp.up_proj", "up", "ln2", "PW(UP_W, (int64_t)FF * C)",
                opt_w(e, g, R_UP_B, "FF", false), "N", "C", "FF", NULL);
        rt_call(o, I, "swiglu_fwd", "SRT_COMPUTE", "silu(gate) * up", "act", "gate", "up", "N", "FF", "FF", NULL);
    } else if (ext_of(e->spec)) {   /* a user-defined activation: the GEMM, then its call */
        const CatalogExtern *x = ext_of(e->spec);
        rt_call(o, I, "matmul_fwd", "SRT_COMPUTE", "mlp.c_fc: (B,T,C) -> (B,T,FF)", "fc1", "ln2",
                "PW(FC1_W, (int64_t)FF * C)", opt_w(e, g, R_FC1_B, "FF", false), "N", "C", "FF", NULL);
        ext_call(o, I, x, 0, arena_printf(&g_arena, "%s (user-defined, overwrites act)", x->name),
                 (const char *[]){"act", "fc1"}, 2);
    } else {    /* GELU in the GEMM's epilogue; fc1 (its input) kept for the backward */
        rt_call(o, I, "matmul_gelu_fwd", "SRT_COMPUTE", "mlp.c_fc + gelu: fc1 = (B,T,C) -> (B,T,FF), act = gelu(fc1)",
                "act", "fc1", "ln2", "PW(FC1_W, (int64_t)FF * C)", opt_w(e, g, R_FC1_B, "FF", false), "N", "C", "FF",
                NULL);
    }
    if (replay)
        sput(o, "    if (a->y < 0) return;  /* the last layer of a recompute group: no output needed */\n");
    if (!sp && carve_off(scr, "tmp2") != carve_off(scr, "tmp"))  /* apart under full checkpointing's packing */
        sf(o, "    tmp = %s;  /* (B,T,C) */\n", piece(scr, "scratch", "tmp2", 0, "(int64_t)N * C", "WDT"));
    rt_call(o, I, "matmul_fwd", "SRT_COMPUTE", "MLP down projection: (B,T,FF) -> (B,T,C)", sp ? "y" : "tmp", "act",
            "PW(FC2_W, (int64_t)C * FF)", fb, "N", "FF", "C", NULL);
    if (sp) {
        rt_call(o, I, "add_fwd", "SRT_COMPUTE", "this rank's tokens += their residual x2", "y_own", "y_own", "x_own",
                NULL);
    } else if (tp) {
        sput(o, "    if (tp0) {\n");
        rt_call(o, "        ", "add_fwd", "SRT_COMPUTE", "y = x2 + this rank's partial mlp", "y", "x2", "tmp", NULL);
        sput(o, "    } else {\n");
        rt_call(o, "        ", "convert", "SRT_COMPUTE", "y = this rank's partial mlp (all-reduced next)", "y", "tmp",
                NULL);
        sput(o, "    }\n");
    } else {
        rt_call(o, I, "add_fwd", "SRT_COMPUTE", "y = x2 + mlp", "y", "x2", "tmp", NULL);
    }
    sput(o, "}\n\n");
}

/* The layer's backward; its numbered steps are the lifetimes carve_bwd packs. */
static void gen_bwd_fn(const CE *e, Str *o, const Carve *kv)
{
    const Model *m = e->m;
    const Group *g = &e->layer[0];
    const Carve *bs = &e->bscr;
    const char *px = e->px, *I = "    ";
    sf(o, "/* One layer's backward for one microbatch: dy (B,T,C) in, dx (B,T,C) out,\n"
          " * weight gradients accumulated (+=) where the part table says. */\n"
          "static void %s_bwd(srt_ctx *c, const %s_bwd_t *a)\n{\n"
          "    const %s_part_t *w = &%s_LAYER[a->layer];\n", px, px, px, e->PX);
    saved_views(e, o, &e->bscr, kv);
    sput(o, "    srt_t dy = DV(a->dy, (int64_t)N * C, WDT), dx = DV(a->dx, (int64_t)N * C, WDT);  /* (B,T,C) */\n"
            "    /* the gradients inside the layer share the scratch by lifetime */\n");
    bool tp = e->p->tp > 1, sp = sp_on(e);
    if (sp) {   /* dy, x (the part's input) and d1 gathered over tp; dx and the MLP part's d1 full partial sums */
        if (g->ct[R_ATTN_OUT_B] >= 0 || g->ct[R_FC2_B] >= 0)   /* the row-parallel biases */
            sput(o, "    bool tp0 = srt_group_rank(c, SRT_TP) == 0;\n");
        sput(o, "    srt_t dx2 = DV(a->d1, (int64_t)N * C, WDT);  /* (B,T,C) the MLP part's partial, then gathered */\n"
                "    srt_t dy_own = DV(a->dy + own * WB, NS * C, WDT), dx2_own = DV(a->d1 + own * WB, NS * C, WDT);\n"
                "    srt_t dx_own = DV(a->dx + own * WB, NS * C, WDT);\n");
    } else if (tp)
        sput(o, "    bool tp0 = srt_group_rank(c, SRT_TP) == 0;\n"
                "    srt_t dx2 = DV(a->d1, (int64_t)N * C, WDT);  /* (B,T,C) the MLP part's partial, then reduced */\n");
    else
        sf(o, "    srt_t dx2 = %s;  /* (B,T,C) */\n", piece(bs, "scratch", "dx2", 0, "(int64_t)N * C", "WDT"));
    if (m->gated || ext_of(e->spec))   /* GELU's backward fuses it away (matmul_bwd_dgelu) */
        sf(o, "    srt_t dact = %s;  /* (B,T,FF) */\n", piece(bs, "scratch", "dact", 0, "(int64_t)N * FF", "WDT"));
    if (m->gated)
        sf(o, "    srt_t dgate = %s, dup = %s;  /* (B,T,FF) */\n", piece(bs, "scratch", "dgate", 0, "(int64_t)N * FF", "WDT"),
           piece(bs, "scratch", "dup", 0, "(int64_t)N * FF", "WDT"));
    else
        sf(o, "    srt_t dfc1 = %s;  /* (B,T,FF) */\n", piece(bs, "scratch", "dfc1", 0, "(int64_t)N * FF", "WDT"));
    sf(o, "    srt_t dln2 = %s, dln1 = %s;  /* (B,T,C) */\n", piece(bs, "scratch", "dln2", 0, "(int64_t)N * C", "WDT"),
       piece(bs, "scratch", "dln1", 0, "(int64_t)N * C", "WDT"));
    sf(o, "    srt_t datt = %s;  /* (B,T,QD) */\n", piece(bs, "scratch", "datt", 0, "(int64_t)N * QD", "WDT"));
    sf(o, "    srt_t dqkv = %s;  /* (B,T,QKV): dq, dk, dv laid out as q, k, v */\n",
       piece(bs, "scratch", "dqkv", 0, "(int64_t)N * QKV", "WDT"));
    if (m->family == FAM_GPT)
        sput(o, "    srt_t dq = dqkv, dk = AT(dqkv, QD), dv = AT(dqkv, QD + KVD);\n");
    else
        sput(o, "    srt_t dq = AT(dqkv, 0), dk = AT(dqkv, (int64_t)N * QD), dv = AT(dqkv, (int64_t)N * (QD + KVD));\n"
                "    dq.n = (int64_t)N * QD, dk.n = dv.n = (int64_t)N * KVD;\n");
    const char *fbg = opt_w(e, g, R_FC2_B, "C", true), *pbg = opt_w(e, g, R_ATTN_OUT_B, "C", true);
    if (tp) {   /* a row-parallel bias sees its whole gradient on every rank: tp rank 0 takes it */
        fbg = strcmp(fbg, "NONE") ? arena_printf(&g_arena, "tp0 ? %s : NONE", fbg) : fbg;
        pbg = strcmp(pbg, "NONE") ? arena_printf(&g_arena, "tp0 ? %s : NONE", pbg) : pbg;
    }
    if (sp) {   /* each rank folds in the residual of its own tokens: the reduce-scatter sums one copy */
        sput(o, "    if (a->part == 1) goto attn;\n");
        rt_call(o, I, "zero", "SRT_COMPUTE", "0", "dx2", NULL);
        rt_call(o, I, "convert", "SRT_COMPUTE", "0: dx2 = dy on this rank's tokens (the MLP residual)", "dx2_own",
                "dy_own", NULL);
    } else if (tp) {
        sput(o, "    if (a->part == 1) goto attn;\n    if (tp0) {\n");
        rt_call(o, "        ", "convert", "SRT_COMPUTE", "0: dx2 = dy (the MLP residual, on tp rank 0)", "dx2", "dy", NULL);
        sput(o, "    } else {\n");
        rt_call(o, "        ", "zero", "SRT_COMPUTE", "0", "dx2", NULL);
        sput(o, "    }\n");
    } else {
        rt_call(o, I, "convert", "SRT_COMPUTE", "0: dx2 = dy (the MLP residual)", "dx2", "dy", NULL);
    }
    /* GELU: the down projection's data gradient fused with gelu' (and c_fc's
     * bias gradient) in one op; a user-defined activation or SwiGLU: dact */
    bool dgelu = !m->gated && !ext_of(e->spec);
    if (!dgelu) rt_call(o, I, "zero", "SRT_COMPUTE", "1", "dact", NULL);
    rt_call(o, I, "matmul_bwd", "SRT_COMPUTE", dgelu ? "1: MLP down projection's weight and bias" : "1: MLP down projection",
            dgelu ? "NONE" : "dact", "PG(FC2_W, (int64_t)C * FF)", fbg, "dy", "act", "PW(FC2_W, (int64_t)C * FF)", "N",
            "FF", "C", NULL);
    if (dgelu) {
        rt_call(o, I, "matmul_bwd_dgelu", "SRT_COMPUTE", "2: dfc1 = (dy·W2) * gelu'(fc1); c_fc's bias gradient +=",
                "dfc1", opt_w(e, g, R_FC1_B, "FF", true), "dy", "PW(FC2_W, (int64_t)C * FF)", "fc1", "N", "FF", "C",
                NULL);
        if (sp) norm_fwd(e, o, g, "ln2", "ln2", "x", R_NORM2_W, R_NORM2_B, "3: the post-attention norm again (gathered x2)");
        rt_call(o, I, "zero", "SRT_COMPUTE", "3", "dln2", NULL);
        rt_call(o, I, "matmul_bwd", "SRT_COMPUTE", "3: mlp.c_fc (its bias gradient came with dfc1)", "dln2",
                "PG(FC1_W, (int64_t)FF * C)", "NONE", "dfc1", "ln2", "PW(FC1_W, (int64_t)FF * C)", "N", "C", "FF", NULL);
    } else if (m->gated) {
        rt_call(o, I, "zero", "SRT_COMPUTE", "2", "dgate", NULL);
        rt_call(o, I, "zero", "SRT_COMPUTE", "2", "dup", NULL);
        rt_call(o, I, "swiglu_bwd", "SRT_COMPUTE", "2: swiglu", "dgate", "dup", "dact", "gate", "up", "N", "FF", "FF", NULL);
        if (sp) norm_fwd(e, o, g, "ln2", "ln2", "x", R_NORM2_W, R_NORM2_B, "3: the post-attention norm again (gathered x2)");
        rt_call(o, I, "zero", "SRT_COMPUTE", "3", "dln2", NULL);
        rt_call(o, I, "matmul_bwd", "SRT_COMPUTE", "3: mlp.up_proj", "dln2", "PG(UP_W, (int64_t)FF * C)",
                opt_w(e, g, R_UP_B, "FF", true), "dup", "ln2", "PW(UP_W, (int64_t)FF * C)", "N", "C", "FF", NULL);
        rt_call(o, I, "matmul_bwd", "SRT_COMPUTE", "3: mlp.gate_proj (dln2 +=)", "dln2", "PG(GATE_W, (int64_t)FF * C)",
                opt_w(e, g, R_GATE_B, "FF", true), "dgate", "ln2", "PW(GATE_W, (int64_t)FF * C)", "N", "C", "FF", NULL);
    } else {
        rt_call(o, I, "zero", "SRT_COMPUTE", "2", "dfc1", NULL);
        const CatalogExtern *x = ext_of(e->spec);
        ext_call(o, I, x, 1, arena_printf(&g_arena, "2: %s (user-defined, dfc1 +=)", x->name),
                 (const char *[]){"dfc1", "fc1", "dact"}, 3);
        if (sp) norm_fwd(e, o, g, "ln2", "ln2", "x", R_NORM2_W, R_NORM2_B, "3: the post-attention norm again (gathered x2)");
        rt_call(o, I, "zero", "SRT_COMPUTE", "3", "dln2", NULL);
        rt_call(o, I, "matmul_bwd", "SRT_COMPUTE", "3: mlp.c_fc", "dln2", "PG(FC1_W, (int64_t)FF * C)",
                opt_w(e, g, R_FC1_B, "FF", true), "dfc1", "ln2", "PW(FC1_W, (int64_t)FF * C)", "N", "C", "FF", NULL);
    }
    norm_bwd(e, o, g, "ln2", "dx2", "dln2", sp ? "x" : "x2", R_NORM2_W, R_NORM2_B, "4: post-attention norm (dx2 +=)");
    if (sp) {
        sput(o, "    return;  /* the reduce-scatter over tp completes this rank's tokens of dx2 */\nattn:\n");
        rt_call(o, I, "zero", "SRT_COMPUTE", "5", "dx", NULL);
        rt_call(o, I, "convert", "SRT_COMPUTE", "5: dx = dx2 on this rank's tokens (the attention residual)", "dx_own",
                "dx2_own", NULL);
    } else if (tp) {
        sput(o, "    return;  /* the all-reduce over tp completes dx2 */\nattn:\n    if (tp0) {\n");
        rt_call(o, "        ", "convert", "SRT_COMPUTE", "5: dx = dx2 (the attention residual, on tp rank 0)", "dx", "dx2",
                NULL);
        sput(o, "    } else {\n");
        rt_call(o, "        ", "zero", "SRT_COMPUTE", "5", "dx", NULL);
        sput(o, "    }\n");
    } else {
        rt_call(o, I, "convert", "SRT_COMPUTE", "5: dx = dx2 (the attention residual)", "dx", "dx2", NULL);
    }
    rt_call(o, I, "zero", "SRT_COMPUTE", "6", "datt", NULL);
    rt_call(o, I, "matmul_bwd", "SRT_COMPUTE", "6: attention output projection", "datt", "PG(PROJ_W, (int64_t)C * QD)",
            pbg, "dx2", "att", "PW(PROJ_W, (int64_t)C * QD)", "N", "QD", "C", NULL);
    rt_call(o, I, "zero", "SRT_COMPUTE", "7", "dqkv", NULL);
    rt_call(o, I, "attention_bwd", "SRT_COMPUTE", "7: attention", "dq", "dk", "dv", "datt", "att", "lse", "q", "k", "v",
            "B", "T", "NH", "NKV", "HS", "LDQ", "LDKV", NULL);
    if (m->family == FAM_LLAMA) {
        rt_call(o, I, "rope_bwd", "SRT_COMPUTE", "7: un-rotate dq", "dq", "B", "T", "NH", "HS", "LDQ", "THETA", NULL);
        rt_call(o, I, "rope_bwd", "SRT_COMPUTE", "7: un-rotate dk", "dk", "B", "T", "NKV", "HS", "LDKV", "THETA", NULL);
    }
    if (sp) norm_fwd(e, o, g, "ln1", "ln1", "x", R_NORM1_W, R_NORM1_B, "8: the input norm again, on the gathered x");
    rt_call(o, I, "zero", "SRT_COMPUTE", "8", "dln1", NULL);
    qkv_proj(e, o, g, true);
    norm_bwd(e, o, g, "ln1", "dx", "dln1", "x", R_NORM1_W, R_NORM1_B, "9: input norm (dx +=)");
    sput(o, "}\n\n");
}

/* The head for one microbatch (train: with its backward; eval: the loss only). */
static void gen_head_fn(const CE *e, Str *o, bool eval)
{
    const Carve *hs = &e->hscr;
    const Group *g = &e->post;
    const char *px = e->px, *I = "    ";
    if (!eval)
        sf(o, "/* The head for one microbatch: the final norm, logits against the %s,\n"
              " * the fused cross-entropy (the loss, and the logits' gradient in place),\n"
              " * then its backward at once, leaving dy (B,T,C) for the last layer. */\n"
              "static void %s_head(srt_ctx *c, const %s_head_t *a)\n{\n",
           e->m->tied ? "tied token embedding" : "output embedding", px, px);
    else
        sf(o, "/* The head's forward only (evaluation): the loss of the microbatch. */\n"
              "static void %s_head_eval(srt_ctx *c, const %s_head_t *a)\n{\n", px, px);
    sf(o, "    const %s_part_t *w = &%s_POST;\n", px, e->PX);
    sput(o, "    srt_t y = DV(a->y, (int64_t)N * C, WDT);  /* (B,T,C) the last layer's output */\n");
    norm_stats(e, o, hs, "scratch", "lnf.stats", "lnf");
    sf(o, "    srt_t lnf = %s;  /* (B,T,C) */\n", piece(hs, "scratch", "lnf", 0, "(int64_t)N * C", "WDT"));
    sf(o, "    srt_t losses = %s;  /* (B,T) */\n", piece(hs, "scratch", "losses", 0, "N", "SRT_F32"));
    sput(o, "    srt_t logits = DV(a->logits, (int64_t)N * VP, WDT);  /* (B,T,VP), then their gradient */\n");
    norm_fwd(e, o, g, "lnf", "lnf", "y", R_NORMF_W, R_NORMF_B, "final norm");
    rt_call(o, I, "matmul_fwd", "SRT_COMPUTE", "logits = lnf · head^T", "logits", "lnf", "PW(HEAD_W, (int64_t)VP * C)",
            "NONE", "N", "C", "VP", NULL);
    rt_call(o, I, "xent_fwd_bwd", "SRT_COMPUTE", "losses; logits := dloss · (softmax - onehot)", "losses", "logits",
            "DV(a->tgt, N, SRT_I32)", "N", "VP", e->p->tp > 1 ? "(int)srt_group_rank(c, SRT_TP) * VP" : "0", "V",
            e->spec->precision.dtype == DT_FP16 ? "DLOSS * srt_loss_scale(c)" : "DLOSS", NULL);
    rt_call(o, I, "loss_add", "SRT_COMPUTE", "the step's loss", "losses", "N", NULL);
    if (!eval) {
        sf(o, "    srt_t dlnf = %s;  /* (B,T,C) */\n", piece(hs, "scratch", "dlnf", 0, "(int64_t)N * C", "WDT"));
        sput(o, "    srt_t dy = DV(a->dy, (int64_t)N * C, WDT);  /* (B,T,C) */\n");
        rt_call(o, I, "zero", "SRT_COMPUTE", NULL, "dlnf", NULL);
        rt_call(o, I, "zero", "SRT_COMPUTE", NULL, "dy", NULL);
        rt_call(o, I, "matmul_bwd", "SRT_COMPUTE", "dlnf, dhead", "dlnf", "PG(HEAD_W, (int64_t)VP * C)", "NONE",
                "logits", "lnf", "PW(HEAD_W, (int64_t)VP * C)", "N", "C", "VP", NULL);
        norm_bwd(e, o, g, "lnf", "dy", "dlnf", "y", R_NORMF_W, R_NORMF_B, "dy, the final norm's gradients");
    }
    sput(o, "}\n\n");
}

/* The embedding's forward and backward. */
static void gen_embed_fns(const CE *e, Str *o)
{
    const char *px = e->px, *I = "    ";
    bool wpe = e->pre.ct[R_POS_EMBED] >= 0, tp = e->p->tp > 1;
    const char *v0 = tp ? "    int v0 = (int)srt_group_rank(c, SRT_TP) * VP;\n" : "";
    if (e->nrows[FN_EMBF]) {
        sf(o, "/* The embedding: x (B,T,C) = wte[tokens]%s. */\n"
              "static void %s_embed_fwd(srt_ctx *c, const %s_embed_fwd_t *a)\n{\n"
              "    const %s_part_t *w = &%s_PRE;\n%s", wpe ? " + wpe[t]" : "", px, px, px, e->PX, v0);
        if (tp)     /* vocab-parallel: this rank's rows, zeros elsewhere; all-reduced next */
            rt_call(o, I, "embed_fwd", "SRT_COMPUTE", "(B,T,C), this rank's vocabulary rows [v0, v0 + VP)",
                    "DV(a->x, (int64_t)N * C, WDT)", "DV(a->tok, N, SRT_I32)", "PW(WTE, (int64_t)VP * C)",
                    wpe ? "v0 == 0 ? PW(WPE, (int64_t)T * C) : NONE" : "NONE", "B", "T", "C", "v0", "v0 + VP", NULL);
        else
            rt_call(o, I, "embed_fwd", "SRT_COMPUTE", "(B,T,C)", "DV(a->x, (int64_t)N * C, WDT)", "DV(a->tok, N, SRT_I32)",
                    "PW(WTE, (int64_t)VP * C)", wpe ? "PW(WPE, (int64_t)T * C)" : "NONE", "B", "T", "C", "0", "VP", NULL);
        sput(o, "}\n\n");
    }
    if (e->nrows[FN_EMBB]) {
        sf(o, "/* The embedding's backward: scatter-add dx (B,T,C) into dwte%s. */\n"
              "static void %s_embed_bwd(srt_ctx *c, const %s_embed_bwd_t *a)\n{\n"
              "    const %s_part_t *w = &%s_PRE;\n%s", wpe ? ", sum into dwpe" : "", px, px, px, e->PX, v0);
        if (tp)
            rt_call(o, I, "embed_bwd", "SRT_COMPUTE", "this rank's vocabulary rows; positions on tp rank 0",
                    "PG(WTE, (int64_t)VP * C)", wpe ? "v0 == 0 ? PG(WPE, (int64_t)T * C) : NONE" : "NONE",
                    "DV(a->dx, (int64_t)N * C, WDT)", "DV(a->tok, N, SRT_I32)", "B", "T", "C", "v0", "v0 + VP", NULL);
        else
            rt_call(o, I, "embed_bwd", "SRT_COMPUTE", NULL, "PG(WTE, (int64_t)VP * C)",
                    wpe ? "PG(WPE, (int64_t)T * C)" : "NONE", "DV(a->dx, (int64_t)N * C, WDT)", "DV(a->tok, N, SRT_I32)",
                    "B", "T", "C", "0", "VP", NULL);
        sput(o, "}\n\n");
    }
}

/* Does the step call kind fn? */
static bool calls_kind(const CE *e, int fn)
{
    for (int i = 0; i < e->nst; i++)
        if (e->st[i].fn == fn) return true;
    return false;
}

/* Selective checkpointing's recompute: a layer's attention core again. */
static void gen_attn_fn(const CE *e, Str *o)
{
    const Model *m = e->m;
    Carve kv = {0};
    carve_merge(&kv, &e->kept, "saved");
    carve_merge(&kv, &e->attn, "attn");
    sf(o, "/* Selective checkpointing: a layer's attention core again, from the q, k, v\n"
          " * its forward kept (RoPE applied), into the buffer its backward reads it\n"
          " * from: the forward's kernel on the forward's inputs, so the same bits. */\n"
          "static void %s_attn(srt_ctx *c, const %s_attn_t *a)\n{\n", e->px, e->px);
    if (m->family == FAM_GPT) {
        sf(o, "    srt_t qkv = %s;  /* (B,T,QKV) */\n", piece(&kv, "saved", "qkv", 0, "(int64_t)N * QKV", "WDT"));
        sput(o, "    srt_t q = qkv, k = AT(qkv, QD), v = AT(qkv, QD + KVD);  /* rows QKV apart */\n");
    } else {
        int64_t T = e->p->T, w = e->wb, qd = m->h / e->p->tp, kvd = model_kv_rank(m) * m->hd;
        sf(o, "    srt_t q = %s, k = %s, v = %s;\n", piece(&kv, "saved", "qkv", 0, "(int64_t)N * QD", "WDT"),
           piece(&kv, "saved", "qkv", T * qd * w, "(int64_t)N * KVD", "WDT"),
           piece(&kv, "saved", "qkv", T * (qd + kvd) * w, "(int64_t)N * KVD", "WDT"));
    }
    sf(o, "    srt_t att = %s;  /* (B,T,QD) */\n", piece(&kv, "attn", "attn.out", 0, "(int64_t)N * QD", "WDT"));
    sf(o, "    srt_t lse = %s;  /* (B,NH,T) */\n", piece(&kv, "attn", "attn.lse", 0, "(int64_t)N * NH", "SRT_F32"));
    rt_call(o, "    ", "attention_fwd", "SRT_COMPUTE", "causal self-attention", "att", "lse", "q", "k", "v", "B", "T",
            "NH", "NKV", "HS", "LDQ", "LDKV", NULL);
    sput(o, "}\n\n");
}

/* The layer forwards of the spec's activation checkpointing: the forward
 * (keeping what carve_ckpt says), the full recompute (the forward keeping
 * everything), the selective recompute (the attention core). */
static void gen_layer_fwd_fns(const CE *e, Str *o)
{
    if (calls_kind(e, FN_FWD)) {
        Carve kv = {0};
        carve_merge(&kv, &e->kept, "saved");
        carve_merge(&kv, &e->fscr, "scratch");
        gen_fwd_fn(e, o, "fwd", &kv, &e->fscr);
    }
    if (calls_kind(e, FN_RECOMP)) {
        Carve kv = {0};
        carve_merge(&kv, &e->saved, "saved");
        carve_merge(&kv, &e->rscr, "scratch");
        gen_fwd_fn(e, o, "recompute", &kv, &e->rscr);
    }
    if (calls_kind(e, FN_ATTN)) gen_attn_fn(e, o);
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
    rt_call(o, I, "copy", "a->st", NULL, "srt_hview(c, a->dst, a->n, WDT)", "DV(a->src, a->n, WDT)", NULL);
    sput(o, "    } else if (a->mode == 1) {\n");
    rt_call(o, I, "copy", "a->st", NULL, "DV(a->dst, a->n, WDT)", "srt_hview(c, a->src, a->n, WDT)", NULL);
    sput(o, "    } else if (a->mode == 2) {\n");
    rt_call(o, I, "all_gather", "a->st", NULL, "SRT_TP", "DV(a->dst, a->n * srt_group_size(c, SRT_TP), WDT)",
            "DV(a->src, a->n, WDT)", NULL);
    sput(o, "    } else {\n");
    rt_call(o, I, "convert", "a->st", NULL, "DV(a->dst, a->n, WDT)",
            "DV(a->src + srt_group_rank(c, SRT_TP) * a->n * WB, a->n, WDT)", NULL);
    sput(o, "    }\n}\n\n");
}

/* The embedding, the layers, the head: the compute kinds this class calls. */
static void gen_compute_fns(CE *e, Str *o)
{
    gen_embed_fns(e, o);
    gen_layer_fwd_fns(e, o);
    if (e->nrows[FN_CKPT]) gen_ckpt_fn(e, o);
    if (e->nrows[FN_HEAD]) gen_head_fn(e, o, false);
    if (e->has_eval && e->nrows[FN_HEAD]) gen_head_fn(e, o, true);     /* pp > 1: the last stage's */
    if (e->nrows[FN_BWD]) {     /* full: the recomputed tensors; selective: the attention core apart */
        Carve kv = {0};
        carve_merge(&kv, e->pol == CKPT_FULL ? &e->saved : &e->kept, "saved");
        carve_merge(&kv, &e->attn, "attn");
        gen_bwd_fn(e, o, &kv);
    }
}

/* The data movement, collective and event kinds. */
static void gen_comm_fns(CE *e, Str *o)
{
    const char *px = e->px, *I = "    ";
    if (e->nrows[FN_LOAD]) {
    sf(o, "/* A microbatch's tokens and targets (B,T) to the device. */\n"
          "static void %s_load(srt_ctx *c, const %s_load_t *a)\n{\n", px, px);
    rt_call(o, I, "load_batch", "a->st", NULL, "a->mb", "a->tok < 0 ? NONE : DV(a->tok, N, SRT_I32)",
            "a->tgt < 0 ? NONE : DV(a->tgt, N, SRT_I32)", NULL);
    sput(o, "}\n\n");
    }
    if (e->nrows[FN_GATHER]) {
    sf(o, "/* ZeRO-3: all-gather a fetch unit from every dp rank's shard. */\n"
          "static void %s_gather(srt_ctx *c, const %s_gather_t *a)\n{\n", px, px);
    rt_call(o, I, "all_gather", "a->st", NULL, "SRT_DP", "DV(a->out, a->n, WDT)", "DV(a->in, a->shard, WDT)", NULL);
    sput(o, "}\n\n");
    }
    if (e->nrows[FN_REDUCE]) {
    sf(o, "/* A gradient reduction over dp.  mode 0: all-reduce in place (ZeRO 0-1);\n"
          " * 1: reduce-scatter into this rank's shard; 2: the same in place (this\n"
          " * rank's slice of the bucket) and added to the shard (accumulation). */\n"
          "static void %s_reduce(srt_ctx *c, const %s_reduce_t *a)\n{\n", px, px);
    sput(o, "    if (a->mode == 0) {\n");
    rt_call(o, "        ", "all_reduce", "a->st", NULL, "SRT_DP", "DV(a->in, a->n, GDT)", "SRT_SUM", NULL);
    sput(o, "    } else if (a->mode == 1) {\n");
    rt_call(o, "        ", "reduce_scatter", "a->st", NULL, "SRT_DP", "DV(a->out, a->shard, GDT)", "DV(a->in, a->n, GDT)",
            NULL);
    sput(o, "    } else {  /* mode 3 (offload): in place only; the caller moves the slice */\n"
            "        srt_t mine = DV(a->in + srt_group_rank(c, SRT_DP) * a->shard * GB, a->shard, GDT);\n");
    rt_call(o, "        ", "reduce_scatter", "a->st", NULL, "SRT_DP", "mine", "DV(a->in, a->n, GDT)", NULL);
    sput(o, "        if (a->mode == 2) {\n"
            "            srt_t acc = DV(a->out, a->shard, GDT);\n");
    rt_call(o, "            ", "add_fwd", "a->st", NULL, "acc", "acc", "mine", NULL);
    sput(o, "        }\n    }\n}\n\n");
    }
    if (e->nrows[FN_PGATHER]) {
    sf(o, "/* Updated parameters to every dp rank: ZeRO 1-2 in place from this rank's\n"
          " * slice of the segment (in < 0), ZeRO 3 the persistent ones from the shard. */\n"
          "static void %s_param_gather(srt_ctx *c, const %s_param_gather_t *a)\n{\n"
          "    int64_t in = a->in >= 0 ? a->in : a->out + srt_group_rank(c, SRT_DP) * a->shard * WB;\n", px, px);
    rt_call(o, I, "all_gather", "a->st", NULL, "SRT_DP", "DV(a->out, a->n, WDT)", "DV(in, a->shard, WDT)", NULL);
    sput(o, "}\n\n");
    }
    if (e->nrows[FN_ZERO]) {
    sf(o, "/* A gradient bucket starts each microbatch at zero. */\n"
          "static void %s_zero(srt_ctx *c, const %s_zero_t *a)\n{\n", px, px);
    rt_call(o, I, "zero", "a->st", NULL, "DV(a->off, a->n, GDT)", NULL);
    sput(o, "}\n\n");
    }
    if (e->nrows[FN_TP]) {
    sf(o, "/* A collective over the tp group: kind 0 an all-reduce (sum) in place of\n"
          " * partial activations (Megatron's f and g) or of replicated tensors'\n"
          " * gradients; sequence parallelism: kind 1 all-gathers the sequence shards\n"
          " * (n / tp elements each) into n, kind 2 reduce-scatters n partial sums;\n"
          " * kind 3 sums a shared kv head's gradients over its tp ranks (SRT_TP_KV). */\n"
          "static void %s_tp(srt_ctx *c, const %s_tp_t *a)\n{\n", px, px);
    if (e->m->kv > 1 && e->m->kv < e->p->tp) {
        sput(o, "    if (a->kind == 3) {\n");
        rt_call(o, "        ", "all_reduce", "a->st", NULL, "SRT_TP_KV", "DV(a->out, a->n, GDT)", "SRT_SUM", NULL);
        sput(o, "        return;\n    }\n");
    }
    if (sp_on(e)) {
        sf(o, "    int64_t ns = a->n / %lld;  /* a sequence shard */\n    if (a->kind == 1) {\n", (long long)e->p->tp);
        rt_call(o, "        ", "all_gather", "a->st", NULL, "SRT_TP", "DV(a->out, a->n, WDT)", "DV(a->in, ns, WDT)", NULL);
        sput(o, "        return;\n    }\n    if (a->kind == 2) {\n");
        rt_call(o, "        ", "reduce_scatter", "a->st", NULL, "SRT_TP", "DV(a->out, ns, WDT)", "DV(a->in, a->n, WDT)",
                NULL);
        sput(o, "        return;\n    }\n");
    }
    rt_call(o, I, "all_reduce", "a->st", NULL, "SRT_TP", "DV(a->out, a->n, a->grad ? GDT : WDT)", "SRT_SUM", NULL);
    sput(o, "}\n\n");
    }
    if (e->nrows[FN_PP]) {
    sf(o, "/* Pipeline transfers on the pp stream: kind 0 sends a stage boundary (B,T,C)\n"
          " * to pp rank peer, 1 receives one from it; 2 sums the tied embedding's\n"
          " * gradient between the first and the last stage (SRT_EMBED). */\n"
          "static void %s_pp(srt_ctx *c, const %s_pp_t *a)\n{\n", px, px);
    sput(o, "    if (a->kind == 0) {\n");
    rt_call(o, "        ", "send", "a->st", NULL, "DV(a->off, a->n, WDT)", "a->peer", NULL);
    sput(o, "    } else if (a->kind == 1) {\n");
    rt_call(o, "        ", "recv", "a->st", NULL, "DV(a->off, a->n, WDT)", "a->peer", NULL);
    sput(o, "    } else {\n");
    rt_call(o, "        ", "all_reduce", "a->st", NULL, "SRT_EMBED", "DV(a->off, a->n, GDT)", "SRT_SUM", NULL);
    sput(o, "    }\n}\n\n");
    }
    if (e->nrows[FN_REC])
        sf(o, "/* Events: recorded right after an op that a wait names, waited for there. */\n"
              "static void %s_record(srt_ctx *c, const %s_record_t *a) { srt_event_record(c, a->st, a->ev); }\n",
           px, px);
    if (e->nrows[FN_WAIT])
        sf(o, "static void %s_wait(srt_ctx *c, const %s_wait_t *a) { srt_event_wait(c, a->st, a->ev); }\n", px, px);
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
    const char *hparam = e->b_hstage >= 0 ? arena_printf(&g_arena, "HV(%lld + (j - lo) * WB, n, WDT)", (long long)boff(e, e->b_hstage))
                       : e->params_space == SPACE_HOST ? arena_printf(&g_arena, "HV(%lld + j * WB, n, WDT)", (long long)boff(e, e->b_pshard))
                       : e->b_hswap >= 0 ? arena_printf(&g_arena, "HV(%lld + (j - lo) * WB, n, WDT)", (long long)boff(e, e->b_hswap))
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
                     : hb[k] >= 0 ? arena_printf(&g_arena, "HV(%lld + h * 4, n, SRT_F32)", (long long)boff(e, hb[k]))
                                  : "NONE";
    sf(o, "            if (host) {\n"
          "                int64_t h = j - %lld;\n"
          "                srt_t g = HV(%lld + h * 4, n, SRT_F32);  /* fp32 on the host */\n",
       (long long)e->S_dev, (long long)boff(e, e->b_hgrads));
    if (e->p->zero < 2) {
        sput(o, "                if (what == OWN_D2H) {\n");
        rt_call(o, "                    ", e->gb == 4 ? "copy" : "convert", "st", NULL, "g", grad, NULL);
        sput(o, "                    continue;\n"
                "                }\n");
    }
    if (e->b_hstage >= 0) {
        sput(o, "                if (what == OWN_H2D) {\n");
        rt_call(o, "                    ", "copy", "st", NULL, param, hparam, NULL);
        sput(o, "                    continue;\n"
                "                }\n");
    }
    sput(o, "                if (what == OWN_SUMSQ) {\n"
            "                    if (!tt->copy && (!tt->replicated || (tt->replicated == 1 ? tp0 : kv0))) srt_grad_sumsq(c, st, g);\n"
            "                    continue;\n"
            "                }\n");
    rt_call(o, I, "optimizer_step", "st", NULL, hparam, st[0], "g", st[1], st[2], "tt->decay", NULL);
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
    rt_call(o, "        ", "add_fwd", "st", NULL, "dst", "dst", "mine", NULL);
    sput(o, "    } else {\n");
    rt_call(o, "        ", "convert", "st", NULL, "dst", "mine", NULL);
    sput(o, "    }\n}\n\n");
}

/* The owned-range helper: the gradient norm's sums and the optimizer step,
 * piece by piece of this rank's shard space (a piece: one tensor's part of
 * one segment's shard, so weight decay is per tensor and padding is skipped). */
static void gen_owned_fn(CE *e, Str *o)
{
    const char *px = e->px;
    int z = e->p->zero;
    const char *grad = z < 2 ? arena_printf(&g_arena, "DV(%lld + f * GB, n, GDT)", (long long)boff(e, e->b_grads))
                      : e->b_gshard < 0 ? "NONE"     /* offload: every element is the host's */
                             : arena_printf(&g_arena, "DV(%lld + j * GB, n, GDT)", (long long)boff(e, e->b_gshard));
    bool away = e->params_space != SPACE_DEVICE;    /* offloaded parameters: updated into pstage */
    const char *param = z < 3 ? arena_printf(&g_arena, "DV(%lld + f * WB, n, WDT)", (long long)boff(e, e->b_params))
                      : away  ? "DV(pstage + (j - lo) * WB, n, WDT)"
                              : arena_printf(&g_arena, "DV(%lld + j * WB, n, WDT)", (long long)boff(e, e->b_pshard));
    const char *master = e->b_master >= 0 ? arena_printf(&g_arena, "DV(%lld + j * 4, n, SRT_F32)", (long long)boff(e, e->b_master))
                                          : "p";
    const char *m1 = e->b_mom1 >= 0 ? arena_printf(&g_arena, "DV(%lld + j * 4, n, SRT_F32)", (long long)boff(e, e->b_mom1)) : "NONE";
    const char *m2 = e->b_mom2 >= 0 ? arena_printf(&g_arena, "DV(%lld + j * 4, n, SRT_F32)", (long long)boff(e, e->b_mom2)) : "NONE";
    if ((e->spec->precision.dtype != DT_FP32 || away) && e->S_dev > 0 && e->b_master < 0)
        die("emit: a 16-bit model (or offloaded parameters) without master weights");
    if (e->b_master >= 0) expect_bytes(e, e->b_master, e->S_dev * 4, "the master weights");
    if (e->b_mom1 >= 0) expect_bytes(e, e->b_mom1, e->S_dev * 4, "the first moments");
    if (e->b_mom2 >= 0) expect_bytes(e, e->b_mom2, e->S_dev * 4, "the second moments");
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
          " * pstage: where the device step writes offloaded parameters. */\n"
          "static void %s_owned(srt_ctx *c, srt_stream st, int what, int64_t lo, int64_t hi, int64_t staging,\n"
          "                     int64_t pstage)\n{\n"
          "    (void)pstage;\n",
       (long long)e->S_dev, px);
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
          "            const trainer_tensor *tt = &%s_tensors[t];\n"
          "            int64_t f = f0 > tt->flat ? f0 : tt->flat;\n"
          "            int64_t fe = f1 < tt->flat + tt->numel ? f1 : tt->flat + tt->numel;\n"
          "            if (f >= fe) continue;\n"
          "            int64_t j = a0 + (f - f0), n = fe - f;\n",
       e->rc->nsegs, px, px);
    if (e->S_host > 0) gen_owned_host_piece(e, o, grad, param);
    sf(o, "            srt_t g = %s;\n"
          "            if (what == OWN_SUMSQ) {\n"
          "                if (!tt->copy && (!tt->replicated || (tt->replicated == 1 ? tp0 : kv0))) srt_grad_sumsq(c, st, g);\n"
          "                continue;\n"
          "            }\n"
          "            srt_t p = %s;\n"
          "            if (what == OWN_H2D) continue;  /* (no device piece in a host range) */\n"
          "            if (staging >= 0) {\n"
          "                srt_t g32 = DV(staging + (j - lo) * 4, n, SRT_F32);\n",
       grad, param);
    rt_call(o, "                ", "convert", "st", NULL, "g32", "g", NULL);
    sput(o, "                g = g32;\n"
            "            }\n");
    rt_call(o, "            ", "optimizer_step", "st", NULL, "p", master, "g", m1, m2, "tt->decay", NULL);
    sput(o, "        }\n    }\n}\n\n");
}

/* ---- the generated file: prologue, program ----------------------------------------- */

/* path made absolute (the trainer is compiled from a temporary folder). */
static const char *abs_path(const char *path)
{
    char *r = realpath(path, NULL);
    if (!r) die("emit: cannot resolve %s: %s", path, strerror(errno));
    const char *a = arena_printf(&g_arena, "%s", r);
    free(r);
    return a;
}

static const char *const dt_c[] = {"SRT_F32", "SRT_BF16", "SRT_F16"};

/* The header comment, the includes, the model constants and the helpers. */
static void gen_prologue(const MemPlan *mp, const char *name, Str *o)
{
    const Spec *s = mp->spec;
    const Model *m = &mp->model;
    const Partition *p = &mp->part;
    sf(o, "/* %s — a trainer generated by shardc %s (`shardc build`).  Do not edit:\n"
          " * change the spec and build again.  docs/codegen.md explains this file.\n *\n"
          " * The resolved spec:\n *\n", name, SHARDC_VERSION);
    comment_text(o, " *  ", capture_text(canon_fn, s));
    sput(o, " *\n * The plan (`shardc plan`):\n *\n");
    comment_text(o, " *  ", capture_text(report_fn, mp));
    sput(o, " */\n#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n\n#include \"shardrt.h\"\n\n");
    const CatalogExtern *x = ext_of(s);
    if (x) sf(o, "/* the user-defined activation (docs/custom-ops.md) */\n#include \"%s\"\n\n", abs_path(x->header));
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
    sput(o, "/* A view of n elements of dt at a device arena offset (bytes). */\n"
            "#define DV(off, n, dt) srt_dview(c, (off), (n), (dt))\n"
            "/* ... of the pinned host arena (offload). */\n"
            "#define HV(off, n, dt) srt_hview(c, (off), (n), (dt))\n"
            "/* No tensor (an absent bias, an unused gradient). */\n"
            "#define NONE ((srt_t){NULL, 0, SRT_F32})\n"
            "/* Parameter / gradient of role r of the part w: its offset, or relative to\n"
            " * the call's gathered unit / gradient bucket. */\n"
            "#define PW(r, n) DV((w->wu[r] ? a->u[w->wu[r] - 1] : 0) + w->w[r], (n), WDT)\n"
            "#define PG(r, n) DV((w->gu[r] ? a->g[w->gu[r] - 1] : 0) + w->g[r], (n), GDT)\n"
            "/* The view of t from element k on (q, k, v inside one buffer). */\n"
            "#define AT(t, k) ((srt_t){(char *)(t).p + (int64_t)(k) * WB, (t).n - (int64_t)(k), (t).dt})\n\n"
            "typedef srt_segment trainer_seg;  /* shardrt.h: the flat segments */\n"
            "/* replicated: 0 split over tp, 1 the same on every tp rank, 2 on the tp ranks\n"
            " * sharing a kv head (SRT_TP_KV) */\n"
            "typedef struct { int64_t flat, numel; bool decay; int replicated; bool copy; } trainer_tensor;\n"
            "enum { OWN_SUMSQ, OWN_OPT, OWN_D2H, OWN_H2D };\n\n");
}

/* The srt_program and main. */
static void gen_program(const MemPlan *mp, const char *name, Str *o, bool *has_eval)
{
    const Spec *s = mp->spec;
    const Model *m = &mp->model;
    const Partition *p = &mp->part;
    sf(o, "static const srt_class classes[%d] = {\n", mp->nclasses);
    for (int i = 0; i < mp->nclasses; i++) {
        const ClassMem *cm = &mp->classes[i];
        const RankClass *rc = cm->cls;
        sf(o, "    {%d, s%d_params, %d, %lld, %lld, s%d_buffers, %d, %lld, %lld, %lld, s%d_step, %s, s%d_segs, %d},\n", rc->stage, i,
           rc->ntensors, (long long)rc->padded, (long long)rc->shard, i, cm->sched.nbufs,
           (long long)cm->arena[SPACE_DEVICE], (long long)cm->arena[SPACE_HOST], (long long)cm->arena[SPACE_NVME], i,
           has_eval[i] ? arena_printf(&g_arena, "s%d_eval", i) : "NULL", i, rc->nsegs);
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
       m->flops_model_step, cost_peak(s));
    sf(o, "    .gemms = %s, .ngemms = %d,\n};\n\n", em_ngemms ? "gemm_shapes" : "NULL", em_ngemms);
    sput(o, "int main(int argc, char **argv)\n{\n    return srt_main(argc, argv, &program);\n}\n");
}

/* ---- one class ------------------------------------------------------------------------- */

/* The persistent buffer called name in space sp, or -1. */
static int named_buf(const CE *e, const char *name, int sp)
{
    for (int i = 0; i < e->s->nbufs; i++)
        if (e->s->bufs[i].persistent && e->s->bufs[i].space == sp && strcmp(e->s->bufs[i].name, name) == 0) return i;
    return -1;
}

/* Offload: the host and NVMe buffers and the host's share of the shard space
 * (the host optimizer owns its last S_host elements: sched.c's opt_split). */
static void offload_buffers(CE *e)
{
    e->b_hgrads = named_buf(e, "grads.fp32", SPACE_HOST);
    e->b_hmaster = named_buf(e, "optimizer.master", SPACE_HOST);
    e->b_hmom1 = named_buf(e, "optimizer.exp_avg", SPACE_HOST);
    if (e->b_hmom1 < 0) e->b_hmom1 = named_buf(e, "optimizer.momentum", SPACE_HOST);
    e->b_hmom2 = named_buf(e, "optimizer.exp_avg_sq", SPACE_HOST);
    e->b_nvme = named_buf(e, "optimizer.nvme", SPACE_NVME);
    e->b_hstage = named_buf(e, "params.h2d_staging", SPACE_HOST);
    e->b_hswap = named_buf(e, "params.nvme_staging", SPACE_HOST);
    e->params_space = SPACE_DEVICE;
    for (int sp = SPACE_HOST; e->p->zero == 3 && sp <= SPACE_NVME && e->b_pshard < 0; sp++)
        if ((e->b_pshard = named_buf(e, "params.shard", sp)) >= 0) e->params_space = sp;
    e->S_host = e->b_hgrads >= 0 ? e->s->bufs[e->b_hgrads].bytes / 4 : 0;
    e->S_dev -= e->S_host;
    bool adam = e->spec->train.optimizer != OPT_SGD;
    e->nstates = 1 + (adam || e->spec->train.momentum > 0) + adam;
    if (e->S_host == 0) return;
    if (e->b_nvme >= 0) {
        expect_bytes(e, e->b_nvme, e->S_host * 4 * e->nstates, "the NVMe optimizer states");
    } else {
        if (e->b_hmaster < 0) die("emit: the host optimizer has no master weights");
        expect_bytes(e, e->b_hmaster, e->S_host * 4, "the host master weights");
        if (e->b_hmom1 >= 0) expect_bytes(e, e->b_hmom1, e->S_host * 4, "the host first moments");
        if (e->b_hmom2 >= 0) expect_bytes(e, e->b_hmom2, e->S_host * 4, "the host second moments");
    }
}

/* Finds the class's persistent buffers and checks their sizes. */
static void class_buffers(CE *e)
{
    e->b_params = class_buf(e, BK_PARAMS);
    e->b_pshard = class_buf(e, BK_PSHARD);
    e->b_persist = class_buf(e, BK_PERSIST);
    e->b_grads = class_buf(e, BK_GRADS);
    e->b_gshard = class_buf(e, BK_GSHARD);
    e->b_gwhole = class_buf(e, BK_GWHOLE);
    e->b_master = class_buf(e, BK_MASTER);
    e->b_mom1 = class_buf(e, BK_MOM1);
    e->b_mom2 = class_buf(e, BK_MOM2);
    const RankClass *rc = e->rc;
    e->S_dev = e->p->zero >= 1 ? rc->shard : rc->padded;
    offload_buffers(e);
    if (e->p->zero < 3) {
        if (e->b_params < 0) die("emit: no params buffer");
        expect_bytes(e, e->b_params, rc->padded * e->wb, "the parameters");
    } else {
        if (e->b_pshard < 0) die("emit: no params.shard buffer");
        expect_bytes(e, e->b_pshard, rc->shard * e->wb, "the parameter shard");
    }
    if (e->p->zero < 2) {
        if (e->b_grads < 0) die("emit: no grads buffer");
        expect_bytes(e, e->b_grads, rc->padded * e->gb, "the gradients");
    } else {
        if (e->b_gshard < 0 && e->S_dev > 0) die("emit: no grads.shard buffer");
        if (e->b_gshard >= 0) expect_bytes(e, e->b_gshard, e->S_dev * e->gb, "the gradient shard");
    }
}

/* The op kinds that belong to a microbatch's backward: the forward of
 * microbatch 0 is its ops before the first of these. */
static bool pe_backward(int kind)
{
    return kind == OP_LAYER_BWD || kind == OP_EMBED_BWD || kind == OP_RECV_BWD || kind == OP_SEND_BWD ||
           kind == OP_RECOMPUTE || kind == OP_CKPT_H2D;
}

/* Evaluation under pipeline parallelism: the step's statements of microbatch
 * 0's forward on this stage (its load, receives, embedding, layers, tp
 * collectives, sends; the last stage's head without backward), the ZeRO 3
 * gathers (and offload fetches) of the units they compute with, and the
 * waits and records between the ops kept.  Every stage keeps exactly
 * microbatch 0's forward messages, so sends and receives pair up; the rows
 * are the step's, so the buffers are the memory plan's (eval runs between
 * steps).  Returns the statements, their count in *n. */
static Stmt *pe_stmts(const CE *e, int *n)
{
    const Sched *s = e->s;
    bool *keep = arena_alloc(&g_arena, sizeof(bool) * (size_t)(s->nops + 1));
    int cut = s->nops, last = -1;
    for (int i = 0; i < s->nops; i++)
        if (s->ops[i].mb == 0 && pe_backward(s->ops[i].kind)) {
            cut = i;
            break;
        }
    for (int i = 0; i < cut; i++) {
        const Op *o = &s->ops[i];
        if (o->mb != 0 || o->kind == OP_WAIT || o->kind == OP_CKPT_D2H || o->kind == OP_GATHER ||
            o->kind == OP_PARAM_FETCH)
            continue;
        keep[i] = true;
        last = i;
        /* the latest gather (and fetch) of each unit it computes with */
        for (int u = 0; u < 2; u++) {
            if (o->unit[u] < 0) continue;
            static const int kinds[2] = {OP_GATHER, OP_PARAM_FETCH};
            for (int k = 0; k < 2; k++)
                for (int j = i - 1; j >= 0; j--)
                    if (s->ops[j].kind == kinds[k] && s->ops[j].aux == o->unit[u]) {
                        keep[j] = true;
                        break;
                    }
        }
    }
    if (last < 0) die("emit: stage %d has no forward of microbatch 0 to evaluate", e->ci);
    /* a wait stays when it waits for a kept op and a kept op follows on its stream */
    for (int i = 0; i < s->nops; i++) {
        const Op *o = &s->ops[i];
        if (o->kind != OP_WAIT || !keep[o->aux]) continue;
        for (int j = i + 1; j < s->nops && !keep[i]; j++)
            if (keep[j] && s->ops[j].kind != OP_WAIT && s->ops[j].stream == o->stream) keep[i] = true;
    }
    Stmt *ev = arena_alloc(&g_arena, sizeof(Stmt) * (size_t)(e->nst + 1));
    *n = 0;
    for (int i = 0; i < e->nst; i++) {
        const Stmt *st = &e->st[i];
        if (st->op < 0 || !keep[st->op] || st->fn == FN_INLINE || st->fn == FN_ZERO) continue;
        ev[*n] = *st;
        if (st->fn == FN_HEAD) ev[*n].fn = FN_HEAD_EVAL;
        (*n)++;
    }
    return ev;
}

/* Emits one rank class: its tables, functions, step and evaluation. */
static void gen_class(MemPlan *mp, int ci, Str *o, bool loops, bool *has_eval)
{
    CE e = {.spec = mp->spec, .mp = mp, .m = &mp->model, .p = &mp->part, .cm = &mp->classes[ci], .ci = ci};
    e.s = &e.cm->sched;
    e.rc = e.cm->cls;
    e.wb = e.p->wbytes, e.gb = e.p->gbytes;
    snprintf(e.px, sizeof e.px, "s%d", ci);
    snprintf(e.PX, sizeof e.PX, "S%d", ci);
    class_buffers(&e);
    plan_whole(&e);
    plan_groups(&e);
    carve_saved(&e);
    carve_ckpt(&e);
    carve_bwd(&e, e.p->act.bwd_scratch);
    int64_t head_scratch = 0;
    for (int i = 0; i < e.s->nops; i++)
        if (e.s->ops[i].kind == OP_HEAD) {
            int id = op_buf(&e, &e.s->ops[i], false, BK_SCRATCH);
            if (id >= 0) head_scratch = e.s->bufs[id].bytes;
        }
    if (e.rc->chunks[e.rc->nchunks - 1].head) carve_head(&e, head_scratch);
    build_stmts(&e);

    Str chunks = {0};   /* the layers of each chunk (several with interleaved virtual stages) */
    for (int k = 0; k < e.rc->nchunks; k++)
        sf(&chunks, "%s%d-%d", k ? ", " : "", e.rc->chunks[k].first_layer,
           e.rc->chunks[k].first_layer + e.rc->chunks[k].nlayers - 1);
    sf(o, "/* ==== stage %d: %lld ranks (tp %lld x dp %lld), layers %s%s%s ==== */\n\n", ci,
       (long long)e.rc->count, (long long)e.p->tp, (long long)e.p->dp, chunks.p ? chunks.p : "none",
       e.rc->chunks[0].embed ? ", the embedding" : "", e.rc->chunks[e.rc->nchunks - 1].head ? ", the head" : "");
    free(chunks.p);
    /* pp 1: the stage with the embedding and the head; pp > 1: every stage (pe_stmts) */
    e.has_eval = e.p->pp > 1 || (e.head_stmt >= 0 && e.rc->chunks[0].embed);
    gen_class_tables(&e, o);
    gen_step_tables(&e, o);
    gen_compute_fns(&e, o);
    gen_comm_fns(&e, o);
    if (e.uses_owned) gen_owned_fn(&e, o);
    if (e.uses_part) gen_part_fn(&e, o);
    sf(o, "/* One training step of stage %d: the schedule's %d ops in order (forward,\n"
          " * backward, gradient reductions, the gradient norm, the optimizer). */\n"
          "static void s%d_step(srt_ctx *c)\n{\n", ci, e.s->nops, ci);
    gen_stmts(&e, o, e.st, e.nst, loops);
    bool used[NSTREAMS] = {false};
    for (int i = 0; i < e.s->nops; i++) used[e.s->ops[i].stream] = true;
    sput(o, "    /* the step ends when every stream has: the next one reuses the arena */\n");
    for (int st = 0; st < NSTREAMS; st++)
        if (used[st]) sf(o, "    srt_stream_sync(c, %s);\n", stream_name(st));
    sput(o, "}\n\n");
    has_eval[ci] = e.has_eval;
    if (e.has_eval && e.p->pp > 1) {
        int n = 0;
        Stmt *ev = pe_stmts(&e, &n);
        sf(o, "/* Evaluation on stage %d: the forward of microbatch 0 through the pipeline\n"
              " * (the step's ops of it on this stage%s), no backward. */\n"
              "static void s%d_eval(srt_ctx *c)\n{\n", ci,
           e.rc->chunks[e.rc->nchunks - 1].head ? "; the head's loss into srt_loss_add" : "", ci);
        gen_stmts(&e, o, ev, n, false);     /* a subset of the step's rows: they need not stride */
        for (int st = 0; st < NSTREAMS; st++)
            if (used[st]) sf(o, "    srt_stream_sync(c, %s);\n", stream_name(st));
        sput(o, "}\n\n");
    } else if (e.has_eval) {
        Stmt *ev = arena_alloc(&g_arena, sizeof(Stmt) * (size_t)(e.head_stmt + 1));
        int n = 0;
        for (int i = 0; i <= e.head_stmt; i++) {
            const Stmt *st = &e.st[i];
            if (st->fn == FN_INLINE || st->fn == FN_ZERO) continue;
            ev[n] = *st;
            if (st->fn == FN_HEAD) ev[n].fn = FN_HEAD_EVAL;
            n++;
        }
        sf(o, "/* Evaluation on stage %d: the forward of microbatch 0 (the step's ops up\n"
              " * to its head, the head without backward), the loss into srt_loss_add. */\n"
              "static void s%d_eval(srt_ctx *c)\n{\n", ci, ci);
        gen_stmts(&e, o, ev, n, loops);
        for (int st = 0; st < NSTREAMS; st++)
            if (used[st]) sf(o, "    srt_stream_sync(c, %s);\n", stream_name(st));
        sput(o, "}\n\n");
    }
    for (int f = 0; f < NFN; f++) free(e.rows[f].p);
}

/* The trainer's C source for a plan. */
char *emit_c(MemPlan *mp, const char *name, bool loops)
{
    Str o = {0};
    em_gemms = NULL;
    em_ngemms = em_capgemms = 0;
    gen_prologue(mp, name, &o);
    bool *has_eval = arena_alloc(&g_arena, sizeof(bool) * (size_t)(mp->nclasses + 1));
    for (int ci = 0; ci < mp->nclasses; ci++) gen_class(mp, ci, &o, loops, has_eval);
    gen_program(mp, name, &o, has_eval);
    char *r = arena_strndup(&g_arena, o.p, o.n);
    free(o.p);
    return r;
}

/* ---- shardc build: the driver ------------------------------------------------------------ */

static const char build_usage[] =
    "usage: shardc build FILE -o TRAINER [options] [-D key.path=value ...]\n"
    "\n"
    "Plans the spec, writes the trainer's C source and compiles and links it\n"
    "against the runtime (libshardrt_cpu.a or libshardrt_cuda.a).\n"
    "\n"
    "options:\n"
    "  -o TRAINER          the trainer binary to write\n"
    "  --backend cpu|cuda  the runtime to link (default cpu)\n"
    "  --emit-c OUT.c      also keep the generated C source (without -o: only write it)\n"
    "  --runtime DIR       where the runtime's libraries and include/shardrt.h are\n"
    "                      (default: the build tree shardc was built in)\n"
    "  --no-loops          write every op as its own call (no folded loops)\n"
    "  -D key.path=value   override a key of the spec\n"
    "  --max-errors N      stop after N errors (default 20)\n"
    "\n"
    "environment: CC, the C compiler (default mpicc for the cpu backend; with CC\n"
    "set, MPI's flags come from `mpicc --showme`)\n"
    "\n"
    "exit codes: 0 ok, 1 error in the input, 2 usage, 3 internal error (the C\n"
    "compiler rejected the generated code: a shardc bug)\n";

/* A usage error of shardc build: exit 2. */
static _Noreturn void build_usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "shardc build: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", build_usage);
    exit(EXIT_USAGE);
}

typedef struct BuildOpts {
    const char *file, *out, *backend, *c_path, *runtime;
    bool loops;
    Override ov[256];
    int nov;
} BuildOpts;

/* Parses the options of shardc build. */
static void build_args(int argc, char **argv, BuildOpts *b)
{
    memset(b, 0, sizeof *b);
    b->backend = "cpu";
    b->loops = true;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char *d = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(build_usage, stdout);
            exit(EXIT_OK);
        } else if (strcmp(a, "-D") == 0) {
            if (!v) build_usage_error("%s needs key.path=value", a);
            d = v, i++;
        } else if (strncmp(a, "-D", 2) == 0) {
            d = a + 2;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--backend") == 0 || strcmp(a, "--emit-c") == 0 ||
                   strcmp(a, "--runtime") == 0 || strcmp(a, "--max-errors") == 0) {
            if (!v) build_usage_error("%s needs a value", a);
            i++;
            if (strcmp(a, "-o") == 0) b->out = v;
            else if (strcmp(a, "--backend") == 0) b->backend = v;
            else if (strcmp(a, "--emit-c") == 0) b->c_path = v;
            else if (strcmp(a, "--runtime") == 0) b->runtime = v;
            else if ((diag_max_errors = atoi(v)) < 1) build_usage_error("%s must be at least 1", a);
            continue;
        } else if (strcmp(a, "--no-loops") == 0) {
            b->loops = false;
            continue;
        } else if (a[0] == '-' && strcmp(a, "-") != 0) {
            build_usage_error("unknown option '%s'", a);
        } else if (!b->file) {
            b->file = a;
            continue;
        } else {
            build_usage_error("one spec file at a time ('%s')", a);
        }
        const char *eq = strchr(d, '=');
        if (!eq || eq == d) build_usage_error("-D takes key.path=value, got '%s'", d);
        if (b->nov == (int)(sizeof b->ov / sizeof b->ov[0])) build_usage_error("too many -D overrides%s", "");
        b->ov[b->nov].path = arena_strndup(&g_arena, d, (size_t)(eq - d));
        b->ov[b->nov].text = eq + 1;
        b->nov++;
    }
    if (!b->file) build_usage_error("which spec file?%s", "");
    if (!b->out && !b->c_path) build_usage_error("nothing to do: give -o TRAINER and/or --emit-c OUT.c%s", "");
    if (strcmp(b->backend, "cpu") != 0 && strcmp(b->backend, "cuda") != 0)
        build_usage_error("--backend is cpu or cuda, not '%s'", b->backend);
}

/* Is path an existing regular file? */
static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The directory shardc runs from (its build tree), or NULL. */
static const char *exe_dir(void)
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return NULL;
    buf[n] = 0;
    char *slash = strrchr(buf, '/');
    if (!slash) return NULL;
    *slash = 0;
    return arena_strdup(&g_arena, buf);
}

/* The first of root/sub/name that exists for the sub-folders given, or NULL. */
static const char *find_under(const char *root, const char *const *subs, const char *name)
{
    if (!root) return NULL;
    for (int i = 0; subs[i]; i++) {
        const char *p = arena_printf(&g_arena, "%s%s%s/%s", root, subs[i][0] ? "/" : "", subs[i], name);
        if (is_file(p)) return p;
    }
    return NULL;
}

/* Looks for a runtime file: under --runtime DIR only when given, else the
 * build tree this shardc runs from, else (headers) its source tree. */
static const char *find_runtime_file(const char *dir, const char *const *subs, const char *name, const char *src_root)
{
    if (dir) return find_under(dir, subs, name);
    const char *p = find_under(exe_dir(), subs, name);
    if (!p && src_root) p = find_under(src_root, subs, name);
    return p;
}

/* A runtime file (a library, shardrt_calibrate) where shardc build looks for
 * its libraries: under dir when given, else the build tree shardc runs from. */
const char *emit_runtime_file(const char *dir, const char *name)
{
    static const char *const subs[] = {"", "lib", "runtime", "bin", NULL};
    return find_runtime_file(dir, subs, name, NULL);
}

/* Runs argv (a NULL-terminated list), its output into *out; returns the exit
 * status (-1 when it could not start or died of a signal). */
static int run_captured(char *const *argv, char **out)
{
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    Str s = {0};
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0) sf(&s, "%.*s", (int)n, buf);
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    *out = arena_strdup(&g_arena, s.p ? s.p : "");
    free(s.p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Is an executable called name on the PATH? */
static bool on_path(const char *name)
{
    const char *path = getenv("PATH");
    if (strchr(name, '/')) return access(name, X_OK) == 0;
    for (const char *p = path ? path : ""; *p;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *full = arena_printf(&g_arena, "%.*s/%s", (int)len, p, name);
        if (access(full, X_OK) == 0) return true;
        if (!end) break;
        p = end + 1;
    }
    return false;
}

typedef struct Argv { char *v[256]; int n; } Argv;

/* Appends one argument. */
static void arg(Argv *a, const char *s)
{
    if (a->n >= (int)(sizeof a->v / sizeof a->v[0]) - 1) die("emit: too many compiler arguments");
    a->v[a->n++] = (char *)s;
    a->v[a->n] = NULL;
}

/* Appends the words of text (mpicc --showme output). */
static void args_split(Argv *a, const char *text)
{
    char *t = arena_strdup(&g_arena, text);
    for (char *w = strtok(t, " \t\n"); w; w = strtok(NULL, " \t\n")) arg(a, w);
}

/* The compiler and the MPI flags: mpicc, or $CC with mpicc's flags. */
static bool compiler_args(Argv *a, Argv *link)
{
    const char *cc = getenv("CC");
    if (!on_path("mpicc")) {
        fprintf(stderr, "shardc build: error: mpicc (Open MPI) was not found on the PATH: the CPU runtime needs MPI\n"
                        "hint: install Open MPI (scripts/install-deps), or build with --emit-c only\n");
        return false;
    }
    if (!cc || !*cc) {
        arg(a, "mpicc");
        return true;
    }
    char *flags;
    char *show_c[] = {"mpicc", "--showme:compile", NULL}, *show_l[] = {"mpicc", "--showme:link", NULL};
    if (run_captured(show_c, &flags) != 0) {
        fprintf(stderr, "shardc build: error: `mpicc --showme:compile` failed: %s\n", flags);
        return false;
    }
    args_split(a, cc);
    args_split(a, flags);
    if (run_captured(show_l, &flags) != 0) {
        fprintf(stderr, "shardc build: error: `mpicc --showme:link` failed: %s\n", flags);
        return false;
    }
    args_split(link, flags);
    return true;
}

/* Runs a compiler command; on failure prints what and its output, removes
 * the file it was making and returns non-zero. */
static int run_tool(const Argv *a, const char *making, const char *what)
{
    char *output;
    if (run_captured(a->v, &output) == 0) return 0;
    unlink(making);
    Str cmd = {0};
    for (int i = 0; i < a->n; i++) sf(&cmd, "%s%s", i ? " " : "", a->v[i]);
    fprintf(stderr, "shardc build: internal error: %s\n  %s\n%s", what, cmd.p, output);
    free(cmd.p);
    return 1;
}

/* The CUDA runtime's link arguments, one a line in shardrt_cuda.link beside
 * libshardrt_cuda.a (runtime/cuda/CMakeLists.txt writes it: the kernels,
 * cuBLASLt, cuDNN, NCCL with their rpaths), and its "nvcc=PATH" line. */
static bool cuda_link_args(const char *rtlib, Argv *out, const char **nvcc)
{
    const char *path = arena_printf(&g_arena, "%.*s/shardrt_cuda.link", (int)(strrchr(rtlib, '/') - rtlib), rtlib);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "shardc build: error: %s is missing (it comes with libshardrt_cuda.a): %s\n", path,
                strerror(errno));
        return false;
    }
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!*line) continue;
        if (strncmp(line, "nvcc=", 5) == 0) *nvcc = arena_strdup(&g_arena, line + 5);
        else arg(out, arena_strdup(&g_arena, line));
    }
    fclose(f);
    return true;
}

/* Compiles and links the generated source at c_path into out (through a
 * temporary file renamed at the end, so no partial trainer is left). */
static int build_trainer(const BuildOpts *b, const char *c_path, const CatalogExtern *x)
{
    static const char *const lib_subs[] = {"", "lib", "runtime", "kernels/cpu", "kernels/cuda", NULL};
    static const char *const inc_subs[] = {"include", "runtime/include", NULL};
    bool cuda = strcmp(b->backend, "cuda") == 0;
    const char *src_root = NULL;
#ifdef SHARDC_SOURCE_DIR
    src_root = SHARDC_SOURCE_DIR;
#endif
    const char *rtlib = find_runtime_file(b->runtime, lib_subs, cuda ? "libshardrt_cuda.a" : "libshardrt_cpu.a", NULL);
    const char *klib = find_runtime_file(b->runtime, lib_subs, cuda ? "libshardk_cuda.a" : "libshardk_cpu.a", NULL);
    const char *hdr = find_runtime_file(b->runtime, inc_subs, "shardrt.h", src_root);
    const char *where = b->runtime ? b->runtime : "shardc's build tree";
    if (!rtlib || !hdr) {
        fprintf(stderr, "shardc build: error: the %s runtime (%s%s) was not found in %s\n", b->backend,
                !rtlib ? (cuda ? "libshardrt_cuda.a" : "libshardrt_cpu.a") : "include/shardrt.h", "", where);
        fprintf(stderr, "hint: %s, or point --runtime at the folder holding it\n",
                cuda ? "configure shardc where nvcc is found (the CUDA backend builds with it)"
                     : "build the runtime (cmake --build BUILD --target shardrt_cpu)");
        return EXIT_USER;
    }
    Argv a = {0}, link = {0};
    if (!compiler_args(&a, &link)) return EXIT_USER;
    const char *tmp = arena_printf(&g_arena, "%s.tmp.%ld", b->out, (long)getpid());
    const char *obj = arena_printf(&g_arena, "%s.tmp.%ld.o", b->out, (long)getpid());
    char *inc = arena_strndup(&g_arena, hdr, strlen(hdr) - strlen("/shardrt.h"));
    Argv cc = a;
    arg(&cc, "-std=gnu11");
    arg(&cc, "-O1");
    arg(&cc, "-I");
    arg(&cc, inc);
    arg(&cc, "-c");
    arg(&cc, c_path);
    arg(&cc, "-o");
    arg(&cc, obj);
    if (run_tool(&cc, obj, "the C compiler failed on the generated code (a shardc bug)") != 0) return EXIT_INTERNAL;
    /* the CUDA runtime's link line and nvcc, as its build wrote them */
    Argv culink = {0};
    const char *nvcc = "nvcc";
    if (cuda && !cuda_link_args(rtlib, &culink, &nvcc)) {
        unlink(obj);
        return EXIT_USER;
    }
    /* the user's op: its C source (or, for the CUDA backend, its CUDA source
     * through nvcc for sm_90) beside the trainer's, its header's folder on the path */
    const char *uobj = NULL;
    if (x) {
        const char *src = abs_path(cuda ? x->cuda : x->cpu), *hdir = abs_path(x->header);
        hdir = arena_strndup(&g_arena, hdir, (size_t)(strrchr(hdir, '/') - hdir));
        uobj = arena_printf(&g_arena, "%s.tmp.%ld.user.o", b->out, (long)getpid());
        Argv uc = a;
        if (cuda) {
            uc = (Argv){0};
            arg(&uc, nvcc);
            arg(&uc, "-arch=sm_90");
        } else {
            arg(&uc, "-std=gnu11");
        }
        arg(&uc, "-O2");
        arg(&uc, "-I");
        arg(&uc, hdir);
        arg(&uc, "-c");
        arg(&uc, src);
        arg(&uc, "-o");
        arg(&uc, uobj);
        if (run_tool(&uc, uobj, arena_printf(&g_arena, "the %s compiler failed on %s, the user-defined %s",
                                             cuda ? "CUDA" : "C", src, x->name)) != 0) {
            unlink(obj);
            return EXIT_USER;
        }
    }
    arg(&a, obj);
    if (uobj) arg(&a, uobj);
    arg(&a, "-o");
    arg(&a, tmp);
    arg(&a, rtlib);
    if (klib) arg(&a, klib);
    if (cuda) {
        for (int i = 0; i < culink.n; i++) arg(&a, culink.v[i]);
    } else {
        static const char *const cpu[] = {"-lopenblas", "-luring", "-fopenmp", NULL};
        for (int i = 0; cpu[i]; i++) arg(&a, cpu[i]);
    }
    arg(&a, "-lcjson");   /* the core's checkpoints and metrics (srt_main) */
    arg(&a, "-lm");
    for (int i = 0; i < link.n; i++) arg(&a, link.v[i]);
    int rc = run_tool(&a, tmp, arena_printf(&g_arena, "linking the trainer against %s failed (a runtime built "
                                            "from other sources than this shardc?)", rtlib));
    unlink(obj);
    if (uobj) unlink(uobj);
    if (rc != 0) return EXIT_INTERNAL;
    if (rename(tmp, b->out) != 0) {
        fprintf(stderr, "shardc build: error: cannot write %s: %s\n", b->out, strerror(errno));
        unlink(tmp);
        return EXIT_USER;
    }
    return EXIT_OK;
}

/* The spec's file name without its folders. */
static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* shardc build FILE -o TRAINER ... */
int emit_build_main(int argc, char **argv)
{
    BuildOpts b;
    build_args(argc, argv, &b);
    sema_source = b.file;
    Item *items = spec_parse_file(b.file);
    if (diag_errors) return EXIT_USER;
    Spec *spec = arena_alloc(&g_arena, sizeof *spec);
    if (!sema_resolve(items, b.ov, b.nov, spec) || diag_errors) return EXIT_USER;
    /* a user-defined op: its header against its kind's ABI, its sources there */
    CatalogExtern x;
    if (!catalog_check_extern(spec, &x) || diag_errors) return EXIT_USER;
    if (x.abi && strcmp(b.backend, "cuda") == 0 && !x.cuda) {
        diag_error(key_loc(spec, "model.activation"), "shardc build: the user-defined %s '%s' has no cuda source, and the CUDA backend needs one",
                   x.abi->kind, x.name);
        diag_hint("add cuda = \"FILE.cu\" to its extern block, or build with --backend cpu");
        return EXIT_USER;
    }
    if (x.abi && strcmp(b.backend, "cpu") == 0 && !x.cpu) {
        diag_error(key_loc(spec, "model.activation"), "shardc build: the user-defined %s '%s' has no cpu source, and the CPU backend needs one",
                   x.abi->kind, x.name);
        diag_hint("add cpu = \"FILE.c\" to its extern block");
        return EXIT_USER;
    }
    MemPlan *mp = arena_alloc(&g_arena, sizeof *mp);
    if (!mem_plan(spec, mp, true) || diag_errors) return EXIT_USER;
    if (!emit_supported(spec, true)) return EXIT_USER;
    /* a schedule that fails verification is a compiler bug: no code from it */
    if (!verify_plan(mp, stderr)) {
        fprintf(stderr, "shardc build: internal error: the schedule of %s failed verification (a shardc bug)\n", b.file);
        return EXIT_INTERNAL;
    }
    if (!mp->fits)
        fprintf(stderr, "shardc build: warning: the plan does not fit the cluster of the spec (see `shardc plan %s`)\n",
                b.file);
    char *src = emit_c(mp, base_name(b.file), b.loops);
    const char *c_path = b.c_path;
    if (c_path && !util_write_atomic(c_path, src, strlen(src))) {
        fprintf(stderr, "shardc build: error: cannot write %s: %s\n", c_path, strerror(errno));
        return EXIT_USER;
    }
    if (!b.out) return EXIT_OK;
    bool temp = !c_path;
    if (temp) {
        const char *dir = getenv("TMPDIR");
        char *t = arena_printf(&g_arena, "%s/shardc-build-XXXXXX.c", dir && *dir ? dir : "/tmp");
        int fd = mkstemps(t, 2);
        if (fd < 0) {
            fprintf(stderr, "shardc build: error: cannot create a temporary file in %s: %s\n",
                    dir && *dir ? dir : "/tmp", strerror(errno));
            return EXIT_USER;
        }
        size_t len = strlen(src), off = 0;
        while (off < len) {
            ssize_t w = write(fd, src + off, len - off);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                fprintf(stderr, "shardc build: error: cannot write %s: %s\n", t, strerror(errno));
                close(fd);
                unlink(t);
                return EXIT_USER;
            }
            off += (size_t)w;
        }
        close(fd);
        c_path = t;
    }
    int rc = build_trainer(&b, c_path, x.abi ? &x : NULL);
    if (temp) unlink(c_path);
    return rc;
}
