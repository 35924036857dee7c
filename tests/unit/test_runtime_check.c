/* test_runtime_check.c — the race checker of the checking mode (check.c).
 *
 * With a hook that collects the reports: a write on one stream then a read
 * on another without an event is reported, naming both ops, both streams
 * and the buffer; with an event record/wait between them it is clean; the
 * same for write-after-read and write-after-write; an event recorded before
 * the write orders nothing; event chains are transitive; a stream sync
 * orders everything; byte ranges are exact (adjacent views never conflict,
 * a one-byte overlap does and the report names the overlap); the state the
 * context keeps (gradient-norm accumulator, clipping scale) and the NVMe
 * file are checked like memory; the history is collected so a long run
 * keeps a small table.  Without a hook, a race ends the process with exit
 * code 3 and the message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

static int g_checks, g_failed;

static void check(int ok, const char *what)
{
    g_checks++;
    if (!ok) {
        g_failed++;
        printf("FAIL %s\n", what);
    }
}

/* The hook: keeps the last report and counts them. */
static char g_msg[1024];
static int g_races;

static void on_race(void *ud, const char *msg)
{
    (void)ud;
    g_races++;
    snprintf(g_msg, sizeof g_msg, "%s", msg);
}

/* Runs one scenario: clears the hook's state first, syncs every stream after
 * (so that scenarios do not see each other's history). */
static void expect(srt_ctx *c, void (*fn)(srt_ctx *), int races, const char *msg, const char *what)
{
    g_races = 0, g_msg[0] = 0;
    fn(c);
    for (int s = 0; s < SRT_NSTREAMS; s++) srt_stream_sync(c, (srt_stream)s);
    int ok = g_races == races && (!msg || strcmp(g_msg, msg) == 0);
    if (!ok) printf("  %s: %d races, last \"%s\"\n", what, g_races, g_msg);
    check(ok, what);
}

/* ---- the program: two named buffers in the device arena ---------------------------------- */

static const srt_buffer g_buffers[] = {
    { "h.0.mlp.out", 0, 0, 4096 },
    { "grads.bucket0", 0, 4096, 4096 },
    { "host.shard", 1, 0, 4096 },
};
static srt_class g_class;
static srt_program g_prog;

static srt_ctx *make_ctx(srt_race_fn hook)
{
    memset(&g_class, 0, sizeof g_class);
    g_class.buffers = g_buffers, g_class.nbuffers = 3;
    g_class.device_arena = 1 << 20, g_class.host_arena = 1 << 16, g_class.nvme_bytes = 1 << 16;
    memset(&g_prog, 0, sizeof g_prog);
    g_prog.abi = SRT_ABI_VERSION, g_prog.name = "test_runtime_check";
    g_prog.layers = 1, g_prog.hidden = 16, g_prog.heads = 2, g_prog.vocab = 64, g_prog.vocab_pad = 64;
    g_prog.seq_len = 8, g_prog.ffn = 64, g_prog.micro_batch = 1, g_prog.microbatches = 1;
    g_prog.tp = g_prog.pp = g_prog.dp = g_prog.world = 1;
    g_prog.dtype = SRT_F32, g_prog.lr = 1e-3, g_prog.beta1 = 0.9, g_prog.beta2 = 0.95;
    g_prog.eps = 1e-8, g_prog.grad_clip = 1.0, g_prog.steps = 1;
    g_prog.classes = &g_class;
    ctx_options o = { .check = 1, .on_race = hook };
    return ctx_create(&g_prog, &o);
}

/* 16 floats of "h.0.mlp.out" at float index i, and of "grads.bucket0". */
static srt_t act(srt_ctx *c, int64_t i) { return srt_dview(c, i * 4, 16, SRT_F32); }
static srt_t grad(srt_ctx *c, int64_t i) { return srt_dview(c, 4096 + i * 4, 16, SRT_F32); }
static srt_t host(srt_ctx *c) { return srt_hview(c, 0, 16, SRT_F32); }

/* ---- scenarios ------------------------------------------------------------------------------ */

/* gelu on compute writes the activation; the copy stream reads it at once. */
static void raw_race(srt_ctx *c)
{
    srt_gelu_fwd(c, SRT_COMPUTE, act(c, 0), grad(c, 0));
    srt_copy(c, SRT_COPY, host(c), act(c, 0));
}

static void raw_event(srt_ctx *c)
{
    srt_gelu_fwd(c, SRT_COMPUTE, act(c, 0), grad(c, 0));
    srt_event_record(c, SRT_COMPUTE, 7);
    srt_event_wait(c, SRT_COPY, 7);
    srt_copy(c, SRT_COPY, host(c), act(c, 0));
}

/* gelu reads the gradient bucket on compute; dp_comm overwrites it (an
 * all-reduce) without waiting. */
static void war_race(srt_ctx *c)
{
    srt_gelu_fwd(c, SRT_COMPUTE, act(c, 0), grad(c, 0));
    srt_zero(c, SRT_DP_COMM, grad(c, 0));
}

static void war_event(srt_ctx *c)
{
    srt_gelu_fwd(c, SRT_COMPUTE, act(c, 0), grad(c, 0));
    srt_event_record(c, SRT_COMPUTE, 1);
    srt_event_wait(c, SRT_DP_COMM, 1);
    srt_zero(c, SRT_DP_COMM, grad(c, 0));
}

static void waw_race(srt_ctx *c)
{
    srt_zero(c, SRT_COMPUTE, grad(c, 0));
    srt_all_reduce(c, SRT_DP_COMM, SRT_DP, grad(c, 0), SRT_SUM);
}

/* Reads on two streams never conflict; nor do ops on one stream. */
static void no_conflict(srt_ctx *c)
{
    srt_zero(c, SRT_COMPUTE, act(c, 0));
    srt_gelu_fwd(c, SRT_COMPUTE, grad(c, 0), act(c, 0));
    srt_zero(c, SRT_COMPUTE, act(c, 0));
    srt_event_record(c, SRT_COMPUTE, 2);
    srt_event_wait(c, SRT_COPY, 2);
    srt_copy(c, SRT_COPY, host(c), act(c, 0));
    srt_gelu_fwd(c, SRT_COMPUTE, grad(c, 0), act(c, 0));
}

/* An event recorded before the write does not order it. */
static void stale_event(srt_ctx *c)
{
    srt_event_record(c, SRT_COMPUTE, 3);
    srt_zero(c, SRT_COMPUTE, act(c, 0));
    srt_event_wait(c, SRT_COPY, 3);
    srt_copy(c, SRT_COPY, host(c), act(c, 0));
}

/* compute -> tp_comm -> pp_comm -> copy by a chain of events. */
static void chain(srt_ctx *c)
{
    srt_zero(c, SRT_COMPUTE, act(c, 0));
    srt_event_record(c, SRT_COMPUTE, 10);
    srt_event_wait(c, SRT_TP_COMM, 10);
    srt_zero(c, SRT_TP_COMM, grad(c, 0));
    srt_event_record(c, SRT_TP_COMM, 11);
    srt_event_wait(c, SRT_PP_COMM, 11);
    srt_event_record(c, SRT_PP_COMM, 12);
    srt_event_wait(c, SRT_COPY, 12);
    srt_copy(c, SRT_COPY, host(c), act(c, 0));
}

/* A stream sync: the host waited, so anything issued later follows. */
static void sync_orders(srt_ctx *c)
{
    srt_zero(c, SRT_COMPUTE, act(c, 0));
    srt_stream_sync(c, SRT_COMPUTE);
    srt_copy(c, SRT_COPY, host(c), act(c, 0));
    srt_stream_sync(c, SRT_COPY);
    srt_zero(c, SRT_HOST, act(c, 0));
}

/* Floats [0, 16) and [16, 32) side by side, on two streams: no conflict. */
static void adjacent(srt_ctx *c)
{
    srt_zero(c, SRT_COMPUTE, act(c, 0));
    srt_zero(c, SRT_DP_COMM, act(c, 16));
    srt_copy(c, SRT_COPY, host(c), act(c, 32));
}

/* One float of overlap: [15, 31) against [0, 16). */
static void overlap(srt_ctx *c)
{
    srt_zero(c, SRT_COMPUTE, act(c, 0));
    srt_zero(c, SRT_DP_COMM, act(c, 15));
}

/* The norm accumulator and the clipping scale live in the context. */
static void norm_race(srt_ctx *c)
{
    srt_grad_sumsq(c, SRT_COMPUTE, grad(c, 0));
    srt_grad_norm_finish(c, SRT_DP_COMM, SRT_WORLD);
}

static void clip_race(srt_ctx *c)
{
    srt_grad_sumsq(c, SRT_COMPUTE, grad(c, 0));
    srt_event_record(c, SRT_COMPUTE, 4);
    srt_event_wait(c, SRT_DP_COMM, 4);
    srt_grad_norm_finish(c, SRT_DP_COMM, SRT_WORLD);
    srt_optimizer_step(c, SRT_HOST, host(c), act(c, 0), act(c, 16), act(c, 32), act(c, 48), true);
}

static void nvme_race(srt_ctx *c)
{
    srt_nvme_write(c, SRT_COPY, host(c), 100);
    srt_nvme_read(c, SRT_HOST, srt_hview(c, 4096, 16, SRT_F32), 120);
}

/* Many steps over many distinct ranges, each step ending in a sync of every
 * stream: the collector keeps the table small. */
static int64_t g_peak;
static void long_run(srt_ctx *c)
{
    for (int step = 0; step < 20; step++) {
        for (int i = 0; i < 3000; i++) {
            srt_zero(c, SRT_COMPUTE, srt_dview(c, 8192 + i * 128, 8, SRT_F32));
            if (i % 10 == 0) {
                srt_event_record(c, SRT_COMPUTE, 5);
                srt_event_wait(c, SRT_DP_COMM, 5);
                srt_all_reduce(c, SRT_DP_COMM, SRT_DP, srt_dview(c, 8192 + i * 128, 8, SRT_F32), SRT_SUM);
            }
            if (chk_ranges(c) > g_peak) g_peak = chk_ranges(c);
        }
        for (int s = 0; s < SRT_NSTREAMS; s++) srt_stream_sync(c, (srt_stream)s);
    }
}

/* Without a hook: the default handler. */
static void default_race(void)
{
    srt_ctx *c = make_ctx(NULL);
    raw_race(c);
    _exit(0);
}

int main(void)
{
    /* The default handler first, in a forked child, while this process has
     * not yet started OpenMP's threads (libgomp does not survive a fork after). */
    int pfd[2];
    if (pipe(pfd) != 0) return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        default_race();
    }
    close(pfd[1]);
    char err[4096];
    size_t got = 0;
    ssize_t k;
    while (got + 1 < sizeof err && (k = read(pfd[0], err + got, sizeof err - 1 - got)) > 0) got += (size_t)k;
    err[got] = 0;
    int st = 0;
    waitpid(pid, &st, 0);
    check(WIFEXITED(st) && WEXITSTATUS(st) == 3 &&
          strstr(err, "shardrt: rank 0: internal error: race: copy on copy reads device buffer "
                      "h.0.mlp.out bytes [0, 64) written by gelu_fwd on compute"),
          "without a hook a race ends the process: exit 3 and the message");

    srt_ctx *c = make_ctx(on_race);
    expect(c, raw_race, 1,
           "race: copy on copy reads device buffer h.0.mlp.out bytes [0, 64) written by gelu_fwd "
           "on compute without an event between them", "read after write on another stream: reported");
    expect(c, raw_event, 0, NULL, "read after write with record/wait: clean");
    expect(c, war_race, 1,
           "race: zero on dp_comm writes device buffer grads.bucket0 bytes [0, 64) read by gelu_fwd "
           "on compute without an event between them", "write after read on another stream: reported");
    expect(c, war_event, 0, NULL, "write after read with record/wait: clean");
    expect(c, waw_race, 1,
           "race: all_reduce on dp_comm reads device buffer grads.bucket0 bytes [0, 64) written by "
           "zero on compute without an event between them", "an all-reduce of a buffer still being zeroed");
    expect(c, no_conflict, 0, NULL, "one stream, and reads on two streams: clean");
    expect(c, stale_event, 1, NULL, "an event recorded before the write orders nothing");
    expect(c, chain, 0, NULL, "an event chain over three streams orders the use");
    expect(c, sync_orders, 0, NULL, "a stream sync orders every later op");
    expect(c, adjacent, 0, NULL, "adjacent views on two streams: clean (exact ranges)");
    expect(c, overlap, 1,
           "race: zero on dp_comm writes device buffer h.0.mlp.out bytes [60, 64) written by zero on "
           "compute without an event between them", "a 4-byte overlap: reported with its range");
    expect(c, norm_race, 1,
           "race: grad_norm_finish on dp_comm reads the gradient-norm accumulator written by "
           "grad_sumsq on compute without an event between them", "the norm accumulator is tracked");
    expect(c, clip_race, 1,
           "race: optimizer_step on host reads the gradient clipping scale written by "
           "grad_norm_finish on dp_comm without an event between them", "the clipping scale is tracked");
    expect(c, nvme_race, 1,
           "race: nvme_read on host reads NVMe bytes [120, 164) written by nvme_write on copy "
           "without an event between them", "NVMe ranges are tracked");
    check(chk_races(c) == 8, "chk_races counts every report");
    int64_t allocs = c->nallocs;
    expect(c, long_run, 0, NULL, "60 000 ops over 20 steps: clean");
    check(g_peak >= 3000 && g_peak < 4096 && chk_ranges(c) == 0,
          "the collector keeps the table small, empty after a sync");
    printf("long run: at most %lld live ranges\n", (long long)g_peak);
    check(c->nallocs == allocs, "the checker allocates nothing after creation");
    ctx_destroy(c);

    printf("%d checks, %d failed\n", g_checks, g_failed);
    return g_failed ? 1 : 0;
}
