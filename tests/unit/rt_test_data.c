/* rt_test_data.c — the data loader (runtime/core/data.c) on generated files:
 *  - every layout (dp, micro-batch, microbatches) gets the same global batch,
 *    and it is the documented sequence of windows (file order, windows of
 *    seq_len + 1 every seq_len tokens, wrap-around after N sequences);
 *  - uint16 and uint32 llm.c shards, a glob of shards, raw text as bytes;
 *  - the holdout split and the deterministic validation batches;
 *  - every bad input gives its code and a message naming the file; with
 *    per-step checking every dp rank fails on the same step;
 *  - a loader over tokens in memory (--sample's window) reads them as they
 *    are at each batch. */
#include "data.h"
#include "check.h"

#include <stdint.h>
#include <unistd.h>

static char tmp[64];

/* A path in the test's temporary directory. */
static const char *path(const char *name)
{
    static char buf[8][256];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, 256, "%s/%s", tmp, name);
    return p;
}

/* Writes an llm.c shard: header (magic, version, declared count) then n tokens of width bytes. */
static void write_shard(const char *p, int32_t magic, int32_t version, int32_t declared,
                        const uint32_t *tok, int64_t n, int width)
{
    FILE *f = fopen(p, "wb");
    int32_t h[256] = {magic, version, declared};
    fwrite(h, sizeof h, 1, f);
    for (int64_t i = 0; i < n; i++) {
        uint16_t t16 = (uint16_t)tok[i];
        if (width == 2) fwrite(&t16, 2, 1, f);
        else fwrite(&tok[i], 4, 1, f);
    }
    fclose(f);
}

/* The token at position i of generated file `file` (a pattern easy to recognise). */
static uint32_t gen(int file, int64_t i) { return (uint32_t)((file * 1000 + i * 7) % 997); }

/* Opens a loader or fails the test. */
static data_loader *open_ok(const data_opts *o)
{
    char err[512] = "";
    data_loader *d = NULL;
    int rc = data_open(&d, o, err, sizeof err);
    if (rc) fprintf(stderr, "data_open: %s\n", err);
    CHECK_EQ(rc, DATA_OK);
    return d;
}

/* Two uint16 shards, T = 8: windows, layouts, wrap-around. */
static void test_layouts(void)
{
    uint32_t a[100], b[70];
    for (int i = 0; i < 100; i++) a[i] = gen(0, i);
    for (int i = 0; i < 70; i++) b[i] = gen(1, i);
    write_shard(path("train_000.bin"), DATA_LLMC_MAGIC16, 1, 100, a, 100, 2);
    write_shard(path("train_001.bin"), DATA_LLMC_MAGIC16, 1, 70, b, 70, 2);
    enum { T = 8, G = 8 };
    data_opts o = {path("train_*.bin"), DATA_FMT_LLMC, T, 1000, G, DATA_PART_ALL, 0, DATA_CHECK_OPEN};
    data_loader *d = open_ok(&o);
    if (!d) return;
    CHECK_EQ(data_num_files(d), 2);
    CHECK_EQ(data_num_sequences(d), 99 / 8 + 69 / 8);      /* 12 + 8 windows */
    CHECK_EQ(data_num_tokens(d), 170);
    CHECK(strstr(data_file_name(d, 0), "train_000.bin") != NULL);
    static int32_t ref_x[G * T], ref_y[G * T], x[G * T], y[G * T];
    for (int64_t step = 0; step < 5; step++) {
        /* the reference: dp 1, one microbatch of G */
        CHECK_EQ(data_batch(d, step, 0, 1, 0, G, ref_x, ref_y), DATA_OK);
        for (int j = 0; j < G; j++) {
            int64_t w = (step * G + j) % 20;                    /* wraps after 20 sequences */
            int file = w < 12 ? 0 : 1;
            int64_t start = (w < 12 ? w : w - 12) * T;
            for (int t = 0; t < T; t++) {
                CHECK_EQ(ref_x[j * T + t], gen(file, start + t));
                CHECK_EQ(ref_y[j * T + t], gen(file, start + t + 1));
            }
        }
        /* every layout: rows in (dp rank, microbatch, row) order are the reference's */
        int64_t layouts[][2] = {{1, 4}, {2, 4}, {2, 2}, {4, 2}, {4, 1}, {8, 1}, {1, 1}, {2, 1}};
        for (size_t l = 0; l < sizeof layouts / sizeof *layouts; l++) {
            int64_t dp = layouts[l][0], B = layouts[l][1], M = G / (dp * B), row = 0;
            for (int64_t r = 0; r < dp; r++)
                for (int64_t mb = 0; mb < M; mb++, row += B)
                    CHECK_EQ(data_batch(d, step, r, dp, mb, B, x + row * T, y + row * T), DATA_OK);
            CHECK(memcmp(x, ref_x, sizeof x) == 0);
            CHECK(memcmp(y, ref_y, sizeof y) == 0);
        }
    }
    CHECK_EQ(data_window(d, 20), 0);
    CHECK_EQ(data_window(d, 47), 7);
    /* a microbatch that does not fit the global batch is the caller's bug */
    CHECK_EQ(data_batch(d, 0, 0, 3, 0, 1, x, y), DATA_E_ARGS);
    CHECK_EQ(data_batch(d, 0, 2, 2, 0, 4, x, y), DATA_E_ARGS);
    CHECK_EQ(data_batch(d, 0, 0, 2, 1, 4, x, y), DATA_E_ARGS);
    data_close(d);
}

/* uint32 tokens (magic 20240801, version 7) above 65535. */
static void test_uint32(void)
{
    uint32_t t[41];
    for (int i = 0; i < 41; i++) t[i] = 70000u + (uint32_t)i * 1000u;
    write_shard(path("big.bin"), DATA_LLMC_MAGIC32, 7, 41, t, 41, 4);
    data_opts o = {path("big.bin"), DATA_FMT_LLMC, 10, 200000, 2, DATA_PART_ALL, 0, DATA_CHECK_OPEN};
    data_loader *d = open_ok(&o);
    if (!d) return;
    CHECK_EQ(data_num_sequences(d), 4);
    int32_t x[20], y[20];
    CHECK_EQ(data_batch(d, 1, 0, 1, 0, 2, x, y), DATA_OK);     /* windows 2 and 3 */
    CHECK_EQ(x[0], 70000 + 20 * 1000);
    CHECK_EQ(y[19], 70000 + 40 * 1000);
    data_close(d);
}

/* Raw text: bytes are tokens; the holdout split and validation batches. */
static void test_text_holdout(void)
{
    const char *text = "First Citizen:\nBefore we proceed any further, hear me speak.\n"
                       "All:\nSpeak, speak.\n";         /* 79 bytes */
    FILE *f = fopen(path("input.txt"), "wb");
    fputs(text, f);
    fclose(f);
    int64_t n = (int64_t)strlen(text);
    data_opts o = {path("input.txt"), DATA_FMT_TEXT, 4, 256, 2, DATA_PART_ALL, 0, DATA_CHECK_OPEN};
    data_loader *all = open_ok(&o);
    if (!all) return;
    CHECK_EQ(data_num_sequences(all), (n - 1) / 4);
    int32_t x[8], y[8];
    CHECK_EQ(data_batch(all, 0, 1, 2, 0, 1, x, y), DATA_OK);   /* dp rank 1: window 1 */
    CHECK_EQ(x[0], text[4]);
    CHECK_EQ(y[3], text[8]);
    int64_t N = data_num_sequences(all);
    o.part = DATA_PART_TRAIN, o.holdout = 0.1;
    data_loader *tr = open_ok(&o);
    o.part = DATA_PART_VAL;
    data_loader *va = open_ok(&o);
    if (tr && va) {
        int64_t nv = (int64_t)(N * 0.1) > 0 ? (int64_t)(N * 0.1) : 1;
        CHECK_EQ(data_num_sequences(tr), N - nv);
        CHECK_EQ(data_num_sequences(va), nv);
        /* validation batch 0 starts at the first held-out window, the same every time */
        CHECK_EQ(data_batch(va, 0, 0, 1, 0, 2, x, y), DATA_OK);
        CHECK_EQ(x[0], text[(N - nv) * 4]);
        int32_t x2[8], y2[8];
        CHECK_EQ(data_batch(va, 0, 0, 1, 0, 2, x2, y2), DATA_OK);
        CHECK(memcmp(x, x2, sizeof x) == 0);
        /* the training part never reads a held-out window */
        for (int64_t g = 0; g < 3 * N; g++) CHECK(data_window(tr, g) < N - nv);
    }
    data_close(tr);
    data_close(va);
    data_close(all);
    /* a bad holdout and a split of a single window */
    o.holdout = 1.5;
    char err[512];
    data_loader *d = NULL;
    CHECK_EQ(data_open(&d, &o, err, sizeof err), DATA_E_ARGS);
    o.holdout = 0.1, o.seq_len = 60;
    CHECK_EQ(data_open(&d, &o, err, sizeof err), DATA_E_SHORT);
    CHECK_HAS(err, "too few to hold out");
    CHECK(d == NULL);
}

/* Opens pattern and expects code with a message containing both strings. */
static void expect_error(const char *pattern, int format, int code, const char *has1, const char *has2)
{
    data_opts o = {pattern, format, 8, 1000, 2, DATA_PART_ALL, 0, DATA_CHECK_OPEN};
    char err[512] = "";
    data_loader *d = NULL;
    CHECK_EQ(data_open(&d, &o, err, sizeof err), code);
    CHECK(d == NULL);
    CHECK_HAS(err, has1);
    if (has2) CHECK_HAS(err, has2);
}

/* Missing, empty, truncated, wrong magic or version, bad token, too short. */
static void test_errors(void)
{
    uint32_t t[100];
    for (int i = 0; i < 100; i++) t[i] = gen(2, i);
    expect_error(path("nope.bin"), DATA_FMT_LLMC, DATA_E_MISSING, "nope.bin", "No such file");
    expect_error(path("nope_*.bin"), DATA_FMT_LLMC, DATA_E_MISSING, "nope_*.bin", "no file matches");
    fclose(fopen(path("empty.bin"), "wb"));
    expect_error(path("empty.bin"), DATA_FMT_LLMC, DATA_E_EMPTY, "empty.bin", "empty file");
    expect_error(path("empty.bin"), DATA_FMT_TEXT, DATA_E_EMPTY, "empty.bin", "empty file");
    write_shard(path("trunc.bin"), DATA_LLMC_MAGIC16, 1, 100, t, 50, 2);
    expect_error(path("trunc.bin"), DATA_FMT_LLMC, DATA_E_TRUNCATED, "trunc.bin", "truncated");
    FILE *f = fopen(path("stub.bin"), "wb");
    fwrite(t, 4, 10, f);
    fclose(f);
    expect_error(path("stub.bin"), DATA_FMT_LLMC, DATA_E_TRUNCATED, "stub.bin", "header");
    write_shard(path("magic.bin"), 12345, 1, 100, t, 100, 2);
    expect_error(path("magic.bin"), DATA_FMT_LLMC, DATA_E_MAGIC, "magic.bin", "20240520");
    write_shard(path("version.bin"), DATA_LLMC_MAGIC16, 7, 100, t, 100, 2);
    expect_error(path("version.bin"), DATA_FMT_LLMC, DATA_E_MAGIC, "version.bin", "version 7");
    write_shard(path("short.bin"), DATA_LLMC_MAGIC16, 1, 5, t, 5, 2);
    expect_error(path("short.bin"), DATA_FMT_LLMC, DATA_E_SHORT, "short.bin", "too short");
    t[61] = 1000;           /* = vocab: out of range */
    write_shard(path("token.bin"), DATA_LLMC_MAGIC16, 1, 100, t, 100, 2);
    expect_error(path("token.bin"), DATA_FMT_LLMC, DATA_E_TOKEN, "token.bin", "token 1000 at position 61");
    expect_error(tmp, DATA_FMT_LLMC, DATA_E_MISSING, tmp, "not a regular file");

    /* per-step checking: open succeeds; the step holding position 61 fails on every dp rank */
    data_opts o = {path("token.bin"), DATA_FMT_LLMC, 8, 1000, 2, DATA_PART_ALL, 0, DATA_CHECK_STEP};
    data_loader *d = open_ok(&o);
    if (!d) return;
    int32_t x[16], y[16];
    CHECK_EQ(data_batch(d, 0, 0, 2, 0, 1, x, y), DATA_OK);     /* windows 0, 1: tokens 0..16 */
    CHECK_EQ(data_check_step(d, 2), DATA_OK);                  /* windows 4, 5: tokens 32..48 */
    /* step 3 = windows 6 (tokens 48..56) and 7 (56..64): rank 1 reads window 7, which holds it */
    CHECK_EQ(data_batch(d, 3, 1, 2, 0, 1, x, y), DATA_E_TOKEN);
    CHECK_HAS(data_error(d), "token.bin");
    CHECK_HAS(data_error(d), "position 61");
    CHECK_EQ(data_check_step(d, 3), DATA_E_TOKEN);
    /* step 4 = windows 8, 9 (tokens 64..80) are clean */
    CHECK_EQ(data_batch(d, 4, 0, 2, 0, 1, x, y), DATA_OK);
    data_close(d);
    /* a rank whose own rows are clean still fails with its step: position 57 is in window 7 only */
    t[61] = gen(2, 61), t[57] = 5000;
    write_shard(path("token2.bin"), DATA_LLMC_MAGIC16, 1, 100, t, 100, 2);
    o.pattern = path("token2.bin");
    d = open_ok(&o);
    if (!d) return;
    CHECK_EQ(data_batch(d, 3, 0, 2, 0, 1, x, y), DATA_E_TOKEN);   /* rank 0 reads window 6 */
    CHECK_HAS(data_error(d), "token 5000");
    data_close(d);
}

/* Removes the temporary directory's files. */
/* data_open_tokens: one window of T + 1 tokens, borrowed: every row of every
 * dp rank reads it, as it is when data_batch runs. */
static void test_tokens(void)
{
    enum { T = 4 };
    int32_t win[T + 1] = {7, 8, 9, 10, 11}, tok[2 * T], tgt[2 * T];
    data_opts o = {.format = DATA_FMT_LLMC, .seq_len = T, .vocab = 300, .global_batch = 4, .part = DATA_PART_ALL};
    data_loader *d;
    char err[256];
    CHECK_EQ(data_open_tokens(&d, win, T + 1, "window", &o, err, sizeof err), DATA_OK);
    CHECK_EQ(data_num_sequences(d), 1);
    CHECK_EQ(data_batch(d, 0, 1, 2, 0, 2, tok, tgt), DATA_OK);
    CHECK(tok[0] == 7 && tok[3] == 10 && tgt[3] == 11 && tok[T] == 7 && tgt[2 * T - 1] == 11);
    win[4] = 299;
    CHECK_EQ(data_batch(d, 0, 0, 2, 0, 2, tok, tgt), DATA_OK);
    CHECK_EQ(tgt[T - 1], 299);
    data_close(d);
    win[0] = 300;
    CHECK_EQ(data_open_tokens(&d, win, T + 1, "window", &o, err, sizeof err), DATA_E_TOKEN);
    CHECK_HAS(err, "window: token 300 at position 0 is outside the model's vocabulary of 300");
    CHECK_EQ(data_open_tokens(&d, win, T, "window", &o, err, sizeof err), DATA_E_ARGS);
}

static void cleanup(void)
{
    const char *names[] = {"train_000.bin", "train_001.bin", "big.bin", "input.txt", "empty.bin",
                           "trunc.bin", "stub.bin", "magic.bin", "version.bin", "short.bin",
                           "token.bin", "token2.bin"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) unlink(path(names[i]));
    rmdir(tmp);
}

int main(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/rt_test_data.XXXXXX");
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    test_layouts();
    test_uint32();
    test_text_holdout();
    test_errors();
    test_tokens();
    cleanup();
    if (!failures) printf("rt_test_data: ok\n");
    return failures != 0;
}
