/* test_cost_props.c — properties the cost model and the simulation must have
 * whatever their constants: a faster link or a faster GPU never makes a step
 * slower, more work never makes it faster, overlapping communication is never
 * slower than not overlapping it (overlap_comm, overlap_param_gather, tp_comm_overlap, which never changes a
 * step's FLOPs and claims nothing on the CPU backend), more microbatches never give a bigger
 * bubble fraction, interleaving never a bigger bubble than 1F1B, the CPU
 * ranks' arrival skew is never negative, 0 without oversubscription and
 * never smaller with more ranks on the cores.  Each
 * compares simulated steps of small plans (no timings of this machine). */
#include "plan_fixture.h"
#include "sim.h"

#include <unistd.h>
#include "../bench/costmodel/calib.h"

/* The simulated step of a GPT (layers × hidden) with the given blocks;
 * bubble (when not NULL) gets the simulated bubble; < 0 if it does not plan. */
static double step_vocab(int layers, int hidden, int vocab, const char *parallel, const char *zero, const char *train,
                         const char *cluster, double *bubble)
{
    const char *text = arena_printf(&g_arena,
        "model gpt { layers = %d  hidden = %d  heads = %d  vocab = %d  seq_len = 2048 }\n"
        "parallel { %s }\nzero { %s }\nprecision { dtype = bf16 }\n"
        "checkpointing { activations = full }\ntrain { %s }\ncluster { %s }\n",
        layers, hidden, hidden / 128, vocab, parallel, zero, train, cluster);
    Plan *mp = cal_plan(text);
    if (!mp) {
        fprintf(stderr, "does not plan:\n%s", text);
        return -1;
    }
    Sim sim;
    const char *err = sim_simulate(mp, NULL, &sim);
    if (err) {
        fprintf(stderr, "%s\n%s", err, text);
        return -1;
    }
    if (bubble) *bubble = sim.bubble;
    return sim.step_time;
}

/* The same of GPT-2's vocabulary. */
static double step_of(int layers, int hidden, const char *parallel, const char *zero, const char *train,
                      const char *cluster, double *bubble)
{
    return step_vocab(layers, hidden, 51200, parallel, zero, train, cluster, bubble);
}

/* x is at most y, up to rounding (fails on NaN). */
static bool le(double x, double y) { return x >= 0 && x <= y * (1 + 1e-9); }

/* The steps of one layout over increasing values of one cluster key (a
 * bandwidth or a peak): each no slower than the one before. */
static void check_never_slower(int hidden, const char *parallel, const char *zero, const char *train,
                               const char *cluster, const char *key, const char *const *vals, int nvals)
{
    double prev = -1;
    for (int i = 0; i < nvals; i++) {
        const char *cl = arena_printf(&g_arena, "%s  %s = %s", cluster, key, vals[i]);
        double t = step_of(8, hidden, parallel, zero, train, cl, NULL);
        CHECK(t > 0);
        if (prev >= 0) CHECK(le(t, prev));
        prev = t;
    }
}

/* A faster network (inter_node) or NVLink (intra_node) never slows a step:
 * tp and pp inside and across nodes, ZeRO-1 and ZeRO-3 data parallelism. */
static void test_monotone_in_bandwidth(void)
{
    static const struct { const char *parallel, *zero; } layouts[] = {
        {"tp = 2  pp = 2  dp = 8", "stage = 1"},
        {"tp = 8  pp = 2  dp = 2  sequence_parallel = on", "stage = 0"},
        {"dp = 32", "stage = 3"},
        {"dp = 32", "stage = 2  overlap_comm = on"},
    };
    static const char *const nets[] = {"5GB/s", "12.5GB/s", "25GB/s", "50GB/s", "100GB/s"};
    static const char *const nvl[] = {"100GB/s", "300GB/s", "900GB/s"};
    const char *train = "global_batch = 64  micro_batch = 1", *cl = "nodes = 4  gpus_per_node = 8  gpu = a100_80gb";
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        check_never_slower(4096, layouts[l].parallel, layouts[l].zero, train, cl, "inter_node", nets, (int)(sizeof nets / sizeof nets[0]));
        check_never_slower(4096, layouts[l].parallel, layouts[l].zero, train, cl, "intra_node", nvl, (int)(sizeof nvl / sizeof nvl[0]));
    }
    /* the formulas themselves: more bandwidth, less time; more bytes or ranks, more */
    for (int coll = COLL_ALLREDUCE; coll <= COLL_SENDRECV; coll++) {
        CHECK(cost_collective(coll, 1e9, 8, 50e9, 5e-6) < cost_collective(coll, 1e9, 8, 25e9, 5e-6));
        CHECK(cost_collective(coll, 1e9, 8, 25e9, 5e-6) < cost_collective(coll, 2e9, 8, 25e9, 5e-6));
        CHECK(cost_collective(coll, 1e9, 8, 25e9, 5e-6) <= cost_collective(coll, 1e9, 16, 25e9, 5e-6));
    }
}

/* A faster GPU (peak, HBM) never slows a step; more layers never speed it up;
 * the Hopper profile is faster than the A100's on the same plan. */
static void test_monotone_in_compute(void)
{
    static const char *const peaks[] = {"100", "312", "989", "2000"};
    static const char *const hbms[] = {"1TB/s", "2TB/s", "4TB/s"};
    const char *layout = "tp = 2  pp = 2  dp = 2", *train = "global_batch = 32  micro_batch = 1";
    const char *cl = "nodes = 1  gpus_per_node = 8  gpu = a100_80gb";
    check_never_slower(4096, layout, "stage = 1", train, cl, "bf16_tflops", peaks, (int)(sizeof peaks / sizeof peaks[0]));
    check_never_slower(4096, layout, "stage = 1", train, cl, "hbm_bandwidth", hbms, (int)(sizeof hbms / sizeof hbms[0]));
    /* a faster peak is strictly faster here: the step is mostly compute */
    CHECK(step_of(8, 4096, layout, "stage = 1", train, arena_printf(&g_arena, "%s  bf16_tflops = 989", cl), NULL) <
          step_of(8, 4096, layout, "stage = 1", train, arena_printf(&g_arena, "%s  bf16_tflops = 312", cl), NULL));
    double prev = -1;
    for (int layers = 4; layers <= 32; layers *= 2) {
        double t = step_of(layers, 4096, layout, "stage = 1", train, cl, NULL);
        CHECK(t > 0);
        if (prev >= 0) CHECK(le(prev, t) && prev < t);
        prev = t;
    }
    double a100 = step_of(8, 4096, layout, "stage = 1", train, cl, NULL);
    double h100 = step_of(8, 4096, layout, "stage = 1", train, "nodes = 1  gpus_per_node = 8  gpu = h100_sxm_80gb", NULL);
    CHECK(h100 > 0 && h100 < a100);
}

/* An overlap key on (zero block `on`) is never slower than off (`off`), for
 * ZeRO stages lo..hi, with and without a pipeline (not ZeRO 2-3 with pp: not
 * supported, as DeepSpeed), on a slow and a fast network; strictly faster for
 * dp 16 across two nodes on 100 Gb/s Ethernet when strict. */
static void check_overlap(const char *what, const char *on_fmt, const char *off_fmt, int lo, int hi, bool strict)
{
    static const char *const layouts[] = {"dp = 16", "pp = 2  dp = 8"};
    static const char *const nets[] = {"network = eth100", "network = ib200"};
    for (int stage = lo; stage <= hi; stage++)
        for (int l = 0; l < 2; l++)
            for (int n = 0; n < 2; n++) {
                if (stage >= 2 && l == 1) continue;
                const char *cl = arena_printf(&g_arena, "nodes = 2  gpus_per_node = 8  gpu = a100_80gb  %s", nets[n]);
                const char *on = arena_printf(&g_arena, on_fmt, stage), *off = arena_printf(&g_arena, off_fmt, stage);
                double t_on = step_of(8, 2048, layouts[l], on, "global_batch = 64  micro_batch = 1", cl, NULL);
                double t_off = step_of(8, 2048, layouts[l], off, "global_batch = 64  micro_batch = 1", cl, NULL);
                if (!(t_on > 0 && t_off > 0 && le(t_on, t_off)))
                    fprintf(stderr, "%s, stage %d, %s, %s: on %.6f s, off %.6f s\n", what, stage, layouts[l], nets[n], t_on, t_off);
                CHECK(t_on > 0 && t_off > 0 && le(t_on, t_off));
                if (strict && l == 0 && n == 0) CHECK(t_on < t_off);
            }
}

/* Overlapping the data-parallel communication is never slower than not
 * overlapping it: the gradient reduction with the backward (overlap_comm, every
 * ZeRO stage that reduces in buckets), and the distributed optimizer's
 * parameter all-gather per bucket at the start of the next step instead of
 * after the optimizer (overlap_param_gather, ZeRO 1-2; strictly faster where
 * the gather is exposed). */
static void test_overlap_never_slower(void)
{
    check_overlap("overlap_comm", "stage = %d  overlap_comm = on  reduce_bucket = 2e7",
                  "stage = %d  overlap_comm = off  reduce_bucket = 2e7", 0, 3, false);
    check_overlap("overlap_param_gather", "stage = %d  overlap_comm = on  reduce_bucket = 2e7  overlap_param_gather = on",
                  "stage = %d  overlap_comm = on  reduce_bucket = 2e7", 1, 2, true);
}

/* Pipeline transfers split over the tp ranks (parallel.pp_scatter_gather:
 * each sends 1/tp, the receiver all-gathers over NVLink) are never slower than
 * whole boundaries from every tp rank, and strictly faster when the stages sit
 * on two nodes of a slow network (tp 8 · pp 2, no sequence parallelism). */
static void test_pp_scatter_gather_never_slower(void)
{
    static const char *const nets[] = {"network = eth100", "network = ib200"};
    for (int n = 0; n < 2; n++) {
        const char *cl = arena_printf(&g_arena, "nodes = 2  gpus_per_node = 8  gpu = a100_80gb  %s", nets[n]);
        const char *train = "global_batch = 16  micro_batch = 1";
        double t_on = step_of(8, 2048, "tp = 8  pp = 2  dp = 1", "stage = 0", train, cl, NULL);
        double t_off = step_of(8, 2048, "tp = 8  pp = 2  dp = 1  pp_scatter_gather = off", "stage = 0", train, cl, NULL);
        if (!(t_on > 0 && t_off > 0 && le(t_on, t_off)))
            fprintf(stderr, "pp_scatter_gather, %s: on %.6f s, off %.6f s\n", nets[n], t_on, t_off);
        CHECK(t_on > 0 && t_off > 0 && le(t_on, t_off));
        if (n == 0) CHECK(t_on < t_off);
    }
}

/* The plan of a GPT (layers x hidden, full recompute, bf16) with the given blocks. */
static Plan *plan_of(int layers, int hidden, const char *parallel, const char *train, const char *cluster)
{
    return cal_plan(arena_printf(&g_arena,
        "model gpt { layers = %d  hidden = %d  heads = %d  vocab = 51200  seq_len = 2048 }\n"
        "parallel { %s }\nzero { stage = 1 }\nprecision { dtype = bf16 }\n"
        "checkpointing { activations = full }\ntrain { %s }\ncluster { %s }\n",
        layers, hidden, hidden / 128, parallel, train, cluster));
}

/* FLOPs of a step on one rank of each class, summed over the classes. */
static double step_flops(const Plan *mp)
{
    double f = 0;
    for (int c = 0; c < mp->sched.nclasses; c++) f += mp->sched.classes[c].flops;
    return f;
}

/* parallel.tp_comm_overlap = wgrad (each tp part's backward collective
 * behind its weight GEMMs) is never slower than none, with and without
 * sequence parallelism and a pipeline, on A100 and H100 nodes, and strictly
 * faster at tp 8; the split never changes a step's FLOPs.  On the CPU
 * backend, whose collective runs when it is issued, it claims no overlap:
 * the same step. */
static void test_tp_comm_overlap(void)
{
    static const char *const layouts[] = {"tp = 2  dp = 8", "tp = 8  dp = 2", "tp = 8  pp = 2  dp = 1"};
    static const char *const gpus[] = {"gpu = a100_80gb  network = ib200", "gpu = h100_sxm_80gb  network = ib400"};
    const char *train = "global_batch = 32  micro_batch = 1";
    for (int l = 0; l < 3; l++)
        for (int sp = 0; sp < 2; sp++)
            for (int g = 0; g < 2; g++) {
                const char *cl = arena_printf(&g_arena, "nodes = 2  gpus_per_node = 8  %s", gpus[g]);
                const char *par = arena_printf(&g_arena, "%s  sequence_parallel = %s  tp_comm_overlap = ", layouts[l],
                                               sp ? "on" : "off");
                Plan *on = plan_of(8, 2048, arena_printf(&g_arena, "%swgrad", par), train, cl);
                Plan *off = plan_of(8, 2048, arena_printf(&g_arena, "%snone", par), train, cl);
                CHECK(on && off);
                if (!on || !off) continue;
                Sim son, soff;
                CHECK(!sim_simulate(on, NULL, &son) && !sim_simulate(off, NULL, &soff));
                if (!(son.step_time > 0 && le(son.step_time, soff.step_time)))
                    fprintf(stderr, "tp_comm_overlap, %s, sp %d, %s: wgrad %.6f s, none %.6f s\n", layouts[l], sp, gpus[g],
                            son.step_time, soff.step_time);
                CHECK(son.step_time > 0 && le(son.step_time, soff.step_time));
                if (l == 1) CHECK(son.step_time < soff.step_time);
                CHECK_NEAR(step_flops(on), step_flops(off), 1e-12 * step_flops(off));
            }
    /* the CPU backend: a measured profile, tp 2 on one node */
    char cwd[4096];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    const char *cpu = arena_printf(&g_arena, "nodes = 1  gpus_per_node = 2  gpu = cpu  profile = \"%s/tests/golden/bad/profile/cpu.json\"", cwd);
    for (int sp = 0; sp < 2; sp++) {
        const char *base = arena_printf(&g_arena,
            "model gpt { layers = 4  hidden = 64  heads = 4  vocab = 256  seq_len = 64 }\n"
            "parallel { tp = 2  dp = 1  sequence_parallel = %s  tp_comm_overlap = %%s }\nprecision { dtype = fp32 }\n"
            "train { global_batch = 16  micro_batch = 4 }\ncluster { %s }\n", sp ? "on" : "off", cpu);
        Plan *on = cal_plan(arena_printf(&g_arena, base, "wgrad")), *off = cal_plan(arena_printf(&g_arena, base, "none"));
        CHECK(on && off && cost_at_issue(on->spec));
        if (!on || !off) continue;
        Sim son, soff;
        CHECK(!sim_simulate(on, NULL, &son) && !sim_simulate(off, NULL, &soff));
        CHECK_NEAR(son.step_time, soff.step_time, 1e-9 * soff.step_time);
        CHECK(son.step_time > 0);
    }
}

/* The simulated step of a GPT (layers x 4096 hidden, selective recompute,
 * bf16, ZeRO-1) at tp 8 on the given GPUs with parallel.tp_comm_overlap =
 * `tpo` (and `k` chunks when full); *tp gets its exposed tp seconds (NaN,
 * and the step -1, where it does not plan: every comparison then fails). */
static double full_step(const char *layout, const char *gpus, int mb, const char *tpo, int k, double *tp)
{
    Plan *mp = cal_plan(arena_printf(&g_arena,
        "model gpt { layers = 8  hidden = 4096  heads = 32  vocab = 51200  seq_len = 2048 }\n"
        "parallel { %s  tp_comm_overlap = %s%s }\nzero { stage = 1 }\nprecision { dtype = bf16 }\n"
        "checkpointing { activations = selective }\ntrain { global_batch = 16  micro_batch = %d }\n"
        "cluster { nodes = 2  gpus_per_node = 8  %s }\n",
        layout, tpo, k ? arena_printf(&g_arena, "  tp_overlap_chunks = %d", k) : "", mb, gpus));
    Sim sim;
    *tp = NAN;
    if (!mp || sim_simulate(mp, NULL, &sim)) return -1;
    *tp = sim.exposed[GRP_TP] * sim.step_time;
    return sim.step_time;
}

/* parallel.tp_comm_overlap = full (each forward part's row-parallel GEMM
 * and its all-reduce in k token-row chunks, each all-reduced behind the
 * next chunk's GEMM): with one chunk the schedule is wgrad's, the same step;
 * the exposed tp communication never grows with more chunks while the
 * chunks' all-reduces stay bandwidth-bound (k 2 and 4 here; at k 8 on H100
 * NVLink each chunk's latency outweighs what it hides: exposure grows again,
 * as it should); with the chunks' GEMMs long (a micro-batch of 8
 * sequences: 4096 token rows a chunk at k = 4, whose efficiency is within
 * 2% of the whole GEMM's) the step is never slower than wgrad's, on A100
 * and H100 nodes, with and without a pipeline, and under sequence
 * parallelism, whose chunk is one strided-batched GEMM of T/k rows on a GPU
 * (priced as tp calls of T/(tp·k) rows, it was slower at k 4 on H100: 71.46
 * ms against 70.40); FLOPs never change.  On the
 * CPU backend, whose collectives run when they are issued, chunking hides
 * nothing: the step is never faster than wgrad's, with or without sequence
 * parallelism. */
static void test_tp_comm_overlap_full(void)
{
    static const char *const layouts[] = {"tp = 8  dp = 2", "tp = 8  pp = 2  dp = 1", "tp = 8  dp = 2  sequence_parallel = on"};
    static const char *const gpus[] = {"gpu = a100_80gb  network = ib200", "gpu = h100_sxm_80gb  network = ib400"};
    for (int l = 0; l < 3; l++)
        for (int g = 0; g < 2; g++) {
            double e1, ew, prev = -1;
            double w = full_step(layouts[l], gpus[g], 8, "wgrad", 0, &ew), one = full_step(layouts[l], gpus[g], 8, "full", 1, &e1);
            CHECK(w > 0 && one > 0);
            CHECK_NEAR(one, w, 1e-12 * w);
            CHECK_NEAR(e1, ew, 1e-12 * w);
            for (int k = 2; k <= 8; k *= 2) {
                double e, t = full_step(layouts[l], gpus[g], 8, "full", k, &e);
                if (!(t > 0 && le(t, w) && (k > 4 || le(e, prev < 0 ? ew : prev))))
                    fprintf(stderr, "tp_comm_overlap full, %s, %s, k %d: step %.6f s (wgrad %.6f), exposed tp %.6f s "
                            "(before %.6f)\n", layouts[l], gpus[g], k, t, w, e, prev < 0 ? ew : prev);
                CHECK(t > 0 && le(t, w));
                if (k <= 4) CHECK(le(e, prev < 0 ? ew : prev));
                if (k == 4) CHECK(e < ew);
                prev = e;
            }
        }
    char cwd[4096];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    /* with and without sequence parallelism (where the CPU runs a chunk's
     * batched GEMM as tp calls, the smaller ones slower still) */
    for (int sp = 0; sp < 2; sp++) {
        const char *base = arena_printf(&g_arena,
            "model gpt { layers = 4  hidden = 64  heads = 4  vocab = 256  seq_len = 64 }\n"
            "parallel { tp = 2  dp = 1  sequence_parallel = %s  tp_comm_overlap = %%s }\nprecision { dtype = fp32 }\n"
            "train { global_batch = 16  micro_batch = 4 }\n"
            "cluster { nodes = 1  gpus_per_node = 2  gpu = cpu  profile = \"%s/tests/golden/bad/profile/cpu.json\" }\n",
            sp ? "on" : "off", cwd);
        Plan *on = cal_plan(arena_printf(&g_arena, base, "full")), *off = cal_plan(arena_printf(&g_arena, base, "wgrad"));
        CHECK(on && off && cost_at_issue(on->spec));
        if (!on || !off) return;
        Sim son, soff;
        CHECK(!sim_simulate(on, NULL, &son) && !sim_simulate(off, NULL, &soff));
        CHECK(son.step_time > 0 && le(soff.step_time, son.step_time));
        CHECK_NEAR(step_flops(on), step_flops(off), 1e-12 * step_flops(off));
    }
}

/* Every op of every class is priced at a finite, non-negative time, for the
 * op splits of tp_comm_overlap under sequence parallelism (a forward part's
 * head whose column and row GEMMs all moved into chunks is left with its
 * norm's share only: it was priced at -8 us on a GPU, two weight kernels
 * the data op of a backward does not launch taken off a forward head) and
 * without, GPT and Llama, on A100 and H100 nodes and on the CPU profile. */
static void test_op_times_valid(void)
{
    char cwd[4096];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    static const char *const models[] = {"gpt { layers = 4  hidden = 512  heads = 8  vocab = 1024  seq_len = 256 }",
                                         "llama { layers = 4  hidden = 512  heads = 8  kv_heads = 2  vocab = 1024  seq_len = 256 }"};
    static const char *const tpos[] = {"none", "wgrad", "full"};
    const char *clusters[] = {"gpu = a100_80gb", "gpu = h100_sxm_80gb",
                              arena_printf(&g_arena, "gpu = cpu  profile = \"%s/tests/golden/bad/profile/cpu.json\"", cwd)};
    int plans = 0;
    for (int m = 0; m < 2; m++)
        for (int sp = 0; sp < 2; sp++)
            for (int t = 0; t < 3; t++)
                for (int c = 0; c < 3; c++) {
                    Plan *mp = cal_plan(arena_printf(&g_arena,
                        "model %s\nparallel { tp = 2  pp = 2  sequence_parallel = %s  tp_comm_overlap = %s }\n"
                        "precision { dtype = fp32 }\ntrain { global_batch = 16  micro_batch = 2 }\n"
                        "cluster { nodes = 1  gpus_per_node = 4  %s }\n", models[m], sp ? "on" : "off", tpos[t],
                        clusters[c]));
                    CHECK(mp != NULL);
                    if (!mp) continue;
                    plans++;
                    for (int k = 0; k < mp->sched.nclasses; k++) {
                        const Sched *s = &mp->sched.classes[k];
                        for (int i = 0; i < s->nops; i++) {
                            double d = cost_op_time(mp, s, i);
                            if (!(d >= 0 && d < INFINITY))
                                fprintf(stderr, "%s, sp %d, %s, %s: %s priced at %g s\n", models[m], sp, tpos[t],
                                        clusters[c], sched_op_label(s, i), d);
                            CHECK(d >= 0 && d < INFINITY);
                        }
                    }
                }
    CHECK_EQ(plans, 36);
}

/* More microbatches never give a bigger bubble fraction; the interleaved
 * schedule's bubble is never bigger than 1F1B's at the same microbatches.
 * Narayanan's claim, for stages of equal work: a small vocabulary, so that
 * the head does not weigh down the last stage (with GPT-2's, the head is
 * about a layer and a half, 1F1B gives the last stage one layer fewer, and
 * interleaving, whose chunks take the layers evenly, cannot: its bubble is
 * then the imbalance, not the pipeline's fill). */
static void test_bubble_shrinks(void)
{
    const char *cl = "nodes = 1  gpus_per_node = 4  gpu = a100_80gb";
    double prev = -1;
    for (int m = 4; m <= 32; m *= 2) {
        double b1, bi;
        const char *train = arena_printf(&g_arena, "global_batch = %d  micro_batch = 1", m);
        CHECK(step_vocab(8, 2048, 1024, "pp = 4  dp = 1  schedule = 1f1b", "stage = 0", train, cl, &b1) > 0);
        CHECK(step_vocab(8, 2048, 1024, "pp = 4  dp = 1  schedule = interleaved  virtual_stages = 2", "stage = 0", train, cl,
                         &bi) > 0);
        CHECK(b1 > 0 && le(bi, b1));
        if (prev >= 0) CHECK(le(b1, prev));
        prev = b1;
    }
}

/* Under full recompute in groups of two, the replay of a group's first layer
 * costs what its forward does; the group's last layer's runs no MLP down
 * projection (the trainer stops before it: its output, the next group's
 * checkpoint, exists), so it costs less, by at least that GEMM's FLOPs at
 * the peak.  Whole layers (tp 1) and the MLP part (tp 2). */
static void check_recompute_cut(const Plan *mp)
{
    bool gpu = !cost_cpu_priced(mp->spec);
    const Sched *s = &mp->sched.classes[0];
    int seen[2] = {0, 0};
    for (int i = 0; i < s->nops; i++) {
        const Op *r = &s->ops[i];
        if (r->kind != OP_RECOMPUTE || r->mb != 0) continue;
        int f = -1;
        for (int j = 0; j < s->nops && f < 0; j++)
            if (s->ops[j].kind == OP_LAYER_FWD && s->ops[j].layer == r->layer && s->ops[j].mb == 0 && s->ops[j].sub == r->sub)
                f = j;
        CHECK(f >= 0);
        if (f < 0) continue;
        double tf = cost_op_time(mp, s, f), tr = cost_op_time(mp, s, i);
        bool last = r->layer % 2 == 1, mlp = r->sub != SUB_ATTN;
        CHECK_EQ(r->grads == GR_NO_OUTPUT, last && mlp);
        if (last && mlp) {
            double down = mp->model.fl_mlp_down * (double)mp->part.b / (double)mp->part.tp;
            CHECK_NEAR(s->ops[f].flops - r->flops, down, 1e-9 * down);
            CHECK(tr > 0 && tf - tr > 0);
            if (gpu) {   /* exactly the GEMM at its shape, its residual's bytes and two kernels */
                const Partition *p = &mp->part;
                const CostProfile *cp = cost_profile(mp->spec);
                double T = (double)p->T, h = (double)mp->model.h, K = (double)mp->model.ffn / (double)p->tp;
                double gemm = down / (cost_peak(mp->spec) * cost_gemm_eff(cp, T, h, K));
                double resid = 3 * (double)p->T_sp * h * p->wbytes / (mp->spec->cluster.hbm_bandwidth * cp->hbm_eff);
                CHECK_NEAR(tf - tr, gemm + resid + 2 * cp->kernel_s, 1e-9 * tf);
            }
        } else {
            CHECK_NEAR(tr, tf, 1e-12 * tf);
        }
        seen[last && mlp]++;
    }
    CHECK(seen[0] > 0 && seen[1] > 0);
}

static void test_recompute_cut(void)
{
    char cwd[4096];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    for (int cpu = 0; cpu < 2; cpu++)
        for (int tp = 1; tp <= 2; tp *= 2) {
            const char *cl = cpu ? arena_printf(&g_arena, "gpu = cpu  profile = \"%s/tests/golden/bad/profile/cpu.json\"", cwd)
                                 : "gpu = a100_80gb";
            Plan *mp = cal_plan(arena_printf(&g_arena,
                "model gpt { layers = 4  hidden = %d  heads = 8  vocab = %d  seq_len = %d }\n"
                "parallel { tp = %d }\nprecision { dtype = %s }\ncheckpointing { activations = full  every = 2 }\n"
                "train { global_batch = 8  micro_batch = 1 }\ncluster { nodes = 1  gpus_per_node = %d  %s }\n",
                cpu ? 128 : 1024, cpu ? 256 : 51200, cpu ? 64 : 2048, tp, cpu ? "fp32" : "bf16", tp, cl));
            CHECK(mp != NULL);
            if (mp) check_recompute_cut(mp);
        }
}

/* A ZeRO-3 plan of a GPT or Llama (4 layers, hidden 1024) on 2 nodes of 8
 * with the given zero block (stage 3 added); NULL if it does not plan. */
static Plan *zero3_plan(bool llama, const char *zero)
{
    const char *text = arena_printf(&g_arena,
        "model %s { layers = 4  hidden = 1024  heads = 8  vocab = 51200  seq_len = 2048 }\n"
        "parallel { dp = 16 }\nzero { stage = 3  %s }\nprecision { dtype = bf16 }\n"
        "checkpointing { activations = full }\ntrain { global_batch = 32  micro_batch = 1 }\n"
        "cluster { nodes = 2  gpus_per_node = 8  gpu = a100_80gb }\n", llama ? "llama" : "gpt", zero);
    Plan *mp = cal_plan(text);
    if (!mp) fprintf(stderr, "does not plan:\n%s", text);
    return mp;
}

/* The all-gathers of ZeRO-3 fetch units in one step of rank class 0. */
static int gathers_of(const Plan *mp)
{
    int n = 0;
    const Sched *s = &mp->sched.classes[0];
    for (int i = 0; i < s->nops; i++) n += s->ops[i].kind == OP_GATHER;
    return n;
}

/* ZeRO-3 fetches by submodule, as DeepSpeed does: every fetch unit of a
 * layer holds the tensors of one module (Tensor.module), a layer of GPT
 * with nothing persistent is six units (ln_1, c_attn, c_proj, ln_2, c_fc,
 * c_proj) and of Llama nine (two norms, q, k, v, o, gate, up, down), and
 * the layer ops compute with all of them; under DeepSpeed's threshold
 * (1e5) the norms and biases stay resident and a GPT layer is four units. */
static void test_zero3_module_units(void)
{
    static const struct { bool llama; const char *zero; int per_layer; } cases[] = {
        {false, "param_persistence_threshold = 0", 6},
        {true, "param_persistence_threshold = 0", 9},
        {false, "", 4},
        {true, "", 7},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Plan *mp = zero3_plan(cases[c].llama, cases[c].zero);
        CHECK(mp != NULL);
        if (!mp) continue;
        const RankClass *rc = &mp->part.classes[0];
        int per_layer[4] = {0};
        for (int i = 0; i < rc->nsegs; i++) {
            const Segment *sg = &rc->segs[i];
            if (sg->persistent || sg->tied) continue;
            const Tensor *t0 = &mp->model.t[rc->tensors[sg->first].tensor];
            for (int k = sg->first; k < sg->first + sg->n; k++)
                CHECK_EQ(mp->model.t[rc->tensors[k].tensor].module, t0->module);
            if (t0->layer >= 0 && t0->layer < 4) per_layer[t0->layer]++;
        }
        for (int L = 0; L < 4; L++) CHECK_EQ(per_layer[L], cases[c].per_layer);
        const Sched *s = &mp->sched.classes[0];
        for (int i = 0; i < s->nops; i++) {
            const Op *o = &s->ops[i];
            if (o->kind != OP_LAYER_FWD && o->kind != OP_LAYER_BWD && o->kind != OP_RECOMPUTE) continue;
            CHECK_EQ(o->nunit, cases[c].per_layer);
        }
    }
}

/* ZeRO-3 steps (dp 32 on 4 nodes, nothing persistent) over increasing
 * values of one zero key: each no slower than the one before. */
static void check_zero3_never_slower(const char *key, const char *const *vals, int nvals, const char *net)
{
    const char *cl = arena_printf(&g_arena, "nodes = 4  gpus_per_node = 8  gpu = a100_80gb  %s", net);
    double prev = -1;
    for (int i = 0; i < nvals; i++) {
        const char *z = arena_printf(&g_arena, "stage = 3  %s = %s  param_persistence_threshold = 0", key, vals[i]);
        double t = step_of(8, 2048, "dp = 32", z, "global_batch = 32  micro_batch = 1", cl, NULL);
        CHECK(t > 0);
        if (prev >= 0 && !le(t, prev)) fprintf(stderr, "%s %s (%s): %.6f s > %.6f s\n", key, vals[i], net, t, prev);
        if (prev >= 0) CHECK(le(t, prev));
        prev = t;
    }
}

/* A larger persistence threshold never gives more gathers (more parameters
 * stay resident), and ZeRO-3's step is never slower with a larger prefetch
 * bucket or a larger live-parameter limit (gathers issued earlier, never
 * later); with no prefetch (0) it is strictly slower than DeepSpeed's default. */
static void test_zero3_monotone(void)
{
    static const char *const thresholds[] = {"0", "2e3", "1e5", "1.5e6", "5e6", "1e12"};
    for (int llama = 0; llama < 2; llama++) {
        int prev = 1 << 30;
        for (size_t i = 0; i < sizeof thresholds / sizeof thresholds[0]; i++) {
            Plan *mp = zero3_plan(llama, arena_printf(&g_arena, "param_persistence_threshold = %s", thresholds[i]));
            CHECK(mp != NULL);
            if (!mp) continue;
            int n = gathers_of(mp);
            CHECK(n <= prev);
            prev = n;
        }
        CHECK_EQ(prev, 0);              /* everything resident: nothing to gather */
    }
    static const char *const buckets[] = {"0", "1", "1e6", "5e6", "5e7", "1e9"};   /* 0: no prefetch */
    static const char *const lives[] = {"1", "5e6", "2e7", "1e9"};
    static const char *const nets[] = {"network = eth100", "network = ib200"};
    for (int n = 0; n < 2; n++) {
        check_zero3_never_slower("prefetch_bucket", buckets, (int)(sizeof buckets / sizeof buckets[0]), nets[n]);
        check_zero3_never_slower("max_live_parameters", lives, (int)(sizeof lives / sizeof lives[0]), nets[n]);
    }
    const char *cl = "nodes = 4  gpus_per_node = 8  gpu = a100_80gb  network = eth100", *train = "global_batch = 32  micro_batch = 1";
    double none = step_of(8, 2048, "dp = 32", "stage = 3  prefetch_bucket = 0  param_persistence_threshold = 0", train, cl, NULL);
    double dflt = step_of(8, 2048, "dp = 32", "stage = 3  param_persistence_threshold = 0", train, cl, NULL);
    CHECK(dflt > 0 && none > dflt * 1.01);
}

/* The arrival skew of ranks that take turns on the cores (profile_skew),
 * over measured rows that rise, fall, are zero, are missing for one kind,
 * at compute lengths between the ops from none to beyond the rows: never
 * negative, 0 without oversubscription (w·threads <= cores) or without
 * compute, and never smaller with more ranks on the same cores; the same
 * for the step's loss (the rows' excess). */
static void test_skew_props(void)
{
    static const ProfSkew sets[][4] = {
        {{false, 4, 1, 2e-3, 5e-3, 5e-3 / 2}, {false, 4, 1, 8e-3, 2e-3, 2e-3 / 2}, {false, 8, 1, 8e-3, 9e-3, 9e-3 / 2}, {true, 4, 1, 8e-3, 1e-3, 1e-3 / 2}},
        {{false, 4, 1, 8e-3, 7e-3, 7e-3 / 2}, {false, 8, 1, 8e-3, 1e-3, 1e-3 / 2}, {true, 8, 1, 8e-3, 4e-3, 4e-3 / 2}, {true, 16, 1, 8e-3, 0, 1e-3}},
        {{false, 2, 1, 8e-3, 3e-3, 3e-3 / 2}, {false, 8, 2, 8e-3, 0, 1e-3}, {false, 16, 1, 1e-3, 2e-2, 2e-2 / 2}, {true, 2, 2, 8e-3, 6e-3, 6e-3 / 2}},
    };
    for (int c = 1; c <= 4; c *= 2)
        for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
            Profile pf = {.backend = PROFILE_CPU, .cores = c, .skew = (ProfSkew *)sets[k], .nskew = 4};
            for (int p2p = 0; p2p < 2; p2p++)
                for (int loss = 0; loss < 2; loss++)   /* the wait, and the step's loss */
                    for (int t = 1; t <= 2; t++)
                        for (double x = 0; x <= 0.03; x += 0.5e-3) {
                            double prev = 0;
                            for (int w = 1; w <= 32; w++) {
                                double v = profile_skew(&pf, w, t, p2p, loss, x);
                                CHECK(v >= 0);
                                if (w * t <= c || x == 0) CHECK(v == 0);
                                CHECK(v >= prev);
                                prev = v;
                            }
                        }
        }
    Profile none = {.backend = PROFILE_CPU, .cores = 2};
    CHECK(profile_skew(&none, 8, 1, false, false, 0.01) == 0);   /* a profile without skew rows adds nothing */
}

int main(void)
{
    test_skew_props();
    test_monotone_in_bandwidth();
    test_monotone_in_compute();
    test_overlap_never_slower();
    test_pp_scatter_gather_never_slower();
    test_tp_comm_overlap();
    test_tp_comm_overlap_full();
    test_op_times_valid();
    test_bubble_shrinks();
    test_recompute_cut();
    test_zero3_module_units();
    test_zero3_monotone();
    return fx_done("test_cost_props");
}
