/* test_emit.c — the code generator (compiler/emit.c): what it refuses, that
 * every runtime call it writes is declared by shardrt.h, that events are
 * recorded before they are waited for and name the op waited for, that a
 * ZeRO-3 layer function waits for each module's unit right before the
 * module's first kernel (UWAIT), that the
 * loops keep a 96-layer trainer small and compute the same rows as the
 * straight-line step, and that strings and comments are escaped.  (That the
 * emitted C compiles and trains the same in every layout is
 * tests/golden/emit.test.sh.) */
#include "check.h"
#include "emit.h"

#include "../../runtime/include/shardrt.h"

#include <ctype.h>

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

/* In the straight-line step, each wait's event was last recorded right
 * after the op the wait names: REC(S) records stream S's next event, WAIT(T,
 * S, k) waits for the k-th latest one on S, AWAIT(R, S, k) hands it to the
 * next layer call (ZeRO-3's per-module waits), each with its op in a comment. */
static void check_events(const char *src)
{
    enum { NS = 8, CAP = 4096 };
    static const char *const streams[NS] = {"COMPUTE", "TP_COMM", "DP_COMM", "PP_COMM", "COPY", "HOST"};
    static char lab[NS][CAP][96];
    int nrec[NS] = {0}, nr = 0, nw = 0, waits = 0;
    const char *step = strstr(src, "static void s0_step"), *end = step ? strstr(step, "\n}\n") : NULL;
    CHECK(step && end);
    if (!step || !end) return;
    for (const char *p = step; p && p < end; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        char s1[32], s2[32], l[96];
        int k;
        while (*p == ' ') p++;
        if (sscanf(p, "REC(%31[A-Z_]);  /* record %95[^*]*/", s1, l) == 2) {
            for (size_t m = strlen(l); m && l[m - 1] == ' ';) l[--m] = 0;
            for (int st = 0; st < NS && streams[st]; st++)
                if (strcmp(s1, streams[st]) == 0 && nrec[st] < CAP) snprintf(lab[st][nrec[st]++], 96, "%s", l);
            nr++;
        } else if (sscanf(p, "WAIT(%31[A-Z_], %31[A-Z_], %d);  /* wait(%95[^*]*/", s1, s2, &k, l) == 4 ||
                   sscanf(p, "AWAIT(%31[A-Z0-9_], %31[A-Z_], %d);  /* wait(%95[^*]*/", s1, s2, &k, l) == 4) {
            nw++;
            for (int st = 0; st < NS && streams[st]; st++) {
                if (strcmp(s2, streams[st]) != 0) continue;
                CHECK(k >= 1 && k <= nrec[st]);
                if (k < 1 || k > nrec[st]) break;
                /* "wait(X)" names the op recorded as "record X" */
                char want[128];
                snprintf(want, sizeof want, "%s)", lab[st][nrec[st] - k]);
                for (size_t m = strlen(l); m && l[m - 1] == ' ';) l[--m] = 0;
                CHECK_STR(l, want);
                waits++;
            }
        }
    }
    CHECK(nr > 0 && nw >= nr);
    CHECK_EQ(waits, nw);
}

/* ZeRO-3's per-module waits: every UWAIT(R) in a layer function is followed
 * by the module's first kernel, the next runtime call, which reads the
 * parameter PW(R, ...) (a wait after its GEMM would leave the GEMM unordered
 * after the gather); returns how many. */
static int check_module_waits(const char *src)
{
    int n = 0;
    for (const char *p = strstr(src, "    UWAIT("); p; p = strstr(p + 1, "    UWAIT(")) {
        char role[32];
        if (sscanf(p, "    UWAIT(%31[A-Z0-9_]);", role) != 1) continue;
        n++;
        const char *call = strstr(strchr(p, '\n'), "srt_"), *eol = call ? strchr(call, '\n') : NULL;
        char want[48];
        snprintf(want, sizeof want, "PW(%s,", role);
        const char *at = call ? strstr(call, want) : NULL;
        if (!call || !at || at > eol) {
            fprintf(stderr, "UWAIT(%s) is not followed by its module's kernel\n", role);
            failures++;
        }
    }
    return n;
}

/* Are the loop form and the straight-line form the same up to stage 0's
 * step (its unit functions and step), the tables and helpers unchanged? */
static bool same_tables(const char *loops, const char *flat)
{
    const char *mark = "/* ---- stage 0's step:";
    const char *a = loops ? strstr(loops, mark) : NULL, *b = flat ? strstr(flat, mark) : NULL;
    return a && b && a - loops == b - flat && memcmp(loops, flat, (size_t)(a - loops)) == 0;
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
                    CHECK((strstr(src, "tr_gather(c, &(tr_gather_t){") != NULL) == (z == 3 && small));
                    /* a unit per linear (the norms persistent): each waited for before its GEMM */
                    CHECK(check_module_waits(src) == (z == 3 && small ? 8 : 0));
                    CHECK((strstr(src, "AWAIT(QKV_W, DP_COMM, ") != NULL) == (z == 3 && small));
                    /* all-reduces (ZeRO 0); ZeRO 1's reduce-scatters in place into its slice;
                     * reduce-scatters that accumulate over microbatches */
                    CHECK((strstr(src, "tr_reduce(c, &(tr_reduce_t){SRT_DP_COMM, 0, ") != NULL) == (z == 0));
                    if (z == 1) CHECK(strstr(src, "tr_reduce(c, &(tr_reduce_t){SRT_DP_COMM, 3, ") != NULL);
                    CHECK((strstr(src, "tr_reduce(c, &(tr_reduce_t){SRT_DP_COMM, 2, ") != NULL) ==
                          ((z == 2 || (z == 3 && small)) && dp < 4));
                    if (bf) CHECK(strstr(src, "OWN_OPT, 0, ") != NULL);
                }
}

/* A 96-layer GPT with 64 microbatches: the loops keep the step short and
 * the file small (how long writing it takes is a benchmark's question). */
static void test_loops(void)
{
    const char *big = "model gpt { layers = 96  hidden = 256  heads = 4  vocab = 512  seq_len = 64 }\n"
                      "parallel { tp = 1  pp = 1  dp = 2 }\n"
                      "zero { stage = 1 }\n"
                      "train { global_batch = 128  micro_batch = 1 }\n"
                      "cluster { nodes = 1  gpus_per_node = 2  gpu = cpu }\n";
    char *src = emit_of(big, NULL, 0, true);
    CHECK(src != NULL);
    if (!src) return;
    const char *step = strstr(src, "static void s0_step"), *end = strstr(step, "\n}\n");
    int lines = 0;
    for (const char *p = step; p < end; p++) lines += *p == '\n';
    CHECK(lines < 200);
    /* the microbatches' loop in the step, the layers' in their unit of work */
    CHECK(strstr(step, "for (int mb = 0; mb < 63; mb++) {  /* embed_fwd mb0 … load_batch mb63 */") != NULL);
    CHECK(strstr(step, "s0_fwd_bwd(c, n, mb);") != NULL);
    CHECK(strstr(src, "static void s0_fwd_bwd(srt_ctx *c, tr_count *n, int mb)") != NULL);
    CHECK(strstr(src, "for (int l = 0; l < 95; l++) {") != NULL);
    check_declared(src);
    /* the same tables as the straight-line form: loops only change the step */
    char *flat = emit_of(big, NULL, 0, false);
    CHECK(same_tables(src, flat));
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
    CHECK(strstr(src, "N, C, VP, (int)srt_group_rank(c, SRT_TP) * VP, V, DLOSS);") != NULL);
    /* the straight-line form has the same tables, and says what each call serves */
    char *flat = emit_of(llama, NULL, 0, false);
    CHECK(same_tables(src, flat));
    CHECK(flat && strstr(flat, "/* tp_allreduce L1 mb0 attn */") != NULL);
    CHECK(strstr(src, "grads \"model.norm.weight\"") != NULL || strstr(src, "model.norm.weight") != NULL);
    const char *sp_ov[] = {"parallel.sequence_parallel=on"};
    char *sp = emit_of(llama, sp_ov, 1, true);
    CHECK(sp != NULL);
    if (sp) {
        check_declared(sp);
        CHECK(strstr(sp, "srt_all_gather(c, a->st, SRT_TP, DV(a->out, a->n, WDT), DV(a->in, ns, WDT));") != NULL);
        CHECK(strstr(sp, "srt_reduce_scatter(c, a->st, SRT_TP, DV(a->out, ns, WDT), DV(a->in, a->n, WDT));") != NULL);
        CHECK(strstr(sp, "srt_add_fwd(c, SRT_COMPUTE, y_own, y_own, x);") != NULL);
        /* the norms on this rank's tokens, in ops of their own before the gathers */
        CHECK(strstr(sp, "_fwd_norm(c, a);") != NULL && strstr(sp, "const int NS = N / 2;") != NULL);
        char *spf = emit_of(llama, sp_ov, 1, false);
        CHECK(spf && strstr(spf, "tp_allgather L1 mb0") != NULL && strstr(spf, "tp_reduce_scatter L1 mb0") != NULL);
    }
    const char *kv1_ov[] = {"model.kv_heads=1"};
    char *kv1 = emit_of(llama, kv1_ov, 1, true);
    CHECK(kv1 != NULL);
    if (kv1) {
        check_declared(kv1);
        CHECK(strstr(kv1, "NH = 2,") != NULL && strstr(kv1, "NKV = 1,") != NULL);
        /* a layer's tensor of a role: its row as a macro of the layer and flat offset */
        CHECK(strstr(kv1, "#define P_K_W(l, flat) {\"model.layers.\" #l \".self_attn.k_proj.weight\", l, 16, 64, 16, "
                          "SRT_SPLIT_NONE, 16, 64, flat,") != NULL);
        CHECK(strstr(kv1, "\".self_attn.v_proj.weight\"") != NULL && strstr(kv1, "    P_K_W(0, ") != NULL);
    }
    /* 2 kv heads of 8 at tp 4: each on 2 tp ranks (SPLIT_KV, head dim 8), its
     * gradients summed over SRT_TP_KV (kind 3), counted once in the norm */
    const char *kv2_ov[] = {"model.heads=8", "parallel.tp=4", "parallel.dp=1", "cluster.gpus_per_node=4"};
    char *kv2 = emit_of(llama, kv2_ov, 4, true);
    CHECK(kv2 != NULL);
    if (kv2) {
        check_declared(kv2);
        CHECK(strstr(kv2, "NH = 2,") != NULL && strstr(kv2, "NKV = 1,") != NULL);
        CHECK(strstr(kv2, "#define P_K_W(l, flat) {\"model.layers.\" #l \".self_attn.k_proj.weight\", l, 16, 64, 16, "
                          "SRT_SPLIT_KV, 8, 64, flat,") != NULL);
        CHECK(strstr(kv2, "#define P_V_W(l, flat) {\"model.layers.\" #l \".self_attn.v_proj.weight\", l, 16, 64, 16, "
                          "SRT_SPLIT_KV, 8, 64, flat,") != NULL && strstr(kv2, "    P_V_W(1, ") != NULL);
        CHECK(strstr(kv2, "#define P_Q_W(l, flat) {\"model.layers.\" #l \".self_attn.q_proj.weight\", l, 64, 64, 64, "
                          "SRT_SPLIT_ROWS, 16, 64, flat,") != NULL);
        CHECK(strstr(kv2, "srt_all_reduce(c, a->st, SRT_TP_KV, DV(a->out, a->n, GDT), SRT_SUM);") != NULL);
        CHECK(strstr(kv2, "{SRT_TP_COMM, 3, 1, ") != NULL);
        /* a shared kv head's tensors: counted on one rank of SRT_TP_KV */
        CHECK(strstr(kv2, "int replicated = tt->split == SRT_SPLIT_NONE ? 1 : tt->split == SRT_SPLIT_KV ? 2 : 0;") != NULL);
        CHECK(strstr(kv2, "bool kv0 = srt_group_rank(c, SRT_TP_KV) == 0;") != NULL);
        CHECK(strstr(src, "SRT_TP_KV, DV(") == NULL);     /* kv 2 = tp 2: no shared heads */
    }
    const char *gpt_ov[] = {"parallel.tp=2", "cluster.gpus_per_node=4"};
    char *gpt = emit_of(tiny, gpt_ov, 2, true);
    CHECK(gpt != NULL);
    if (gpt) {
        check_declared(gpt);
        CHECK(strstr(gpt, "#define P_QKV_W(l, flat) {\"h.\" #l \".attn.c_attn.weight\", l, 192, 64, 192, SRT_SPLIT_QKV, 96, 64, "
                          "flat,") != NULL);
        CHECK(strstr(gpt, "#define P_QKV_B(l, flat) {\"h.\" #l \".attn.c_attn.bias\", l, 192, 0, 192, SRT_SPLIT_QKV, 96, 0, "
                          "flat,") != NULL && strstr(gpt, "    P_QKV_W(0, ") != NULL);
    }
    /* SP with checkpointing: full replays each layer from the gathered input
     * shard, selective recomputes the attention core (train_sp3d trains them) */
    const char *ck_ov[2][2] = {{"parallel.sequence_parallel=on", "checkpointing.activations=full"},
                               {"parallel.sequence_parallel=on", "checkpointing.activations=selective"}};
    for (int i = 0; i < 2; i++) {
        char *ck = emit_of(llama, ck_ov[i], 2, true), *ckf = emit_of(llama, ck_ov[i], 2, false);
        CHECK(ck != NULL);
        if (!ck) continue;
        check_declared(ck);
        CHECK(ckf && strstr(ckf, "recompute L1 mb0") != NULL && strstr(ckf, "tp_reduce_scatter L1 mb0") != NULL);
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
        CHECK(strstr(src, "srt_send(c, a->st, DV(off, a->n, WDT), a->peer);") != NULL);
        CHECK(strstr(src, "srt_recv(c, a->st, DV(off, a->n, WDT), a->peer);") != NULL);
        CHECK(strstr(src, "srt_all_reduce(c, a->st, SRT_EMBED, DV(a->off, a->n, GDT), SRT_SUM);") != NULL);
        /* the straight-line form says what each call serves */
        char *fl = emit_of(tiny, ov, 6, false);
        CHECK(fl != NULL);
        if (!fl) return;
        const char *s1 = strstr(fl, "static void s1_step(srt_ctx *c)");
        CHECK(s1 && strstr(s1, "tr_pp(c, &(tr_pp_t){SRT_PP_COMM, 1, X(0, 0, 0), ") &&
              strstr(s1, ");  /* recv_fwd mb0 chunk0 */"));
        CHECK(strstr(src, "tied_reduce wte.weight */") != NULL);
        /* the last stage's copy of the tied embedding: left out of the norm */
        const char *o0 = strstr(src, "static void s0_owned("), *o1 = strstr(src, "static void s1_owned(");
        CHECK(o0 && o1 && strstr(o0, "bool copy = t == -1;") && strstr(o1, "bool copy = t == 26;"));
        CHECK(strstr(src, "if (!copy && (!replicated || (replicated == 1 ? tp0 : kv0))) srt_grad_sumsq(c, st, g);") != NULL);
        /* the embedding on stage 0 only, the head on stage 1 only */
        const char *st0 = strstr(fl, "static void s0_step("), *st1 = strstr(fl, "static void s1_step(");
        const char *st0e = st0 ? strstr(st0, "\n}\n") : NULL, *st1e = st1 ? strstr(st1, "\n}\n") : NULL;
        CHECK(st0e && st1e);
        if (st0e && st1e) {
            const char *b0 = arena_strndup(&g_arena, st0, (size_t)(st0e - st0));
            const char *b1 = arena_strndup(&g_arena, st1, (size_t)(st1e - st1));
            CHECK(strstr(b0, "tr_embed_fwd(c, ") != NULL && strstr(b1, "tr_embed_fwd(c, ") == NULL);
            CHECK(strstr(b1, "tr_head(c, ") != NULL && strstr(b0, "tr_head(c, ") == NULL);
        }
        CHECK(strstr(src, "s0_step, s0_eval,") != NULL && strstr(src, "s1_step, s1_eval,") != NULL);
        const char *e0 = strstr(fl, "static void s0_eval(srt_ctx *c)"), *e1 = strstr(fl, "static void s1_eval(srt_ctx *c)");
        CHECK(e0 && e1);
        if (e0 && e1) {
            const char *z0 = strstr(e0, "\n}\n"), *z1 = strstr(e1, "\n}\n");
            const char *b0 = arena_strndup(&g_arena, e0, (size_t)(z0 - e0));
            const char *b1 = arena_strndup(&g_arena, e1, (size_t)(z1 - e1));
            CHECK(strstr(b0, "/* send_fwd mb0 chunk0 */") && strstr(b0, "/* recv_fwd mb0 chunk1 */") &&
                  strstr(b0, "/* send_fwd mb0 chunk1 */") && strstr(b0, "/* embed_fwd mb0"));
            CHECK(strstr(b1, "/* recv_fwd mb0 chunk0 */") && strstr(b1, "/* send_fwd mb0 chunk0 */") &&
                  strstr(b1, "/* recv_fwd mb0 chunk1 */") && strstr(b1, "tr_head_eval(c, &(tr_head_t){&S1_POST, 0, "));
            CHECK(!strstr(b0, "mb1") && !strstr(b1, "mb1") && !strstr(b0, "bwd") && !strstr(b1, "bwd") &&
                  !strstr(b0, "head"));
        }
        CHECK(strstr(src, "static void tr_head_eval(") != NULL);
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
    static const struct { const char *ov[5]; const char *want[4]; } cases[] = {
        {{"zero.stage=1", "offload.optimizer=cpu"}, {"OWN_D2H, ", "SRT_HOST, OWN_OPT", "OWN_H2D, "}},
        {{"zero.stage=2", "offload.optimizer=cpu"}, {"_part(c, SRT_COPY, ", "SRT_HOST, OWN_OPT", "OWN_H2D, "}},
        {{"zero.stage=3", "offload.optimizer=nvme{path=\"/x\"}", "zero.sub_group_size=20000"},
         {"srt_nvme_read(c, SRT_COPY, srt_hview(", "srt_nvme_write(c, SRT_COPY, srt_hview(", "HV(staging + ("}},
        {{"zero.stage=3", "offload.optimizer=cpu", "offload.optimizer.ratio=0.5"},
         {"{SRT_DP_COMM, 3, ", "the device's part, then the host's", "SRT_COMPUTE, OWN_OPT"}},
        {{"zero.stage=3", "offload.params=nvme{path=\"/x\" buffer_count=2 buffer_size=100000}",
          "precision.dtype=bf16", "zero.param_persistence_threshold=100"},
         {"tr_fetch(c, &(tr_fetch_t){SRT_COPY, ", "srt_nvme_read(c, a->st, HV(a->swap, ", "srt_nvme_write(c, SRT_COPY, DV(",
          "srt_nvme_read(c, SRT_DP_COMM, HV("}},
        /* one dp rank: each unit fetched, the persistent parameters copied to the device */
        {{"zero.stage=3", "offload.params=cpu", "parallel.dp=1", "cluster.gpus_per_node=1",
          "zero.param_persistence_threshold=100"},
         {"tr_fetch(c, &(tr_fetch_t){SRT_COPY, ", "srt_copy(c, a->st, DV(a->dst, a->n, WDT), HV(", "srt_copy(c, SRT_COPY, HV(",
          "srt_copy(c, SRT_DP_COMM, DV("}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = 0;
        while (n < 5 && cases[i].ov[n]) n++;
        char *src = emit_of(tiny, (const char **)cases[i].ov, n, true);
        CHECK(src != NULL);
        if (!src) continue;
        check_declared(src);
        for (int k = 0; k < 4 && cases[i].want[k]; k++)
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
    CHECK(strstr(src, "static void tr_recompute(srt_ctx *c, const tr_fwd_t *a)") != NULL);
    CHECK(strstr(src, "if (a->y < 0) return;") != NULL);
    CHECK(strstr(src, "tr_recompute(c, &(tr_fwd_t){") != NULL);
    const char *f = strstr(src, "static void tr_fwd("), *r = strstr(src, "static void tr_recompute(");
    CHECK(f && r && f < r);
    if (f && r && f < r)    /* the forward keeps nothing */
        CHECK(!strstr(arena_strndup(&g_arena, f, (size_t)(r - f)), "a->saved"));
    char *flat = emit_of(tiny, full, 1, false);
    CHECK(same_tables(src, flat));
    const char *cpu[] = {"checkpointing.activations=full", "checkpointing.every=2", "checkpointing.cpu=on",
                         "model.layers=4"};
    src = emit_of(tiny, cpu, 4, true);
    CHECK(src && strstr(src, "tr_ckpt(c, &(tr_ckpt_t){SRT_COPY, 0, ") && strstr(src, "tr_ckpt(c, &(tr_ckpt_t){SRT_COPY, 1, "));
    const char *sel[] = {"checkpointing.activations=selective"};
    src = emit_of(tiny, sel, 1, true);
    CHECK(src && strstr(src, "static void tr_attn(") && strstr(src, "tr_attn(c, &(tr_attn_t){") &&
          strstr(src, "int64_t attn; } tr_bwd_t;") && !strstr(src, "tr_recompute"));
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
