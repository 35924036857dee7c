/* rt_test_export.c — `shardc export` (compiler/export.c) end to end:
 *  - a tiny GPT checkpoint written by a 2-rank layout (tp 2: column- and
 *    row-parallel shards, a vocabulary padded with garbage rows) and a tiny
 *    Llama one (grouped-query k/v, untied head) are exported in fp32 and bf16;
 *  - tests/unit/rt_export_check.py parses the files by hand (json + numpy:
 *    no safetensors package), checks names, shapes, values, the bf16 rounding
 *    against PyTorch, and the Conv1D convention with PyTorch matmuls;
 *  - bad arguments exit 2, a missing checkpoint exits 1 with a message, and
 *    no output file is left behind.
 * Exit 77 (skipped) when /usr/bin/python3 lacks numpy or torch. */
#include "shardc.h"
#include "ckpt.h"
#include "check.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

/* The value both sides compute for element (r, c) of a tensor (exact in fp32). */
static float val(const char *name, int64_t r, int64_t c)
{
    int h = 0;
    for (const char *p = name; *p; p++) h += (unsigned char)*p;
    return (float)((h % 97) * 0.5 + (double)r * 0.0625 + (double)c / 256.0 - 10.0);
}

typedef struct TT { const char *name; int64_t rows, cols; int split; } TT;   /* split: 0 none, 1 rows, 2 cols */

static TT tensors[64];
static int ntensors;

/* Appends one tensor to the model being built. */
static void add(const char *name, int64_t rows, int64_t cols, int split)
{
    tensors[ntensors++] = (TT){arena_strdup(&g_arena, name), rows, cols, split};
}

/* The specs of the two tiny models, recorded in their checkpoints (the
 * directory form's config.json is written from them). */
#define GPT_SPEC "model gpt { layers = 2  hidden = 8  heads = 2  vocab = 50  seq_len = 4  ffn_hidden = 32 }\n"
#define LLAMA_SPEC "model llama { layers = 1  hidden = 8  heads = 4  kv_heads = 2  vocab = 50  seq_len = 4  " \
                   "ffn_hidden = 16 }\n"

/* The tiny GPT (as compiler/model.c names it): l 2, h 8, V 50, s 4, ffn 32, tied. */
static void gpt_model(void)
{
    ntensors = 0;
    add("wte.weight", 50, 8, 1);
    add("wpe.weight", 4, 8, 0);
    for (int L = 0; L < 2; L++) {
        char n[64];
#define T(suffix, r, c, s) (snprintf(n, sizeof n, "h.%d." suffix, L), add(n, r, c, s))
        T("ln_1.weight", 8, 0, 0), T("ln_1.bias", 8, 0, 0);
        T("attn.c_attn.weight", 24, 8, 1), T("attn.c_attn.bias", 24, 0, 1);
        T("attn.c_proj.weight", 8, 8, 2), T("attn.c_proj.bias", 8, 0, 0);
        T("ln_2.weight", 8, 0, 0), T("ln_2.bias", 8, 0, 0);
        T("mlp.c_fc.weight", 32, 8, 1), T("mlp.c_fc.bias", 32, 0, 1);
        T("mlp.c_proj.weight", 8, 32, 2), T("mlp.c_proj.bias", 8, 0, 0);
#undef T
    }
    add("ln_f.weight", 8, 0, 0);
    add("ln_f.bias", 8, 0, 0);
}

/* The tiny Llama: l 1, h 8, 4 heads, 2 kv heads, V 50, ffn 16, untied. */
static void llama_model(void)
{
    ntensors = 0;
    add("model.embed_tokens.weight", 50, 8, 1);
    add("model.layers.0.input_layernorm.weight", 8, 0, 0);
    add("model.layers.0.self_attn.q_proj.weight", 8, 8, 1);
    add("model.layers.0.self_attn.k_proj.weight", 4, 8, 1);
    add("model.layers.0.self_attn.v_proj.weight", 4, 8, 1);
    add("model.layers.0.self_attn.o_proj.weight", 8, 8, 2);
    add("model.layers.0.post_attention_layernorm.weight", 8, 0, 0);
    add("model.layers.0.mlp.gate_proj.weight", 16, 8, 1);
    add("model.layers.0.mlp.up_proj.weight", 16, 8, 1);
    add("model.layers.0.mlp.down_proj.weight", 8, 16, 2);
    add("model.norm.weight", 8, 0, 0);
    add("lm_head.weight", 50, 8, 1);
}

/* Saves the model as 2 tp ranks would: each its shard (vocabulary padded to
 * 64 rows, the padding garbage), replicated tensors from both, plus moments. */
static int save_tp2(const char *dir, const char *family, const char *spec)
{
    char err[512];
    uint64_t tok = ckpt_token();
    int rc = ckpt_save_begin(dir, 10, tok, err, sizeof err);
    for (int t = 0; t < 2 && rc == CKPT_OK; t++) {
        ckpt_piece p[128];
        float *bufs[128];
        int n = 0;
        for (int i = 0; i < ntensors; i++) {
            const TT *m = &tensors[i];
            int64_t rows_mem = m->rows == 50 ? 64 : m->rows, cols = m->cols ? m->cols : 1;
            int64_t r0 = 0, r1 = rows_mem, c0 = 0, c1 = cols;
            if (m->split == 1) r0 = t * rows_mem / 2, r1 = (t + 1) * rows_mem / 2;
            if (m->split == 2) c0 = t * cols / 2, c1 = (t + 1) * cols / 2;
            float *b = malloc((size_t)((r1 - r0) * (c1 - c0)) * sizeof *b);
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++)
                    b[(r - r0) * (c1 - c0) + (c - c0)] = r < m->rows ? val(m->name, r, c) : 777.0f;
            bufs[n] = b;
            p[n++] = (ckpt_piece){CKPT_PARAM, m->name, m->rows, m->cols, r0, r1, c0, c1, 0, 0, CKPT_F32, b};
            bufs[n] = NULL;         /* a moment the export must ignore */
            p[n++] = (ckpt_piece){CKPT_ADAM_M, m->name, m->rows, m->cols, r0, r1, c0, c1, 0, 0, CKPT_F32, b};
        }
        rc = ckpt_save_rank(dir, 10, tok, t, "tiny.tspec", p, n, err, sizeof err);
        for (int i = 0; i < n; i++) free(bufs[i]);
    }
    ckpt_kv layout[] = {{"tp", 2}, {"dp", 1}, {"pp", 1}};
    ckpt_meta meta = {"tiny.tspec", family, spec, layout, 3, NULL, 0};
    if (rc == CKPT_OK) rc = ckpt_save_commit(dir, 10, tok, 2, &meta, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    return rc;
}

/* Runs export_main on a NULL-terminated argument list. */
static int export(const char **args)
{
    int n = 0;
    while (args[n]) n++;
    return export_main(n, (char **)args);
}
#define EXPORT(...) export((const char *[]){__VA_ARGS__, NULL})

/* A path in the test directory. */
static const char *at(const char *dir, const char *name)
{
    return arena_printf(&g_arena, "%s/%s", dir, name);
}

/* Whether a directory holds an entry whose name contains s. */
static bool has_entry(const char *dir, const char *s)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    bool found = false;
    while (d && (e = readdir(d))) found |= strstr(e->d_name, s) != NULL;
    if (d) closedir(d);
    return found;
}

/* Removes the test directory (files and step directories two levels down). */
static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        const char *p = at(dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) rm_tree(p);
        else unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

int main(void)
{
    char dir[] = "/tmp/rt_test_export.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char *msgs = NULL;
    size_t msglen = 0;
    diag_stream = open_memstream(&msgs, &msglen);

    const char *gdir = at(dir, "gpt"), *ldir = at(dir, "llama");
    gpt_model();
    CHECK_EQ(save_tp2(gdir, "gpt", GPT_SPEC), CKPT_OK);
    CHECK_EQ(EXPORT(gdir, "-o", at(dir, "gpt.safetensors")), EXIT_OK);
    CHECK_EQ(EXPORT(at(gdir, "step-10"), "-o", at(dir, "gpt-bf16.safetensors"), "--dtype", "bf16"), EXIT_OK);
    llama_model();
    CHECK_EQ(save_tp2(ldir, "llama", LLAMA_SPEC), CKPT_OK);
    CHECK_EQ(EXPORT(ldir, "-o", at(dir, "llama.safetensors")), EXIT_OK);
    CHECK_EQ(EXPORT(ldir, "--dtype", "bf16", "-o", at(dir, "llama-bf16.safetensors")), EXIT_OK);
    CHECK(!has_entry(dir, ".tmp-"));

    /* the directory form: shards above the limit (transformers' split), one file below it */
    CHECK_EQ(EXPORT(gdir, "-o", at(dir, "gpt-dir"), "--max-shard-size", "2KiB"), EXIT_OK);
    CHECK(has_entry(at(dir, "gpt-dir"), "config.json") && has_entry(at(dir, "gpt-dir"), "generation_config.json"));
    CHECK(has_entry(at(dir, "gpt-dir"), "model.safetensors.index.json"));
    CHECK(has_entry(at(dir, "gpt-dir"), "model-00001-of-") && !has_entry(at(dir, "gpt-dir"), ".tmp-"));
    CHECK_EQ(EXPORT(ldir, "-o", at(dir, "llama-dir"), "--dtype", "bf16"), EXIT_OK);
    CHECK(has_entry(at(dir, "llama-dir"), "config.json") && has_entry(at(dir, "llama-dir"), "model.safetensors"));
    CHECK(!has_entry(at(dir, "llama-dir"), "index.json"));
    /* a directory that is there already, a checkpoint without a spec: nothing written */
    CHECK_EQ(EXPORT(gdir, "-o", at(dir, "gpt-dir")), EXIT_USER);
    gpt_model();
    CHECK_EQ(save_tp2(at(dir, "nospec"), "gpt", ""), CKPT_OK);
    CHECK_EQ(EXPORT(at(dir, "nospec"), "-o", at(dir, "nospec-dir")), EXIT_USER);
    CHECK(!has_entry(dir, "nospec-dir"));
    CHECK_EQ(EXPORT(gdir, "-o", at(dir, "x-dir"), "--max-shard-size", "5XB"), EXIT_USAGE);
    CHECK_EQ(EXPORT(gdir, "-o", at(dir, "x.safetensors"), "--max-shard-size", "5GB"), EXIT_USAGE);

    /* usage and user errors; nothing written for them */
    CHECK_EQ(EXPORT(gdir), EXIT_USAGE);
    CHECK_EQ(EXPORT("-o", at(dir, "x.safetensors")), EXIT_USAGE);
    CHECK_EQ(EXPORT(gdir, "-o", at(dir, "x.safetensors"), "--dtype", "fp8"), EXIT_USAGE);
    CHECK_EQ(EXPORT(gdir, "-o", at(dir, "x.safetensors"), "--bogus"), EXIT_USAGE);
    CHECK_EQ(EXPORT(at(dir, "missing"), "-o", at(dir, "x.safetensors")), EXIT_USER);
    CHECK_EQ(EXPORT(gdir, "-o", at(dir, "no/such/dir/x.safetensors")), EXIT_USER);
    fflush(diag_stream);
    CHECK_HAS(msgs, "shardc: export: -o OUT_DIR (or -o FILE.safetensors) is required\n\nusage: shardc export CKPT_DIR -o");
    CHECK_HAS(msgs, "gpt-dir: the directory exists and is not empty");
    CHECK_HAS(msgs, "the checkpoint's spec does not resolve, so config.json cannot be written");
    CHECK_HAS(msgs, "--max-shard-size takes a size such as 5GB");
    CHECK_HAS(msgs, "--max-shard-size applies to a directory");
    CHECK_HAS(msgs, "shardc: export: which checkpoint directory?");
    CHECK_HAS(msgs, "shardc: export: --dtype is fp32 or bf16");
    CHECK_HAS(msgs, "shardc: export: unexpected argument '--bogus'");
    CHECK_HAS(msgs, "missing: no checkpoint");
    CHECK_HAS(msgs, "hint: give the --ckpt-dir of a training run");
    CHECK_HAS(msgs, "x.safetensors: cannot create");
    CHECK(!has_entry(dir, "x.safetensors"));

    /* the files, checked by an implementation not written here */
    int rc = failures ? 1 : 0;
    if (!failures) {
        const char *cmd = arena_printf(&g_arena, "/usr/bin/python3 %s/tests/unit/rt_export_check.py %s",
                                       SHARDC_SOURCE_DIR, dir);
        int st = system(cmd);
        rc = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
        if (rc == 77) printf("rt_test_export: skipped (no numpy or torch in /usr/bin/python3)\n");
        else if (rc) failures++;
    }
    fclose(diag_stream);
    diag_stream = NULL;
    free(msgs);
    rm_tree(dir);
    arena_free(&g_arena);
    if (!failures && rc == 0) printf("rt_test_export: ok\n");
    return failures ? 1 : rc;
}
