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
    Plan *mp = arena_alloc(&g_arena, sizeof *mp);
    if (!plan_build(s, mp, true) || !emit_supported(s, true)) return NULL;
    return emit_c(mp, NULL, "test.tspec", loops);
}

/* Each feature of issue 6 is refused at its key, naming the feature. */
static void test_refusals(void)
{
    static const struct { const char *ov[4]; const char *what; } cases[] = {
        {{"parallel.tp=2", "model.kv_heads=1", "cluster.gpus_per_node=4"}, "fused QKV with kv_heads 1 not a multiple of tp 2"},
        {{"model.bias=off"}, "without biases"},
        {{"model.activation=relu"}, "other than GELU and SwiGLU"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char **ov = (const char **)cases[i].ov;
        int n = 0;
        while (n < 4 && ov[n]) n++;
        Spec s;
        capture();
        CHECK(spec_of(tiny, ov, n, &s));
        CHECK(!emit_supported(&s, true));
        const char *d = captured();
        CHECK(strstr(d, cases[i].what) != NULL);
        CHECK(strstr(d, "is not supported by the code generator") != NULL);
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
    static const char *const api[] = {"dview", "hview", "event_record", "event_wait", "stream_sync", "group_rank", "main",
                                      "param", "buffer", "class", "program", "ctx", "t", "stream", "segment",
                                      "gemm_shape"};
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
 * sequence parallelism's all-gathers and reduce-scatters, each rank adding
 * its own tokens' residual; GPT's fused c_attn split per head (SPLIT_QKV);
 * one kv head replicated on both ranks (k_proj and v_proj unsplit, their
 * gradients in the tp all-reduce); sequence parallelism with full and
 * selective checkpointing. */
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
    const char *sp_ov[] = {"parallel.sequence_parallel=on"};
    char *sp = emit_of(llama, sp_ov, 1, true);
    CHECK(sp != NULL);
    if (sp) {
        check_declared(sp);
        CHECK(strstr(sp, "srt_all_gather(c, a->st, SRT_TP, DV(a->out, a->n, WDT), DV(a->in, ns, WDT));") != NULL);
        CHECK(strstr(sp, "srt_reduce_scatter(c, a->st, SRT_TP, DV(a->out, ns, WDT), DV(a->in, a->n, WDT));") != NULL);
        CHECK(strstr(sp, "srt_add_fwd(c, SRT_COMPUTE, y_own, y_own, x_own);") != NULL);
        CHECK(strstr(sp, "tp_allgather L1 mb0") != NULL && strstr(sp, "tp_reduce_scatter L1 mb0") != NULL);
    }
    const char *kv1_ov[] = {"model.kv_heads=1"};
    char *kv1 = emit_of(llama, kv1_ov, 1, true);
    CHECK(kv1 != NULL);
    if (kv1) {
        check_declared(kv1);
        CHECK(strstr(kv1, "NH = 2,") != NULL && strstr(kv1, "NKV = 1,") != NULL);
        CHECK(strstr(kv1, "{\"model.layers.0.self_attn.k_proj.weight\", 0, 16, 64, 16, SRT_SPLIT_NONE, 16, 64,") != NULL);
        CHECK(strstr(kv1, "model.layers.0.self_attn.v_proj.weight\"") != NULL);
    }
    /* 2 kv heads of 8 at tp 4: each on 2 tp ranks (SPLIT_KV, head dim 8), its
     * gradients summed over SRT_TP_KV (kind 3), counted once in the norm */
    const char *kv2_ov[] = {"model.heads=8", "parallel.tp=4", "parallel.dp=1", "cluster.gpus_per_node=4"};
    char *kv2 = emit_of(llama, kv2_ov, 4, true);
    CHECK(kv2 != NULL);
    if (kv2) {
        check_declared(kv2);
        CHECK(strstr(kv2, "NH = 2,") != NULL && strstr(kv2, "NKV = 1,") != NULL);
        CHECK(strstr(kv2, "{\"model.layers.0.self_attn.k_proj.weight\", 0, 16, 64, 16, SRT_SPLIT_KV, 8, 64,") != NULL);
        CHECK(strstr(kv2, "{\"model.layers.1.self_attn.v_proj.weight\", 1, 16, 64, 16, SRT_SPLIT_KV, 8, 64,") != NULL);
        CHECK(strstr(kv2, "{\"model.layers.0.self_attn.q_proj.weight\", 0, 64, 64, 64, SRT_SPLIT_ROWS, 16, 64,") != NULL);
        CHECK(strstr(kv2, "srt_all_reduce(c, a->st, SRT_TP_KV, DV(a->out, a->n, GDT), SRT_SUM);") != NULL);
        CHECK(strstr(kv2, "{SRT_TP_COMM, 3, 1, ") != NULL);
        CHECK(strstr(kv2, ", true, 2, false},  /* model.layers.0.self_attn.k_proj.weight */") != NULL);
        CHECK(strstr(kv2, "bool kv0 = srt_group_rank(c, SRT_TP_KV) == 0;") != NULL);
        CHECK(strstr(src, "SRT_TP_KV, DV(") == NULL);     /* kv 2 = tp 2: no shared heads */
    }
    const char *gpt_ov[] = {"parallel.tp=2", "cluster.gpus_per_node=4"};
    char *gpt = emit_of(tiny, gpt_ov, 2, true);
    CHECK(gpt != NULL);
    if (gpt) {
        check_declared(gpt);
        CHECK(strstr(gpt, "{\"h.0.attn.c_attn.weight\", 0, 192, 64, 192, SRT_SPLIT_QKV, 96, 64,") != NULL);
        CHECK(strstr(gpt, "{\"h.0.attn.c_attn.bias\", 0, 192, 0, 192, SRT_SPLIT_QKV, 96, 0,") != NULL);
    }
    /* SP with checkpointing: full replays each layer from the gathered input
     * shard, selective recomputes the attention core (train_sp3d trains them) */
    const char *ck_ov[2][2] = {{"parallel.sequence_parallel=on", "checkpointing.activations=full"},
                               {"parallel.sequence_parallel=on", "checkpointing.activations=selective"}};
    for (int i = 0; i < 2; i++) {
        char *ck = emit_of(llama, ck_ov[i], 2, true);
        CHECK(ck != NULL);
        if (!ck) continue;
        check_declared(ck);
        CHECK(strstr(ck, "recompute L1 mb0") != NULL && strstr(ck, "tp_reduce_scatter L1 mb0") != NULL);
    }
}

/* Pipeline parallelism: one step function per stage with only its layers
 * (interleaved: two chunks per stage, not contiguous), sends and receives on
 * the pp stream to the neighbouring pp ranks, the tied embedding's gradient
 * summed over SRT_EMBED, its copy on the last stage left out of the norm;
 * an evaluation function on every stage: microbatch 0's forward through the
 * pipeline (its sends and receives, chunk 0 then 1), the head without
 * backward on the last stage only, no backward op anywhere. */
static void test_pipeline(void)
{
    const char *ov[] = {"model.layers=4", "parallel.pp=2", "parallel.dp=1", "parallel.schedule=interleaved",
                        "parallel.virtual_stages=2", "zero.stage=0"};
    for (int z = 0; z <= 3; z += 3) {
        ov[5] = z ? "zero.stage=3" : "zero.stage=0";
        char *src = emit_of(tiny, ov, 6, true);
        CHECK(src != NULL);
        if (!src) {
            fprintf(stderr, "%s\n", captured());
            return;
        }
        check_declared(src);
        CHECK(strstr(src, "==== stage 0: 1 ranks (tp 1 x dp 1), layers 0-0, 2-2, the embedding ====") != NULL);
        CHECK(strstr(src, "==== stage 1: 1 ranks (tp 1 x dp 1), layers 1-1, 3-3, the head ====") != NULL);
        CHECK(strstr(src, "srt_send(c, a->st, DV(a->off, a->n, WDT), a->peer);") != NULL);
        CHECK(strstr(src, "srt_recv(c, a->st, DV(a->off, a->n, WDT), a->peer);") != NULL);
        CHECK(strstr(src, "srt_all_reduce(c, a->st, SRT_EMBED, DV(a->off, a->n, GDT), SRT_SUM);") != NULL);
        CHECK(strstr(src, "s1_pp(c, &S1_pp[0]);  /* recv_fwd mb0 chunk0 */") != NULL);
        CHECK(strstr(src, "tied_reduce wte.weight */") != NULL);
        CHECK(strstr(src, "wte.weight (the head's copy) */") != NULL);
        CHECK(strstr(src, "if (!tt->copy && (!tt->replicated || (tt->replicated == 1 ? tp0 : kv0))) srt_grad_sumsq(c, st, g);") != NULL);
        CHECK(strstr(src, "static void s0_embed_fwd(") != NULL && strstr(src, "static void s1_embed_fwd(") == NULL);
        CHECK(strstr(src, "static void s1_head(") != NULL && strstr(src, "static void s0_head(") == NULL);
        CHECK(strstr(src, "s0_step, s0_eval,") != NULL && strstr(src, "s1_step, s1_eval,") != NULL);
        const char *e0 = strstr(src, "static void s0_eval(srt_ctx *c)"), *e1 = strstr(src, "static void s1_eval(srt_ctx *c)");
        CHECK(e0 && e1);
        if (e0 && e1) {
            const char *z0 = strstr(e0, "\n}\n"), *z1 = strstr(e1, "\n}\n");
            const char *b0 = arena_strndup(&g_arena, e0, (size_t)(z0 - e0));
            const char *b1 = arena_strndup(&g_arena, e1, (size_t)(z1 - e1));
            CHECK(strstr(b0, "/* send_fwd mb0 chunk0 */") && strstr(b0, "/* recv_fwd mb0 chunk1 */") &&
                  strstr(b0, "/* send_fwd mb0 chunk1 */") && strstr(b0, "/* embed_fwd mb0"));
            CHECK(strstr(b1, "/* recv_fwd mb0 chunk0 */") && strstr(b1, "/* send_fwd mb0 chunk0 */") &&
                  strstr(b1, "/* recv_fwd mb0 chunk1 */") && strstr(b1, "s1_head_eval(c, &S1_head[0]);"));
            CHECK(!strstr(b0, "mb1") && !strstr(b1, "mb1") && !strstr(b0, "bwd") && !strstr(b1, "bwd") &&
                  !strstr(b0, "head"));
        }
        CHECK(strstr(src, "static void s1_head_eval(") != NULL && strstr(src, "static void s0_head_eval(") == NULL);
        CHECK(strstr(src, "layer 2 */") != NULL && strstr(src, "layer 3 */") != NULL);
    }
}

/* Strings in the program are C-escaped; nothing ends the header comment. */
/* Offload: every layout emits, with only declared calls, the host optimizer on
 * SRT_HOST, its gradients and parameters on SRT_COPY, the NVMe reads and writes,
 * the shard split at S_dev (ratio), and offloaded parameters fetched before
 * their gathers (with one dp rank too, the persistent ones copied to the device). */
static void test_offload(void)
{
    static const struct { const char *ov[5]; const char *want[3]; } cases[] = {
        {{"zero.stage=1", "offload.optimizer=cpu"}, {"OWN_D2H, ", "SRT_HOST, OWN_OPT", "OWN_H2D, "}},
        {{"zero.stage=2", "offload.optimizer=cpu"}, {"_part(c, SRT_COPY, ", "SRT_HOST, OWN_OPT", "OWN_H2D, "}},
        {{"zero.stage=3", "offload.optimizer=nvme{path=\"/x\"}", "zero.sub_group_size=20000"},
         {"srt_nvme_read(c, SRT_COPY, srt_hview(", "srt_nvme_write(c, SRT_COPY, srt_hview(", "HV(staging + ("}},
        {{"zero.stage=3", "offload.optimizer=cpu", "offload.optimizer.ratio=0.5"},
         {"{SRT_DP_COMM, 3, ", "the device's part, then the host's", "SRT_COMPUTE, OWN_OPT"}},
        {{"zero.stage=3", "offload.params=nvme{path=\"/x\" buffer_count=2 buffer_size=100000}",
          "precision.dtype=bf16", "zero.param_persistence_threshold=100"},
         {"srt_nvme_read(c, SRT_COPY, HV(", "srt_nvme_write(c, SRT_COPY, DV(", "srt_nvme_read(c, SRT_DP_COMM, HV("}},
        /* one dp rank: each unit fetched, the persistent parameters copied to the device */
        {{"zero.stage=3", "offload.params=cpu", "parallel.dp=1", "cluster.gpus_per_node=1",
          "zero.param_persistence_threshold=100"},
         {"srt_copy(c, SRT_COPY, DV(", "srt_copy(c, SRT_COPY, HV(", "srt_copy(c, SRT_DP_COMM, DV("}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = 0;
        while (n < 5 && cases[i].ov[n]) n++;
        char *src = emit_of(tiny, (const char **)cases[i].ov, n, true);
        CHECK(src != NULL);
        if (!src) continue;
        check_declared(src);
        for (int k = 0; k < 3; k++)
            if (!strstr(src, cases[i].want[k])) {
                fprintf(stderr, "offload case %zu: no \"%s\"\n", i, cases[i].want[k]);
                failures++;
            }
    }
}

/* Activation checkpointing: full keeps nothing in the forward and replays it
 * (the forward's code, its table) into the recomputed buffers; every 2 with
 * cpu checkpointing copies the group inputs through the host arena; selective
 * recomputes the attention core into the buffer the backward reads; partitioned
 * activations keep a tp slice and gather it; loops change no table. */
static void test_checkpointing(void)
{
    const char *full[] = {"checkpointing.activations=full"};
    char *src = emit_of(tiny, full, 1, true);
    CHECK(src != NULL);
    if (!src) return;
    CHECK(strstr(src, "static void s0_recompute(srt_ctx *c, const s0_fwd_t *a)") != NULL);
    CHECK(strstr(src, "if (a->y < 0) return;") != NULL);
    CHECK(strstr(src, "s0_recompute(c, &S0_fwd[") != NULL);
    const char *f = strstr(src, "static void s0_fwd("), *r = strstr(src, "static void s0_recompute(");
    CHECK(f && r && f < r);
    if (f && r && f < r)    /* the forward keeps nothing */
        CHECK(!strstr(arena_strndup(&g_arena, f, (size_t)(r - f)), "a->saved"));
    char *flat = emit_of(tiny, full, 1, false);
    const char *a = strstr(src, "static void s0_step"), *b = flat ? strstr(flat, "static void s0_step") : NULL;
    CHECK(a && b && a - src == b - flat && memcmp(src, flat, (size_t)(a - src)) == 0);
    const char *cpu[] = {"checkpointing.activations=full", "checkpointing.every=2", "checkpointing.cpu=on",
                         "model.layers=4"};
    src = emit_of(tiny, cpu, 4, true);
    CHECK(src && strstr(src, "s0_ckpt(c, &S0_ckpt[") && strstr(src, "{SRT_COPY, 0, ") && strstr(src, "{SRT_COPY, 1, "));
    const char *sel[] = {"checkpointing.activations=selective"};
    src = emit_of(tiny, sel, 1, true);
    CHECK(src && strstr(src, "static void s0_attn(") && strstr(src, "s0_attn(c, &S0_attn[") &&
          strstr(src, "int64_t attn; } s0_bwd_t;") && !strstr(src, "s0_recompute"));
    const char *llama = "model llama { layers = 2  hidden = 64  heads = 4  kv_heads = 2  vocab = 256  seq_len = 32 }\n"
                        "parallel { tp = 2  pp = 1  dp = 1 }\nprecision { dtype = fp32 }\n"
                        "checkpointing { activations = full  partition_activations = on }\n"
                        "train { global_batch = 4  micro_batch = 2  steps = 4 optimizer = adamw { lr = 1e-3 } }\n"
                        "data { train = \"data/x.txt\"  format = text }\n"
                        "cluster { nodes = 1  gpus_per_node = 2  gpu = cpu }\n";
    src = emit_of(llama, NULL, 0, true);
    CHECK(src && strstr(src, "{SRT_COMPUTE, 3, ") && strstr(src, "{SRT_TP_COMM, 2, ") &&
          strstr(src, "srt_all_gather(c, a->st, SRT_TP,"));
}

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
    test_pipeline();
    test_checkpointing();
    test_offload();
    test_escaping();
    arena_free(&g_arena);
    if (failures) fprintf(stderr, "test_emit: %d failures\n", failures);
    return failures != 0;
}
