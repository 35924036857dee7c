/* test_sema.c — resolution: derived values (model shape, cluster profile, dp,
 * batch), -D overrides and includes (later wins), keys of enum blocks, the
 * rules' messages, and the round trip of every spec in specs/ through the
 * canonical printer. */
#include "shardc.h"
#include "check.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Parses and resolves text with overrides "a.b=v" (NULL-terminated). */
static bool resolve(const char *text, Spec *s, const char *const *defs)
{
    capture();
    sema_source = NULL;
    Item *items = spec_parse_text("t.tspec", text, strlen(text));
    if (diag_errors) return false;
    Override ov[16];
    int n = 0;
    for (; defs && defs[n]; n++) {
        const char *eq = strchr(defs[n], '=');
        ov[n].path = arena_strndup(&g_arena, defs[n], (size_t)(eq - defs[n]));
        ov[n].text = eq + 1;
    }
    return sema_resolve(items, ov, n, s);
}

/* Says what went wrong when a resolution that should pass did not. */
static bool resolve_ok(const char *text, Spec *s, const char *const *defs)
{
    bool ok = resolve(text, s, defs);
    if (!ok) fprintf(stderr, "unexpected diagnostics:\n%s", captured());
    return ok;
}

#define TINY "model gpt { layers = 2 hidden = 64 heads = 4 vocab = 256 seq_len = 64 }\n"
#define NODE8 "cluster { nodes = 1 gpus_per_node = 8 gpu = a100_80gb }\n"

/* Family defaults: Llama's MLP rule (7B 11008, 13B 13824), GPT's 4h, biases, ties. */
static void test_model_derived(void)
{
    Spec s;
    CHECK(resolve_ok("model llama { layers = 2 hidden = 4096 heads = 32 vocab = 32000 seq_len = 4096 }\n" NODE8, &s, NULL));
    CHECK(s.model.ffn_hidden == 11008 && s.model.kv_heads == 32 && !s.model.bias && !s.model.tie_embeddings);
    CHECK(s.model.activation == ACT_SWIGLU && s.model.family == FAM_LLAMA && s.model.rope_theta == 10000);
    CHECK(resolve_ok("model llama { layers = 2 hidden = 5120 heads = 40 kv_heads = 8 vocab = 32000 seq_len = 4096 }\n" NODE8,
                     &s, NULL));
    CHECK(s.model.ffn_hidden == 13824 && s.model.kv_heads == 8);
    CHECK(resolve_ok("model = gpt { layers = 12 hidden = 768 heads = 12 vocab = 50257 seq_len = 1024 }\n" NODE8, &s, NULL));
    CHECK(s.model.ffn_hidden == 3072 && s.model.bias && s.model.tie_embeddings && s.model.activation == ACT_GELU);
    CHECK(resolve_ok("model gpt { layers = 2 hidden = 64 heads = 4 vocab = 256 seq_len = 64 bias = off ffn_hidden = 100 }\n" NODE8,
                     &s, NULL));
    CHECK(!s.model.bias && s.model.ffn_hidden == 100);
    CHECK(resolve_ok("model gpt { layers = 2 hidden = 64 heads = 4 vocab = 256 seq_len = 64\n"
                     "  activation = extern \"sqrelu\" { header = \"ext/sqrelu.h\" cpu = \"ext/sqrelu.c\" } }\n" NODE8,
                     &s, NULL));
    CHECK(s.model.activation == ACT_EXTERN && strcmp(s.model.extern_name, "sqrelu") == 0);
    CHECK(strcmp(s.model.extern_header, "ext/sqrelu.h") == 0 && strcmp(s.model.extern_cuda, "") == 0);
}

/* The gpu profile fills what the cluster block leaves out; a key overrides it. */
static void test_cluster_derived(void)
{
    Spec s;
    CHECK(resolve_ok(TINY NODE8, &s, NULL));
    CHECK(s.cluster.gpu == GPU_A100_80GB && s.cluster.gpu_memory == 80LL << 30 && s.cluster.intra_node == 300e9);
    CHECK(s.cluster.network == NET_IB200 && s.cluster.inter_node == 25e9 && s.cluster.bf16_tflops == 312);
    CHECK(s.cluster.pcie == 32e9 && s.cluster.runtime_reserve == 1LL << 30);
    CHECK(resolve_ok(TINY "cluster { gpus_per_node = 8 gpu = h100_sxm_80gb intra_node = 400GB/s network = eth400\n"
                          "  gpu_memory = 75GiB host_memory = 2TiB inter_node = 400Gb/s }\n",
                     &s, NULL));
    CHECK(s.cluster.intra_node == 400e9 && s.cluster.network == NET_ETH400 && s.cluster.inter_node == 50e9);
    CHECK(s.cluster.gpu_memory == 75LL << 30 && s.cluster.hbm_bandwidth == 3.35e12 && s.cluster.host_memory == 2LL << 40);
    CHECK(s.cluster.network_latency_us == cluster_nets[NET_ETH400].latency_us);
    CHECK(resolve_ok(TINY "cluster { gpus_per_node = 8 }\n", &s, NULL));
    CHECK(s.cluster.gpu == GPU_H100_SXM_80GB && s.cluster.network == NET_IB400);
}

/* dp from the cluster, and the batch triangle global = micro · accum · dp. */
static void test_batch(void)
{
    Spec s;
    CHECK(resolve_ok(TINY "cluster { nodes = 4 gpus_per_node = 8 }\nparallel { tp = 2 pp = 2 }\n", &s, NULL));
    CHECK(s.parallel.dp == 8 && s.train.global_batch == 8 && s.train.micro_batch == 1 && s.train.grad_accum == 1);
    CHECK(resolve_ok(TINY NODE8 "train { global_batch = 512 micro_batch = 16 }\n", &s, NULL));
    CHECK(s.train.grad_accum == 4 && s.parallel.microbatches == 4);
    CHECK(resolve_ok(TINY NODE8 "train { global_batch = 512 grad_accum = 4 }\n", &s, NULL));
    CHECK(s.train.micro_batch == 16);
    CHECK(resolve_ok(TINY NODE8 "train { micro_batch = 2 grad_accum = 3 }\n", &s, NULL));
    CHECK(s.train.global_batch == 48);
    CHECK(resolve_ok(TINY NODE8 "train { global_batch = 64 }\n", &s, NULL));
    CHECK(s.train.micro_batch == 8 && s.train.grad_accum == 1);
    CHECK(resolve_ok(TINY NODE8 "parallel { microbatches = 6 }\n", &s, NULL));
    CHECK(s.train.grad_accum == 6 && s.train.global_batch == 48);
    CHECK(resolve_ok(TINY NODE8 "train { global_batch = 512 micro_batch = 16 grad_accum = 4 }\n", &s, NULL));
    CHECK(!resolve(TINY NODE8 "train { global_batch = 512 micro_batch = 16 grad_accum = 2 }\n", &s, NULL));
    CHECK(strstr(captured(), "micro_batch · grad_accum · dp = 16 · 2 · 8 = 256") != NULL);
    /* huge factors overflow nothing: they are reported */
    CHECK(!resolve(TINY NODE8 "train { global_batch = 5 micro_batch = 1000000 grad_accum = 1000000 }\n", &s, NULL));
    CHECK(!resolve(TINY "cluster { nodes = 1000000 gpus_per_node = 1000 }\ntrain { micro_batch = 1000000 grad_accum = 1000000 }\n",
                   &s, NULL));
    CHECK(strstr(captured(), "too large") != NULL);
}

/* Defaults that depend on other keys: overlap with stage 3, virtual stages, decay. */
static void test_other_derived(void)
{
    Spec s;
    CHECK(resolve_ok(TINY NODE8 "zero { stage = 3 }\n", &s, NULL));
    CHECK(s.zero.overlap_comm && s.parallel.virtual_stages == 1 && s.train.decay_steps == s.train.steps);
    CHECK(resolve_ok(TINY NODE8 "zero { stage = 2 }\nprecision { dtype = bf16 }\ntrain { steps = 77 }\n", &s, NULL));
    CHECK(!s.zero.overlap_comm && s.precision.grad_reduce == DT_BF16 && s.train.decay_steps == 77);
    CHECK(resolve_ok("model gpt { layers = 8 hidden = 64 heads = 4 vocab = 256 seq_len = 64 }\n" NODE8
                     "parallel { pp = 2 schedule = interleaved microbatches = 4 }\n",
                     &s, NULL));
    CHECK(s.parallel.virtual_stages == 2 && s.parallel.dp == 4);
}

/* -D overrides: nesting, labels kept, errors located at -D:1:N. */
static void test_overrides(void)
{
    Spec s;
    const char *d1[] = {"train.optimizer.lr=1e-3", "parallel.tp=2", "model=llama", "cluster.gpu=cpu", NULL};
    CHECK(resolve_ok(TINY NODE8 "train { optimizer = sgd { momentum = 0.9 } }\n", &s, d1));
    CHECK(s.train.lr == 1e-3 && s.train.optimizer == OPT_SGD && s.train.momentum == 0.9);
    CHECK(s.parallel.tp == 2 && s.parallel.dp == 4 && s.model.family == FAM_LLAMA && s.cluster.gpu == GPU_CPU);
    const char *d2[] = {"parallel.tpp=2", NULL};
    CHECK(!resolve(TINY NODE8, &s, d2));
    CHECK(strstr(captured(), "-D:1:12: error: unknown key 'tpp' in block 'parallel'") != NULL);
    CHECK(strstr(captured(), "did you mean 'tp'?") != NULL);
    const char *d3[] = {"zero.stage=5", NULL};
    CHECK(!resolve(TINY NODE8, &s, d3));
    CHECK(strstr(captured(), "zero.stage = 5 is out of range [0, 3]") != NULL);
    const char *d4[] = {"a..b=1", NULL};
    CHECK(!resolve(TINY NODE8, &s, d4));
    CHECK(strstr(captured(), "is not a key path") != NULL);
    const char *d5[] = {"parallel.tp=", NULL};
    CHECK(!resolve(TINY NODE8, &s, d5));
    CHECK(strstr(captured(), "has no value") != NULL);
    /* a value with its block through -D */
    const char *d6[] = {"offload.optimizer=nvme { path = \"/nv\" }", "zero.stage=1", NULL};
    CHECK(resolve_ok(TINY NODE8, &s, d6));
    CHECK(s.offload.optimizer == OFF_NVME && strcmp(s.offload.optimizer_path, "/nv") == 0);
}

/* Keys of an enum's block: wrong value in one source is an error; a later
 * source switching the enum drops them silently. */
static void test_enum_blocks(void)
{
    Spec s;
    CHECK(!resolve(TINY NODE8 "zero { stage = 3 }\noffload { optimizer = cpu { path = \"/x\" } }\n", &s, NULL));
    CHECK(strstr(captured(), "offload.optimizer.path applies only when offload.optimizer is nvme, but it is cpu") != NULL);
    const char *d[] = {"offload.optimizer=cpu", NULL};
    CHECK(resolve_ok(TINY NODE8 "zero { stage = 3 }\noffload { optimizer = nvme { path = \"/x\" pipeline_read = off } }\n",
                     &s, d));
    /* the dropped keys are back at their defaults (pipeline_read's is on) */
    CHECK(s.offload.optimizer == OFF_CPU && strcmp(s.offload.optimizer_path, "") == 0 && s.offload.optimizer_pipeline_read);
    CHECK(!s.set[schema_index(schema_find("offload.optimizer.path"))]);
    /* an unlabeled block keeps the value and sets its keys */
    const char *d2[] = {"offload.optimizer.path=/y", NULL};
    (void)d2;
    CHECK(resolve_ok(TINY NODE8 "zero { stage = 3 }\noffload { optimizer = nvme { path = \"/x\" } }\noffload { optimizer { buffer_count = 9 } }\n",
                     &s, NULL));
    CHECK(s.offload.optimizer == OFF_NVME && s.offload.optimizer_buffer_count == 9);
    /* loss scaling only with fp16 */
    CHECK(resolve_ok(TINY NODE8 "precision { dtype = fp16 loss_scale = static { scale = 1024 } }\n", &s, NULL));
    CHECK(s.precision.loss_scale == LS_STATIC && s.precision.static_scale == 1024);
    CHECK(sema_applies(&s, schema_find("precision.loss_scale.scale")));
    CHECK(!sema_applies(&s, schema_find("precision.loss_scale.window")));
    const char *d3[] = {"precision.dtype=bf16", NULL};
    CHECK(resolve_ok(TINY NODE8 "precision { dtype = fp16 loss_scale = static { scale = 1024 } }\n", &s, d3));
    CHECK(s.precision.dtype == DT_BF16 && !sema_applies(&s, schema_find("precision.loss_scale")));
    CHECK(!resolve(TINY NODE8 "precision { dtype = bf16 loss_scale = dynamic { window = 10 } }\n", &s, NULL));
    CHECK(strstr(captured(), "fp16 and bf16 are exclusive") != NULL);
    /* one error for the enum, none for the key inside it */
    CHECK(strstr(captured(), "loss_scale.window applies") == NULL);
}

/* A key twice in one file is an error with a note; across files, later wins. */
static void test_twice_and_includes(void)
{
    Spec s;
    CHECK(!resolve(TINY NODE8 "parallel { tp = 1 }\nparallel { tp = 2 }\n", &s, NULL));
    CHECK(strstr(captured(), "t.tspec:4:12: error: parallel.tp is set twice") != NULL);
    CHECK(strstr(captured(), "t.tspec:3:12: note: first set here") != NULL);

    char dir[] = "/tmp/test_sema.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *common = arena_printf(&g_arena, "%s/common.tspec", dir), *top = arena_printf(&g_arena, "%s/top.tspec", dir);
    FILE *f = fopen(common, "w");
    fputs(TINY "zero { stage = 3 }\noffload { optimizer = nvme { path = \"/nv\" } }\nparallel { tp = 1 }\n", f);
    fclose(f);
    f = fopen(top, "w");
    fputs("include \"common.tspec\"\nparallel { tp = 2 }\noffload { optimizer = cpu }\n" NODE8, f);
    fclose(f);
    capture();
    sema_source = top;
    Item *items = spec_parse_file(top);
    CHECK(diag_errors == 0);
    bool ok = sema_resolve(items, NULL, 0, &s);
    if (!ok) fprintf(stderr, "%s", captured());
    CHECK(ok && s.parallel.tp == 2 && s.parallel.dp == 4 && s.offload.optimizer == OFF_CPU);
    CHECK(strcmp(s.offload.optimizer_path, "") == 0 && strcmp(s.source, top) == 0);
    /* an empty top-level file: "no model block" points at its line 1 */
    f = fopen(top, "w");
    fclose(f);
    capture();
    items = spec_parse_file(top);
    CHECK(!sema_resolve(items, NULL, 0, &s));
    CHECK(strstr(captured(), arena_printf(&g_arena, "%s:1:1: error: no model block", top)) != NULL);
    sema_source = NULL;
    unlink(common);
    unlink(top);
    rmdir(dir);
}

/* Each rule: the spec fails and the message carries its arithmetic. */
static void test_rules(void)
{
    static const struct { const char *text, *want; } cases[] = {
        {"model gpt { layers = 2 hidden = 100 heads = 12 vocab = 256 seq_len = 64 }\n" NODE8,
         "hidden = 100 is not divisible by heads = 12"},
        {TINY NODE8 "parallel { tp = 8 }\n", "heads = 4 is not divisible by tp = 8"},
        {"model llama { layers = 2 hidden = 64 heads = 4 kv_heads = 3 vocab = 256 seq_len = 64 }\n" NODE8,
         "heads = 4 is not a multiple of kv_heads = 3"},
        {"model llama { layers = 2 hidden = 768 heads = 12 kv_heads = 6 vocab = 256 seq_len = 64 }\n" NODE8
         "parallel { tp = 4 }\n",
         "kv_heads = 6 does not fit tp = 4"},
        {"model gpt { layers = 2 hidden = 768 heads = 12 ffn_hidden = 1001 vocab = 256 seq_len = 64 }\n" NODE8
         "parallel { tp = 2 }\n",
         "ffn_hidden = 1001 is not divisible by tp = 2"},
        {TINY NODE8 "parallel { pp = 4 }\n", "pp = 4 pipeline stages, but the model has only layers = 2"},
        {TINY NODE8 "parallel { schedule = interleaved }\n", "the interleaved schedule needs pp >= 2 (pp = 1)"},
        {"model gpt { layers = 6 hidden = 64 heads = 4 vocab = 256 seq_len = 64 }\n" NODE8
         "parallel { pp = 2 schedule = interleaved }\n",
         "layers = 6 is not divisible by pp·virtual_stages = 2·2 = 4"},
        {"model gpt { layers = 8 hidden = 64 heads = 4 vocab = 256 seq_len = 64 }\n" NODE8
         "parallel { pp = 2 schedule = interleaved microbatches = 3 }\n",
         "multiple of pp, but 3 % 2 = 1"},
        {"model gpt { layers = 8 hidden = 64 heads = 4 vocab = 256 seq_len = 64 }\n" NODE8
         "parallel { pp = 2 stage_layers = [3, 4] }\n",
         "stage_layers add up to 3 + 4 = 7, but layers = 8"},
        {TINY "cluster { nodes = 4 gpus_per_node = 8 }\nparallel { tp = 8 pp = 4 dp = 8 }\n",
         "tp·pp·dp = 8·4·8 = 256 ranks, but the cluster has 4 nodes × 8 GPUs = 32"},
        {TINY "cluster { nodes = 4 gpus_per_node = 8 }\nparallel { tp = 4 pp = 3 }\n",
         "tp·pp = 4·3 = 12 does not divide the cluster's 4 nodes × 8 GPUs = 32"},
        {TINY NODE8 "train { global_batch = 100 micro_batch = 2 }\n",
         "global_batch = 100 is not divisible by micro_batch · dp = 2 · 8 = 16"},
        {TINY NODE8 "parallel { microbatches = 8 }\ntrain { grad_accum = 4 }\n",
         "parallel.microbatches = 8 but train.grad_accum = 4"},
        {"model gpt { layers = 2 hidden = 64 heads = 4 vocab = 256 seq_len = 66 }\n" NODE8
         "parallel { tp = 4 sequence_parallel = on }\n",
         "seq_len = 66 is not divisible by tp = 4"},
        {TINY NODE8 "zero { stage = 2 }\noffload { params = cpu }\n", "parameter offload needs ZeRO stage 3 (zero.stage = 2)"},
        {TINY NODE8 "offload { optimizer = cpu }\n", "optimizer offload needs ZeRO stage 1 or more"},
        {TINY NODE8 "zero { stage = 1 }\noffload { optimizer = nvme }\n", "NVMe optimizer offload needs a path"},
        {TINY NODE8 "zero { stage = 1 }\noffload { optimizer = cpu { ratio = 0.5 } }\n",
         "a partial optimizer offload (ratio = 0.5) needs zero.stage = 3 (it is 1)"},
        {TINY NODE8 "precision { dtype = bf16 master_weights = bf16 }\n", "the master copy must be fp32"},
        {TINY NODE8 "precision { dtype = fp16 grad_reduce = bf16 }\n", "fp16 and bf16 are exclusive"},
        {TINY NODE8 "zero { reduce_bucket = 0 }\n", "zero.reduce_bucket = 0 is out of range [1, 1e12]"},
        {TINY NODE8 "checkpointing { every = 0 }\n", "checkpointing.every = 0 is out of range"},
        {TINY NODE8 "train { optimizer = adamw { lr = 0 } }\n", "lr = 0: the learning rate must be positive"},
        {TINY NODE8 "train { optimizer = adamw { lr = 1e-4 } lr_schedule = cosine { min_lr = 1e-3 } }\n",
         "min_lr = 1e-3 is above lr = 1e-4"},
        {TINY NODE8 "train { steps = 10 lr_schedule = cosine { warmup = 11 } }\n",
         "warmup = 11 is longer than the run (steps = 10)"},
        {TINY NODE8 "train { optimizer = adam { betas = (0.9, 1) } }\n", "betas = (0.9, 1): each must be below 1"},
        {TINY NODE8 "train { grad_clip = 0.5 optimizer = sgd { momentum = 1 } }\n", "momentum = 1 must be below 1"},
        {"model gpt { layers = 2 hidden = 64 heads = 4 vocab = 200 seq_len = 64 }\n" NODE8 "data { format = text }\n",
         "data.format = text reads bytes (256 symbols), but vocab = 200"},
        {NODE8, "t.tspec:1:1: error: no model block"},
        {"model gpt { layers = 2 }\n" NODE8, "the model block does not give hidden, heads, vocab, seq_len"},
        {TINY NODE8 "offload { aio { block_size = 5000 } }\n", "aio block_size = 5000 is not a multiple of 4KiB"},
        {TINY "cluster { gpu = cpu gpus_per_node = 8 gpu_memory = 1GiB }\n", "runtime_reserve = 1GiB leaves nothing"},
        {TINY "cluster { gpu = h100 }\n", "did you mean 'h100_sxm_80gb'?"},
        {TINY NODE8 "train { lr = 1 }\n", "'lr' belongs in another block: train { optimizer { lr = ... } }"},
        {TINY NODE8 "parallel { schedule = gpipe { } }\n", "parallel.schedule takes no block"},
        {"model gpt { layers = 2 hidden = 64 heads = 4 vocab = 256 seq_len = 64 activation = extern \"x\" }\n" NODE8,
         "activation = extern needs the header"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Spec s;
        bool ok = resolve(cases[i].text, &s, NULL);
        bool found = strstr(captured(), cases[i].want) != NULL;
        if (ok || !found)
            fprintf(stderr, "case %zu: want an error with \"%s\", got%s:\n%s", i, cases[i].want, ok ? " success" : "",
                    captured());
        CHECK(!ok && found);
    }
}

/* Warnings do not fail the spec; options without effect are turned off. */
static void test_warnings(void)
{
    Spec s;
    CHECK(resolve_ok(TINY NODE8 "parallel { sequence_parallel = on }\ncheckpointing { partition_activations = on }\n"
                                "precision { master_weights = bf16 }\n",
                     &s, NULL));
    CHECK(diag_warnings == 3 && !s.parallel.sequence_parallel && !s.checkpointing.partition_activations);
    CHECK(s.precision.master_weights == DT_FP32);
    CHECK(resolve_ok("model gpt { layers = 8 hidden = 64 heads = 4 vocab = 256 seq_len = 64 }\n" NODE8
                     "parallel { pp = 2 } zero { stage = 3 } train { grad_accum = 4 }\n",
                     &s, NULL));
    CHECK(diag_warnings == 1 && strstr(captured(), "4× the reduce-scatter and all-gather traffic") != NULL);
    CHECK(resolve_ok(TINY "parallel { tp = 4 }\ncluster { nodes = 2 gpus_per_node = 2 }\n", &s, NULL));
    CHECK(diag_warnings == 1 && strstr(captured(), "tp = 4 spans 2 nodes") != NULL);
}

/* Every key of a and b equal (strings by content, lists by elements). */
static bool spec_equal(const Spec *a, const Spec *b)
{
    bool same = true;
    for (int i = 0; i < schema_nkeys; i++) {
        const SchemaKey *k = &schema_keys[i];
        const char *pa = (const char *)a + k->offset, *pb = (const char *)b + k->offset;
        bool eq;
        switch (k->type) {
        case T_STRING: eq = strcmp(*(const char *const *)pa, *(const char *const *)pb) == 0; break;
        case T_INTLIST: {
            const IntList *la = (const IntList *)pa, *lb = (const IntList *)pb;
            eq = la->n == lb->n && (la->n == 0 || memcmp(la->v, lb->v, sizeof(int64_t) * (size_t)la->n) == 0);
            break;
        }
        case T_INT: case T_BYTES: eq = *(const int64_t *)pa == *(const int64_t *)pb; break;
        case T_FLOAT: case T_BANDWIDTH: eq = *(const double *)pa == *(const double *)pb; break;
        case T_FLOAT2: eq = memcmp(pa, pb, 2 * sizeof(double)) == 0; break;
        case T_BOOL: eq = *(const bool *)pa == *(const bool *)pb; break;
        case T_ENUM: eq = *(const int *)pa == *(const int *)pb; break;
        default: eq = false;
        }
        if (!eq) fprintf(stderr, "round trip changed %s\n", k->path);
        same &= eq;
    }
    return same;
}

/* canon_print into a string. */
static char *print(const Spec *s)
{
    /* on the heap: gcc takes a stack buffer handed to open_memstream for a dangling pointer */
    struct { char *buf; size_t len; } *m = calloc(1, sizeof *m);
    FILE *f = open_memstream(&m->buf, &m->len);
    canon_print(f, s);
    fclose(f);
    char *buf = m->buf;
    free(m);
    return buf;
}

/* One spec file under overrides: check, print, re-read the print: same Spec, same text. */
static void roundtrip(const char *path, const char *const *defs)
{
    capture();
    sema_source = path;
    Item *items = spec_parse_file(path);
    Override ov[8];
    int n = 0;
    for (; defs && defs[n]; n++) {
        const char *eq = strchr(defs[n], '=');
        ov[n].path = arena_strndup(&g_arena, defs[n], (size_t)(eq - defs[n]));
        ov[n].text = eq + 1;
    }
    Spec a, b;
    bool ok = diag_errors == 0 && sema_resolve(items, ov, n, &a);
    if (!ok) fprintf(stderr, "%s (with %d overrides) does not check:\n%s", path, n, captured());
    CHECK(ok);
    if (!ok) return;
    char *text = print(&a);
    capture();
    sema_source = NULL;
    items = spec_parse_text("printed.tspec", text, strlen(text));
    ok = diag_errors == 0 && sema_resolve(items, NULL, 0, &b);
    if (!ok) fprintf(stderr, "the print of %s does not check:\n%s\n%s", path, captured(), text);
    CHECK(ok);
    if (!ok) return;
    char *again = print(&b);
    /* the first line names the source file; the rest must be identical */
    bool same_text = strcmp(strchr(text, '\n'), strchr(again, '\n')) == 0;
    if (!same_text) fprintf(stderr, "the print of %s changes when re-read\n", path);
    CHECK(same_text);
    CHECK(spec_equal(&a, &b));
    free(text);
    free(again);
}

/* Every spec in specs/ checks and round-trips, also under overrides. */
static void test_roundtrip_specs(void)
{
    DIR *d = opendir("specs");
    CHECK(d != NULL);
    if (!d) return;
    int count = 0;
    const char *fp16[] = {"precision.dtype=fp16", "precision.grad_reduce=fp32", "offload.optimizer=cpu", NULL};
    const char *nvme[] = {"zero.stage=3", "offload.optimizer=nvme { path = \"/nvme\" pipeline_read = on }",
                          "offload.params=nvme { path = \"/nvme\" }", "train.lr_schedule=linear", NULL};
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 6, ".tspec") != 0) continue;
        char *path = arena_printf(&g_arena, "specs/%s", e->d_name);
        roundtrip(path, NULL);
        roundtrip(path, fp16);
        roundtrip(path, nvme);
        count++;
    }
    closedir(d);
    CHECK(count >= 7);
    /* a spec with every exotic form the printer knows */
    char tmp[] = "/tmp/test_sema_rt.XXXXXX";
    int fd = mkstemp(tmp);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("model llama { layers = 8 hidden = 64 heads = 4 kv_heads = 2 vocab = 300 seq_len = 64\n"
          "  activation = extern \"sq\\\"relu\" { header = \"ext/a b.h\" cpu = \"x\\\\y.c\" } }\n"
          "parallel { pp = 2 stage_layers = [3, 5] rank_order = tp_pp_dp }\n"
          "precision { dtype = fp16 loss_scale = static { scale = 0.5 } }\n"
          "train { optimizer = sgd { lr = 0.123456789 momentum = 0.9 } lr_schedule = linear { decay_steps = 50 } }\n"
          "cluster { gpu = cpu gpus_per_node = 4 host_memory = 1536MB nvme = 1.25GB/s network_latency_us = 0.1 }\n",
          f);
    fclose(f);
    roundtrip(tmp, NULL);
    unlink(tmp);
}

/* The canonical text of a resolved spec (malloc'ed). */
static char *canon_text(const Spec *s)
{
    char *text;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    canon_print(f, s);
    fclose(f);
    return text;
}

/* Open keys: where they are and what they hold; sema_bind of a choice resolves
 * exactly as the spec with those values written in (every default, derived
 * value and rule), and a choice's errors are reported like a file's. */
static void test_open_keys(void)
{
    const char *open = TINY "parallel { tp = auto  schedule = (gpipe, 1f1b) }\n"
                       "zero { stage = (3, 1) }\ntrain { global_batch = 16  micro_batch = auto }\n"
                       "cluster { nodes = 1 gpus_per_node = 4 gpu = cpu }\n";
    Spec o;
    CHECK(resolve_ok(open, &o, NULL));
    CHECK(o.nopen == 4 && o.pending);
    if (o.nopen != 4) return;
    const char *keys[] = {"parallel.tp", "parallel.schedule", "zero.stage", "train.micro_batch"};
    for (int i = 0; i < 4; i++) CHECK(strcmp(schema_keys[o.open[i].key].path, keys[i]) == 0);
    CHECK(o.open[0].any && o.open[0].loc.line == 2 && o.open[0].loc.col == 17);
    CHECK(!o.open[2].any && o.open[2].n == 2 && o.open[2].v[0] == 3 && o.open[2].v[1] == 1);
    CHECK(!o.open[1].any && o.open[1].v[0] == SCHED_GPIPE);
    struct { int64_t tp, sched, zero, mb; } choice[] = {{1, SCHED_GPIPE, 3, 4}, {2, SCHED_1F1B, 1, 2}, {4, SCHED_1F1B, 3, 1}};
    for (int c = 0; c < 3; c++) {
        int64_t val[4] = {choice[c].tp, choice[c].sched, choice[c].zero, choice[c].mb};
        Spec bound, closed;
        capture();
        CHECK(sema_bind(&o, val, &bound));
        char *text = arena_printf(&g_arena,
                                  TINY "parallel { tp = %lld  schedule = %s }\nzero { stage = %lld }\n"
                                  "train { global_batch = 16  micro_batch = %lld }\ncluster { nodes = 1 gpus_per_node = 4 gpu = cpu }\n",
                                  (long long)val[0], val[1] == SCHED_GPIPE ? "gpipe" : "1f1b", (long long)val[2], (long long)val[3]);
        CHECK(resolve_ok(text, &closed, NULL));
        char *a = canon_text(&bound), *b = canon_text(&closed);
        CHECK(strcmp(a, b) == 0);
        CHECK(bound.nopen == 0 && bound.parallel.dp == 4 / val[0]);
        free(a);
        free(b);
    }
    /* unbound: the default (tp 1) and the derived micro-batch (16 / dp 4) */
    int64_t val[4] = {SEMA_UNBOUND, SCHED_1F1B, 1, SEMA_UNBOUND};
    Spec bound;
    CHECK(sema_bind(&o, val, &bound) && bound.parallel.tp == 1 && bound.train.micro_batch == 4);
    /* a choice the rules reject: located at the open key */
    int64_t bad[4] = {4, SCHED_1F1B, 1, 3};
    capture();
    CHECK(!sema_bind(&o, bad, &bound));
    CHECK(strstr(captured(), "t.tspec:") != NULL && strstr(captured(), "error:") != NULL);
    /* -D closes an open key and opens a fixed one */
    const char *defs[] = {"parallel.tp=2", "parallel.pp=auto", NULL};
    CHECK(resolve_ok(open, &o, defs));
    CHECK(o.nopen == 4 && strcmp(schema_keys[o.open[0].key].path, "parallel.pp") == 0);
}

int main(void)
{
    test_model_derived();
    test_cluster_derived();
    test_batch();
    test_other_derived();
    test_overrides();
    test_enum_blocks();
    test_twice_and_includes();
    test_rules();
    test_warnings();
    test_roundtrip_specs();
    test_open_keys();
    if (failures) fprintf(stderr, "test_sema: %d failures\n", failures);
    else printf("test_sema: ok\n");
    return failures != 0;
}
