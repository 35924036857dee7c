/* calib.h — the cost model's calibration and validation, shared by the
 * benchmark (tests/bench/costmodel/run.sh prints both sets) and the unit test
 * (test_cost.c asserts the calibration set): published throughput of large
 * training runs, each row written as a spec, planned, simulated and counted
 * as its source counts FLOPs.  The constants of compiler/cost.c were fitted on
 * the rows marked SET_CAL only; the SET_VAL rows check them.
 *
 * The assumptions per source are in cal_spec (docs/cost-model.md says why);
 * CAL_V=2 runs the pipelined rows on the interleaved schedule (2 model chunks
 * per stage where the stage's layers split evenly) instead of 1F1B.
 */
#ifndef CALIB_H
#define CALIB_H

#include "sim.h"

#include <math.h>
#include <string.h>

/* Where a row comes from; the spec it is planned as and the FLOPs its
 * throughput is counted with follow from it. */
typedef enum CalSource {
    SRC_PTDP,   /* Narayanan et al. SC21, Megatron-LM PTD-P, A100 80 GB, ib200:
                   Table 1 (weak scaling) and Table 2 (175B, 530B)          */
    SRC_ZERO3,  /* Narayanan et al. SC21 Table 2: DeepSpeed ZeRO-3, no model
                   parallelism, A100 80 GB, ib200                           */
    SRC_MCORE,  /* Megatron-LM README (r0.8) weak-scaling table, Megatron-Core,
                   H100 SXM, bf16, s 4096, V 131072, no recompute, ZeRO-1   */
    SRC_AZURE,  /* DeepSpeed's "Azure empowers ... hyperscale model training"
                   post (deepspeed.ai, 2022-07-26): DeepSpeed 0.6.2 ZeRO-3,
                   no model parallelism, A100 80 GB, 8 HDR NICs per node
                   (ib200), fp16, full recompute, optimizer states and
                   checkpoints in host memory, Megatron-DeepSpeed's
                   examples/azure recipe (V 50257 padded to 50304)          */
    SRC_MTNLG,  /* Smith et al. 2022, "Using DeepSpeed and Megatron to Train
                   Megatron-Turing NLG 530B" (arXiv 2201.11990), Section 2.4:
                   the 530B model (105 layers, h 20480, 128 heads, s 2048) on
                   Selene's A100 80 GB nodes (ib200), Megatron's tensor slicing
                   tp 8 inside DeepSpeed's pipeline engine pp 35, dp over the
                   rest, global batch 1920; 60.1, 50.2, 44.4 s an iteration on
                   280, 350, 420 nodes = 126, 121, 113 TFLOP/s per GPU as
                   Narayanan counts them (the counts check to ±0.5)          */
    SRC_ANY = -1,               /* cal_table: every source of the set           */
} CalSource;
/* SET_CHECK: published rows of another implementation printed beside the
 * sets, in neither mean and never used to fit (docs/cost-model.md, "Why the
 * ZeRO-3 rows miss"). */
typedef enum CalSet { SET_CAL, SET_VAL, SET_CHECK } CalSet;

typedef struct CalRow {
    CalSet set;                 /* calibration (constants fitted on it) or
                                   validation (never looked at when fitting)  */
    CalSource src;
    const char *cite;           /* table and row, as printed                    */
    double params_b;            /* the source's label, billions                 */
    int a, h, l, tp, pp, gpus, B, mb;
    double published;           /* TFLOP/s per GPU, as the source counts them   */
    int seq;                    /* sequence length where the source's rows
                                   differ (0: the source's, cal_seq)            */
    bool at_least;              /* published is a bound the source states
                                   ("more than"): printed, in no mean           */
} CalRow;

static const CalRow cal_rows[] = {
    /* calibration: Narayanan Table 1, 7 of its 10 rows (A100) */
    {SET_CAL, SRC_PTDP, "Narayanan T1", 1.7, 24, 2304, 24, 1, 1, 32, 512, 1, 137, 0, false},
    {SET_CAL, SRC_PTDP, "Narayanan T1", 18.4, 48, 6144, 40, 8, 1, 256, 1024, 1, 135, 0, false},
    {SET_CAL, SRC_PTDP, "Narayanan T1", 39.1, 64, 8192, 48, 8, 2, 512, 1536, 1, 138, 0, false},
    {SET_CAL, SRC_PTDP, "Narayanan T1", 145.6, 96, 12288, 80, 8, 8, 1536, 2304, 1, 148, 0, false},
    {SET_CAL, SRC_PTDP, "Narayanan T1", 310.1, 128, 16384, 96, 8, 16, 1920, 2160, 1, 155, 0, false},
    {SET_CAL, SRC_PTDP, "Narayanan T1", 529.6, 128, 20480, 105, 8, 35, 2520, 2520, 1, 163, 0, false},
    {SET_CAL, SRC_PTDP, "Narayanan T1", 1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 1, 163, 0, false},
    /* calibration: Megatron-Core H100, 3 of its 9 rows */
    {SET_CAL, SRC_MCORE, "Megatron-Core", 1.7, 16, 2048, 24, 1, 1, 48, 192, 1, 408.8, 0, false},
    {SET_CAL, SRC_MCORE, "Megatron-Core", 32, 56, 7168, 48, 8, 1, 384, 192, 1, 459.6, 0, false},
    {SET_CAL, SRC_MCORE, "Megatron-Core", 177, 96, 12288, 96, 8, 6, 2304, 1152, 1, 432.8, 0, false},
    /* validation: Table 1's other 3 rows */
    {SET_VAL, SRC_PTDP, "Narayanan T1", 3.6, 32, 3072, 30, 2, 1, 64, 512, 1, 138, 0, false},
    {SET_VAL, SRC_PTDP, "Narayanan T1", 7.5, 32, 4096, 36, 4, 1, 128, 512, 1, 142, 0, false},
    {SET_VAL, SRC_PTDP, "Narayanan T1", 76.1, 80, 10240, 60, 8, 4, 1024, 1792, 1, 140, 0, false},
    /* validation: Table 2, PTD-P */
    {SET_VAL, SRC_PTDP, "Narayanan T2", 175, 96, 12288, 96, 8, 12, 384, 1536, 1, 153, 0, false},
    {SET_VAL, SRC_PTDP, "Narayanan T2", 175, 96, 12288, 96, 8, 12, 768, 1536, 1, 149, 0, false},
    {SET_VAL, SRC_PTDP, "Narayanan T2", 175, 96, 12288, 96, 8, 12, 1536, 1536, 1, 141, 0, false},
    {SET_VAL, SRC_PTDP, "Narayanan T2", 530, 128, 20480, 105, 8, 35, 560, 2240, 1, 171, 0, false},
    {SET_VAL, SRC_PTDP, "Narayanan T2", 530, 128, 20480, 105, 8, 35, 1120, 2240, 1, 167, 0, false},
    {SET_VAL, SRC_PTDP, "Narayanan T2", 530, 128, 20480, 105, 8, 35, 2240, 2240, 1, 159, 0, false},
    /* validation: Table 2, ZeRO-3 */
    {SET_VAL, SRC_ZERO3, "Narayanan T2", 175, 96, 12288, 96, 1, 1, 384, 1536, 4, 144, 0, false},
    {SET_VAL, SRC_ZERO3, "Narayanan T2", 175, 96, 12288, 96, 1, 1, 768, 1536, 2, 88, 0, false},
    {SET_VAL, SRC_ZERO3, "Narayanan T2", 175, 96, 12288, 96, 1, 1, 1536, 1536, 1, 44, 0, false},
    {SET_VAL, SRC_ZERO3, "Narayanan T2", 530, 128, 20480, 105, 1, 1, 640, 2560, 4, 138, 0, false},
    {SET_VAL, SRC_ZERO3, "Narayanan T2", 530, 128, 20480, 105, 1, 1, 1120, 2240, 2, 98, 0, false},
    {SET_VAL, SRC_ZERO3, "Narayanan T2", 530, 128, 20480, 105, 1, 1, 2240, 2240, 1, 48, 0, false},
    /* validation: Megatron-Core H100, the other 6 rows */
    {SET_VAL, SRC_MCORE, "Megatron-Core", 7.1, 32, 4096, 30, 2, 1, 96, 192, 1, 465.9, 0, false},
    {SET_VAL, SRC_MCORE, "Megatron-Core", 16, 48, 6144, 32, 4, 1, 192, 192, 1, 489.1, 0, false},
    {SET_VAL, SRC_MCORE, "Megatron-Core", 70, 64, 8192, 84, 8, 2, 768, 384, 1, 419.7, 0, false},
    {SET_VAL, SRC_MCORE, "Megatron-Core", 119, 80, 10240, 92, 8, 4, 1536, 768, 1, 420.5, 0, false},
    {SET_VAL, SRC_MCORE, "Megatron-Core", 314, 128, 16384, 96, 8, 8, 3072, 1536, 1, 474.4, 0, false},
    {SET_VAL, SRC_MCORE, "Megatron-Core", 462, 144, 18432, 112, 8, 16, 6144, 3072, 1, 459.9, 0, false},
    /* check: DeepSpeed 0.6.2's ZeRO-3 on the same A100 nodes (the post's
     * text: 175B at s 512, 256 GPUs, micro-batch 32; 1T and 2T at s 1024,
     * 1024 GPUs, micro-batch 8; "more than 140" for 530B at micro-batches
     * over 1 on 512 and 1024 GPUs), one microbatch per step as the recipe */
    {SET_CHECK, SRC_AZURE, "Azure DS 0.6.2", 175, 96, 12288, 96, 1, 1, 256, 8192, 32, 204.49, 512, false},
    {SET_CHECK, SRC_AZURE, "Azure DS 0.6.2", 1000, 160, 25600, 128, 1, 1, 1024, 8192, 8, 165.36, 1024, false},
    {SET_CHECK, SRC_AZURE, "Azure DS 0.6.2", 2000, 128, 32768, 160, 1, 1, 1024, 8192, 8, 157, 1024, false},
    {SET_CHECK, SRC_AZURE, "Azure DS 0.6.2", 530, 128, 20480, 105, 1, 1, 1024, 2048, 2, 140, 1024, true},
    /* check: MT-NLG 530B, Megatron-DeepSpeed's 3D parallelism on the same
     * nodes as Narayanan's (the section states no micro-batch: 1 assumed,
     * as Narayanan's 530B rows) */
    {SET_CHECK, SRC_MTNLG, "MT-NLG 3D", 530, 128, 20480, 105, 8, 35, 2240, 1920, 1, 126, 0, false},
    {SET_CHECK, SRC_MTNLG, "MT-NLG 3D", 530, 128, 20480, 105, 8, 35, 2800, 1920, 1, 121, 0, false},
    {SET_CHECK, SRC_MTNLG, "MT-NLG 3D", 530, 128, 20480, 105, 8, 35, 3360, 1920, 1, 113, 0, false},
};
#ifndef CAL_V
#define CAL_V 1                 /* model chunks per stage: 1 = plain 1F1B      */
#endif
enum { CAL_NROWS = (int)(sizeof cal_rows / sizeof cal_rows[0]) };

/* The spec of text with nov -D overrides, resolved; NULL (diagnostics on
 * stderr) if it does not check. */
static inline const Spec *cal_resolve_with(const char *text, const Override *ov, int nov)
{
    diag_reset();
    sema_source = NULL;
    Item *items = spec_parse_text("calibration.tspec", text, strlen(text));
    Spec *s = arena_alloc(&g_arena, sizeof *s);
    if (diag_errors || !sema_resolve(items, ov, nov, s)) return NULL;
    return s;
}

/* The spec of text, resolved; NULL (diagnostics on stderr) if it does not check. */
static inline const Spec *cal_resolve(const char *text) { return cal_resolve_with(text, NULL, 0); }

/* Plans spec text end to end; NULL (diagnostics on stderr) if it does not check. */
static inline Plan *cal_plan(const char *text)
{
    const Spec *s = cal_resolve(text);
    Plan *mp = arena_alloc(&g_arena, sizeof *mp);
    return s && plan_build(s, mp, true) ? mp : NULL;
}

/* Plans and simulates spec text as `shardc plan` does: the step from a few
 * microbatches when its steady state is periodic (period_plan), else the
 * whole step; NULL, or why it did not (diagnostics on stderr). */
static inline const char *cal_simulate_with(const char *text, const Override *ov, int nov, Sim *sim)
{
    const Spec *s = cal_resolve_with(text, ov, nov);
    if (!s) return "the spec does not plan";
    Plan *mp = arena_alloc(&g_arena, sizeof *mp);
    if (period_plan(s, true, mp, sim)) return NULL;
    if (!plan_build(s, mp, true)) return "the spec does not plan";
    return sim_simulate(mp, NULL, sim);
}

static inline const char *cal_simulate(const char *text, Sim *sim) { return cal_simulate_with(text, NULL, 0, sim); }

/* Sequence length and vocabulary of a row's source. */
static inline int cal_seq(const CalRow *r) { return r->seq ? r->seq : r->src == SRC_MCORE ? 4096 : 2048; }
static inline int cal_vocab(const CalRow *r)
{
    return r->src == SRC_MCORE ? 131072 : r->src == SRC_AZURE ? 50304 : 51200;
}

/* Model chunks per pipeline rank the row runs with (1: plain 1F1B). */
static inline int cal_chunks(const CalRow *r)
{
    return CAL_V > 1 && r->pp > 1 && (r->l / r->pp) % CAL_V == 0 ? CAL_V : 1;
}

/* The spec of one row (arena text).  PTD-P: fp16, gradients all-reduced in
 * fp32 as one buffer after the flush (Megatron's 2021 DDP), full recompute,
 * sequence parallelism where tp > 1 (it splits the pipeline transfers as
 * Megatron's scatter/gather does).  ZeRO-3: DeepSpeed's defaults, fp16, full
 * recompute, dp over every GPU; the Azure rows with their recipe's buckets and
 * limits, the optimizer and the checkpoints on the host.  Megatron-Core: bf16, no recompute, the
 * distributed optimizer (ZeRO-1) with its overlapped reduce-scatter and
 * all-gather, sequence parallelism, untied embeddings, and tp_comm_overlap =
 * full (the runs' --tp-comm-overlap: docs/cost-model.md).  MT-NLG: as
 * PTD-P, but DeepSpeed's pipeline engine sends whole activations (no
 * scatter/gather: sequence parallelism off) and its ZeRO-1 reduces fp16
 * gradients in DeepSpeed's default 5e8-element buckets after the flush. */
static inline const char *cal_spec(const CalRow *r)
{
    int v = cal_chunks(r), dp = r->gpus / (r->tp * r->pp);
    const char *sched = v > 1 ? arena_printf(&g_arena, "schedule = interleaved  virtual_stages = %d", v)
                              : "schedule = 1f1b";
    const char *model = arena_printf(&g_arena,
        "model gpt { layers = %d  hidden = %d  heads = %d  vocab = %d  seq_len = %d%s }\n", r->l, r->h, r->a,
        cal_vocab(r), cal_seq(r), r->src == SRC_MCORE ? "  tie_embeddings = off" : "");
    const char *train = arena_printf(&g_arena,
        "train { global_batch = %d  micro_batch = %d }\n"
        "cluster { nodes = %d  gpus_per_node = 8  gpu = %s  network = %s }\n", r->B, r->mb, r->gpus / 8,
        r->src == SRC_MCORE ? "h100_sxm_80gb" : "a100_80gb", r->src == SRC_MCORE ? "ib400" : "ib200");
    switch (r->src) {
    case SRC_ZERO3:
        return arena_printf(&g_arena, "%sparallel { dp = %d }\nzero { stage = 3 }\n"
                            "precision { dtype = fp16  master_weights = fp32 }\n"
                            "checkpointing { activations = full }\n%s", model, dp, train);
    case SRC_AZURE:     /* the recipe's zero_optimization block */
        return arena_printf(&g_arena, "%sparallel { dp = %d }\n"
                            "zero { stage = 3  overlap_comm = on  contiguous_gradients = on  reduce_bucket = 9e7\n"
                            "       prefetch_bucket = 5e7  param_persistence_threshold = 1e5\n"
                            "       max_live_parameters = 3e9  max_reuse_distance = 3e9 }\n"
                            "offload { optimizer = cpu { pin_memory = on } }\n"
                            "precision { dtype = fp16  master_weights = fp32 }\n"
                            "checkpointing { activations = full  cpu = on }\n%s", model, dp, train);
    case SRC_MCORE:
        return arena_printf(&g_arena, "%sparallel { tp = %d  pp = %d  dp = %d  sequence_parallel = %s  %s  tp_comm_overlap = full }\n"
                            "zero { stage = 1  overlap_comm = on  overlap_param_gather = on  reduce_bucket = 4e7 }\n"
                            "precision { dtype = bf16  master_weights = fp32 }\n%s",
                            model, r->tp, r->pp, dp, r->tp > 1 ? "on" : "off", sched, train);
    case SRC_MTNLG:
        return arena_printf(&g_arena, "%sparallel { tp = %d  pp = %d  dp = %d  sequence_parallel = off  %s  tp_comm_overlap = none }\n"
                            "zero { stage = 1  reduce_bucket = 5e8 }\n"
                            "precision { dtype = fp16  master_weights = fp32  grad_reduce = fp16 }\n"
                            "checkpointing { activations = full }\n%s",
                            model, r->tp, r->pp, dp, sched, train);
    default:
        return arena_printf(&g_arena, "%sparallel { tp = %d  pp = %d  dp = %d  sequence_parallel = %s  %s  tp_comm_overlap = none }\n"
                            "zero { stage = 0  reduce_bucket = 1e12 }\n"
                            "precision { dtype = fp16  master_weights = fp32  grad_reduce = fp32 }\n"
                            "checkpointing { activations = full }\n%s",
                            model, r->tp, r->pp, dp, r->tp > 1 ? "on" : "off", sched, train);
    }
}

/* TFLOP/s per GPU as the row's source counts them: Narayanan (full
 * recompute) 96·B·s·l·h²·(1 + s/6h + V/16lh) per step; Megatron-Core (model
 * FLOPs) 72·B·s·l·h²·(1 + s/6h + V/12lh). */
static inline double cal_tflops(const CalRow *r, double step)
{
    double s = cal_seq(r), h = r->h, l = r->l, V = cal_vocab(r), B = r->B;
    double flops = r->src == SRC_MCORE ? 72.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
                                       : 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    return flops / (step * r->gpus) / 1e12;
}

/* Which rows a table covers: one set of one GPU (A100 rows: PTD-P and
 * ZeRO-3; H100 rows: Megatron-Core), of one source or of any (SRC_ANY). */
static inline bool cal_in(const CalRow *r, CalSet set, bool h100, CalSource src)
{
    return r->set == set && (r->src == SRC_MCORE) == h100 && (src == SRC_ANY || r->src == src);
}

/* The label of a row's kind, as the tables print it. */
static inline const char *cal_kind(const CalRow *r)
{
    return r->src == SRC_ZERO3 || r->src == SRC_AZURE ? "ZeRO-3" : r->src == SRC_MCORE ? "MCore"
         : r->src == SRC_MTNLG ? "DS-3D" : "PTD-P";
}

/* Prints the rows of one set, GPU and source (SRC_ANY: all; when out) and
 * returns their mean absolute error, as a fraction of the published figure
 * (rows whose figure is a bound printed, "> x", and left out); < 0 if a row
 * did not plan. */
static inline double cal_table(FILE *out, CalSet set, bool h100, CalSource src)
{
    double sum = 0;
    int n = 0;
    bool ok = true;
    if (out) fprintf(out, "%-14s %-7s %6s %5s %3s %2s %2s %5s %4s %2s %9s %9s %7s %7s %6s %5s %5s\n", "source", "kind",
                     "params", "h", "l", "tp", "pp", "gpus", "B", "mb", "step (s)", "predicted", "paper", "error",
                     "bubble", "tp", "dp");
    for (int i = 0; i < CAL_NROWS; i++) {
        const CalRow *r = &cal_rows[i];
        if (!cal_in(r, set, h100, src)) continue;
        Sim sim;
        const char *why = cal_simulate(cal_spec(r), &sim);
        if (why) {
            fprintf(out ? out : stderr, "%7.1fB: %s\n", r->params_b, why);
            ok = false;
            continue;
        }
        double pred = cal_tflops(r, sim.step_time), err = (pred - r->published) / r->published;
        if (!r->at_least) sum += fabs(err), n++;
        if (out)
            fprintf(out, "%-14s %-7s %5.1fB %5d %3d %2d %2d %5d %4d %2d %9.2f %9.1f %7s %+6.1f%% %5.1f%% %4.1f%% %4.1f%%\n",
                    r->cite, cal_kind(r), r->params_b, r->h, r->l, r->tp, r->pp, r->gpus, r->B, r->mb, sim.step_time,
                    pred, arena_printf(&g_arena, "%s%.1f", r->at_least ? ">" : "", r->published), 100 * err,
                    100 * sim.bubble, 100 * sim.exposed[GRP_TP], 100 * sim.exposed[GRP_DP]);
    }
    if (!ok || n == 0) return -1;
    double mae = sum / n;
    if (out) fprintf(out, "mean absolute error: %.1f%% over %d rows\n", 100 * mae, n);
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
            "cluster { %s  gpu = a100_80gb }\n", 51200, 2048, nets[i]);
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
