/* rt_test_ckpt.c — checkpoints (runtime/core/ckpt.c):
 *  - a checkpoint written under layout A (tp 2 · dp 2: parameters as tp
 *    shards, Adam moments as ZeRO flat shards cutting tensors anywhere, a
 *    padded vocabulary, replicated norms) reads back under any other layout:
 *    every tensor whole, and random rectangles and flat ranges, element for
 *    element; padding reads as zero;
 *  - index.json holds step, layout, state and spec; the model identity check
 *    names the first difference; a missing slice and a damaged file are errors;
 *  - bf16 and fp16 pieces convert exactly;
 *  - atomicity: a writer that dies at each point of a save (a fork that
 *    _exits there), or is SIGKILLed at a random moment while saving in a
 *    loop, leaves the newest complete checkpoint findable with the right
 *    values (latest's, or a checkpoint published after it whose latest
 *    update never happened); the next save removes the leftovers;
 *  - integrity: a flipped byte, a rank file of another step, rank, or run, a
 *    truncated or extended rank file, an edited, non-numeric, negative or
 *    trailing-garbage step in index.json — each refused naming the file (and
 *    the tensor); ckpt_verify checks every piece;
 *  - the newest checkpoint: latest unless one was committed after it (and a
 *    higher-numbered one committed before it is not taken);
 *  - one writer per directory: a second process's ckpt_lock is refused. */
#include "ckpt.h"
#include "check.h"

#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { SPLIT_NONE, SPLIT_ROWS, SPLIT_COLS };

typedef struct TT { const char *name; int64_t rows, cols, rows_mem; int split; } TT;

/* A tiny GPT-like model: a vocabulary of 300 padded to 320 for tp 2. */
static const TT model[] = {
    {"wte.weight", 300, 16, 320, SPLIT_ROWS},
    {"wpe.weight", 8, 16, 8, SPLIT_NONE},
    {"h.0.ln_1.weight", 16, 0, 16, SPLIT_NONE},
    {"h.0.attn.c_attn.weight", 48, 16, 48, SPLIT_ROWS},
    {"h.0.attn.c_attn.bias", 48, 0, 48, SPLIT_ROWS},
    {"h.0.attn.c_proj.weight", 16, 16, 16, SPLIT_COLS},
    {"ln_f.weight", 16, 0, 16, SPLIT_NONE},
};
enum { NT = sizeof model / sizeof *model, TP = 2, DP = 2, WORLD = TP * DP };
static const char *const kinds[3] = {CKPT_PARAM, CKPT_ADAM_M, CKPT_ADAM_V};

static char root[64];

static void rm_tree(const char *dir);

/* The value of element (r, c) of state kind k of tensor ti in checkpoint
 * version ver; padding rows hold garbage the reader must not return. */
static float val(int ver, int k, int ti, int64_t r, int64_t c)
{
    if (r >= model[ti].rows) return 999.0f;
    return (float)(ver * 8192 + ti * 1024 + r) + (float)c / 64.0f + (float)k * 0.25f;
}

/* What the reader must return: the value, or 0 outside the logical shape. */
static float want(int ver, int k, int ti, int64_t r, int64_t c)
{
    int64_t cols = model[ti].cols ? model[ti].cols : 1;
    return r < model[ti].rows && c < cols ? val(ver, k, ti, r, c) : 0.0f;
}

/* Tensor ti's shard rectangle on tp rank t (rows_mem rows: the padded vocabulary). */
static void shard_rect(int ti, int t, int64_t g[4])
{
    const TT *m = &model[ti];
    int64_t cols = m->cols ? m->cols : 1;
    g[0] = 0, g[1] = m->rows_mem, g[2] = 0, g[3] = cols;
    if (m->split == SPLIT_ROWS) g[0] = t * m->rows_mem / TP, g[1] = (t + 1) * m->rows_mem / TP;
    if (m->split == SPLIT_COLS) g[2] = t * cols / TP, g[3] = (t + 1) * cols / TP;
}

typedef struct Pieces { ckpt_piece p[64]; float *buf[64]; int n; } Pieces;

/* Adds the piece (rect g, flat [f0, f1)) of kind k of tensor ti, filled with version ver's values. */
static void add_piece(Pieces *ps, int ver, int k, int ti, const int64_t g[4], int64_t f0, int64_t f1)
{
    int64_t w = g[3] - g[2], n = f1 - f0;
    float *b = malloc((size_t)n * sizeof *b);
    for (int64_t e = f0; e < f1; e++) b[e - f0] = val(ver, k, ti, g[0] + e / w, g[2] + e % w);
    ps->buf[ps->n] = b;
    ps->p[ps->n++] = (ckpt_piece){kinds[k], model[ti].name, model[ti].rows, model[ti].cols,
                                   g[0], g[1], g[2], g[3], f0, f1, CKPT_F32, b};
}

/* Rank r's pieces under layout A: dp rank 0 holds the parameters (tp shards);
 * each dp rank its 1/DP of the tp rank's flat space of moments. */
static void layout_a(Pieces *ps, int rank, int ver)
{
    int t = rank % TP, d = rank / TP;
    ps->n = 0;
    int64_t flat = 0, off[NT], g[NT][4];
    for (int ti = 0; ti < NT; ti++) {
        shard_rect(model[ti].split == SPLIT_NONE ? ti : ti, t, g[ti]);
        off[ti] = flat;
        flat += (g[ti][1] - g[ti][0]) * (g[ti][3] - g[ti][2]);
        if (d == 0) add_piece(ps, ver, 0, ti, g[ti], 0, (g[ti][1] - g[ti][0]) * (g[ti][3] - g[ti][2]));
    }
    int64_t S = (flat + DP - 1) / DP, lo = d * S, hi = lo + S;
    for (int k = 1; k < 3; k++)
        for (int ti = 0; ti < NT; ti++) {
            int64_t n = (g[ti][1] - g[ti][0]) * (g[ti][3] - g[ti][2]);
            int64_t a = off[ti] > lo ? off[ti] : lo, b = off[ti] + n < hi ? off[ti] + n : hi;
            if (a < b) add_piece(ps, ver, k, ti, g[ti], a - off[ti], b - off[ti]);
        }
}

/* Frees the pieces' buffers. */
static void free_pieces(Pieces *ps)
{
    for (int i = 0; i < ps->n; i++) free(ps->buf[i]);
    ps->n = 0;
}

static const ckpt_kv layout_kv[] = {{"tp", TP}, {"pp", 1}, {"dp", DP}, {"zero", 1}, {"world", WORLD}};

/* Saves version ver at step under layout A as WORLD ranks would (three phases). */
static int save_a(const char *dir, int64_t step, int ver, char *err, size_t errlen)
{
    ckpt_kv state[] = {{"data_position", (double)step * 8}, {"seed", 1337}, {"loss_scale", 65536},
                       {"version", ver}};
    ckpt_meta meta = {"tiny.tspec", "gpt", "model gpt { layers = 1 }\n", layout_kv, 5, state, 4};
    uint64_t token = ckpt_token();
    int rc = ckpt_save_begin(dir, step, token, err, errlen);
    for (int r = 0; r < WORLD && rc == CKPT_OK; r++) {
        Pieces ps;
        layout_a(&ps, r, ver);
        rc = ckpt_save_rank(dir, step, token, r, meta.model, ps.p, ps.n, err, errlen);
        free_pieces(&ps);
    }
    if (rc == CKPT_OK) rc = ckpt_save_commit(dir, step, token, WORLD, &meta, err, errlen);
    if (rc) ckpt_save_abort(dir, step, token);
    return rc;
}

/* A tiny LCG for random requests. */
static uint64_t lcg = 12345;
static int64_t rnd(int64_t n)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (int64_t)((lcg >> 33) % (uint64_t)n);
}

/* Reads everything of version ver back: whole tensors, then random slices
 * (rectangles past the padded end included) of random flat ranges. */
static void verify(ckpt_reader *r, int ver)
{
    char err[512];
    static float out[400 * 16];
    for (int k = 0; k < 3; k++)
        for (int ti = 0; ti < NT; ti++) {
            const TT *m = &model[ti];
            int64_t cols = m->cols ? m->cols : 1;
            int rc = ckpt_read(r, kinds[k], m->name, 0, m->rows, 0, cols, 0, 0, out, err, sizeof err);
            if (rc) fprintf(stderr, "%s\n", err);
            CHECK_EQ(rc, CKPT_OK);
            int bad = 0;
            for (int64_t i = 0; i < m->rows * cols; i++) bad += out[i] != want(ver, k, ti, i / cols, i % cols);
            CHECK_EQ(bad, 0);
        }
    for (int q = 0; q < 300; q++) {
        int k = (int)rnd(3), ti = (int)rnd(NT);
        const TT *m = &model[ti];
        int64_t cols = m->cols ? m->cols : 1;
        int64_t r0 = rnd(m->rows_mem), r1 = r0 + 1 + rnd(m->rows_mem + 20 - r0);
        int64_t c0 = m->cols ? rnd(cols) : 0, c1 = m->cols ? c0 + 1 + rnd(cols - c0) : 1;
        int64_t area = (r1 - r0) * (c1 - c0), f0 = rnd(area), f1 = f0 + 1 + rnd(area - f0);
        if (q % 3 == 0) f0 = f1 = 0;    /* the whole rectangle */
        int rc = ckpt_read(r, kinds[k], m->name, r0, r1, c0, c1, f0, f1, out, err, sizeof err);
        if (rc) fprintf(stderr, "%s\n", err);
        CHECK_EQ(rc, CKPT_OK);
        if (f1 <= f0) f0 = 0, f1 = area;
        int bad = 0;
        for (int64_t e = f0; e < f1; e++)
            bad += out[e - f0] != want(ver, k, ti, r0 + e / (c1 - c0), c0 + e % (c1 - c0));
        CHECK_EQ(bad, 0);
    }
}

/* The model as the identity check sees it. */
static void descs(ckpt_tensor_desc *d)
{
    for (int i = 0; i < NT; i++) d[i] = (ckpt_tensor_desc){model[i].name, model[i].rows, model[i].cols};
}

/* Layout A written, read under any layout; the index; the identity check. */
static void test_roundtrip(const char *dir)
{
    char err[512];
    int rc = save_a(dir, 7, 1, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    CHECK_EQ(rc, CKPT_OK);
    ckpt_reader *r = NULL;
    rc = ckpt_open(&r, dir, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    CHECK_EQ(rc, CKPT_OK);
    if (!r) return;
    CHECK_EQ(ckpt_step(r), 7);
    CHECK_EQ(ckpt_nranks(r), WORLD);
    CHECK_HAS(ckpt_path(r), "/step-7");
    CHECK(strcmp(ckpt_model(r), "tiny.tspec") == 0);
    CHECK(strcmp(ckpt_family(r), "gpt") == 0);
    CHECK(strcmp(ckpt_spec_text(r), "model gpt { layers = 1 }\n") == 0);
    double v = 0;
    CHECK(ckpt_layout(r, "dp", &v) && v == DP);
    CHECK(ckpt_state(r, "data_position", &v) && v == 56);
    CHECK(ckpt_state(r, "loss_scale", &v) && v == 65536);
    CHECK(!ckpt_state(r, "nothing", &v));
    CHECK_EQ(ckpt_ntensors(r), NT);
    int64_t rows, cols;
    for (int i = 0; i < NT; i++) {
        CHECK(strcmp(ckpt_tensor(r, i, &rows, &cols), model[i].name) == 0);   /* saved order */
        CHECK_EQ(rows, model[i].rows);
        CHECK_EQ(cols, model[i].cols);
    }
    CHECK(ckpt_has(r, CKPT_ADAM_V, "wte.weight"));
    CHECK(!ckpt_has(r, "momentum", "wte.weight"));
    verify(r, 1);

    /* the identity check */
    ckpt_tensor_desc d[NT + 1];
    descs(d);
    CHECK_EQ(ckpt_check_model(r, d, NT, err, sizeof err), CKPT_OK);
    d[0].rows = 301;
    CHECK_EQ(ckpt_check_model(r, d, NT, err, sizeof err), CKPT_E_MODEL);
    CHECK_HAS(err, "another model");
    CHECK_HAS(err, "tensor 'wte.weight' is [300, 16] there but [301, 16] in this model");
    descs(d);
    CHECK_EQ(ckpt_check_model(r, d, NT - 1, err, sizeof err), CKPT_E_MODEL);
    CHECK_HAS(err, "it has a tensor 'ln_f.weight' this model does not");
    d[NT] = (ckpt_tensor_desc){"lm_head.weight", 300, 16};
    CHECK_EQ(ckpt_check_model(r, d, NT + 1, err, sizeof err), CKPT_E_MODEL);
    CHECK_HAS(err, "it has no tensor 'lm_head.weight'");
    CHECK_EQ(ckpt_read(r, CKPT_PARAM, "nope", 0, 1, 0, 1, 0, 0, (float[1]){0}, err, sizeof err), CKPT_E_MODEL);
    CHECK_EQ(ckpt_read(r, CKPT_PARAM, "wte.weight", 5, 5, 0, 1, 0, 0, (float[1]){0}, err, sizeof err),
             CKPT_E_ARGS);
    ckpt_close(r);

    /* saving the same step again replaces it whole */
    CHECK_EQ(save_a(dir, 7, 3, err, sizeof err), CKPT_OK);
    CHECK_EQ(ckpt_open(&r, dir, err, sizeof err), CKPT_OK);
    if (r) verify(r, 3);
    ckpt_close(r);
}

/* bf16 and fp16 pieces read back as the fp32 they encode. */
static void test_dtypes(const char *dir)
{
    float xs[6] = {1.0f, -2.25f, 3.14159265f, 1e-3f, -65504.0f, 0.0f};
    uint16_t bf[6], hf[6] = {0x3C00, 0xC000, 0x0001, 0x7BFF, 0x8400, 0x7C00};
    for (int i = 0; i < 6; i++) bf[i] = ckpt_bf16_from_f32(xs[i]);
    float want16[6] = {1.0f, -2.0f, 5.9604645e-08f, 65504.0f, -6.1035156e-05f, INFINITY};
    ckpt_piece p[2] = {
        {CKPT_PARAM, "a.weight", 2, 3, 0, 2, 0, 3, 0, 0, CKPT_BF16, bf},
        {CKPT_PARAM, "b.bias", 6, 0, 0, 6, 0, 1, 0, 0, CKPT_F16, hf},
    };
    char err[512];
    CHECK_EQ(ckpt_save(dir, 1, p, 2, NULL, err, sizeof err), CKPT_OK);
    ckpt_reader *r = NULL;
    CHECK_EQ(ckpt_open(&r, dir, err, sizeof err), CKPT_OK);
    if (!r) return;
    float out[6];
    CHECK_EQ(ckpt_read(r, CKPT_PARAM, "a.weight", 0, 2, 0, 3, 0, 0, out, err, sizeof err), CKPT_OK);
    for (int i = 0; i < 6; i++) CHECK(out[i] == ckpt_f32_from_bf16(bf[i]));
    CHECK(out[0] == 1.0f && out[1] == -2.25f && out[5] == 0.0f);
    CHECK_ABS(out[2], 3.140625, 0);                         /* nearest bf16 of pi */
    CHECK_EQ(ckpt_bf16_from_f32(1.00390625f), 0x3f80);      /* a tie rounds to even */
    CHECK_EQ(ckpt_bf16_from_f32(1.01171875f), 0x3f82);
    CHECK(ckpt_f32_from_bf16(ckpt_bf16_from_f32(NAN)) != ckpt_f32_from_bf16(ckpt_bf16_from_f32(NAN)));
    CHECK_EQ(ckpt_read(r, CKPT_PARAM, "b.bias", 0, 6, 0, 1, 0, 0, out, err, sizeof err), CKPT_OK);
    for (int i = 0; i < 6; i++) CHECK(out[i] == want16[i]);
    ckpt_close(r);
}

/* A slice no rank holds, a damaged rank file, a missing rank file, bad pieces. */
static void test_errors(const char *dir, const char *dir2)
{
    char err[512], p[512];
    /* only the first half of a tensor's rows was saved */
    float half[24 * 16] = {0};
    ckpt_piece pc = {CKPT_PARAM, "h.0.attn.c_attn.weight", 48, 16, 0, 24, 0, 16, 0, 0, CKPT_F32, half};
    CHECK_EQ(ckpt_save(dir, 3, &pc, 1, NULL, err, sizeof err), CKPT_OK);
    ckpt_reader *r = NULL;
    CHECK_EQ(ckpt_open(&r, dir, err, sizeof err), CKPT_OK);
    static float out[48 * 16];
    if (r) {
        CHECK_EQ(ckpt_read(r, CKPT_PARAM, pc.tensor, 0, 48, 0, 16, 0, 0, out, err, sizeof err), CKPT_E_COVER);
        CHECK_HAS(err, "no rank file holds param of 'h.0.attn.c_attn.weight' at element (24, 0)");
        CHECK_EQ(ckpt_read(r, CKPT_PARAM, pc.tensor, 0, 24, 0, 16, 0, 0, out, err, sizeof err), CKPT_OK);
        CHECK_EQ(ckpt_read(r, CKPT_ADAM_M, pc.tensor, 0, 24, 0, 16, 0, 0, out, err, sizeof err), CKPT_E_COVER);
        ckpt_close(r);
    }
    /* a truncated rank file */
    snprintf(p, sizeof p, "%s/step-3/rank-00000.safetensors", dir);
    CHECK_EQ(truncate(p, 200), 0);
    CHECK_EQ(ckpt_open(&r, dir, err, sizeof err), CKPT_E_CORRUPT);
    CHECK_HAS(err, "rank-00000.safetensors");
    CHECK(r == NULL);
    /* no checkpoint at all */
    CHECK_EQ(ckpt_open(&r, dir2, err, sizeof err), CKPT_E_MISSING);
    CHECK_HAS(err, dir2);
    char found[512];
    CHECK_EQ(ckpt_find(dir2, found, sizeof found, NULL, 0, err, sizeof err), CKPT_E_MISSING);

    /* a commit that misses a rank file fails and leaves the previous checkpoint */
    CHECK_EQ(save_a(dir2, 1, 1, err, sizeof err), CKPT_OK);
    uint64_t tok = ckpt_token();
    CHECK_EQ(ckpt_save_begin(dir2, 2, tok, err, sizeof err), CKPT_OK);
    Pieces ps;
    layout_a(&ps, 0, 2);
    CHECK_EQ(ckpt_save_rank(dir2, 2, tok, 0, NULL, ps.p, ps.n, err, sizeof err), CKPT_OK);
    /* a piece twice in one rank, and a piece past its rectangle */
    ps.p[1] = ps.p[0];
    CHECK_EQ(ckpt_save_rank(dir2, 2, tok, 1, NULL, ps.p, 2, err, sizeof err), CKPT_E_ARGS);
    CHECK_HAS(err, "twice");
    ps.p[1].f1 = 1 << 20;
    CHECK_EQ(ckpt_save_rank(dir2, 2, tok, 1, NULL, ps.p + 1, 1, err, sizeof err), CKPT_E_ARGS);
    free_pieces(&ps);
    CHECK_EQ(ckpt_save_commit(dir2, 2, tok, WORLD, NULL, err, sizeof err), CKPT_E_MISSING);
    CHECK_HAS(err, "rank-00001.safetensors");
    ckpt_save_abort(dir2, 2, tok);
    snprintf(p, sizeof p, "%s/step-2.tmp-%016llx", dir2, (unsigned long long)tok);
    struct stat st;
    CHECK(stat(p, &st) != 0);                               /* no partial checkpoint left */
    CHECK_EQ(ckpt_open(&r, dir2, err, sizeof err), CKPT_OK);
    if (r) {
        CHECK_EQ(ckpt_step(r), 1);
        verify(r, 1);
        ckpt_close(r);
    }
    /* a stale latest falls back on the highest complete step-N */
    CHECK_EQ(save_a(dir2, 4, 2, err, sizeof err), CKPT_OK);
    snprintf(p, sizeof p, "%s/latest", dir2);
    FILE *f = fopen(p, "w");
    fputs("step-999\n", f);
    fclose(f);
    char note[1024];
    CHECK_EQ(ckpt_find(dir2, found, sizeof found, note, sizeof note, err, sizeof err), CKPT_OK);
    CHECK_HAS(found, "/step-4");
    CHECK_HAS(note, "latest names no complete checkpoint: taking the newest complete checkpoint, step-4");
}

static const char *crash_target;

/* The crash hook: dies without cleanup at the chosen point. */
static void crash_here(const char *point)
{
    if (strcmp(point, crash_target) == 0) _exit(0);
}

/* Counts directory entries whose name contains s. */
static int count_entries(const char *dir, const char *s)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) n += strstr(e->d_name, s) != NULL;
    if (d) closedir(d);
    return n;
}

/* A writer dies at each point of a save; the previous checkpoint survives. */
static void test_crash_points(const char *dir)
{
    char err[512];
    CHECK_EQ(save_a(dir, 5, 1, err, sizeof err), CKPT_OK);
    const char *points[] = {"rank-half", "rank-written", "index-written", "renamed", "latest-written"};
    for (int i = 0; i < 5; i++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            crash_target = points[i];
            ckpt_crash_hook = crash_here;
            char e[512];
            save_a(dir, 6, 2, e, sizeof e);
            _exit(3);           /* the hook did not fire */
        }
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        /* before "renamed" step-6 is not published: latest's step-5; after
         * it, step-6 is complete and newer than latest's, and is taken */
        ckpt_reader *r = NULL;
        CHECK_EQ(ckpt_open(&r, dir, err, sizeof err), CKPT_OK);
        if (r) {
            CHECK_EQ(ckpt_step(r), i >= 3 ? 6 : 5);
            verify(r, i >= 3 ? 2 : 1);
            if (i >= 3) CHECK_HAS(ckpt_note(r), "latest names step-5, but step-6 was saved after it and is complete");
            else CHECK_STR(ckpt_note(r), "");
            ckpt_close(r);
        }
        char p[512];
        snprintf(p, sizeof p, "%s/step-6", dir);
        if (i >= 3) {                           /* published before the crash: complete */
            CHECK_EQ(ckpt_open(&r, p, err, sizeof err), CKPT_OK);
            if (r) verify(r, 2);
            ckpt_close(r);
            snprintf(p, sizeof p, "%s/step-6", dir);
            rm_tree(p);                         /* the next round starts from step-5 again */
        }
    }
    CHECK(count_entries(dir, ".tmp-") > 0);
    /* the next save cleans up and becomes latest */
    CHECK_EQ(save_a(dir, 8, 3, err, sizeof err), CKPT_OK);
    CHECK_EQ(count_entries(dir, ".tmp-"), 0);
    ckpt_reader *r = NULL;
    CHECK_EQ(ckpt_open(&r, dir, err, sizeof err), CKPT_OK);
    if (r) {
        CHECK_EQ(ckpt_step(r), 8);
        verify(r, 3);
        ckpt_close(r);
    }
}

/* A writer saving in a loop is SIGKILLed at a random moment, several times. */
static void test_sigkill(const char *dir)
{
    char err[512];
    CHECK_EQ(save_a(dir, 1, 1, err, sizeof err), CKPT_OK);
    for (int round = 0; round < 4; round++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            char e[512];
            for (int64_t s = 2;; s++) save_a(dir, s, (int)(s % 3) + 1, e, sizeof e);
        }
        struct timespec ts = {0, (long)(5 + 7 * round) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        ckpt_reader *r = NULL;
        CHECK_EQ(ckpt_open(&r, dir, err, sizeof err), CKPT_OK);
        if (r) {
            double ver = 0;
            CHECK(ckpt_state(r, "version", &ver));
            CHECK_EQ((int64_t)ver, ckpt_step(r) == 1 ? 1 : ckpt_step(r) % 3 + 1);
            verify(r, (int)ver);
            ckpt_close(r);
        }
    }
}

/* rm -r of the test's directories (two levels: DIR/step-N/files). */
static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[1024];
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) rm_tree(p);
        else unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* fp32 -> fp16: every finite fp16 value round-trips, ties round to even,
 * overflow gives infinity, the subnormals and their rounding are exact. */
static void test_f16_from_f32(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;   /* NaNs: checked below */
        if (ckpt_f16_from_f32(ckpt_f32_from_f16((uint16_t)h)) != h) bad++;
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(ckpt_f16_from_f32(1.0f + 0x1p-11f), 0x3c00);     /* a tie: to the even 1.0 */
    CHECK_EQ(ckpt_f16_from_f32(1.0f + 3 * 0x1p-11f), 0x3c02); /* a tie: up to the even */
    CHECK_EQ(ckpt_f16_from_f32(65504.0f), 0x7bff);
    CHECK_EQ(ckpt_f16_from_f32(65519.0f), 0x7bff);            /* below the halfway point */
    CHECK_EQ(ckpt_f16_from_f32(65520.0f), 0x7c00);            /* the halfway point: inf */
    CHECK_EQ(ckpt_f16_from_f32(-1e10f), 0xfc00);
    CHECK_EQ(ckpt_f16_from_f32(0x1p-25f), 0x0000);            /* half the least subnormal: to even 0 */
    CHECK_EQ(ckpt_f16_from_f32(0x1.8p-25f), 0x0001);
    CHECK_EQ(ckpt_f16_from_f32(3 * 0x1p-25f), 0x0002);        /* 1.5 subnormal units: to even 2 */
    CHECK_EQ(ckpt_f16_from_f32(0x1.ffcp-15f), 0x0400);        /* rounds up into the normals */
    uint16_t n = ckpt_f16_from_f32(NAN);
    CHECK((n & 0x7c00) == 0x7c00 && (n & 0x3ff));
}

/* The whole content of a file ("" if unreadable; static, one at a time). */
static char *slurp(const char *path, size_t *len)
{
    static char buf[1 << 20];
    FILE *f = fopen(path, "rb");
    *len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[*len] = 0;
    return buf;
}

/* Writes len bytes to path. */
static void spill(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, len, f) == len);
    if (f) fclose(f);
}

/* Replaces the first `from` in path's text by `to`. */
static void edit(const char *path, const char *from, const char *to)
{
    size_t len;
    char *t = slurp(path, &len), *at = strstr(t, from);
    CHECK(at != NULL);
    if (!at) return;
    static char out[1 << 20];
    size_t a = (size_t)(at - t), nf = strlen(from), nt = strlen(to);
    memcpy(out, t, a);
    memcpy(out + a, to, nt);
    memcpy(out + a + nt, at + nf, len - a - nf);
    spill(path, out, len - nf + nt);
}

/* ckpt_open of dir must fail with code, its message holding want (and the
 * file, when given). */
static void refused(const char *dir, int code, const char *file, const char *want)
{
    char err[1024] = "";
    ckpt_reader *r = NULL;
    int rc = ckpt_open(&r, dir, err, sizeof err);
    if (rc == CKPT_OK) {       /* the damage may sit in a piece: reading everything finds it */
        rc = ckpt_verify(r, NULL, err, sizeof err);
        ckpt_close(r);
    }
    CHECK_EQ(rc, code);
    if (file) CHECK_HAS(err, file);
    CHECK_HAS(err, want);
}

/* Checksums, the rank files' identity, the index's strictness (the rows of
 * the fault review's table, each on a fresh copy of a good checkpoint). */
static void test_integrity(const char *dir)
{
    char err[1024], p[1024], q[2048], cmd[4096];
    CHECK_EQ(save_a(dir, 19, 1, err, sizeof err), CKPT_OK);
    CHECK_EQ(save_a(dir, 20, 2, err, sizeof err), CKPT_OK);
    ckpt_reader *r = NULL;
    ckpt_verify_stats vs = {0};
    CHECK_EQ(ckpt_open(&r, dir, err, sizeof err), CKPT_OK);
    if (r) {
        CHECK_EQ(ckpt_verify(r, &vs, err, sizeof err), CKPT_OK);
        CHECK_EQ(vs.files, WORLD);
        CHECK_EQ(vs.tensors, NT);
        CHECK(vs.pieces > 3 * NT && vs.bytes > 4 * vs.pieces);
        ckpt_close(r);
    }
    char s20[256], work[256];
    snprintf(s20, sizeof s20, "%s/step-20", dir);
    snprintf(work, sizeof work, "%s/work", dir);
    /* a fresh copy of step-20 as work/step-20 (latest naming it) */
#define FRESH()                                                                                   \
    do {                                                                                          \
        snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && cp -r %s %s/ && echo step-20 > %s/latest", work, \
                 work, s20, work, work);                                                          \
        CHECK_EQ(system(cmd), 0);                                                                 \
    } while (0)
    /* a flipped byte in a tensor's data: refused naming the file and the tensor */
    FRESH();
    snprintf(p, sizeof p, "%s/step-20/rank-00001.safetensors", work);
    size_t len;
    char *t = slurp(p, &len);
    t[len - 5] ^= 0x10;                 /* in the last piece's data */
    spill(p, t, len);
    refused(work, CKPT_E_CORRUPT,
            "rank-00001.safetensors: tensor 'wte.weight' (adam_v, piece 'adam_v/wte.weight/160:320,0:16/",
            "do not match their checksum");
    /* and when reading: the first read of the damaged piece fails */
    CHECK_EQ(ckpt_open(&r, work, err, sizeof err), CKPT_OK);
    if (r) {
        static float out[300 * 16];
        CHECK_EQ(ckpt_read(r, CKPT_ADAM_V, "wte.weight", 0, 300, 0, 16, 0, 0, out, err, sizeof err), CKPT_E_CORRUPT);
        CHECK_HAS(err, "the file is damaged");
        ckpt_close(r);
    }
    /* a rank file of step 19 copied into step 20 */
    FRESH();
    snprintf(q, sizeof q, "cp %s/step-19/rank-00002.safetensors %s/step-20/", dir, work);
    CHECK_EQ(system(q), 0);
    refused(work, CKPT_E_CORRUPT, "rank-00002.safetensors",
            "written at step 19 (its own metadata) into the checkpoint of step 20");
    /* rank 0's file in rank 1's place */
    FRESH();
    snprintf(q, sizeof q, "cp %s/step-20/rank-00000.safetensors %s/step-20/rank-00001.safetensors", work, work);
    CHECK_EQ(system(q), 0);
    refused(work, CKPT_E_CORRUPT, "rank-00001.safetensors", "the file of rank 0 in the place of rank 1's");
    /* the same rank and step from another run (another save token) */
    char other[256];
    snprintf(other, sizeof other, "%s/other", dir);
    CHECK_EQ(save_a(other, 20, 2, err, sizeof err), CKPT_OK);
    FRESH();
    snprintf(q, sizeof q, "cp %s/step-20/rank-00003.safetensors %s/step-20/", other, work);
    CHECK_EQ(system(q), 0);
    refused(work, CKPT_E_CORRUPT, "rank-00003.safetensors", "written by another save");
    /* 4 KiB appended to a rank file */
    FRESH();
    snprintf(q, sizeof q, "head -c 4096 /dev/zero >> %s/step-20/rank-00000.safetensors", work);
    CHECK_EQ(system(q), 0);
    refused(work, CKPT_E_CORRUPT, "rank-00000.safetensors", "4096 bytes follow the last tensor's data");
    /* a truncated rank file */
    FRESH();
    snprintf(p, sizeof p, "%s/step-20/rank-00003.safetensors", work);
    slurp(p, &len);
    CHECK_EQ(truncate(p, (off_t)len - 4), 0);
    refused(work, CKPT_E_CORRUPT, "rank-00003.safetensors", "past the file's");
    /* index.json: the step edited, a string or negative step, trailing garbage, a NUL */
    snprintf(p, sizeof p, "%s/step-20/index.json", work);
    static const struct { const char *from, *to, *want; } edits[] = {
        {"\"step\":\t20", "\"step\":\t15", "\"step\" is 15 but the checkpoint's directory is step-20"},
        {"\"step\":\t20", "\"step\":\t\"20\"", "\"step\" is \"20\", not a step number"},
        {"\"step\":\t20", "\"step\":\t-9", "\"step\" is -9, not a step number"},
        {"\"version\":\t2", "\"version\":\t1", "version 1 has no checksums"},
        {"\"rank-00001.safetensors\"", "\"../rank-00001.safetensors\"", "file 1 of the list is not rank-00001.safetensors"},
        {"\"shape\":\t[300, 16]", "\"shape\":\t[300.5, 16]", "tensor 'wte.weight': a malformed shape"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        FRESH();
        edit(p, edits[i].from, edits[i].to);
        refused(work, CKPT_E_CORRUPT, "step-20/index.json", edits[i].want);
    }
    FRESH();
    edit(p, "\"step\":\t20", "\"step\":\t2e1");     /* the same number, written otherwise: fine */
    CHECK_EQ(ckpt_open(&r, work, err, sizeof err), CKPT_OK);
    ckpt_close(r);
    FRESH();
    t = slurp(p, &len);
    memcpy(t + len, "\n}garbage", 9);
    spill(p, t, len + 9);
    refused(work, CKPT_E_CORRUPT, "step-20/index.json", "8 bytes follow the JSON object");
    FRESH();
    t = slurp(p, &len);
    t[len - 2] = 0;
    spill(p, t, len);
    refused(work, CKPT_E_CORRUPT, "step-20/index.json", "a NUL byte");
    /* the index's step and the directory's name both edited: the rank files still say 20 */
    FRESH();
    edit(p, "\"step\":\t20", "\"step\":\t15");
    snprintf(q, sizeof q, "mv %s/step-20 %s/step-15 && echo step-15 > %s/latest", work, work, work);
    CHECK_EQ(system(q), 0);
    refused(work, CKPT_E_CORRUPT, "rank-00000.safetensors",
            "written at step 20 (its own metadata) into the checkpoint of step 15");
    rm_tree(work);
    rm_tree(other);
#undef FRESH
}

/* Which checkpoint is the newest: latest, unless one was committed after it. */
static void test_find_newest(const char *dir)
{
    char err[512], found[512], note[1024], p[1024];
    CHECK_EQ(save_a(dir, 10, 1, err, sizeof err), CKPT_OK);
    CHECK_EQ(save_a(dir, 100, 2, err, sizeof err), CKPT_OK);
    /* resumed from step-10 and saved step-70: latest names it, and although
     * step-100 has a higher number it is older: step-70 */
    CHECK_EQ(save_a(dir, 70, 3, err, sizeof err), CKPT_OK);
    CHECK_EQ(ckpt_find(dir, found, sizeof found, note, sizeof note, err, sizeof err), CKPT_OK);
    CHECK_HAS(found, "/step-70");
    CHECK_STR(note, "");
    /* step-80's save then failed to replace latest: step-80 is taken, with a note */
    CHECK_EQ(save_a(dir, 80, 1, err, sizeof err), CKPT_OK);
    snprintf(p, sizeof p, "%s/latest", dir);
    spill(p, "step-70\n", 8);
    CHECK_EQ(ckpt_find(dir, found, sizeof found, note, sizeof note, err, sizeof err), CKPT_OK);
    CHECK_HAS(found, "/step-80");
    CHECK_HAS(note, "latest names step-70, but step-80 was saved after it and is complete: taking step-80");
    ckpt_reader *r = NULL;
    CHECK_EQ(ckpt_open(&r, dir, err, sizeof err), CKPT_OK);
    if (r) {
        CHECK_EQ(ckpt_step(r), 80);
        CHECK_HAS(ckpt_note(r), "taking step-80");
        ckpt_close(r);
    }
    /* no latest at all: the one saved last */
    unlink(p);
    CHECK_EQ(ckpt_find(dir, found, sizeof found, note, sizeof note, err, sizeof err), CKPT_OK);
    CHECK_HAS(found, "/step-80");
    CHECK_HAS(note, "latest is missing: taking the newest complete checkpoint, step-80");
    /* a newer-numbered checkpoint whose index is damaged is not taken, and said so */
    spill(p, "step-80\n", 8);
    CHECK_EQ(save_a(dir, 90, 1, err, sizeof err), CKPT_OK);
    spill(p, "step-80\n", 8);
    snprintf(p, sizeof p, "%s/step-90/index.json", dir);
    spill(p, "{", 1);
    CHECK_EQ(ckpt_find(dir, found, sizeof found, note, sizeof note, err, sizeof err), CKPT_OK);
    CHECK_HAS(found, "/step-80");
    CHECK_HAS(note, "step-90 is not considered: ");
    CHECK_HAS(note, "step-90/index.json: not a JSON object");
}

/* One writer per directory: a second process's lock is refused, naming the
 * holder; the lock goes with the holder, however it ends. */
static void test_lock(const char *dir)
{
    char err[512];
    int fd = -1, pipefd[2];
    CHECK_EQ(pipe(pipefd), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int cfd;
        char e[512];
        if (ckpt_lock(dir, &cfd, e, sizeof e) != CKPT_OK) _exit(2);
        if (write(pipefd[1], "x", 1) != 1) _exit(3);
        pause();                        /* killed by the parent */
        _exit(0);
    }
    char x;
    CHECK_EQ(read(pipefd[0], &x, 1), 1);
    CHECK_EQ(ckpt_lock(dir, &fd, err, sizeof err), CKPT_E_BUSY);
    CHECK_HAS(err, "another trainer is writing checkpoints here (pid ");
    CHECK_HAS(err, "one trainer per checkpoint directory");
    CHECK_EQ(fd, -1);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CHECK_EQ(ckpt_lock(dir, &fd, err, sizeof err), CKPT_OK);
    CHECK(fd >= 0);
    /* a save does not remove the lock file; the lock is still this process's */
    CHECK_EQ(save_a(dir, 1, 1, err, sizeof err), CKPT_OK);
    char p[512];
    snprintf(p, sizeof p, "%s/.lock", dir);
    struct stat st;
    CHECK_EQ(stat(p, &st), 0);
    close(fd);
    close(pipefd[0]);
    close(pipefd[1]);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/rt_test_ckpt.XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    char a[128], b[128], c[128], d[128], e[128], f[128];
    snprintf(a, sizeof a, "%s/a", root);
    snprintf(b, sizeof b, "%s/b", root);
    snprintf(c, sizeof c, "%s/c", root);
    snprintf(d, sizeof d, "%s/nested/d", root);
    snprintf(e, sizeof e, "%s/e", root);
    snprintf(f, sizeof f, "%s/f", root);
    test_roundtrip(a);
    test_dtypes(b);
    test_f16_from_f32();
    test_errors(c, d);
    test_crash_points(e);
    test_sigkill(f);
    char g[128], h[128], i[128];
    snprintf(g, sizeof g, "%s/g", root);
    snprintf(h, sizeof h, "%s/h", root);
    snprintf(i, sizeof i, "%s/i", root);
    test_integrity(g);
    test_find_newest(h);
    test_lock(i);
    rm_tree(root);
    if (!failures) printf("rt_test_ckpt: ok\n");
    return failures != 0;
}
