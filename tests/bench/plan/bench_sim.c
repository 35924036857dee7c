/* bench_sim.c — the planner's pieces on the 1T-parameter GPT on 16 384 H100s
 * (gpt-1t-16k.tspec's model and layout: 64 rank classes): the time of the
 * plan (parse, check, partition, schedule, memory) and of the discrete-event
 * simulation of its step, each the best of RUNS, and their ratio — a ratio
 * measured in one run on one machine, which is what to compare (the unit
 * test test_sim checks what the simulation says, never how long it takes).
 * Built and run by tests/bench/plan/run.sh. */
#include "plan.h"
#include "sim.h"
#include "../costmodel/calib.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Seconds on the monotonic clock. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 3;
    const char *text =
        "model gpt { layers = 128  hidden = 25600  heads = 160  vocab = 51200  seq_len = 2048 }\n"
        "parallel { tp = 8  pp = 64  dp = 32  sequence_parallel = on  schedule = 1f1b }\n"
        "zero { stage = 1 }\n precision { dtype = bf16  master_weights = fp32  grad_reduce = fp32 }\n"
        "checkpointing { activations = full }\n train { global_batch = 3072  micro_batch = 1 }\n"
        "cluster { nodes = 2048  gpus_per_node = 8  gpu = h100_sxm_80gb }\n";
    double plan = 1e30, sim = 1e30, mfu = 0;
    int classes = 0;
    for (int i = 0; i < (runs > 0 ? runs : 1); i++) {
        double t0 = now();
        Plan *mp = cal_plan(text);
        double t1 = now();
        if (!mp) {
            fprintf(stderr, "bench_sim: the spec does not plan\n");
            return 1;
        }
        Sim s;
        sim_run(mp, &s);
        double t2 = now();
        if (t1 - t0 < plan) plan = t1 - t0;
        if (t2 - t1 < sim) sim = t2 - t1;
        mfu = s.mfu, classes = mp->mem.nclasses;
    }
    printf("1T GPT on 16 384 GPUs (%d rank classes, MFU %.1f%%): plan %.0f ms, simulation %.0f ms "
           "(best of %d); simulation / plan = %.2f\n", classes, 100 * mfu, 1e3 * plan, 1e3 * sim, runs, sim / plan);
    return 0;
}
