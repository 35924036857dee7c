/* fuzz_ckpt.c — libFuzzer target over the checkpoint reader: the strict
 * safetensors parser (runtime/core/safetensors.c) and shardc's checkpoints
 * on it (runtime/core/ckpt.c: index.json, the rank files, checksums).
 *
 * The first byte of an input chooses what the rest is:
 *   0  a safetensors file, parsed from memory: every tensor found by name and
 *      read whole;
 *   1  the index.json of a checkpoint whose rank file is a good one;
 *   2  the rank file of a checkpoint whose index.json is a good one;
 * for 1 and 2 the checkpoint is opened, verified (every checksum, every
 * state whole) and checked against the model.  Nothing may crash, leak or
 * hang, and every refusal has a message.  The good checkpoint (two tensors,
 * fp32 and bf16 pieces, moments) is written at start-up with a fixed token,
 * so the committed seeds (tests/fuzz/corpus/ckpt/) match it:
 * FUZZ_CKPT_SEEDS=DIR writes them there and exits.  Build and run with
 * scripts/run-fuzz.
 */
#include "ckpt.h"
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { TOKEN = 0x5eed5eed };
static char dir_ix[64], dir_rank[64];       /* the checkpoint whose index / rank file is fuzzed */
static char path_ix[96], path_rank[96];

/* The good checkpoint's tensors: a [4, 3] matrix as fp32, a [5] vector as bf16. */
static const ckpt_tensor_desc model[] = {{"w", 4, 3}, {"b", 5, 0}};

/* Writes the good checkpoint (step 1) into dir. */
static void write_good(const char *dir)
{
    static float w[12], m[12];
    static uint16_t b[5];
    for (int i = 0; i < 12; i++) w[i] = 0.25f * (float)i - 1.0f, m[i] = 1e-3f * (float)i;
    for (int i = 0; i < 5; i++) b[i] = ckpt_bf16_from_f32(0.5f * (float)i);
    ckpt_piece p[] = {
        {CKPT_PARAM, "w", 4, 3, 0, 4, 0, 3, 0, 0, CKPT_F32, w},
        {CKPT_ADAM_M, "w", 4, 3, 0, 4, 0, 3, 0, 6, CKPT_F32, m},
        {CKPT_ADAM_M, "w", 4, 3, 0, 4, 0, 3, 6, 12, CKPT_F32, m + 6},
        {CKPT_PARAM, "b", 5, 0, 0, 5, 0, 1, 0, 0, CKPT_BF16, b},
    };
    ckpt_kv layout[] = {{"tp", 1}, {"pp", 1}, {"dp", 1}, {"zero", 0}, {"world", 1}};
    ckpt_kv state[] = {{"step", 1}, {"seed", 7}};
    ckpt_meta meta = {"fuzz.tspec", "gpt", "model gpt { }\n", layout, 5, state, 2};
    char err[512];
    if (ckpt_save_begin(dir, 1, TOKEN, err, sizeof err) || ckpt_save_rank(dir, 1, TOKEN, 0, meta.model, p, 4, err,
                                                                         sizeof err) ||
        ckpt_save_commit(dir, 1, TOKEN, 1, &meta, err, sizeof err)) {
        fprintf(stderr, "fuzz_ckpt: cannot write the good checkpoint: %s\n", err);
        abort();
    }
}

/* The whole content of path (malloc'ed), its length in *n. */
static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) abort();
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(*n + 1);
    if (!b || fread(b, 1, *n, f) != *n) abort();
    fclose(f);
    return b;
}

/* Writes a seed: the mode byte, then path's content. */
static void seed(const char *dir, const char *name, int mode, const char *path)
{
    size_t n;
    char *b = slurp(path, &n), out[512];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    FILE *f = fopen(out, "wb");
    if (!f || fputc(mode, f) == EOF || fwrite(b, 1, n, f) != n) abort();
    fclose(f);
    free(b);
}

/* Writes n bytes to path. */
static void put(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

/* Removes the two checkpoints at exit. */
static void cleanup(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", dir_ix, dir_rank);
    if (system(cmd) != 0) fprintf(stderr, "fuzz_ckpt: could not remove %s, %s\n", dir_ix, dir_rank);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir_ix, sizeof dir_ix, "%s/fuzz-ckpt-%d-ix", tmp, (int)getpid());
    snprintf(dir_rank, sizeof dir_rank, "%s/fuzz-ckpt-%d-rank", tmp, (int)getpid());
    atexit(cleanup);
    write_good(dir_ix);
    write_good(dir_rank);
    snprintf(path_ix, sizeof path_ix, "%s/step-1/index.json", dir_ix);
    snprintf(path_rank, sizeof path_rank, "%s/step-1/rank-00000.safetensors", dir_rank);
    const char *seeds = getenv("FUZZ_CKPT_SEEDS");
    if (seeds) {
        seed(seeds, "safetensors", 0, path_rank);
        seed(seeds, "index", 1, path_ix);
        seed(seeds, "rank", 2, path_rank);
        exit(0);
    }
    return 0;
}

/* Parses a safetensors file from memory; every tensor found and read. */
static void fuzz_safetensors(const uint8_t *p, size_t n)
{
    st_file *f;
    char err[512] = "";
    if (st_open_mem(&f, p, n, "fuzz.safetensors", err, sizeof err)) {
        if (!*err) abort();                 /* refused without saying why */
        return;
    }
    for (int i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_tensor_at(f, i);
        if (st_find(f, t->name) != t) abort();
        uint64_t bytes = t->end - t->begin;
        char *buf = malloc(bytes + 1);
        if (!buf || st_read(f, t, 0, bytes, buf, err, sizeof err) != 0) abort();
        free(buf);
    }
    st_meta(f, "format");
    st_close(f);
}

/* Opens, verifies and checks the checkpoint in dir. */
static void fuzz_checkpoint(const char *dir)
{
    ckpt_reader *r;
    char err[2048] = "";
    if (ckpt_open(&r, dir, err, sizeof err) != CKPT_OK) {
        if (!*err) abort();
        return;
    }
    ckpt_verify_stats st;
    if (ckpt_verify(r, &st, err, sizeof err) != CKPT_OK && !*err) abort();
    *err = 0;
    if (ckpt_check_model(r, model, 2, err, sizeof err) != CKPT_OK && !*err) abort();
    ckpt_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    switch (data[0] % 3) {
    case 0: fuzz_safetensors(data + 1, size - 1); break;
    case 1: put(path_ix, data + 1, size - 1), fuzz_checkpoint(dir_ix); break;
    case 2: put(path_rank, data + 1, size - 1), fuzz_checkpoint(dir_rank); break;
    }
    return 0;
}
