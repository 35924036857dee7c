/* calibrate.c — shardrt_calibrate, the microbenchmarks behind `shardc calibrate`
 * (docs/cost-model.md, "Calibrating a machine").
 *
 *   shardrt_calibrate compute --out FILE [--quick|--smoke] [--nvme-dir DIR] [--threads N,M,...]
 *   mpirun -np W shardrt_calibrate comm --out FILE [--quick|--smoke] [--ranks-per-node R]
 *
 * Every measurement goes through the runtime's own ops (srt_matmul_fwd,
 * srt_attention_bwd, srt_all_reduce, srt_nvme_write, ...) on the backend this
 * program is linked with, the one the trainers link: libshardrt_cpu.a
 * (OpenBLAS, OpenMP, MPI, io_uring) or libshardrt_cuda.a (cuBLASLt, cuDNN,
 * NCCL).  The context is a synthetic program's (one rank class whose arena
 * holds the largest benchmark), so the kernels, the bf16 staging, the
 * communicators and the swap file are the trainers'.
 *
 * compute (one process; each benchmark at every thread count of --threads in
 * turn, or at OMP_NUM_THREADS's alone; the arena's pages read first): GEMM
 * forward and backward over a grid of shapes in fp32 and bf16, attention
 * forward and backward over sequence lengths and head sizes, an elementwise
 * op over sizes, the activations (GELU, SwiGLU) and the norms (layernorm,
 * RMSNorm, over rows and columns) forward and backward, the
 * AdamW step, the gradient norm's sum of squares, an op's fixed cost, copies between the
 * device and the host arena, NVMe writes and reads; and the reference GEMM
 * and elementwise op of the sharing test alone.
 * comm (under mpirun, W ranks): all-reduce, all-gather and reduce-scatter
 * in groups of every size n dividing the ranks of a node (W/n groups at once,
 * as a layout's tp or dp groups run), send/receive between pairs, across
 * nodes too when --ranks-per-node is below W; then the sharing test: a
 * reference GEMM and elementwise op run by rank 0 alone (the others waiting
 * in MPI), then by every rank at once; then the arrival skew: each rank
 * computes (reference GEMMs) and enters a small all-reduce, and separately a
 * send/receive pair, repeated; the op's time beyond the same op entered at
 * once, for two compute lengths.
 *
 * Each benchmark repeats its op in batches long enough to time (the batch
 * ends with srt_stream_sync, so a GPU's queue is drained) and keeps the
 * fastest batch: on a machine shared with other work a batch only ever gets
 * slower (descheduled, its caches evicted), so the minimum is the machine's
 * own speed where a median would price the others' load; collectives run the same batches on every rank (rank 0
 * chooses the count).  The compute tables and the collectives run in passes
 * (3, each benchmark 2 batches a pass; 2 --quick): every table, then every
 * table again, the fastest batch over all passes kept, so that a slow phase
 * of the machine seconds long falls on one pass of many benchmarks rather
 * than on every batch of a few.  Rank 0 prints "[k/n] what: result" per benchmark on
 * stdout and writes the measurements, one JSON object per row with its
 * seconds, to --out (shardc calibrate merges the phases into a profile).
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#ifndef SRT_CALIBRATE_CUDA
#include <omp.h>
#endif
#ifdef SRT_CALIBRATE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "internal.h"

/* ---- options and the run's state --------------------------------------------------- */

typedef struct Run {
    const char *out, *nvme_dir;
    int64_t ranks_per_node;     /* comm: ranks on one node (W when not given)      */
    int rank, world;
    int done, total;            /* benchmarks printed so far, and planned          */
    int pass;                   /* the pass over the tables (Sizes.passes)         */
    int slot;                   /* the next benchmark's slot in this pass; -1: not
                                   in a pass (bench times it once, Sizes.batches)  */
    cJSON *rows;                /* the measurements                                */
} Run;

static Run R;

/* What a run measures: the grids and sizes, and how long it times each
 * benchmark.  full: the default; quick (--quick): seconds on a CPU; smoke
 * (--smoke): one point per table and one batch, the least that makes a
 * profile, for the emulated CUDA stack of the tests (docs/cuda-emulation.md). */
typedef struct Sizes {
    int gemm[4], ngemm, seq[3], nseq, hs[3], nhs;
    int64_t ew[4], copy[4], nvme[2], coll[4];
    int new, ncopy, nnvme, ncoll;
    int64_t tokens, opt_n, act_n;
    double target, window;      /* seconds: a timed batch; the sharing test   */
    int batches;                /* timed batches of a benchmark run once         */
    int passes, pass_batches;   /* the tables run `passes` times, each benchmark
                                   `pass_batches` batches a pass (bench)         */
    int norm_rows[2], norm_cols[2], nnorm_rows, nnorm_cols;   /* the norms' grid  */
    int64_t opt_span;           /* bytes the optimizer's operands cycle through  */
} Sizes;
#ifdef SRT_CALIBRATE_CUDA
/* The GPU's full grid (shardrt_calibrate_cuda): an H200 reached 743 TFLOP/s
 * in bf16 only at 2048^3 of the CPU's grid, where GPT-2 124M's GEMMs have
 * 16384 rows; attention runs to 4096 tokens (Llama 2); the elementwise and
 * copy sizes go past the 60 MB L2, which held the CPU grid's largest. */
static const Sizes FULL = {{128, 512, 2048, 8192}, 4, {256, 1024, 4096}, 3, {32, 64, 128}, 3,
                           {3 << 20, 48 << 20, 192 << 20, 384 << 20}, {1 << 20, 16 << 20, 64 << 20, 256 << 20},
                           {1 << 20, 16 << 20}, {4 << 10, 64 << 10, 1 << 20, 8 << 20}, 4, 4, 2, 4,
                           16384, 1 << 24, 1 << 22, 10e-3, 300e-3, 5, 3, 2, {1024, 8192}, {1024, 2048}, 2, 2,
                           (int64_t)2 << 30};
#else
static const Sizes FULL = {{32, 128, 512, 2048}, 4, {64, 256, 1024}, 3, {16, 64, 128}, 3,
                           {12 << 10, 192 << 10, 3 << 20, 48 << 20}, {64 << 10, 1 << 20, 16 << 20, 64 << 20},
                           {1 << 20, 16 << 20}, {4 << 10, 64 << 10, 1 << 20, 8 << 20}, 4, 4, 2, 4,
                           1024, 1 << 20, 1 << 18, 10e-3, 300e-3, 5, 3, 2, {128, 1024}, {128, 1024}, 2, 2, 512 << 20};
#endif
static const Sizes QUICK = {{64, 512}, 2, {64, 256}, 2, {32, 64}, 2, {48 << 10, 12 << 20}, {64 << 10, 8 << 20},
                            {1 << 20, 4 << 20}, {4 << 10, 1 << 20}, 2, 2, 2, 2, 1024, 1 << 18, 1 << 16, 2e-3, 50e-3, 3, 2, 2,
                            {128, 1024}, {128, 1024}, 2, 2, 256 << 20};
static const Sizes SMOKE = {{64}, 1, {32}, 1, {16}, 1, {48 << 10}, {64 << 10}, {1 << 20}, {4 << 10}, 1, 1, 1, 1,
                            64, 1 << 12, 1 << 10, 0, 0, 1, 1, 1, {64}, {64}, 1, 1, 0};
static const Sizes *Z = &FULL;

/* Monotonic seconds. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Usage error: exit 2. */
static _Noreturn void usage(const char *msg)
{
    if (msg) fprintf(stderr, "shardrt_calibrate: %s\n", msg);
    fprintf(stderr, "usage: shardrt_calibrate compute --out FILE [--quick|--smoke] [--nvme-dir DIR] [--threads N,M,...]\n"
                    "       mpirun -np W shardrt_calibrate comm --out FILE [--quick|--smoke] [--ranks-per-node R]\n");
    exit(2);
}

/* ---- timing ------------------------------------------------------------------------- */

typedef void (*bench_fn)(srt_ctx *c, void *ud);

/* The compute arena as host memory (the CPU backend; none on CUDA), which
 * bench reads a byte of every page of before each benchmark. */
static struct { const volatile unsigned char *p; int64_t bytes; } g_touch;

/* Reads a byte of every 4 KB page of the compute arena, as a trainer's step
 * touches all of its arena.  On a VM that drops the mapping of a page left
 * untouched for a fraction of a second (this Firecracker guest: 0.05-0.24 us
 * a page at its next access after 0.05 s, 1.4-2.9 after 2 s, two runs of
 * tests/bench/pages), a benchmark whose timed batches all fell in its first
 * cycle through its copies timed those faults and not its kernel: attention
 * of 32 sequences of 64 tokens, head size 16 (11 copies of 4 MB, a batch of
 * two calls) read 8.40 ms a call where its kernel takes 0.9 (docs/cost-model.md,
 * "Every page of the arena is read before each benchmark").  Mapped, the
 * cold rows' operands still come from memory, not from a cache. */
static void touch_arena(void)
{
    unsigned char x = 0;
    for (int64_t i = 0; i < g_touch.bytes; i += 4096) x ^= g_touch.p[i];
    (void)x;
}

/* A benchmark's state across the passes over the tables: its batch length
 * (calls, chosen in the first pass) and its fastest batch so far. */
enum { MAX_SLOTS = 4096 };
static struct { int k; double best; } g_slot[MAX_SLOTS];

/* Seconds of one call of fn: batches of k calls, k chosen (by rank 0 for a
 * collective) so that a batch takes about `target`; the fastest batch / k.
 * Inside a pass over the tables (R.slot >= 0) each benchmark runs
 * pass_batches batches a pass and returns its fastest over the passes so
 * far: the passes run every table before any again, so that a slow phase of
 * a shared machine (another job's burst, seconds long) falls on one pass of
 * many benchmarks, where timing a benchmark's batches back to back let it
 * fall on every batch of a few. */
static double bench(srt_ctx *c, bench_fn fn, void *ud, bool collective)
{
    double target = Z->target;
    int slot = R.slot >= 0 && R.slot < MAX_SLOTS ? R.slot++ : -1, nb = slot >= 0 ? Z->pass_batches : Z->batches;
    touch_arena();
    fn(c, ud);   /* warm-up: first-touch, plans, communicators' buffers */
    srt_stream_sync(c, SRT_COMPUTE);
    int k = slot >= 0 && R.pass > 0 ? g_slot[slot].k : 1;
    for (; !(slot >= 0 && R.pass > 0);) {
        if (collective) MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now();
        for (int i = 0; i < k; i++) fn(c, ud);
        srt_stream_sync(c, SRT_COMPUTE);
        double t = now() - t0;
        /* the next batch's factor (0: this k will do), rank 0's for a collective */
        int grow = t >= target || k >= (1 << 20) ? 0 : t * 8 < target ? 8 : 2;
        if (collective) MPI_Bcast(&grow, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (!grow) break;
        k *= grow;
    }
    double best = slot >= 0 && R.pass > 0 ? g_slot[slot].best : 0;
    for (int j = 0; j < nb; j++) {
        if (collective) MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now();
        for (int i = 0; i < k; i++) fn(c, ud);
        srt_stream_sync(c, SRT_COMPUTE);
        double t = (now() - t0) / k;
        if (best == 0 || t < best) best = t;
    }
    if (slot >= 0) g_slot[slot].k = k, g_slot[slot].best = best;
    return best;
}

/* Starts pass p over the tables (the benchmarks' slots from the first). */
static void pass_start(int p)
{
    R.pass = p, R.slot = 0;
}

/* Whether this is the last pass (its rows are recorded). */
static bool last_pass(void) { return R.slot < 0 || R.pass == Z->passes - 1; }

/* Seconds of one call of fn with rank 0 alone, while the others wait in a
 * barrier as MPI's waiting ranks do (*alone), and with every rank running it
 * at once (*all): a fixed number of calls (about 300 ms of one rank's work,
 * 50 ms --quick) between two barriers, so that time slices longer than a
 * short batch cannot hide the sharing (each rank timing its own batch could
 * run while the others wait); three windows of each, alone and all at once
 * in turn, so that both sample the same moments of a machine whose speed
 * drifts (read apart, the two-rank ratio spread 0.97-1.17 over one day's
 * calibrations), the fastest of each kind (as bench: the others' load only
 * slows a window down).  All at once, a window lasts until its last rank is
 * done (the slowest rank's time: ranks that take turns on the cores finish
 * at different moments, and a step waits for the last; rank 0's alone could
 * be one that the scheduler favoured); alone, rank 0's.  Every rank gets
 * both. */
static void bench_shared(srt_ctx *c, bench_fn fn, void *ud, double *alone, double *all)
{
    fn(c, ud);
    srt_stream_sync(c, SRT_COMPUTE);
    double t0 = now();
    fn(c, ud);
    srt_stream_sync(c, SRT_COMPUTE);
    int k = (int)(Z->window / (now() - t0 + 1e-9)) + 1;
    MPI_Bcast(&k, 1, MPI_INT, 0, MPI_COMM_WORLD);
    double best[2] = {0, 0};
    for (int w = 0; w < 2 * (Z->batches < 3 ? Z->batches : 3); w++) {
        bool every = w % 2 == 1;
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = now();
        if (every || R.rank == 0) {
            for (int i = 0; i < k; i++) fn(c, ud);
            srt_stream_sync(c, SRT_COMPUTE);
        }
        double t = (now() - t0) / k, last = t;
        MPI_Allreduce(&t, &last, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (every) t = last;
        if (w < 2 || t < best[every]) best[every] = t;
    }
    MPI_Bcast(best, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    *alone = best[0], *all = best[1];
}

/* Records a row (rank 0) and prints its progress line. */
static void record(cJSON *row, const char *what, const char *result)
{
    R.done++;
    if (R.rank != 0 || !last_pass()) {
        if (R.rank == 0) {   /* an earlier pass: progress only */
            printf("[%d/%d] pass %d/%d %s: %s\n", R.done, R.total, R.pass + 1, Z->passes, what, result);
            fflush(stdout);
        }
        cJSON_Delete(row);
        return;
    }
    cJSON_AddItemToArray(R.rows, row);
    printf("[%d/%d] %s: %s\n", R.done, R.total, what, result);
    fflush(stdout);
}

/* A row {"table": table, ...} to be filled by the caller. */
static cJSON *row_of(const char *table)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "table", table);
    return r;
}

static const char *dt_name(srt_dtype dt) { return dt == SRT_F32 ? "fp32" : "bf16"; }

/* The thread counts the compute phase measures (--threads; OMP_NUM_THREADS's
 * alone without it), and the one the benchmark running now runs at (0 before
 * the first at_threads). */
enum { MAX_THREAD_COUNTS = 4 };
static int g_thr[MAX_THREAD_COUNTS], g_nthr, g_cur_thr;

/* OMP_NUM_THREADS as the runtime's OpenMP loops see it (1 when unset: the
 * trainers are launched with it set, README). */
static int env_threads(void)
{
    const char *e = getenv("OMP_NUM_THREADS");
    int t = e ? atoi(e) : 1;
    return t > 0 ? t : 1;
}

/* The thread count the benchmark running now runs at (its rows' "threads"). */
static int threads(void) { return g_cur_thr > 0 ? g_cur_thr : env_threads(); }

/* Runs what follows at the i-th thread count of --threads.  The compute
 * phase times each benchmark at every count in turn (one thread, then all
 * the cores), so that the two rates of a shape come from the same moments
 * of a machine whose speed drifts: measured in two processes a minute apart,
 * a calibration 13 minutes after another priced the two-thread layouts 15 %
 * faster than it and the one-thread ones 4-8 % (docs/cost-model.md, "Every
 * benchmark at each thread count in turn"). */
static void at_threads(int i)
{
    g_cur_thr = g_thr[i];
#ifndef SRT_CALIBRATE_CUDA
    omp_set_num_threads(g_cur_thr);
#endif
}

/* ---- the synthetic program ---------------------------------------------------------- */

static srt_program g_prog;
static srt_class g_cls[64];
static srt_param g_param;
static srt_gemm_shape g_gemms[512];

/* A program of tp·dp·pp = world ranks (rank order 0: tp, dp, pp; 1: tp, pp,
 * dp) whose class arena holds `arena` bytes
 * and whose backend scratch covers GEMMs up to dim × dim and `tokens` rows in
 * bf16 (the CPU backend sizes its fp32 staging from the program's shapes). */
static srt_ctx *make_ctx(int64_t tp, int64_t dp, int64_t pp, int order, int64_t arena, int64_t host, int64_t nvme,
                         int64_t dim, int64_t tokens)
{
    memset(&g_prog, 0, sizeof g_prog);
    g_prog.abi = SRT_ABI_VERSION;
    g_prog.name = "shardrt_calibrate";
    g_prog.layers = 1, g_prog.hidden = dim, g_prog.heads = dim >= 128 ? dim / 128 : 1;
    g_prog.kv_heads = g_prog.heads, g_prog.vocab = dim, g_prog.vocab_pad = dim, g_prog.ffn = dim;
    g_prog.seq_len = tokens, g_prog.micro_batch = 1, g_prog.microbatches = 1;
    g_prog.tp = tp, g_prog.dp = dp, g_prog.pp = pp, g_prog.world = tp * dp * pp, g_prog.rank_order = order;
    g_prog.dtype = SRT_BF16;
    g_prog.global_batch = dp, g_prog.steps = 1;
    g_prog.lr = 1e-4, g_prog.beta1 = 0.9, g_prog.beta2 = 0.95, g_prog.eps = 1e-8;
    g_prog.comm_timeout = 120;   /* a hang ends the run (the watchdog) */
    g_param = (srt_param){.name = "w", .rows = dim, .cols = dim, .rows_mem = dim};
    for (int s = 0; s < pp && s < 64; s++) {
        g_cls[s] = (srt_class){.stage = s, .params = &g_param, .nparams = 1, .device_arena = arena,
                               .host_arena = host, .nvme_bytes = nvme};
    }
    g_prog.classes = g_cls;
    g_prog.gemms = g_gemms;
    ctx_options o = {.check = -1, .nvme_dir = R.nvme_dir};
    return ctx_create(&g_prog, &o);
}

/* Declares a GEMM shape for backends that plan them at start-up (CUDA). */
static void declare_gemm(int kind, int N, int C, int OC, srt_dtype dt)
{
    if (g_prog.ngemms == (int)(sizeof g_gemms / sizeof g_gemms[0])) return;
    g_gemms[g_prog.ngemms++] = (srt_gemm_shape){.kind = kind, .N = N, .C = C, .OC = OC, .dt = dt, .out_dt = dt};
}

/* ---- compute benchmarks ------------------------------------------------------------- */

/* Bytes a benchmark's operands cycle through: each call takes the next copy
 * of its operands, so that they come from memory as a trainer's weights and
 * activations do (a trainer touches tens of megabytes a step), not from a
 * cache that a repeated call on the same bytes would keep warm. */
enum { COLD_BYTES = 48 << 20 };

/* The bytes the warm GEMM rows' operands cycle through: more than a core's
 * L2 (512 KB here), less than its share of the last-level cache with 8
 * ranks on a node (32 MB here): the operands of a small model's GEMMs, which
 * a trainer touches again after a few megabytes of other work, come from the
 * last-level cache, not from memory (docs/cost-model.md, "warm GEMMs").
 * The warm grid is the GEMM grid's dimensions up to WARM_MAX_DIM, whose
 * operands fit there. */
enum { WARM_BYTES = 4 << 20, WARM_MAX_DIM = 512 };

/* Bytes rounded up to a whole 4 KB page. */
static int64_t page_round(int64_t bytes) { return (bytes + 4095) & ~(int64_t)4095; }

/* The offset of call i's copy of a set of `set` bytes cycling through `span`
 * bytes (COLD_BYTES, WARM_BYTES or Sizes.opt_span): copies a page-rounded
 * stride apart, as many as fit in the span (one when the set does not), so
 * that every copy lies within the first max(span, set) bytes, which the arena
 * holds.  (Until 2026-12-05 the count was span / set, and a set just past a
 * page multiple had its copies run up to twice the span.) */
static int64_t cycle_copy(int64_t *i, int64_t set, int64_t span)
{
    int64_t stride = page_round(set), copies = stride < span ? span / stride : 1, at = (*i % copies) * stride;
    ++*i;
    return at;
}

static int64_t cold_copy(int64_t *i, int64_t set) { return cycle_copy(i, set, COLD_BYTES); }

/* warm: the operands cycle through WARM_BYTES instead of COLD_BYTES. */
typedef struct Gemm { srt_dtype dt; bool bwd; int m, n, k; int64_t call; bool warm; } Gemm;

static void gemm_run(srt_ctx *c, void *ud)
{
    Gemm *g = ud;
    int64_t w = ops_dtype_size(g->dt), mk = (int64_t)g->m * g->k, nk = (int64_t)g->n * g->k;
    int64_t mn = (int64_t)g->m * g->n;
    int64_t a = cycle_copy(&g->call, (2 * mk + 2 * nk + mn) * w, g->warm ? WARM_BYTES : COLD_BYTES), b = a + mk * w, o = b + nk * w, d = o + mn * w,
            dw = d + mk * w;
    srt_t inp = srt_dview(c, a, mk, g->dt), wt = srt_dview(c, b, nk, g->dt), out = srt_dview(c, o, mn, g->dt);
    srt_t none = {NULL, 0, g->dt};
    if (!g->bwd) srt_matmul_fwd(c, SRT_COMPUTE, out, inp, wt, none, g->m, g->k, g->n);
    else srt_matmul_bwd(c, SRT_COMPUTE, srt_dview(c, d, mk, g->dt), srt_dview(c, dw, nk, g->dt), none, out, inp, wt,
                        g->m, g->k, g->n);
}

/* A row of a rate table (gemm, attention): its dtype, pass and threads. */
static cJSON *rate_row(const char *table, srt_dtype dt, bool bwd)
{
    cJSON *r = row_of(table);
    cJSON_AddStringToObject(r, "dtype", dt_name(dt));
    cJSON_AddStringToObject(r, "pass", bwd ? "bwd" : "fwd");
    cJSON_AddNumberToObject(r, "threads", threads());
    return r;
}

/* The GEMM rows: forward out(m,n) = inp(m,k)·w(n,k)^T, backward dinp and dw. */
static void bench_gemm(srt_ctx *c, Gemm *g)
{
    double s = bench(c, gemm_run, g, false);
    cJSON *r = rate_row("gemm", g->dt, g->bwd);
    cJSON_AddNumberToObject(r, "m", g->m);
    cJSON_AddNumberToObject(r, "n", g->n);
    cJSON_AddNumberToObject(r, "k", g->k);
    if (g->warm) cJSON_AddStringToObject(r, "cache", "warm");   /* absent: cold */
    cJSON_AddNumberToObject(r, "seconds", s);
    char what[128], res[64];
    snprintf(what, sizeof what, "gemm %s %s %dx%dx%d%s", dt_name(g->dt), g->bwd ? "bwd" : "fwd", g->m, g->n, g->k,
             g->warm ? " warm" : "");
    snprintf(res, sizeof res, "%.2f GFLOP/s", (g->bwd ? 4.0 : 2.0) * g->m * g->n * g->k / s * 1e-9);
    record(r, what, res);
}

typedef struct Attn { srt_dtype dt; bool bwd; int B, T, NH, HS; int64_t call; } Attn;

static void attn_run(srt_ctx *c, void *ud)
{
    Attn *a = ud;
    int64_t w = ops_dtype_size(a->dt), N = (int64_t)a->B * a->T, ld = 3 * (int64_t)a->NH * a->HS;
    int64_t set = 2 * N * ld * w + 2 * N * a->NH * a->HS * w + N * a->NH * 4;
    int64_t qkv = cold_copy(&a->call, set), out = qkv + N * ld * w, lse = out + N * a->NH * a->HS * w;
    int64_t dout = lse + N * a->NH * 4, dqkv = dout + N * a->NH * a->HS * w;
    srt_t q = srt_dview(c, qkv, N * ld, a->dt), k = srt_dview(c, qkv + a->NH * a->HS * w, N * ld - a->NH * a->HS, a->dt);
    srt_t v = srt_dview(c, qkv + 2 * a->NH * a->HS * w, N * ld - 2 * a->NH * a->HS, a->dt);
    srt_t o = srt_dview(c, out, N * a->NH * a->HS, a->dt), l = srt_dview(c, lse, N * a->NH, SRT_F32);
    if (!a->bwd) {
        srt_attention_fwd(c, SRT_COMPUTE, o, l, q, k, v, a->B, a->T, a->NH, a->NH, a->HS, (int)ld, (int)ld);
        return;
    }
    srt_t dq = srt_dview(c, dqkv, N * ld, a->dt);
    srt_t dk = srt_dview(c, dqkv + a->NH * a->HS * w, N * ld - a->NH * a->HS, a->dt);
    srt_t dv = srt_dview(c, dqkv + 2 * a->NH * a->HS * w, N * ld - 2 * a->NH * a->HS, a->dt);
    srt_attention_bwd(c, SRT_COMPUTE, dq, dk, dv, srt_dview(c, dout, N * a->NH * a->HS, a->dt), o, l, q, k, v, a->B,
                      a->T, a->NH, a->NH, a->HS, (int)ld, (int)ld);
}

/* Attention rows: B sequences of T tokens, NH heads of HS (no grouped kv). */
static void bench_attn(srt_ctx *c, Attn *a)
{
    double s = bench(c, attn_run, a, false);   /* the backward reads a zeroed out and lse: finite, timed alike */
    cJSON *r = rate_row("attention", a->dt, a->bwd);
    cJSON_AddNumberToObject(r, "batch", a->B);
    cJSON_AddNumberToObject(r, "seq", a->T);
    cJSON_AddNumberToObject(r, "heads", a->NH);
    cJSON_AddNumberToObject(r, "head_dim", a->HS);
    cJSON_AddNumberToObject(r, "seconds", s);
    char what[128], res[64];
    snprintf(what, sizeof what, "attention %s %s B%d T%d heads %d x %d", dt_name(a->dt), a->bwd ? "bwd" : "fwd", a->B,
             a->T, a->NH, a->HS);
    snprintf(res, sizeof res, "%.3f ms", s * 1e3);
    record(r, what, res);
}

typedef struct Ew { srt_dtype dt; int64_t n; } Ew;

static void ew_run(srt_ctx *c, void *ud)
{
    const Ew *e = ud;
    int64_t w = ops_dtype_size(e->dt);
    srt_add_fwd(c, SRT_COMPUTE, srt_dview(c, 0, e->n, e->dt), srt_dview(c, e->n * w, e->n, e->dt),
                srt_dview(c, 2 * e->n * w, e->n, e->dt));
}

/* Elementwise rows: srt_add_fwd over n elements, 3·n·w bytes moved. */
static double bench_ew(srt_ctx *c, Ew *e, const char *table)
{
    double s = bench(c, ew_run, e, strcmp(table, "sharing") == 0);
    if (strcmp(table, "elementwise") != 0) return s;
    cJSON *r = row_of(table);
    cJSON_AddStringToObject(r, "dtype", dt_name(e->dt));
    cJSON_AddNumberToObject(r, "threads", threads());
    cJSON_AddNumberToObject(r, "bytes", (double)(3 * e->n * ops_dtype_size(e->dt)));
    cJSON_AddNumberToObject(r, "seconds", s);
    char what[128], res[64];
    snprintf(what, sizeof what, "elementwise %s %lld bytes", dt_name(e->dt), (long long)(3 * e->n * ops_dtype_size(e->dt)));
    snprintf(res, sizeof res, e->n > 64 ? "%.2f GB/s" : "%.2f us", e->n > 64 ? 3.0 * e->n * ops_dtype_size(e->dt) / s * 1e-9 : s * 1e6);
    record(r, what, res);
    return s;
}

/* An activation over n elements (its output's): GELU (out = gelu(inp);
 * backward dinp += gelu'(inp) dout) or SwiGLU (out(N,H) = silu(a) b, rows of
 * ACT_H; backward da, db), each call on the next copy of its operands. */
enum { ACT_GELU, ACT_SWIGLU, ACT_H = 512 };
static const char *const ACT_NAMES[] = {"gelu", "swiglu"};
typedef struct Act { srt_dtype dt; int op; bool bwd; int64_t n, call; } Act;

static void act_run(srt_ctx *c, void *ud)
{
    Act *a = ud;
    int64_t n = a->n, w = ops_dtype_size(a->dt), at = cold_copy(&a->call, 5 * n * w);
    srt_t x[5];
    for (int i = 0; i < 5; i++) x[i] = srt_dview(c, at + i * n * w, n, a->dt);
    int N = (int)(n / ACT_H);
    if (a->op == ACT_GELU && !a->bwd) srt_gelu_fwd(c, SRT_COMPUTE, x[0], x[1]);
    else if (a->op == ACT_GELU) srt_gelu_bwd(c, SRT_COMPUTE, x[0], x[1], x[2]);
    else if (!a->bwd) srt_swiglu_fwd(c, SRT_COMPUTE, x[0], x[1], x[2], N, ACT_H, ACT_H);
    else srt_swiglu_bwd(c, SRT_COMPUTE, x[0], x[1], x[2], x[3], x[4], N, ACT_H, ACT_H);
}

/* An activation row: elements (the output's) per call. */
static void bench_act(srt_ctx *c, Act *a)
{
    double s = bench(c, act_run, a, false);
    cJSON *r = rate_row("activation", a->dt, a->bwd);
    cJSON_AddStringToObject(r, "op", ACT_NAMES[a->op]);
    cJSON_AddNumberToObject(r, "elements", (double)a->n);
    cJSON_AddNumberToObject(r, "seconds", s);
    char what[128], res[64];
    snprintf(what, sizeof what, "activation %s %s %s %lld elements", ACT_NAMES[a->op], dt_name(a->dt),
             a->bwd ? "bwd" : "fwd", (long long)a->n);
    snprintf(res, sizeof res, "%.2f ns/element", s / (double)a->n * 1e9);
    record(r, what, res);
}

/* A norm over rows of C: layernorm (GPT) or RMSNorm (Llama), forward (out,
 * and the row statistics) or backward (dinp, and dweight, dbias summed over
 * the rows), each call on the next copy of its operands.  It is timed, not
 * streamed: its row sums run per row, and a layer's norm of a few hundred
 * rows costs several times its bytes at the elementwise rate (docs/cost-model.md,
 * "The CPU backend's model"). */
enum { NORM_LAYER, NORM_RMS };
static const char *const NORM_NAMES[] = {"layernorm", "rmsnorm"};
typedef struct Norm { srt_dtype dt; int op; bool bwd; int N, C; int64_t call; } Norm;

/* The bytes of a norm call's operands: four [N, C] tensors (x, out or dout,
 * dinp, spare) and the weights, bias and statistics. */
static int64_t norm_bytes(const Norm *q)
{
    return ((int64_t)4 * q->N * q->C + 4 * q->C) * ops_dtype_size(q->dt) + 2 * (int64_t)q->N * 4;
}

static void norm_run(srt_ctx *c, void *ud)
{
    Norm *q = ud;
    int64_t N = q->N, C = q->C, w = ops_dtype_size(q->dt), at = cold_copy(&q->call, norm_bytes(q));
    srt_t x = srt_dview(c, at, N * C, q->dt), y = srt_dview(c, at + N * C * w, N * C, q->dt);
    srt_t dx = srt_dview(c, at + 2 * N * C * w, N * C, q->dt);
    int64_t v = at + 4 * N * C * w;
    srt_t wt = srt_dview(c, v, C, q->dt), b = srt_dview(c, v + C * w, C, q->dt);
    srt_t dw = srt_dview(c, v + 2 * C * w, C, q->dt), db = srt_dview(c, v + 3 * C * w, C, q->dt);
    srt_t mean = srt_dview(c, v + 4 * C * w, N, SRT_F32), rstd = srt_dview(c, v + 4 * C * w + N * 4, N, SRT_F32);
    if (q->op == NORM_LAYER && !q->bwd) srt_layernorm_fwd(c, SRT_COMPUTE, y, mean, rstd, x, wt, b, q->N, q->C, 1e-5f);
    else if (q->op == NORM_LAYER) srt_layernorm_bwd(c, SRT_COMPUTE, dx, dw, db, y, x, wt, mean, rstd, q->N, q->C);
    else if (!q->bwd) srt_rmsnorm_fwd(c, SRT_COMPUTE, y, rstd, x, wt, q->N, q->C, 1e-5f);
    else srt_rmsnorm_bwd(c, SRT_COMPUTE, dx, dw, y, x, wt, rstd, q->N, q->C);
}

/* A norm row: rows and cols of one call.  Its copies start from zeros: on
 * another benchmark's leftovers it read fp32 values as bf16 pairs (a norm's
 * rstd, 316.2, is the pair 316 and 2.3e-21; the attention's statistics
 * likewise), whose products are subnormal, and the pass's check found them in
 * most quick calibrations run two at a time.  Every copy of one benchmark has
 * the same layout, so it never reads its own statistics as data. */
static void bench_norm(srt_ctx *c, Norm *q)
{
    srt_zero(c, SRT_COMPUTE, srt_dview(c, 0, COLD_BYTES + page_round(norm_bytes(q)), SRT_U8));   /* every copy */
    double s = bench(c, norm_run, q, false);
    cJSON *r = rate_row("norm", q->dt, q->bwd);
    cJSON_AddStringToObject(r, "op", NORM_NAMES[q->op]);
    cJSON_AddNumberToObject(r, "rows", q->N);
    cJSON_AddNumberToObject(r, "cols", q->C);
    cJSON_AddNumberToObject(r, "seconds", s);
    char what[128], res[64];
    snprintf(what, sizeof what, "norm %s %s %s %dx%d", NORM_NAMES[q->op], dt_name(q->dt), q->bwd ? "bwd" : "fwd", q->N, q->C);
    snprintf(res, sizeof res, "%.2f us (%.2f ns/element)", s * 1e6, s / ((double)q->N * q->C) * 1e9);
    record(r, what, res);
}

/* The optimizer's step over n fp32 elements (parameters and gradients, m,
 * v), each call on the next copy of them in Sizes.opt_span bytes: a
 * trainer's parameters and moments are touched once a step and come from
 * memory, past any cache (on this VM kc_adamw_step took 0.55 ns an element
 * at one thread on copies cycling through 1 MB, 0.67 through 48 MB, 1.33
 * through 400 MB, and a trainer's 1.1-1.7; docs/cost-model.md).  The span
 * starts at `base`, past every other benchmark's operands, so that the step
 * reads only its own zeros: on the other benchmarks' leftovers (bf16 pairs
 * read as fp32 among them) it computed subnormals, which the pass's check
 * then found. */
typedef struct Opt { int64_t n, base, call; } Opt;

static void opt_run(srt_ctx *c, void *ud)
{
    Opt *o = ud;
    int64_t n = o->n, at = o->base + (Z->opt_span > 0 ? cycle_copy(&o->call, 4 * n * 4, Z->opt_span) : 0);
    srt_t p = srt_dview(c, at, n, SRT_F32);
    srt_optimizer_step(c, SRT_COMPUTE, p, p, srt_dview(c, at + n * 4, n, SRT_F32), srt_dview(c, at + 2 * n * 4, n, SRT_F32),
                       srt_dview(c, at + 3 * n * 4, n, SRT_F32), true);
}

/* The gradient norm's exact sum of squares over n fp32 elements (their
 * values set by sumsq_fill: the kernel's time depends on how many exponent
 * bins it adds into). */
static void sumsq_run(srt_ctx *c, void *ud)
{
    srt_grad_sumsq(c, SRT_COMPUTE, srt_dview(c, 0, ((const Opt *)ud)->n, SRT_F32));
}

/* n fp32 values spread like gradients (magnitudes 1e-6 .. 1e-2, both signs)
 * at the device arena's start, written through the host arena (which holds
 * at least n floats). */
static void sumsq_fill(srt_ctx *c, int64_t n)
{
    srt_t h = srt_hview(c, 0, n, SRT_F32);
    float *x = h.p;
    uint32_t st = 12345;
    for (int64_t i = 0; i < n; i++) {
        st = st * 1664525u + 1013904223u;
        x[i] = (float)((st >> 8) / 16777216.0 * 1e-2 * ((st & 1) ? 1 : -1) * (st & 2 ? 1e-1 : st & 4 ? 1e-3 : 1));
    }
    srt_copy(c, SRT_COPY, srt_dview(c, 0, n, SRT_F32), h);
    srt_stream_sync(c, SRT_COPY);
}

typedef struct Copy { int64_t bytes; bool to_host; } Copy;

static void copy_run(srt_ctx *c, void *ud)
{
    const Copy *k = ud;
    srt_t d = srt_dview(c, 0, k->bytes, SRT_U8), h = srt_hview(c, 0, k->bytes, SRT_U8);
    srt_copy(c, SRT_COPY, k->to_host ? h : d, k->to_host ? d : h);
    srt_stream_sync(c, SRT_COPY);
}

typedef struct Nvme { int64_t bytes; bool write; } Nvme;

static void nvme_run(srt_ctx *c, void *ud)
{
    const Nvme *k = ud;
    srt_t h = srt_hview(c, 0, k->bytes, SRT_U8);
    if (k->write) srt_nvme_write(c, SRT_COPY, h, 0);
    else srt_nvme_read(c, SRT_COPY, h, 0);
    srt_stream_sync(c, SRT_COPY);
}

/* A row of one of the byte-sized tables (copy, nvme). */
static void record_bytes(const char *table, const char *op, int64_t bytes, double s)
{
    cJSON *r = row_of(table);
    cJSON_AddStringToObject(r, "op", op);
    cJSON_AddNumberToObject(r, "bytes", (double)bytes);
    cJSON_AddNumberToObject(r, "seconds", s);
    char what[128], res[64];
    snprintf(what, sizeof what, "%s %s %lld bytes", table, op, (long long)bytes);
    snprintf(res, sizeof res, "%.2f GB/s", (double)bytes / s * 1e-9);
    record(r, what, res);
}

/* A row of one of the per-element tables (optimizer, sumsq): n elements a
 * call at the current thread count. */
static void record_elements(const char *table, const char *what, int64_t n, double s)
{
    cJSON *r = row_of(table);
    cJSON_AddNumberToObject(r, "threads", threads());
    cJSON_AddNumberToObject(r, "elements", (double)n);
    cJSON_AddNumberToObject(r, "seconds", s);
    char res[64];
    snprintf(res, sizeof res, "%.1f M elements/s", (double)n / s * 1e-6);
    record(r, what, res);
}

/* The reference shapes of the sharing test (compute and comm phases alike). */
static Gemm SHARE_GEMM = {SRT_F32, false, SRT_SHARE_GEMM_DIM, SRT_SHARE_GEMM_DIM, SRT_SHARE_GEMM_DIM, 0, false};
static const Ew SHARE_EW = {SRT_F32, SRT_SHARE_EW_ELEMS};
/* The arena of a context that runs them: the cold cycle, the GEMM's operands
 * and the add's three vectors. */
static const int64_t SHARE_ARENA = COLD_BYTES + 5 * SRT_SHARE_GEMM_DIM * SRT_SHARE_GEMM_DIM * 4 + 3 * SRT_SHARE_EW_ELEMS * 4;

/* With SRT_CHECK=1 (the tests), on the CPU backend: after pass p the
 * device arena holds no subnormal operand, by the upper 16 bits of each
 * 32-bit word: an fp32 value's sign, exponent and top mantissa bits, which
 * show every fp32 subnormal from 2^-133 up, and of bf16 data every other
 * element (the lower halves of fp32 words can look like anything, so the
 * check reads no further).  The benchmarks share the arena, each call's
 * operands a copy further on; with values below 1 left there (sumsq_fill's),
 * GEMM outputs that become later GEMMs' operands shrink pass after pass into
 * subnormals, on which x86 takes up to a hundred times the cycles: a pass's
 * batches then timed arithmetic no trainer runs, and the fastest batch came
 * from the first pass alone.  run_compute zeroes the arena before every
 * pass. */
static void check_operands(srt_ctx *c, int64_t arena, int p)
{
#ifdef SRT_CALIBRATE_CUDA
    (void)c, (void)arena, (void)p;
#else
    if (!ctx_check_wanted(NULL)) return;
    srt_stream_sync(c, SRT_COMPUTE);
    uint32_t *w = srt_dview(c, 0, arena / 4, SRT_F32).p;
    if (getenv("SRT_TEST_SUBNORMAL")) w[arena / 8] = 0x00400000;   /* the tests' seam: one subnormal (2^-127) */
    int64_t bad = 0;
    for (int64_t i = 0; i < arena / 4; i++) bad += (w[i] >> 16 & 0x7f80) == 0 && (w[i] >> 16 & 0x007f) != 0;
    if (bad)
        ctx_die(c, "pass %d left %lld subnormal operands in the arena: its benchmarks timed "
                   "subnormal arithmetic", p + 1, (long long)bad);
#endif
}

/* compute: every single-process benchmark. */
static void run_compute(void)
{
    const int *gd = Z->gemm, *as = Z->seq, *ah = Z->hs;
    const int64_t *eb = Z->ew, *cb = Z->copy, *nb = Z->nvme;
    int ngd = Z->ngemm, nas = Z->nseq, nah = Z->nhs, neb = Z->new, ncb = Z->ncopy, nnb = Z->nnvme;
    int64_t dmax = gd[ngd - 1], tokens = Z->tokens, opt_n = Z->opt_n;
    if (tokens < dmax) tokens = dmax;
    int64_t gemm_bytes = 5 * dmax * dmax * 4, attn_bytes = 16 * tokens * 4 * 128 * 4;
    int64_t arena = COLD_BYTES + (gemm_bytes > attn_bytes ? gemm_bytes : attn_bytes);
    if (arena < COLD_BYTES + 5 * Z->act_n * 4) arena = COLD_BYTES + 5 * Z->act_n * 4;
    if (arena < 4 * opt_n * 4) arena = 4 * opt_n * 4;   /* the gradient norm's sums at the arena's start */
    Norm nmax = {SRT_F32, NORM_LAYER, false, Z->norm_rows[Z->nnorm_rows - 1], Z->norm_cols[Z->nnorm_cols - 1], 0};
    if (arena < COLD_BYTES + norm_bytes(&nmax)) arena = COLD_BYTES + norm_bytes(&nmax);
    if (arena < cb[ncb - 1]) arena = cb[ncb - 1];
    int64_t opt_base = page_round(arena);   /* the optimizer's own span, past the rest */
    arena = opt_base + Z->opt_span + 4 * opt_n * 4;
    int64_t host = cb[ncb - 1] > nb[nnb - 1] ? cb[ncb - 1] : nb[nnb - 1];
    if (host < opt_n * 4) host = opt_n * 4;
    int nwd = 0;   /* the warm grid: the GEMM grid's dimensions up to WARM_MAX_DIM */
    while (nwd < ngd && gd[nwd] <= WARM_MAX_DIM) nwd++;
    R.total = ((2 * 2 * ngd * ngd * ngd + 2 * 2 * nwd * nwd * nwd + 2 * 2 * nas * nah + 2 * neb + 2 * 2 * 2 +
                2 * 2 * 2 * Z->nnorm_rows * Z->nnorm_cols + 1 + 1 + 1) * g_nthr + 2 * ncb + 2 * nnb) * Z->passes;
    /* the CUDA backend plans its GEMMs at start-up: declare the grid */
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < ngd; i++)
            for (int j = 0; j < ngd; j++)
                for (int l = 0; l < ngd; l++) {
                    srt_dtype dt = d ? SRT_BF16 : SRT_F32;
                    declare_gemm(SRT_GEMM_FWD, gd[i], gd[l], gd[j], dt);
                    declare_gemm(SRT_GEMM_BWD_DATA, gd[i], gd[l], gd[j], dt);
                    declare_gemm(SRT_GEMM_BWD_WEIGHT, gd[i], gd[l], gd[j], dt);
                }
    srt_ctx *c = make_ctx(1, 1, 1, 0, arena, host, nb[nnb - 1], dmax, tokens);
#ifndef SRT_CALIBRATE_CUDA
    g_touch.p = srt_dview(c, 0, arena, SRT_U8).p, g_touch.bytes = arena;
#endif
    for (int p = 0; p < Z->passes; p++) {   /* every table, then every table again */
        pass_start(p);
        srt_zero(c, SRT_COMPUTE, srt_dview(c, 0, arena, SRT_U8));   /* no pass inherits another's values */
        for (int warm = 0; warm < 2; warm++) {  /* the cold grid, then the warm one (its first nwd dimensions) */
            int n = warm ? nwd : ngd;
            for (int d = 0; d < 2; d++)
                for (int bwd = 0; bwd < 2; bwd++)
                    for (int i = 0; i < n; i++)
                        for (int j = 0; j < n; j++)
                            for (int l = 0; l < n; l++) {
                                Gemm g = {d ? SRT_BF16 : SRT_F32, bwd, gd[i], gd[j], gd[l], 0, warm};
                                for (int t = 0; t < g_nthr; t++) at_threads(t), bench_gemm(c, &g);
                            }
        }
        for (int d = 0; d < 2; d++)
            for (int bwd = 0; bwd < 2; bwd++)
                for (int i = 0; i < nas; i++)
                    for (int j = 0; j < nah; j++) {
                        Attn a = {d ? SRT_BF16 : SRT_F32, bwd, (int)(tokens / as[i] > 0 ? tokens / as[i] : 1), as[i], 4, ah[j], 0};
                        for (int t = 0; t < g_nthr; t++) at_threads(t), bench_attn(c, &a);
                    }
        for (int d = 0; d < 2; d++)
            for (int i = 0; i < neb; i++) {
                srt_dtype dt = d ? SRT_BF16 : SRT_F32;
                Ew e = {dt, eb[i] / 3 / ops_dtype_size(dt)};
                for (int t = 0; t < g_nthr; t++) at_threads(t), bench_ew(c, &e, "elementwise");
            }
        for (int d = 0; d < 2; d++)
            for (int op = ACT_GELU; op <= ACT_SWIGLU; op++)
                for (int bwd = 0; bwd < 2; bwd++) {
                    Act a = {d ? SRT_BF16 : SRT_F32, op, bwd, Z->act_n / ACT_H * ACT_H, 0};
                    for (int t = 0; t < g_nthr; t++) at_threads(t), bench_act(c, &a);
                }
        for (int d = 0; d < 2; d++)
            for (int op = NORM_LAYER; op <= NORM_RMS; op++)
                for (int bwd = 0; bwd < 2; bwd++)
                    for (int i = 0; i < Z->nnorm_rows; i++)
                        for (int j = 0; j < Z->nnorm_cols; j++) {
                            Norm q = {d ? SRT_BF16 : SRT_F32, op, bwd, Z->norm_rows[i], Z->norm_cols[j], 0};
                            for (int t = 0; t < g_nthr; t++) at_threads(t), bench_norm(c, &q);
                        }
        Opt o = {opt_n, opt_base, 0};
        for (int t = 0; t < g_nthr; t++) {
            at_threads(t);
            Ew tiny = {SRT_F32, 16};
            double s = bench(c, ew_run, &tiny, false);
            cJSON *r = row_of("launch");
            cJSON_AddNumberToObject(r, "threads", threads());
            cJSON_AddNumberToObject(r, "seconds", s);
            char res[64];
            snprintf(res, sizeof res, "%.2f us", s * 1e6);
            record(r, "an op's fixed cost (add of 16 elements)", res);
            record_elements("optimizer", "optimizer AdamW fp32", o.n, bench(c, opt_run, &o, false));
        }
        sumsq_fill(c, o.n);
        for (int t = 0; t < g_nthr; t++)
            at_threads(t), record_elements("sumsq", "gradient norm's sum of squares fp32", o.n,
                                           bench(c, sumsq_run, &o, false));
        for (int dir = 0; dir < 2; dir++)
            for (int i = 0; i < ncb; i++) {
                Copy k = {cb[i], dir == 1};
                record_bytes("copy", dir ? "d2h" : "h2d", cb[i], bench(c, copy_run, &k, false));
            }
        for (int w = 1; w >= 0; w--)
            for (int i = 0; i < nnb; i++) {
                Nvme k = {nb[i], w == 1};
                record_bytes("nvme", w ? "write" : "read", nb[i], bench(c, nvme_run, &k, false));
            }
        check_operands(c, arena, p);
    }
    R.slot = -1;
    ctx_destroy(c);
}

/* ---- communication benchmarks ------------------------------------------------------- */

typedef struct Coll { int op; srt_group g; int64_t bytes, n; } Coll;
enum { C_ALL_REDUCE, C_ALL_GATHER, C_REDUCE_SCATTER, C_SENDRECV };
static const char *const COLL_NAMES[] = {"all_reduce", "all_gather", "reduce_scatter", "send_recv"};

static void coll_run(srt_ctx *c, void *ud)
{
    const Coll *k = ud;
    int64_t e = k->bytes / 4;   /* fp32 elements of the full buffer */
    switch (k->op) {
    case C_ALL_REDUCE: srt_all_reduce(c, SRT_DP_COMM, k->g, srt_dview(c, 0, e, SRT_F32), SRT_SUM); break;
    case C_ALL_GATHER:
        srt_all_gather(c, SRT_DP_COMM, k->g, srt_dview(c, 0, e, SRT_F32), srt_dview(c, e * 4, e / k->n, SRT_F32));
        break;
    case C_REDUCE_SCATTER:
        srt_reduce_scatter(c, SRT_DP_COMM, k->g, srt_dview(c, e * 4, e / k->n, SRT_F32), srt_dview(c, 0, e, SRT_F32));
        break;
    default: {   /* a round trip between pipeline neighbours 0 and 1 (others idle) */
        srt_t x = srt_dview(c, 0, e, SRT_F32);
        if (srt_group_rank(c, SRT_PP) > 1) break;
        if (srt_group_rank(c, SRT_PP) == 0) {
            srt_send(c, SRT_PP_COMM, x, 1);
            srt_recv(c, SRT_PP_COMM, x, 1);
        } else {
            srt_recv(c, SRT_PP_COMM, x, 0);
            srt_send(c, SRT_PP_COMM, x, 0);
        }
        srt_stream_sync(c, SRT_PP_COMM);
    }
    }
    srt_stream_sync(c, SRT_DP_COMM);
}

/* One collective over the sizes: a row per size ("span": intra or inter). */
static void bench_coll(srt_ctx *c, int op, srt_group g, int64_t n, const char *span, const int64_t *sizes, int ns)
{
    for (int i = 0; i < ns; i++) {
        Coll k = {op, g, sizes[i] / (4 * n) * (4 * n), n};
        double s = bench(c, coll_run, &k, true);
        if (op == C_SENDRECV) s /= 2;   /* one way */
        cJSON *r = row_of("collective");
        cJSON_AddStringToObject(r, "op", COLL_NAMES[op]);
        cJSON_AddStringToObject(r, "span", span);
        cJSON_AddNumberToObject(r, "ranks_per_node", (double)R.ranks_per_node);
        cJSON_AddNumberToObject(r, "group", (double)n);
        cJSON_AddNumberToObject(r, "bytes", (double)k.bytes);
        cJSON_AddNumberToObject(r, "seconds", s);
        char what[160], res[64];
        snprintf(what, sizeof what, "%s %s, %lld ranks a node, groups of %lld, %lld bytes", COLL_NAMES[op], span,
                 (long long)R.ranks_per_node, (long long)n, (long long)k.bytes);
        snprintf(res, sizeof res, "%.1f us", s * 1e6);
        record(r, what, res);
    }
}


/* A reference kernel the skew benchmark computes between the ops: seconds
 * a call alone and with every rank at once (the sharing test's). */
typedef struct SkewRef { bench_fn fn; void *ud; double alone, shared; } SkewRef;

/* Seconds one collective (or send/receive round trip) takes on each rank
 * when every rank first computes `reps` calls of the reference: the mean
 * over the ranks of the mean over the repetitions.  Ranks that take turns
 * on the cores finish their compute at different moments and wait for each
 * other inside the collective.  *wall: the seconds of a repetition, compute
 * and collective, from a barrier to the last one's end (the mean over the
 * ranks): what the waiting cost the step, since a rank that waits gives its
 * core to the late ones, which then compute faster. */
static double after_compute(srt_ctx *c, const Coll *k, const SkewRef *ref, int reps, int iters, double *wall)
{
    coll_run(c, (void *)k);
    MPI_Barrier(MPI_COMM_WORLD);
    double sum = 0, start = now();
    for (int it = 0; it < iters; it++) {
        for (int i = 0; i < reps; i++) ref->fn(c, ref->ud);
        srt_stream_sync(c, SRT_COMPUTE);
        double t0 = now();
        coll_run(c, (void *)k);
        sum += now() - t0;
    }
    double per[2] = {sum / iters, (now() - start) / iters}, all[2] = {0, 0};
    MPI_Allreduce(per, all, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    *wall = all[1] / R.world;
    return all[0] / R.world;
}

/* The arrival skew: how much longer a small all-reduce (or a send/receive
 * one way) takes when each rank computes before it, as a training step does,
 * than the same op entered by every rank at once (bench, as the collective
 * rows time it); a row per compute length between the ops: about 0.25 and
 * 1 ms of the elementwise reference (a layer's tensor-parallel halves are
 * that short; ranks that compute less than a time slice between the ops
 * take turns in step and hardly wait), and 2 ms and four times that of the
 * GEMM reference (refs[0], refs[1]).  Each row also has the step's loss
 * (`excess_seconds`): a repetition's wall time less the same compute with
 * every rank busy at once and the op entered at once, the least over three
 * windows — the wait is no loss where the waiting rank's core went to a
 * late one. */
static void bench_skew(srt_ctx *c, int op, const SkewRef refs[2])
{
    Coll k = {op, op == C_SENDRECV ? SRT_PP : SRT_DP, 4096, op == C_SENDRECV ? 2 : R.world};
    double at_once = bench(c, coll_run, &k, true);
    int iters = 4 * Z->batches;
    static const double lengths[] = {0.25e-3, 1e-3, 2e-3, 8e-3};   /* the last two: 2 ms of GEMMs and 4× those */
    for (int m = 0; m < 4; m++) {
        const SkewRef *ref = m < 2 ? &refs[1] : &refs[0];
        int reps = Z->window > 0 ? (int)(lengths[m] / ref->alone) + 1 : 1;
        /* the wait from the first window; the loss the least over three (as
         * bench_shared: the machine's other load only ever adds to it) */
        double wall, s = after_compute(c, &k, ref, reps, iters, &wall) - at_once, x = wall;
        for (int w = 1; w < (Z->batches < 3 ? Z->batches : 3); w++) {
            after_compute(c, &k, ref, reps, iters, &wall);
            x = fmin(x, wall);
        }
        x -= reps * ref->shared + at_once;
        if (op == C_SENDRECV) s /= 2, x /= 2;   /* one way */
        cJSON *r = row_of("skew");
        cJSON_AddStringToObject(r, "op", COLL_NAMES[op]);
        cJSON_AddNumberToObject(r, "ranks_per_node", (double)R.ranks_per_node);
        cJSON_AddNumberToObject(r, "threads", threads());
        cJSON_AddNumberToObject(r, "compute_seconds", reps * ref->alone);
        cJSON_AddNumberToObject(r, "seconds", s > 0 ? s : 0);
        cJSON_AddNumberToObject(r, "excess_seconds", x > 0 ? x : 0);
        char what[128], res[64];
        snprintf(what, sizeof what, "arrival skew, %s on %lld ranks after %.2f ms of compute", COLL_NAMES[op],
                 (long long)R.world, reps * ref->alone * 1e3);
        snprintf(res, sizeof res, "%.1f us (the step's loss %.1f us)", (s > 0 ? s : 0) * 1e6, (x > 0 ? x : 0) * 1e6);
        record(r, what, res);
    }
}

/* comm: the collectives of every group size on this launch's ranks, then the
 * sharing test and the arrival skew. */
static void run_comm(void)
{
    const int64_t *sz = Z->coll;
    int ns = Z->ncoll;
    int64_t W = R.world, L = R.ranks_per_node, nodes = W / L, arena = 2 * sz[ns - 1] + 4096;
    int ngroups = 0;
    for (int64_t n = 2; n <= L; n++) ngroups += L % n == 0;
    R.total = (ngroups * 3 * ns + (L % 2 == 0 ? ns : 0) + (nodes > 1 ? 3 * ns + ns : 0)) * Z->passes + 1 + 4 +
              (W % 2 == 0 ? 4 : 0);
    for (int p = 0; p < Z->passes; p++) {   /* every collective, then every one again */
        pass_start(p);
        for (int64_t n = 2; n <= L; n++) {
            if (L % n) continue;
            srt_ctx *c = make_ctx(n, W / n, 1, 0, arena, 4096, 0, 64, 64);
            for (int op = C_ALL_REDUCE; op <= C_REDUCE_SCATTER; op++) bench_coll(c, op, SRT_TP, n, "intra", sz, ns);
            ctx_destroy(c);
        }
        if (L % 2 == 0) {   /* pairs of neighbours on a node: pp 2 inside the rank order's tp, pp, dp */
            srt_ctx *c = make_ctx(1, W / 2, 2, 1, arena, 4096, 0, 64, 64);
            bench_coll(c, C_SENDRECV, SRT_PP, 2, "intra", sz, ns);
            ctx_destroy(c);
        }
        if (nodes > 1) {   /* one member per node: dp (or pp) across the nodes, tp inside */
            srt_ctx *c = make_ctx(L, nodes, 1, 0, arena, 4096, 0, 64, 64);
            for (int op = C_ALL_REDUCE; op <= C_REDUCE_SCATTER; op++) bench_coll(c, op, SRT_DP, nodes, "inter", sz, ns);
            ctx_destroy(c);
            c = make_ctx(L, 1, nodes, 0, arena, 4096, 0, 64, 64);
            bench_coll(c, C_SENDRECV, SRT_PP, 2, "inter", sz, ns);
            ctx_destroy(c);
        }
    }
    R.slot = -1;
    /* every rank runs the reference kernels at once */
    srt_ctx *c = make_ctx(1, W, 1, 0, SHARE_ARENA, 4096, 0, 256, 256);
    double ag, ae, sg, se;
    bench_shared(c, gemm_run, &SHARE_GEMM, &ag, &sg);
    bench_shared(c, ew_run, (void *)&SHARE_EW, &ae, &se);
    cJSON *r = row_of("sharing");
    cJSON_AddNumberToObject(r, "ranks_per_node", (double)L);
    cJSON_AddNumberToObject(r, "threads", threads());
    cJSON_AddNumberToObject(r, "gemm_seconds", sg);
    cJSON_AddNumberToObject(r, "elementwise_seconds", se);
    cJSON_AddNumberToObject(r, "alone_gemm_seconds", ag);
    cJSON_AddNumberToObject(r, "alone_elementwise_seconds", ae);
    char what[96], res[96];
    snprintf(what, sizeof what, "sharing, %lld ranks at once against one alone", (long long)W);
    snprintf(res, sizeof res, "gemm %.3f / %.3f ms, elementwise %.3f / %.3f ms", sg * 1e3, ag * 1e3, se * 1e3, ae * 1e3);
    record(r, what, res);
    SkewRef refs[2] = {{gemm_run, &SHARE_GEMM, ag, sg}, {ew_run, (void *)&SHARE_EW, ae, se}};
    bench_skew(c, C_ALL_REDUCE, refs);
    ctx_destroy(c);
    if (W % 2 == 0) {   /* pipeline neighbours, pairs as in the send/receive rows */
        c = make_ctx(1, W / 2, 2, 1, SHARE_ARENA, 4096, 0, 256, 256);
        bench_skew(c, C_SENDRECV, refs);
        ctx_destroy(c);
    }
}

/* ---- main --------------------------------------------------------------------------- */

/* Writes the rows as {"rows": [...]} to --out (rank 0), and the BLAS kernels
 * they ran ("blas", the CPU backend's); false on failure. */
static bool write_rows(void)
{
    cJSON *doc = cJSON_CreateObject();
    if (g_backend.blas) cJSON_AddStringToObject(doc, "blas", g_backend.blas());
    cJSON_AddItemToObject(doc, "rows", R.rows);
    char *text = cJSON_Print(doc);
    FILE *f = text ? fopen(R.out, "w") : NULL;
    bool ok = f && fputs(text, f) >= 0;
    if (f) ok = fclose(f) == 0 && ok;
    if (!ok) fprintf(stderr, "shardrt_calibrate: cannot write %s\n", R.out);
    free(text);
    cJSON_Delete(doc);
    return ok;
}

/* --threads N,M,...: the compute phase's thread counts (at most
 * MAX_THREAD_COUNTS, each 1 to 4096). */
static void parse_threads(const char *v)
{
    for (const char *p = v;;) {
        char *end;
        long t = strtol(p, &end, 10);
        if (end == p || t < 1 || t > 4096 || g_nthr == MAX_THREAD_COUNTS)
            usage("--threads takes up to 4 thread counts, e.g. --threads 1,8");
        g_thr[g_nthr++] = (int)t;
        if (*end == '\0') return;
        if (*end != ',') usage("--threads takes thread counts separated by commas, e.g. --threads 1,8");
        p = end + 1;
    }
}

int main(int argc, char **argv)
{
#ifdef SRT_CALIBRATE_CUDA
    /* `devices`: the node's GPUs, for shardc calibrate's rank counts (no MPI, no context) */
    if (argc == 2 && strcmp(argv[1], "devices") == 0) {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
        printf("%d\n", n);
        return 0;
    }
#endif
    if (g_backend.start) g_backend.start(argv);    /* the trainers' start: OpenMP's wait, OpenBLAS's kernels */
    if (argc < 2) usage(NULL);
    bool comm = strcmp(argv[1], "comm") == 0;
    if (!comm && strcmp(argv[1], "compute") != 0) usage("the phases are 'compute' and 'comm'");
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quick") == 0) Z = &QUICK;
        else if (strcmp(a, "--smoke") == 0) Z = &SMOKE;
        else if (strcmp(a, "--out") == 0 && v) R.out = v, i++;
        else if (strcmp(a, "--nvme-dir") == 0 && v) R.nvme_dir = v, i++;
        else if (strcmp(a, "--ranks-per-node") == 0 && v) R.ranks_per_node = atoll(v), i++;
        else if (strcmp(a, "--threads") == 0 && v && !comm) parse_threads(v), i++;
        else usage("unknown argument");
    }
    if (!R.out) usage("--out FILE is required");
    if (g_nthr == 0) g_thr[g_nthr++] = env_threads();
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &R.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &R.world);
    if (R.ranks_per_node <= 0) R.ranks_per_node = R.world;
    if (R.world % R.ranks_per_node != 0) {
        if (R.rank == 0) fprintf(stderr, "shardrt_calibrate: --ranks-per-node %lld does not divide %d ranks\n",
                                 (long long)R.ranks_per_node, R.world);
        MPI_Finalize();
        return 2;
    }
    if (!comm && R.world != 1) {
        if (R.rank == 0) fprintf(stderr, "shardrt_calibrate: compute runs as one process\n");
        MPI_Finalize();
        return 2;
    }
    R.rows = cJSON_CreateArray();
    R.slot = -1;   /* not in a pass until run_compute or run_comm starts one */
    if (comm) run_comm();
    else run_compute();
    bool ok = R.rank != 0 || write_rows();
    if (R.rank != 0) cJSON_Delete(R.rows);
    MPI_Finalize();
    return ok ? 0 : 1;
}
