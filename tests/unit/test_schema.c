/* test_schema.c — the key table: every Spec field has exactly one key, every
 * default parses as its type and lies in its range, enums match the C enums
 * and the cluster profiles, suggestions and the canonical number spellings. */
#include "shardc.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Every field of struct Spec with its size: a field added to the struct
 * without a key in schema.def fails test_every_field_has_one_key. */
#define F(field) {#field, offsetof(Spec, field), sizeof(((Spec *)0)->field)}
static const struct { const char *name; size_t offset, size; } fields[] = {
    F(model.family), F(model.layers), F(model.hidden), F(model.heads), F(model.kv_heads),
    F(model.vocab), F(model.seq_len), F(model.ffn_hidden), F(model.activation),
    F(model.extern_name), F(model.extern_header), F(model.extern_cpu), F(model.extern_cuda),
    F(model.bias), F(model.tie_embeddings), F(model.norm_eps), F(model.rope_theta), F(model.init_std),
    F(parallel.tp), F(parallel.pp), F(parallel.dp), F(parallel.sequence_parallel), F(parallel.pp_scatter_gather), F(parallel.schedule),
    F(parallel.microbatches), F(parallel.virtual_stages), F(parallel.stage_layers), F(parallel.rank_order),
    F(parallel.tp_comm_overlap), F(parallel.tp_overlap_chunks),
    F(zero.stage), F(zero.overlap_comm), F(zero.overlap_param_gather), F(zero.contiguous_gradients), F(zero.reduce_scatter),
    F(zero.reduce_bucket), F(zero.allgather_bucket), F(zero.prefetch_bucket),
    F(zero.param_persistence_threshold), F(zero.max_live_parameters), F(zero.max_reuse_distance),
    F(zero.sub_group_size), F(zero.gather_across_microbatches),
    F(offload.optimizer), F(offload.optimizer_pin_memory), F(offload.optimizer_path),
    F(offload.optimizer_buffer_count), F(offload.optimizer_ratio), F(offload.optimizer_pipeline_read),
    F(offload.optimizer_pipeline_write), F(offload.params), F(offload.params_pin_memory),
    F(offload.params_path), F(offload.params_buffer_count), F(offload.params_buffer_size),
    F(offload.params_max_in_cpu), F(offload.aio_block_size), F(offload.aio_queue_depth),
    F(precision.dtype), F(precision.master_weights), F(precision.grad_reduce), F(precision.loss_scale),
    F(precision.initial_scale_power), F(precision.window), F(precision.hysteresis), F(precision.min_scale),
    F(precision.static_scale),
    F(checkpointing.activations), F(checkpointing.every), F(checkpointing.partition_activations),
    F(checkpointing.cpu),
    F(train.global_batch), F(train.micro_batch), F(train.grad_accum), F(train.steps), F(train.seed),
    F(train.grad_clip), F(train.optimizer), F(train.lr), F(train.beta1), F(train.beta2), F(train.eps),
    F(train.weight_decay), F(train.momentum), F(train.lr_schedule), F(train.warmup), F(train.decay_steps),
    F(train.min_lr), F(train.eval_every), F(train.log_every), F(train.comm_timeout),
    F(data.train), F(data.val), F(data.format),
    F(cluster.nodes), F(cluster.gpus_per_node), F(cluster.gpu), F(cluster.gpu_memory),
    F(cluster.bf16_tflops), F(cluster.fp32_tflops), F(cluster.hbm_bandwidth), F(cluster.intra_node),
    F(cluster.inter_node), F(cluster.pcie), F(cluster.network), F(cluster.network_latency_us),
    F(cluster.host_memory), F(cluster.nvme_capacity), F(cluster.nvme), F(cluster.host_bandwidth),
    F(cluster.runtime_reserve), F(cluster.profile_path),
};
#undef F

/* The bytes a key of this type writes into Spec. */
static size_t type_size(SchemaType t)
{
    switch (t) {
    case T_INT: case T_BYTES: return sizeof(int64_t);
    case T_FLOAT: case T_BANDWIDTH: return sizeof(double);
    case T_BOOL: return sizeof(bool);
    case T_ENUM: return sizeof(int);
    case T_STRING: return sizeof(const char *);
    case T_INTLIST: return sizeof(IntList);
    case T_FLOAT2: return 2 * sizeof(double);
    }
    return 0;
}

/* Each field is written by exactly one key, with the field's size. */
static void test_every_field_has_one_key(void)
{
    CHECK(schema_nkeys <= SPEC_MAX_KEYS);
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
        int owners = 0;
        for (int i = 0; i < schema_nkeys; i++) {
            const SchemaKey *k = &schema_keys[i];
            size_t b = k->offset, e = k->offset + type_size(k->type);
            if (fields[f].offset >= b && fields[f].offset < e) {
                owners++;
                /* the key starts at the field, or (betas) covers it as its second half */
                CHECK(k->offset == fields[f].offset || k->type == T_FLOAT2);
                if (k->type != T_FLOAT2) CHECK(type_size(k->type) == fields[f].size);
            }
        }
        if (owners != 1) fprintf(stderr, "field %s has %d keys\n", fields[f].name, owners);
        CHECK(owners == 1);
    }
    /* ... and every key writes a listed field */
    for (int i = 0; i < schema_nkeys; i++) {
        bool found = false;
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) found |= fields[f].offset == schema_keys[i].offset;
        if (!found) fprintf(stderr, "key %s writes no listed field\n", schema_keys[i].path);
        CHECK(found);
    }
}

/* Paths are unique, documented, and find themselves. */
static void test_paths(void)
{
    for (int i = 0; i < schema_nkeys; i++) {
        const SchemaKey *k = &schema_keys[i];
        CHECK(schema_find(k->path) == k);
        CHECK(schema_index(k) == i);
        CHECK(k->doc && strlen(k->doc) > 5);
        CHECK(k->def && *k->def);
        if (k->type == T_ENUM) CHECK(schema_enum_count(k) >= 2);
        else CHECK(!*k->enums);
        if (k->when[0]) {
            const SchemaKey *g = schema_governor(k);
            CHECK(g && g->type == T_ENUM);
            /* every value named in `when` is one of the governor's */
            const char *v = schema_when_values(k);
            while (*v) {
                size_t n = strcspn(v, "|");
                char *name = arena_strndup(&g_arena, v, n);
                if (schema_enum_index(g, name) < 0) fprintf(stderr, "%s: when value %s\n", k->path, name);
                CHECK(schema_enum_index(g, name) >= 0);
                v += n + (v[n] == '|');
            }
        }
    }
    CHECK(schema_find("parallel") == NULL);
    CHECK(schema_is_block("parallel"));
    CHECK(schema_is_block("offload.aio"));
    CHECK(schema_is_block("train.optimizer"));
    CHECK(!schema_is_block("parallel.tp"));
    CHECK(schema_parent(schema_find("train.optimizer.lr")) == schema_find("train.optimizer"));
    CHECK(schema_parent(schema_find("offload.aio.block_size")) == NULL);
    CHECK(schema_governor(schema_find("precision.loss_scale")) == schema_find("precision.dtype"));
    CHECK(schema_governor(schema_find("offload.optimizer.path")) == schema_find("offload.optimizer"));
    CHECK(schema_governor(schema_find("train.optimizer.lr")) == NULL);
}

/* True if a parsed default value has a kind the key's type accepts. */
static bool kind_fits(const SchemaKey *k, const Value *v)
{
    switch (k->type) {
    case T_INT: return v->kind == V_INT;
    case T_FLOAT: return v->kind == V_INT || v->kind == V_FLOAT;
    case T_BOOL: return v->kind == V_BOOL;
    case T_ENUM: return v->kind == V_IDENT && schema_enum_index(k, v->s) >= 0;
    case T_STRING: return v->kind == V_STRING;
    case T_BYTES: return v->kind == V_BYTES || v->kind == V_INT;
    case T_BANDWIDTH: return v->kind == V_BANDWIDTH;
    case T_INTLIST: return v->kind == V_LIST;
    case T_FLOAT2: return v->kind == V_TUPLE && v->n == 2;
    }
    return false;
}

/* Every default is spec text of the key's type, inside the key's range. */
static void test_defaults(void)
{
    for (int i = 0; i < schema_nkeys; i++) {
        const SchemaKey *k = &schema_keys[i];
        if (strcmp(k->def, "derived") == 0) {
            CHECK(strstr(k->doc, "derived") != NULL);     /* the rule is documented */
            continue;
        }
        if (strcmp(k->def, "required") == 0) continue;
        char *text = arena_printf(&g_arena, "x = %s", k->def);
        diag_reset();
        Item *it = spec_parse_text("<default>", text, strlen(text));
        CHECK(diag_errors == 0 && it && it->kind == I_ASSIGN);
        if (!it || it->kind != I_ASSIGN) continue;
        const Value *v = it->value;
        if (!kind_fits(k, v)) fprintf(stderr, "default of %s (%s) is not its type\n", k->path, k->def);
        CHECK(kind_fits(k, v));
        double x = v->kind == V_INT || v->kind == V_BYTES ? (double)v->i : v->f;
        if (k->min <= k->max && (v->kind == V_INT || v->kind == V_FLOAT || v->kind == V_BYTES || v->kind == V_BANDWIDTH)) {
            if (x < k->min || x > k->max) fprintf(stderr, "default of %s out of range\n", k->path);
            CHECK(x >= k->min && x <= k->max);
        }
    }
    /* DeepSpeed's defaults, as REFERENCE.md lists them */
    CHECK_STR(schema_find("zero.reduce_bucket")->def, "5e8");
    CHECK_STR(schema_find("zero.prefetch_bucket")->def, "5e7");
    CHECK_STR(schema_find("zero.param_persistence_threshold")->def, "1e5");
    CHECK_STR(schema_find("offload.optimizer.buffer_count")->def, "4");
    CHECK_STR(schema_find("offload.params.buffer_count")->def, "5");
    CHECK_STR(schema_find("offload.aio.queue_depth")->def, "8");
    CHECK_STR(schema_find("precision.loss_scale.window")->def, "1000");
}

/* Enum values line up with the C enums and the profile tables. */
static void test_enums(void)
{
    const SchemaKey *gpu = schema_find("cluster.gpu"), *net = schema_find("cluster.network");
    CHECK(schema_enum_count(gpu) == cluster_ngpus);
    for (int i = 0; i < cluster_ngpus; i++) CHECK_STR(schema_enum_name(gpu, i), cluster_gpus[i].name);
    CHECK(schema_enum_count(net) == cluster_nnets);
    for (int i = 0; i < cluster_nnets; i++) CHECK_STR(schema_enum_name(net, i), cluster_nets[i].name);
    CHECK(schema_enum_index(schema_find("model"), "llama") == FAM_LLAMA);
    CHECK(schema_enum_index(schema_find("model.activation"), "extern") == ACT_EXTERN);
    CHECK(schema_enum_index(schema_find("parallel.schedule"), "interleaved") == SCHED_INTERLEAVED);
    CHECK(schema_enum_index(schema_find("parallel.rank_order"), "tp_pp_dp") == ORDER_TP_PP_DP);
    CHECK(schema_enum_index(schema_find("parallel.tp_comm_overlap"), "wgrad") == TPO_WGRAD);
    CHECK(schema_enum_index(schema_find("parallel.tp_comm_overlap"), "full") == TPO_FULL);
    CHECK(schema_enum_index(schema_find("offload.params"), "nvme") == OFF_NVME);
    CHECK(schema_enum_index(schema_find("precision.dtype"), "fp16") == DT_FP16);
    CHECK(schema_enum_index(schema_find("precision.master_weights"), "bf16") == DT_BF16);
    CHECK(schema_enum_index(schema_find("precision.loss_scale"), "static") == LS_STATIC);
    CHECK(schema_enum_index(schema_find("checkpointing.activations"), "selective") == CKPT_SELECTIVE);
    CHECK(schema_enum_index(schema_find("train.optimizer"), "sgd") == OPT_SGD);
    CHECK(schema_enum_index(schema_find("train.lr_schedule"), "linear") == LR_LINEAR);
    CHECK(schema_enum_index(schema_find("data.format"), "text") == DATA_TEXT);
    CHECK(schema_enum_index(gpu, "nope") == -1);
    CHECK(schema_enum_name(gpu, 99) == NULL);
    /* the profiles quote REFERENCE.md */
    CHECK(cluster_gpus[GPU_A100_80GB].nvlink == 300e9 && cluster_gpus[GPU_H100_SXM_80GB].nvlink == 450e9);
    CHECK(cluster_gpus[GPU_H100_SXM_80GB].bf16_tflops == 989 && cluster_gpus[GPU_A100_40GB].bf16_tflops == 312);
    CHECK(cluster_gpus[GPU_H200_141GB].hbm_bandwidth == 4.8e12 && cluster_gpus[GPU_H200_141GB].memory == 141000000000);
    CHECK(cluster_gpus[GPU_A100_40GB].memory == 40LL << 30 && cluster_gpus[GPU_A100_40GB].hbm_bandwidth == 1.555e12);
    CHECK(cluster_nets[NET_IB400].bandwidth == 50e9 && cluster_nets[NET_ETH100].bandwidth == 12.5e9);
}

/* Did-you-mean: near misses, prefixes, and nothing for a stranger. */
static void test_suggest(void)
{
    const char *model[] = {"layers", "hidden", "heads", "kv_heads", "vocab", "seq_len"};
    CHECK_STR(schema_suggest("hiden", model, 6), "hidden");
    CHECK_STR(schema_suggest("Hidden", model, 6), "hidden");
    CHECK_STR(schema_suggest("haeds", model, 6), "heads");      /* a transposition */
    CHECK_STR(schema_suggest("seqlen", model, 6), "seq_len");
    CHECK(schema_suggest("banana", model, 6) == NULL);
    CHECK(schema_suggest("", model, 6) == NULL);
    const char *par[] = {"tp", "pp", "dp", "sequence_parallel"};
    CHECK_STR(schema_suggest("tpp", par, 4), "tp");
    const char *gpus[] = {"a100_40gb", "a100_80gb", "h100_sxm_80gb", "h200_141gb"};
    CHECK_STR(schema_suggest("h100", gpus, 4), "h100_sxm_80gb");
    char longname[200];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CHECK(schema_suggest(longname, gpus, 4) == NULL);
    const char *blocks[16];
    int n = schema_children("", blocks, 16);
    CHECK(n == 9);
    CHECK_STR(blocks[0], "model");
    CHECK_STR(blocks[8], "cluster");
    n = schema_children("offload", blocks, 16);
    CHECK(n == 3);
    CHECK_STR(blocks[2], "aio");
}

/* Parses `x = text` and returns its value (the lexer is the judge of round trips). */
static const Value *lexed(const char *text)
{
    char *t = arena_printf(&g_arena, "x = %s", text);
    diag_reset();
    Item *it = spec_parse_text("<t>", t, strlen(t));
    if (diag_errors || !it) {
        fprintf(stderr, "'%s' does not parse\n", text);
        failures++;
        return NULL;
    }
    return it->value;
}

/* The canonical spellings, and that the lexer reads them back exactly. */
static void test_formatting(void)
{
    CHECK_STR(schema_fmt_bytes(80LL << 30), "80GiB");
    CHECK_STR(schema_fmt_bytes(500000000), "500MB");
    CHECK_STR(schema_fmt_bytes(1048576), "1MiB");
    CHECK_STR(schema_fmt_bytes(2LL << 40), "2TiB");
    CHECK_STR(schema_fmt_bytes(3840000000000LL), "3840GB");
    CHECK_STR(schema_fmt_bytes(1000), "1KB");
    CHECK_STR(schema_fmt_bytes(1023), "1023");
    CHECK_STR(schema_fmt_bytes(0), "0");
    CHECK_STR(schema_fmt_bandwidth(450e9), "450GB/s");
    CHECK_STR(schema_fmt_bandwidth(12.5e9), "12.5GB/s");
    CHECK_STR(schema_fmt_bandwidth(3.35e12), "3350GB/s");
    CHECK_STR(schema_fmt_bandwidth(5e8), "0.5GB/s");
    CHECK_STR(schema_fmt_double(6e-4), "6e-4");
    CHECK_STR(schema_fmt_double(0.1), "0.1");
    CHECK_STR(schema_fmt_double(0.02), "0.02");
    CHECK_STR(schema_fmt_double(1e-8), "1e-8");
    CHECK_STR(schema_fmt_double(10000), "10000");
    CHECK_STR(schema_fmt_double(0.999), "0.999");
    CHECK_STR(schema_fmt_double(0), "0");
    CHECK_STR(schema_fmt_double(1e20), "1e20");
    CHECK_STR(schema_fmt_range(schema_find("parallel.tp")), "[1, 65536]");
    CHECK_STR(schema_fmt_range(schema_find("offload.aio.block_size")), "[4KiB, 1GiB]");
    CHECK_STR(schema_fmt_range(schema_find("data.train")), "");
    /* doubles of every magnitude: the printed text lexes to the same bits */
    unsigned seed = 12345;
    for (int i = 0; i < 2000; i++) {
        seed = seed * 1103515245u + 12345u;
        double mant = (double)(seed >> 8) / (double)(1u << 24);
        seed = seed * 1103515245u + 12345u;
        int e = (int)(seed >> 16) % 36 - 20;
        double v = ldexp(mant, 0) * pow(10, e);
        const Value *lv = lexed(schema_fmt_double(v));
        if (!lv) continue;
        double back = lv->kind == V_INT ? (double)lv->i : lv->f;
        if (back != v) fprintf(stderr, "%.17g printed as %s reads back as %.17g\n", v, schema_fmt_double(v), back);
        CHECK(back == v);
        double bw = floor(v * 1e6);
        if (bw >= 1 && bw < 9e18) {
            const Value *bv = lexed(schema_fmt_bandwidth(bw));
            CHECK(bv && bv->kind == V_BANDWIDTH && bv->f == bw);
        }
    }
    int64_t sizes[] = {1, 4096, 1000, 1536, 141000000000LL, 17LL << 40, 123456789};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const Value *v = lexed(schema_fmt_bytes(sizes[i]));
        CHECK(v && (v->kind == V_BYTES || v->kind == V_INT) && v->i == sizes[i]);
    }
}

/* The reference names every key and every profile. */
static void test_reference(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    schema_write_reference(f);
    fclose(f);
    for (int i = 0; i < schema_nkeys; i++) {
        char *needle = arena_printf(&g_arena, "| `%s` |", schema_keys[i].path);
        if (!strstr(buf, needle)) fprintf(stderr, "reference lacks %s\n", schema_keys[i].path);
        CHECK(strstr(buf, needle) != NULL);
    }
    for (int i = 0; i < cluster_ngpus; i++) CHECK(strstr(buf, cluster_gpus[i].name) != NULL);
    CHECK(strstr(buf, "| `h100_sxm_80gb` | 80GiB | 989 | 67 | 3350GB/s | 450GB/s | 64GB/s |") != NULL);
    CHECK(strstr(buf, "`offload.optimizer` is `cpu` or `nvme`") != NULL);
    CHECK(strstr(buf, "`precision.dtype` is `fp16`") != NULL);
    free(buf);
}

int main(void)
{
    diag_stream = fopen("/dev/null", "w");
    test_every_field_has_one_key();
    test_paths();
    test_defaults();
    test_enums();
    test_suggest();
    test_formatting();
    test_reference();
    if (failures) fprintf(stderr, "test_schema: %d failures\n", failures);
    else printf("test_schema: ok\n");
    return failures != 0;
}
