/* calib.h — the cost model's calibration, shared by the benchmark
 * (tests/bench/costmodel/run.sh prints it) and the unit test (test_cost.c
 * asserts it): every row of Megatron-LM's 2021 weak-scaling table (Narayanan
 * et al., REFERENCE.md) planned and simulated with the one A100 profile, and
 * the seed discussion's ZeRO-3 case on three networks.
 *
 * The assumptions, the same for every row (docs/cost-model.md says why):
 * a100_80gb, 8 GPUs per node, ib200 (8 × 200 Gb/s HDR per node); GPT with
 * vocabulary 51 200 and context 2048; full recompute; fp16 with the gradient
 * all-reduced in fp32 (Megatron's main_grad) as one buffer after the pipeline
 * flush (ZeRO 0, one bucket); sequence parallelism wherever tp > 1, which
 * splits the pipeline boundary tensor over the tp ranks as Megatron's
 * scatter/gather optimisation does; micro-batch 1; the plain 1F1B schedule
 * (CAL_V=2: interleaved with 2 model chunks per stage where the stage's layers
 * split evenly).
 */
#ifndef CALIB_H
#define CALIB_H

#include "sim.h"

#include <math.h>
#include <string.h>

typedef struct CalRow {
    double params_b;            /* the paper's label, billions                  */
    int a, h, l, tp, pp, gpus, B;
    double published;           /* TFLOP/s per GPU                              */
} CalRow;

static const CalRow cal_rows[] = {
    {1.7, 24, 2304, 24, 1, 1, 32, 512, 137},
    {18.4, 48, 6144, 40, 8, 1, 256, 1024, 135},
    {39.1, 64, 8192, 48, 8, 2, 512, 1536, 138},
    {145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148},
    {310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155},
    {529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163},
    {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163},
};
#ifndef CAL_V
#define CAL_V 1                 /* model chunks per stage: 1 = plain 1F1B      */
#endif
enum { CAL_NROWS = (int)(sizeof cal_rows / sizeof cal_rows[0]), CAL_SEQ = 2048, CAL_VOCAB = 51200 };

/* Plans spec text end to end; NULL (diagnostics on stderr) if it does not check. */
static inline Plan *cal_plan(const char *text)
{
    diag_reset();
    sema_source = NULL;
    Item *items = spec_parse_text("calibration.tspec", text, strlen(text));
    Spec *s = arena_alloc(&g_arena, sizeof *s);
    if (diag_errors || !sema_resolve(items, NULL, 0, s)) return NULL;
    Plan *mp = arena_alloc(&g_arena, sizeof *mp);
    return plan_build(s, mp, true) ? mp : NULL;
}

/* Model chunks per pipeline rank the row runs with (1: plain 1F1B). */
static inline int cal_chunks(const CalRow *r)
{
    return CAL_V > 1 && r->pp > 1 && (r->l / r->pp) % CAL_V == 0 ? CAL_V : 1;
}

/* The spec of one row (arena text). */
static inline const char *cal_spec(const CalRow *r)
{
    int v = cal_chunks(r), dp = r->gpus / (r->tp * r->pp);
    return arena_printf(&g_arena,
        "model gpt { layers = %d  hidden = %d  heads = %d  vocab = %d  seq_len = %d }\n"
        "parallel { tp = %d  pp = %d  dp = %d  sequence_parallel = %s  %s }\n"
        "zero { stage = 0  reduce_bucket = 1e12 }\n"
        "precision { dtype = fp16  master_weights = fp32  grad_reduce = fp32 }\n"
        "checkpointing { activations = full }\n"
        "train { global_batch = %d  micro_batch = 1 }\n"
        "cluster { nodes = %d  gpus_per_node = 8  gpu = a100_80gb  network = ib200 }\n",
        r->l, r->h, r->a, CAL_VOCAB, CAL_SEQ, r->tp, r->pp, dp, r->tp > 1 ? "on" : "off",
        v > 1 ? arena_printf(&g_arena, "schedule = interleaved  virtual_stages = %d", v) : "schedule = 1f1b", r->B,
        r->gpus / 8);
}

/* TFLOP/s per GPU as the paper counts them: 96·B·s·l·h²·(1 + s/6h + V/16lh) per step. */
static inline double cal_tflops(const CalRow *r, double step)
{
    double s = CAL_SEQ, h = r->h, l = r->l, V = CAL_VOCAB;
    double flops = 96.0 * r->B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    return flops / (step * r->gpus) / 1e12;
}

/* Prints the calibration table (when out) and returns the mean absolute
 * error, as a fraction of the published figure; < 0 if a row did not plan. */
static inline double cal_table(FILE *out)
{
    double sum = 0;
    bool ok = true;
    if (out) fprintf(out, "%8s %5s %3s %3s %5s %5s %2s %-12s %12s %10s %7s %6s %6s %6s\n", "params", "h", "l", "tp",
                     "pp", "gpus", "B", "  schedule", "step (s)", "predicted", "paper", "error", "bubble", "tp+dp");
    for (int i = 0; i < CAL_NROWS; i++) {
        const CalRow *r = &cal_rows[i];
        Plan *mp = cal_plan(cal_spec(r));
        Sim sim;
        const char *why = mp ? sim_simulate(mp, NULL, &sim) : "the spec does not plan";
        if (why) {
            fprintf(out ? out : stderr, "%7.1fB: %s\n", r->params_b, why);
            ok = false;
            continue;
        }
        double pred = cal_tflops(r, sim.step_time), err = (pred - r->published) / r->published;
        sum += fabs(err);
        if (out)
            fprintf(out, "%7.1fB %5d %3d %3d %5d %5d %4d %-12s %10.2f %10.1f %7.0f %+5.1f%% %5.1f%% %5.1f%%\n",
                    r->params_b, r->h, r->l, r->tp, r->pp, r->gpus, r->B,
                    cal_chunks(r) > 1 ? "interleaved" : "1f1b", sim.step_time, pred, r->published, 100 * err,
                    100 * sim.bubble, 100 * (sim.exposed[GRP_TP] + sim.exposed[GRP_DP]));
    }
    if (!ok) return -1;
    double mae = sum / CAL_NROWS;
    if (out) fprintf(out, "mean absolute error: %.1f%% (must be under 10%%)\n", 100 * mae);
    return mae;
}

/* The seed discussion's case: a ~20B GPT (44 layers, hidden 6144) with ZeRO-3
 * on 8 A100s: one node over NVLink, 8 nodes of one GPU over 200 Gb/s
 * InfiniBand, 8 nodes over 100 Gb/s Ethernet.  Fills exposed[3] with the
 * exposed dp communication (fraction of the step) and prints the three. */
static inline bool cal_zero3(FILE *out, double exposed[3])
{
    static const char *const nets[3] = {"nodes = 1  gpus_per_node = 8",
                                        "nodes = 8  gpus_per_node = 1  network = ib200",
                                        "nodes = 8  gpus_per_node = 1  network = eth100"};
    static const char *const names[3] = {"1 node x 8, NVLink", "8 nodes x 1, 200 Gb/s IB", "8 nodes x 1, 100 Gb/s Ethernet"};
    if (out) fprintf(out, "\n20B GPT (44 x 6144), ZeRO-3, dp 8, global batch 64:\n%-32s %10s %8s %12s\n", "cluster",
                     "step (s)", "MFU", "exposed dp");
    for (int i = 0; i < 3; i++) {
        const char *text = arena_printf(&g_arena,
            "model gpt { layers = 44  hidden = 6144  heads = 48  vocab = %d  seq_len = %d }\n"
            "parallel { dp = 8 }\n"
            "zero { stage = 3  overlap_comm = on }\n"
            "precision { dtype = bf16 }\n"
            "checkpointing { activations = full }\n"
            "train { global_batch = 64  micro_batch = 2 }\n"
            "cluster { %s  gpu = a100_80gb }\n", CAL_VOCAB, CAL_SEQ, nets[i]);
        Plan *mp = cal_plan(text);
        Sim sim;
        const char *err = mp ? sim_simulate(mp, NULL, &sim) : "the spec does not plan";
        if (err) {
            fprintf(out ? out : stderr, "%s: %s\n", names[i], err);
            return false;
        }
        exposed[i] = sim.exposed[GRP_DP];
        if (out) fprintf(out, "%-32s %10.2f %7.1f%% %11.1f%%\n", names[i], sim.step_time, 100 * sim.mfu, 100 * exposed[i]);
    }
    return true;
}

#endif
