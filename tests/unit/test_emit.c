/* test_emit.c — the code generator (compiler/emit.c): what it refuses, that
 * every runtime call it writes is declared by shardrt.h, that events are
 * recorded before they are waited for and name the op waited for, that the
 * loops keep a 96-layer trainer small and compute the same rows as the
 * straight-line step, and that strings and comments are escaped.  (That the
 * emitted C compiles and trains the same in every layout is
 * tests/golden/emit.test.sh.) */
#include "check.h"
#include "emit.h"

#include "../../runtime/include/shardrt.h"

#include <ctype.h>
#include <time.h>

/* A resolved spec from text and -D overrides ("key=value" strings). */
static bool spec_of(const char *text, const char **ovs, int nov, Spec *s)
{
    Override ov[32];
    for (int i = 0; i < nov; i++) {
        const char *eq = strchr(ovs[i], '=');
        ov[i].path = arena_strndup(&g_arena, ovs[i], (size_t)(eq - ovs[i]));
        ov[i].text = eq + 1;
    }
    Item *items = spec_parse_text("test.tspec", text, strlen(text));
    return !diag_errors && sema_resolve(items, ov, nov, s) && !diag_errors;
}

static const char tiny[] =
    "model gpt { layers = 2  hidden = 64  heads = 4  vocab = 256  seq_len = 32 }\n"
    "parallel { tp = 1  pp = 1  dp = 2 }\n"
    "zero { stage = 1 }\n"
    "precision { dtype = fp32 }\n"
    "train { global_batch = 8  micro_batch = 2  steps = 4  grad_clip = 1.0\n"
    "        optimizer = adamw { lr = 1e-3 } }\n"
    "data { train = \"data/x.txt\"  format = text }\n"
    "cluster { nodes = 1  gpus_per_node = 2  gpu = cpu }\n";

/* The C source of tiny with overrides (NULL if it does not plan). */
static char *emit_of(const char *text, const char **ovs, int nov, bool loops)
{
    Spec *s = arena_alloc(&g_arena, sizeof *s);
    capture();
    if (!spec_of(text, ovs, nov, s)) return NULL;
    MemPlan *mp = arena_alloc(&g_arena, sizeof *mp);
    if (!mem_plan(s, mp, true) || !emit_supported(s, true)) return NULL;
    return emit_c(mp, "test.tspec", loops);
}

/* Each feature of issue 6 is refused at its key, naming the feature. */
static void test_refusals(void)
{
    static const struct { const char *ov[3]; const char *what; } cases[] = {
        {{"parallel.tp=2", "cluster.gpus_per_node=4"}, "tensor parallelism"},
        {{"parallel.pp=2", "cluster.gpus_per_node=4"}, "pipeline parallelism"},
        {{"checkpointing.activations=full"}, "activation checkpointing"},
        {{"offload.optimizer=cpu"}, "optimizer offload"},
        {{"zero.stage=3", "offload.params=cpu"}, "parameter offload"},
        {{"precision.dtype=fp16"}, "fp16"},
        {{"model.bias=off"}, "without biases"},
        {{"model.activation=relu"}, "other than GELU and SwiGLU"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char **ov = (const char **)cases[i].ov;
        int n = 0;
        while (n < 3 && ov[n]) n++;
        Spec s;
        capture();
        CHECK(spec_of(tiny, ov, n, &s));
        CHECK(!emit_supported(&s, true));
        const char *d = captured();
        CHECK(strstr(d, cases[i].what) != NULL);
        CHECK(strstr(d, "comes with issue 6") != NULL);
        CHECK(strstr(d, "-D:1:") != NULL);     /* at the override that set it */
        if (!strstr(d, cases[i].what)) fprintf(stderr, "%s\n", d);
    }
    Spec s;
    capture();
    CHECK(spec_of(tiny, NULL, 0, &s));
    CHECK(emit_supported(&s, true));
    CHECK_STR(captured(), "");
}

/* The API calls the generated code may make besides the SRT_OPS ops. */
static bool api_call(const char *name)
{
    static const char *const api[] = {"dview", "event_record", "event_wait", "stream_sync", "group_rank", "main",
                                      "param", "buffer", "class", "program", "ctx", "t", "stream", "segment"};
    for (size_t i = 0; i < sizeof api / sizeof api[0]; i++)
        if (strcmp(name, api[i]) == 0) return true;
#define SRT_OP(op, arity, kind) if (strcmp(name, #op) == 0) return true;
    SRT_OPS(SRT_OP)
#undef SRT_OP
    return false;
}

/* Every srt_ identifier of the source is an op of SRT_OPS or the API. */
static void check_declared(const char *src)
{
    for (const char *p = strstr(src, "srt_"); p; p = strstr(p + 1, "srt_")) {
        if (p > src && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) continue;
        char name[64];
        int n = 0;
        for (const char *q = p + 4; (isalnum((unsigned char)*q) || *q == '_') && n < 63; q++) name[n++] = *q;
        name[n] = 0;
        if (!api_call(name)) {
            fprintf(stderr, "undeclared runtime call srt_%s\n", name);
            failures++;
        }
    }
}

/* Parses the rows "{STREAM, EV},  [i] LABEL" (and a comment) of a table: ev, label. */
static int event_rows(const char *src, const char *table, int *ev, char (*label)[96], int cap)
{
    const char *t = strstr(src, table);
    if (!t) return 0;
    int n = 0;
    for (const char *p = strchr(t, '\n') + 1; *p == ' ' && n < cap; p = strchr(p, '\n') + 1) {
        const char *comma = strchr(p, ',');
        ev[n] = atoi(comma + 1);
        const char *l = strstr(p, "] ") + 2, *end = strstr(l, " */");
        snprintf(label[n], 96, "%.*s", (int)(end - l), l);
        n++;
    }
    return n;
}

/* In the straight-line step, each wait's event was last recorded right
 * after the op the wait names. */
static void check_events(const char *src)
{
    static int rev[4096], wev[4096];
    static char rlab[4096][96], wlab[4096][96];
    int nr = event_rows(src, "S0_record[", rev, rlab, 4096), nw = event_rows(src, "S0_wait[", wev, wlab, 4096);
    CHECK(nr > 0 && nw >= nr);
    int last[4096];
    for (int i = 0; i < 4096; i++) last[i] = -1;
    const char *step = strstr(src, "static void s0_step");
    int waits = 0;
    for (const char *p = step; p && (p = strstr(p, "s0_")) && strncmp(p, "s0_eval", 7) != 0; p++) {
        int k;
        if (sscanf(p, "s0_record(c, &S0_record[%d]);", &k) == 1) last[rev[k]] = k;
        if (sscanf(p, "s0_wait(c, &S0_wait[%d]);", &k) == 1) {
            int r = last[wev[k]];
            CHECK(r >= 0);
            /* "wait(X)" names the op recorded as "record X" */
            if (r >= 0) {
                char want[128];
                snprintf(want, sizeof want, "wait(%s)", rlab[r] + strlen("record "));
                CHECK_STR(wlab[k], want);
            }
            waits++;
        }
    }
    CHECK_EQ(waits, nw);
}

/* Does table name's body hold row text? */
static bool table_has(const char *src, const char *name, const char *row)
{
    const char *t = strstr(src, name), *end = t ? strstr(t, "\n};") : NULL;
    const char *r = t ? strstr(t, row) : NULL;
    return r && r < end;
}

/* Layouts, dtypes, buckets and fetch units all emit (a size the plan and the
 * emitter disagree on would be an internal error), with the right code. */
static void test_matrix(void)
{
    for (int z = 0; z <= 3; z++)
        for (int dp = 1; dp <= 4; dp *= 2)
            for (int bf = 0; bf < 2; bf++)
                for (int small = 0; small < 2; small++) {
                    const char *ov[8];
                    int n = 0;
                    ov[n++] = arena_printf(&g_arena, "zero.stage=%d", z);
                    ov[n++] = arena_printf(&g_arena, "parallel.dp=%d", dp);
                    ov[n++] = arena_printf(&g_arena, "cluster.gpus_per_node=%d", dp);
                    ov[n++] = bf ? "precision.dtype=bf16" : "precision.dtype=fp32";
                    if (small) {
                        ov[n++] = "zero.param_persistence_threshold=1000";
                        ov[n++] = "zero.reduce_bucket=9000";
                        ov[n++] = "zero.sub_group_size=7000";
                    }
                    char *src = emit_of(tiny, ov, n, false);
                    CHECK(src != NULL);
                    if (!src) {
                        fprintf(stderr, "%s\n", captured());
                        continue;
                    }
                    check_declared(src);
                    check_events(src);
                    CHECK(strstr(src, bf ? "#define WDT SRT_BF16" : "#define WDT SRT_F32") != NULL);
                    CHECK(strstr(src, "srt_grad_norm_finish(c, ") != NULL);
                    CHECK(strstr(src, "static void s0_eval(srt_ctx *c)") != NULL);
                    CHECK((strstr(src, "s0_gather(c, &S0_gather[") != NULL) == (z == 3 && small));
                    /* all-reduces (ZeRO 0-1); reduce-scatters that accumulate over microbatches */
                    CHECK(table_has(src, "S0_reduce[", "{SRT_DP_COMM, 0, ") == (z < 2));
                    CHECK(table_has(src, "S0_reduce[", "{SRT_DP_COMM, 2, ") == ((z == 2 || (z == 3 && small)) && dp < 4));
                    if (bf) CHECK(strstr(src, "OWN_OPT, 0, ") != NULL);
                }
}

/* A 96-layer GPT with 64 microbatches: the loops keep the step short and
 * the file small; it is written in well under a second. */
static void test_loops(void)
{
    const char *big = "model gpt { layers = 96  hidden = 256  heads = 4  vocab = 512  seq_len = 64 }\n"
                      "parallel { tp = 1  pp = 1  dp = 2 }\n"
                      "zero { stage = 1 }\n"
                      "train { global_batch = 128  micro_batch = 1 }\n"
                      "cluster { nodes = 1  gpus_per_node = 2  gpu = cpu }\n";
    clock_t t0 = clock();
    char *src = emit_of(big, NULL, 0, true);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK(src != NULL);
    if (!src) return;
    CHECK(secs < 5.0);
    const char *step = strstr(src, "static void s0_step"), *end = strstr(step, "\n}\n");
    int lines = 0;
    for (const char *p = step; p < end; p++) lines += *p == '\n';
    CHECK(lines < 200);
    CHECK(strstr(step, "for (int i1 = 0; i1 < 96; i1++)") != NULL);
    CHECK(strstr(src, "/* 96×: fwd L0 mb0 … fwd L95 mb0 */") != NULL);
    check_declared(src);
    /* the same tables as the straight-line form: loops only change the step */
    char *flat = emit_of(big, NULL, 0, false);
    const char *a = strstr(src, "static void s0_step"), *b = strstr(flat, "static void s0_step");
    CHECK(a - src == b - flat && memcmp(src, flat, (size_t)(a - src)) == 0);
    CHECK(strlen(flat) > strlen(src));
}

/* The Llama family: RMSNorm, separate q/k/v with RoPE, SwiGLU, grouped-query
 * attention, an untied head, no positions. */
static void test_llama(void)
{
    const char *llama = "model llama { layers = 2  hidden = 64  heads = 4  kv_heads = 2  vocab = 256  seq_len = 32 }\n"
                        "cluster { nodes = 1  gpus_per_node = 2  gpu = cpu }\n"
                        "zero { stage = 2 }\n"
                        "train { global_batch = 8  micro_batch = 2 }\n";
    char *src = emit_of(llama, NULL, 0, true);
    CHECK(src != NULL);
    if (!src) {
        fprintf(stderr, "%s\n", captured());
        return;
    }
    check_declared(src);
    CHECK(strstr(src, "srt_rmsnorm_fwd(c, SRT_COMPUTE, ln1, ln1_rstd, x, PW(LN1_W, C), N, C, EPS);") != NULL);
    CHECK(strstr(src, "srt_rope_fwd(c, SRT_COMPUTE, k, B, T, NKV, HS, LDKV, THETA);") != NULL);
    CHECK(strstr(src, "srt_rope_bwd(c, SRT_COMPUTE, dq, B, T, NH, HS, LDQ, THETA);") != NULL);
    CHECK(strstr(src, "srt_swiglu_fwd(c, SRT_COMPUTE, act, gate, up, N, FF, FF);") != NULL);
    CHECK(strstr(src, "NKV = 2,") != NULL);
    CHECK(strstr(src, "PW(HEAD_W, (int64_t)VP * C)") != NULL);
    CHECK(strstr(src, "\"lm_head.weight\"") != NULL);
    CHECK(strstr(src, "srt_embed_fwd(c, SRT_COMPUTE, DV(a->x, (int64_t)N * C, WDT), DV(a->tok, N, SRT_I32), "
                      "PW(WTE, (int64_t)VP * C), NONE,") != NULL);
}

/* Tensor parallelism (Llama, tp 2): the layer runs as its attention and MLP
 * parts around all-reduces over SRT_TP, vocab-parallel embedding and
 * cross-entropy, tp rank 0 alone adding residuals and row-parallel biases;
 * sequence parallelism and kv heads fewer than tp are refused at their keys. */
static void test_tp(void)
{
    const char *llama = "model llama { layers = 2  hidden = 64  heads = 4  kv_heads = 2  vocab = 256  seq_len = 32 }\n"
                        "parallel { tp = 2  pp = 1  dp = 2 }\n"
                        "cluster { nodes = 1  gpus_per_node = 4  gpu = cpu }\n"
                        "zero { stage = 3 }\n"
                        "train { global_batch = 8  micro_batch = 2 }\n";
    char *src = emit_of(llama, NULL, 0, true);
    CHECK(src != NULL);
    if (!src) {
        fprintf(stderr, "%s\n", captured());
        return;
    }
    check_declared(src);
    CHECK(strstr(src, "NH = 2,") != NULL && strstr(src, "NKV = 1,") != NULL && strstr(src, "VP = 128,") != NULL);
    CHECK(strstr(src, "srt_all_reduce(c, a->st, SRT_TP, DV(a->out, a->n, a->grad ? GDT : WDT), SRT_SUM);") != NULL);
    CHECK(strstr(src, "bool tp0 = srt_group_rank(c, SRT_TP) == 0;") != NULL);
    CHECK(strstr(src, "int v0 = (int)srt_group_rank(c, SRT_TP) * VP;") != NULL);
    CHECK(strstr(src, "N, VP, (int)srt_group_rank(c, SRT_TP) * VP, V, DLOSS);") != NULL);
    CHECK(strstr(src, "/* tp_allreduce L1 mb0 attn */") != NULL || strstr(src, "tp_allreduce L1 mb0 attn") != NULL);
    CHECK(strstr(src, "grads \"model.norm.weight\"") != NULL || strstr(src, "model.norm.weight") != NULL);
    /* the straight-line form has the same tables */
    char *flat = emit_of(llama, NULL, 0, false);
    const char *a = strstr(src, "static void s0_step"), *b = strstr(flat, "static void s0_step");
    CHECK(a - src == b - flat && memcmp(src, flat, (size_t)(a - src)) == 0);
    static const struct { const char *ov[3]; const char *what, *key; } cases[] = {
        {{"parallel.sequence_parallel=on"}, "sequence parallelism", "-D:1:"},
        {{"parallel.tp=4", "parallel.dp=1"}, "fewer kv heads than tp", "-D:1:"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char **ov = (const char **)cases[i].ov;
        int n = 0;
        while (n < 3 && ov[n]) n++;
        Spec s;
        capture();
        CHECK(spec_of(llama, ov, n, &s));
        CHECK(!emit_supported(&s, true));
        const char *d = captured();
        CHECK(strstr(d, cases[i].what) != NULL && strstr(d, cases[i].key) != NULL);
        if (!strstr(d, cases[i].what)) fprintf(stderr, "%s\n", d);
    }
}

/* Strings in the program are C-escaped; nothing ends the header comment. */
static void test_escaping(void)
{
    const char *ov[] = {"data.train=\"runs/*/tr\\\"ain*/.bin\""};
    char *src = emit_of(tiny, ov, 1, true);
    CHECK(src != NULL);
    if (!src) {
        fprintf(stderr, "%s\n", captured());
        return;
    }
    const char *inc = strstr(src, "#include <stdbool.h>");
    const char *close = strstr(src, "*/");
    CHECK(close && close + 3 == inc);            /* the header comment ends right before it */
    CHECK(strstr(src, ".data_train = \"runs/*/tr\\\"ain*/.bin\"") != NULL);
}

int main(void)
{
    test_refusals();
    test_matrix();
    test_loops();
    test_llama();
    test_tp();
    test_escaping();
    arena_free(&g_arena);
    if (failures) fprintf(stderr, "test_emit: %d failures\n", failures);
    return failures != 0;
}
