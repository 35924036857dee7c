/* test_sim.c — the discrete-event simulation: pipeline bubbles against the
 * published fractions ((p-1)/m for gpipe and 1f1b, (1/v)(p-1)/m interleaved)
 * with equal stage times and negligible communication; MFU of a one-stage
 * compute-only plan against the GEMM efficiency; the critical path; exposed
 * communication; ZeRO-3's per-module waits against waiting up front (never
 * slower, strictly faster without prefetch); a hand-broken schedule whose sends wait on each other is
 * reported as a deadlock naming the ops (and sim_run dies with exit 3); a 1T
 * model on 16 384 GPUs (64 rank classes) simulates to a plausible MFU (how
 * long that takes is tests/bench/plan's: a test asserts no time). */
#include "plan_fixture.h"
#include "sim.h"
#include "../bench/costmodel/calib.h"

#include <sys/wait.h>
#include <unistd.h>

/* A uniform GPT whose stages cost the same: a tiny vocabulary (the head and
 * embedding are noise), links so fast that communication is negligible. */
static Plan *uniform_plan(const char *sched, int p, int m, int v)
{
    int layers = p * v * 2;
    const char *text = arena_printf(&g_arena,
        "model gpt { layers = %d  hidden = 8192  heads = 64  vocab = 128  seq_len = 2048 }\n"
        "parallel { pp = %d  dp = 1  schedule = %s %s }\n"
        "precision { dtype = bf16 }\n"
        "train { global_batch = %d  micro_batch = 1  grad_clip = 0 }\n"
        "cluster { nodes = 1  gpus_per_node = %d  gpu = h100_sxm_80gb  intra_node = 1000000GB/s\n"
        "          inter_node = 1000000GB/s  network_latency_us = 0 }\n",
        layers, p, sched, v > 1 ? arena_printf(&g_arena, "virtual_stages = %d", v) : "", m, p);
    Plan *mp = cal_plan(text);
    if (!mp) fprintf(stderr, "%s", text);
    return mp;
}

/* The bubble of each schedule matches the formula within 4%. */
static void test_bubbles(void)
{
    static const struct { const char *sched; int p, m, v; } cases[] = {
        {"gpipe", 4, 8, 1},       {"gpipe", 2, 4, 1},       {"gpipe", 8, 16, 1},
        {"1f1b", 4, 8, 1},        {"1f1b", 2, 8, 1},        {"1f1b", 8, 16, 1},
        {"interleaved", 4, 8, 2}, {"interleaved", 2, 8, 2}, {"interleaved", 4, 8, 4},
        {"interleaved", 4, 16, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Plan *mp = uniform_plan(cases[i].sched, cases[i].p, cases[i].m, cases[i].v);
        CHECK(mp != NULL);
        if (!mp) continue;
        CHECK_EQ(mp->part.m, cases[i].m);
        Sim sim;
        const char *err = sim_simulate(mp, NULL, &sim);
        if (err) {
            fprintf(stderr, "%s p=%d m=%d v=%d: %s\n", cases[i].sched, cases[i].p, cases[i].m, cases[i].v, err);
            failures++;
            continue;
        }
        double want = (double)(cases[i].p - 1) / cases[i].m / cases[i].v;
        if (fabs(sim.bubble - want) > 0.04 * want) {
            fprintf(stderr, "bubble of %s p=%d m=%d v=%d: %.4f, the formula says %.4f\n", cases[i].sched,
                    cases[i].p, cases[i].m, cases[i].v, sim.bubble, want);
            failures++;
        }
        /* every stage idles about as long (equal stage times) */
        for (int c = 0; c < mp->mem.nclasses; c++)
            CHECK_NEAR(sim.classes[c].bubble / sim.classes[c].work, want, 0.06);
        CHECK(sim.exposed[GRP_PP] < 0.01);
        /* the step is the ideal compute stretched by the bubble, plus the optimizer */
        CHECK(sim.step_time >= sim.classes[0].work * (1 + want) * 0.99);
    }
}

/* pp 4 · dp 2 on 1F1B, ZeRO 1, with the data-parallel reduction of a stage
 * as long as several backward units, in several buckets: each stage's
 * reductions run as its last backward completes their buckets, and the
 * compute stream waits for them only at the optimizer (not within that
 * backward, which would hold every earlier stage's last backward too), so the step is the pipeline (the bubble of the formula) plus
 * the first stage's reduction, once, not once per stage; and "bubble" stays
 * the pipeline's share, the reduction counted as exposed dp. */
static void test_dp_under_pp(void)
{
    int p = 4, m = 8;
    Plan *mp = cal_plan(arena_printf(&g_arena,
        "model gpt { layers = %d  hidden = 4096  heads = 32  vocab = 128  seq_len = 2048 }\n"
        "parallel { pp = %d  dp = 2  schedule = 1f1b }\n zero { stage = 1  reduce_bucket = 3e8 }\n"
        "precision { dtype = bf16 }\n"
        "train { global_batch = %d  micro_batch = 1  grad_clip = 0 }\n"
        "cluster { nodes = %d  gpus_per_node = 1  gpu = h100_sxm_80gb  intra_node = 1000000GB/s\n"
        "          inter_node = 40GB/s  network_latency_us = 0 }\n",
        4 * p, p, 2 * m, 2 * p));
    CHECK(mp != NULL);
    if (!mp) return;
    CHECK_EQ(mp->part.m, m);
    Sim sim;
    sim_run(mp, &sim);
    double want = (double)(p - 1) / m, work = 0, reduce = 0, pp = 0;
    for (int c = 0; c < mp->mem.nclasses; c++) {
        work = fmax(work, sim.classes[c].work);
        reduce = fmax(reduce, sim.classes[c].busy[ST_DP_COMM]);     /* the reductions and parameter gathers */
        pp = fmax(pp, sim.classes[c].busy[ST_PP_COMM]);
    }
    /* the reduction is long against a backward unit (else nothing is tested) */
    CHECK(reduce > 3 * work / m / 1.5);
    /* at most the formula: where a stage's own reduction outlasts its drain,
     * the wait is the reduction's (exposed dp), not the pipeline's */
    if (sim.bubble > 1.1 * want || sim.bubble < 0.5 * want) {
        fprintf(stderr, "bubble of 1f1b p=%d m=%d dp=2: %.4f, the formula says %.4f\n", p, m, sim.bubble, want);
        failures++;
    }
    if (sim.step_time > work * (1 + want) * 1.03 + reduce + pp) {
        fprintf(stderr, "1f1b p=%d m=%d dp=2: step %.4f s, the pipeline %.4f s plus one reduction %.4f s and the transfers %.4f s\n",
                p, m, sim.step_time, work * (1 + want), reduce, pp);
        failures++;
    }
    CHECK(sim.exposed[GRP_DP] > 0.5 * reduce / sim.step_time);
}

/* tp 2 · pp 4 on 1F1B over a slow link: the tp collectives are exposed, and
 * the fill and drain are stretched by the other stages' exposed tp waits; those
 * are tp's (exposed tp), so the bubble stays the formula's. */
static void test_tp_under_pp(void)
{
    int p = 4, m = 8;
    Plan *mp = cal_plan(arena_printf(&g_arena,
        "model gpt { layers = %d  hidden = 8192  heads = 64  vocab = 128  seq_len = 2048 }\n"
        "parallel { tp = 2  pp = %d  dp = 1  schedule = 1f1b }\n precision { dtype = bf16 }\n"
        "train { global_batch = %d  micro_batch = 1  grad_clip = 0 }\n"
        "cluster { nodes = 1  gpus_per_node = %d  gpu = h100_sxm_80gb  intra_node = 50GB/s  network_latency_us = 0 }\n",
        2 * p, p, m, 2 * p));
    CHECK(mp != NULL);
    if (!mp) return;
    CHECK_EQ(mp->part.m, m);
    Sim sim;
    sim_run(mp, &sim);
    double want = (double)(p - 1) / m;
    CHECK(sim.exposed[GRP_TP] > 0.08);          /* else nothing is tested */
    if (fabs(sim.bubble - want) > 0.1 * want) {
        fprintf(stderr, "bubble of 1f1b p=%d m=%d tp=2: %.4f, the formula says %.4f\n", p, m, sim.bubble, want);
        failures++;
    }
}

/* One stage, one GPU, no communication: MFU is the FLOP-weighted efficiency
 * of the layer's GEMMs and attention core (less the small memory-bound work). */
static void test_mfu_compute_only(void)
{
    Plan *mp = cal_plan("model gpt { layers = 4  hidden = 12288  heads = 96  vocab = 128  seq_len = 2048 }\n"
                           "parallel { dp = 1 }\n precision { dtype = bf16 }\n"
                           "train { global_batch = 16  micro_batch = 1  grad_clip = 0 }\n"
                           "cluster { nodes = 1  gpus_per_node = 1  gpu = a100_80gb }\n");
    CHECK(mp != NULL);
    if (!mp) return;
    double T = 2048, h = 12288, hd = 128, peak = 312e12;
    const CostProfile *cp = cost_profile(mp->spec);
    double shapes[4][3] = {{T, 3 * h, h}, {T, h, h}, {T, 4 * h, h}, {T, h, 4 * h}};
    double fl = 0, sec = 0;
    for (int i = 0; i < 4; i++) {
        double f = 2 * shapes[i][0] * shapes[i][1] * shapes[i][2];
        fl += f, sec += f / (peak * cost_gemm_eff(cp, shapes[i][0], shapes[i][1], shapes[i][2]));
    }
    double fa = 4 * T * T * h;
    fl += fa, sec += fa / (peak * cost_attn_eff(cp, hd));
    double eff = fl / sec / peak;
    Sim sim;
    sim_run(mp, &sim);
    CHECK(sim.mfu < eff);
    CHECK_NEAR(sim.mfu, eff, 0.04);
    CHECK_NEAR(sim.hfu, sim.mfu, 1e-12);         /* no recompute */
    CHECK(sim.bubble == 0);
    for (int g = 0; g < NGROUPS; g++) CHECK(sim.exposed[g] == 0);
    CHECK_NEAR(sim.tokens_per_s, 16 * 2048 / sim.step_time, 1e-12);
    /* a second, identical plan costs the same: the simulation is deterministic */
    Sim again;
    sim_run(mp, &again);
    CHECK(again.step_time == sim.step_time);
}

/* The critical path runs from time 0 to the step's end, each op ending after
 * the one before it, and its stretches add up to the step. */
static void test_critical_path(void)
{
    Plan *mp = uniform_plan("1f1b", 4, 8, 1);
    CHECK(mp != NULL);
    if (!mp) return;
    Sim sim;
    sim_run(mp, &sim);
    CHECK(sim.ncritical > 8 * 3);
    const SimRef *last = &sim.critical[sim.ncritical - 1];
    CHECK_NEAR(sim.classes[last->cls].ops[last->op].end, sim.step_time, 1e-12);
    double prev = 0;
    bool ordered = true, crosses = false;
    for (int i = 0; i < sim.ncritical; i++) {
        const SimRef *r = &sim.critical[i];
        double end = sim.classes[r->cls].ops[r->op].end;
        ordered &= end >= prev - 1e-15;
        prev = end;
        crosses |= i > 0 && r->cls != sim.critical[i - 1].cls;
    }
    CHECK(ordered);
    CHECK(crosses);         /* a pipeline's path runs through several stages */
    const SimRef *first = &sim.critical[0];
    CHECK(sim.classes[first->cls].ops[first->op].start < 1e-3 * sim.step_time);
    /* the summary names the path's main contributors */
    char buf[8192];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    sim_summary(f, mp, &sim);
    fclose(f);
    CHECK(strstr(buf, "critical  path of") != NULL);
    CHECK(strstr(buf, "bwd") != NULL);
    CHECK(strstr(buf, "bubble") != NULL && strstr(buf, "MFU") != NULL && strstr(buf, "tokens/s") != NULL);
}

/* ZeRO-3 over a slow network: the gathers are exposed, and more so on a slower link. */
static void test_exposed(void)
{
    double ex[2];
    const char *nets[2] = {"network = ib400", "network = eth100"};
    for (int i = 0; i < 2; i++) {
        Plan *mp = cal_plan(arena_printf(&g_arena,
            "model gpt { layers = 8  hidden = 4096  heads = 32  vocab = 51200  seq_len = 2048 }\n"
            "parallel { dp = 4 }\n zero { stage = 3  overlap_comm = on }\n precision { dtype = bf16 }\n"
            "train { global_batch = 8  micro_batch = 1 }\n"
            "cluster { nodes = 4  gpus_per_node = 1  gpu = h100_sxm_80gb  %s }\n", nets[i]));
        CHECK(mp != NULL);
        if (!mp) return;
        Sim sim;
        sim_run(mp, &sim);
        ex[i] = sim.exposed[GRP_DP];
        CHECK(sim.exposed[GRP_TP] == 0 && sim.exposed[GRP_PP] == 0);
        CHECK(sim.classes[0].busy[ST_DP_COMM] > 0);
    }
    CHECK(ex[0] > 0);
    CHECK(ex[1] > ex[0] + 0.1);
}

/* ZeRO-3's per-module waits (Op.inner) against the same schedule waiting for
 * every unit up front (the flags cleared: the waits then hold the compute
 * stream before the layer op, as before): never slower; strictly faster
 * where a layer's later units are gathered while its first modules compute
 * (no prefetch: each unit gathered when its op comes, NVLink), and the same
 * where the dp link is the bottleneck anyway (eth100 across 4 nodes: the
 * step is the dp stream's).  cost_unit_start stays in [0, 1] and grows with
 * the module order of the op. */
static void test_module_waits(void)
{
    const char *nets[3] = {"nodes = 4  gpus_per_node = 1  network = eth100", "nodes = 1  gpus_per_node = 4",
                           "nodes = 1  gpus_per_node = 4"};
    const char *zero[3] = {"", "", "prefetch_bucket = 0"};
    for (int i = 0; i < 3; i++) {
        Plan *mp = cal_plan(arena_printf(&g_arena,
            "model gpt { layers = 8  hidden = 4096  heads = 32  vocab = 51200  seq_len = 2048 }\n"
            "parallel { dp = 4 }\n zero { stage = 3  overlap_comm = on  %s }\n precision { dtype = bf16 }\n"
            "train { global_batch = 8  micro_batch = 1 }\n"
            "cluster { %s  gpu = h100_sxm_80gb }\n", zero[i], nets[i]));
        CHECK(mp != NULL);
        if (!mp) return;
        Sched *s = &mp->sched.classes[0];
        int inner = 0;
        for (int w = 0; w < s->nops; w++) {
            int op, k = sched_wait_unit(s, w, &op);
            if (!s->ops[w].inner) continue;
            inner++;
            CHECK(k >= 0);
            if (k < 0) continue;
            double a = cost_unit_start(s, op, k);
            CHECK(a >= 0 && a <= 1);
            for (int j = 0; j < k; j++) CHECK(cost_unit_start(s, op, j) <= a);
        }
        CHECK(inner > 0);
        Sim per, front;
        sim_run(mp, &per);
        for (int w = 0; w < s->nops; w++) s->ops[w].inner = false;
        sim_run(mp, &front);
        CHECK(per.step_time <= front.step_time * (1 + 1e-12));
        if (i == 2) CHECK(per.step_time < front.step_time * (1 - 1e-3));
        printf("zero-3 step, waits per module %.4f s, up front %.4f s (%s%s)\n", per.step_time, front.step_time,
               nets[i], zero[i]);
    }
}

/* A pp = 2 plan whose schedules are replaced by hand: per stage, two ops on
 * the pp stream.  Returns the plan. */
static Plan *two_stage_plan(const int kinds[2][2])
{
    Plan *mp = cal_plan("model gpt { layers = 2  hidden = 256  heads = 4  vocab = 128  seq_len = 128 }\n"
                           "parallel { pp = 2  dp = 1 }\n precision { dtype = bf16 }\n"
                           "train { global_batch = 1  micro_batch = 1 }\n"
                           "cluster { nodes = 1  gpus_per_node = 2  gpu = h100_sxm_80gb }\n");
    if (!mp) return NULL;
    for (int c = 0; c < 2; c++) {
        Sched *s = &mp->sched.classes[c];
        s->nops = 2;
        for (int i = 0; i < 2; i++) {
            Op *o = &s->ops[i];
            memset(o, 0, sizeof *o);
            *o = (Op){.kind = kinds[c][i], .stream = ST_PP_COMM, .layer = -1, .mb = 0, .chunk = 0, .aux = -1,
                      .bytes = 1 << 20};
        }
    }
    return mp;
}

/* Two sends waiting on each other: each stage sends first and receives
 * second.  Blocking (rendezvous) sends deadlock, and the report names both
 * stuck sends; eager sends would get through; sim_run makes the deadlock an
 * internal error (exit 3). */
static void test_deadlock(void)
{
    const int crossed[2][2] = {{OP_SEND_FWD, OP_RECV_BWD}, {OP_SEND_BWD, OP_RECV_FWD}};
    Plan *mp = two_stage_plan(crossed);
    CHECK(mp != NULL);
    if (!mp) return;
    Sim sim;
    SimOpts eager = {.eager = true};
    CHECK(sim_simulate(mp, &eager, &sim) == NULL);
    CHECK(sim.step_time > 0);
    const char *err = sim_simulate(mp, NULL, &sim);
    CHECK(err != NULL);
    if (err) {
        CHECK(strstr(err, "deadlock") != NULL);
        CHECK(strstr(err, "stage 0 pp-comm op 0 send_fwd") != NULL);
        CHECK(strstr(err, "stage 1 pp-comm op 0 send_bwd") != NULL);
        CHECK(strstr(err, "to be posted") != NULL);
    }
    /* receives first on both stages: a deadlock even with eager sends */
    const int recv_first[2][2] = {{OP_RECV_BWD, OP_SEND_FWD}, {OP_RECV_FWD, OP_SEND_BWD}};
    mp = two_stage_plan(recv_first);
    err = sim_simulate(mp, &eager, &sim);
    CHECK(err != NULL && strstr(err, "recv_bwd") && strstr(err, "recv_fwd"));
    /* a receive nobody sends */
    const int lonely[2][2] = {{OP_RECV_BWD, OP_WAIT}, {OP_SEND_BWD, OP_WAIT}};
    mp = two_stage_plan(lonely);
    for (int c = 0; c < 2; c++) mp->sched.classes[c].nops = 1;
    mp->sched.classes[1].ops[0].kind = OP_SEND_FWD;
    err = sim_simulate(mp, NULL, &sim);
    CHECK(err != NULL && strstr(err, "no stage sends it"));
    /* sim_run dies naming the ops */
    mp = two_stage_plan(crossed);
    int fd[2];
    CHECK(pipe(fd) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        sim_run(mp, &sim);
        _exit(0);
    }
    close(fd[1]);
    char buf[4096];
    ssize_t n, len = 0;
    while ((n = read(fd[0], buf + len, sizeof buf - 1 - (size_t)len)) > 0) len += n;
    buf[len] = 0;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == EXIT_INTERNAL);
    CHECK(strstr(buf, "deadlock") != NULL && strstr(buf, "send_fwd") != NULL && strstr(buf, "send_bwd") != NULL);
}

/* Two waits on each other (on two streams of one class) are stuck too; the
 * report says what each waits for.  The same wait on a real op runs. */
static void test_wait_cycle(void)
{
    const int kinds[2][2] = {{OP_WAIT, OP_WAIT}, {OP_WAIT, OP_WAIT}};
    Plan *mp = two_stage_plan(kinds);
    CHECK(mp != NULL);
    if (!mp) return;
    for (int c = 0; c < 2; c++) {
        Sched *s = &mp->sched.classes[c];
        s->ops[0].stream = ST_COMPUTE, s->ops[0].aux = 1;
        s->ops[1].stream = ST_DP_COMM, s->ops[1].aux = 0;
    }
    Sim sim;
    const char *err = sim_simulate(mp, NULL, &sim);
    CHECK(err != NULL && strstr(err, "stage 0 compute op 0 wait") && strstr(err, "waits for stage 0 dp-comm op 1"));
    for (int c = 0; c < 2; c++) mp->sched.classes[c].ops[1].kind = OP_GRAD_REDUCE;
    CHECK(sim_simulate(mp, NULL, &sim) == NULL);
    CHECK(sim.classes[0].ops[0].start == sim.classes[0].ops[1].end);
}

/* The 1T-parameter GPT on 16 384 GPUs (64 rank classes) simulates, to a
 * plausible step (tests/bench/plan/run.sh times it). */
static void test_1t(void)
{
    Plan *mp = cal_plan("model gpt { layers = 128  hidden = 25600  heads = 160  vocab = 51200  seq_len = 2048 }\n"
                           "parallel { tp = 8  pp = 64  dp = 32  sequence_parallel = on  schedule = 1f1b }\n"
                           "zero { stage = 1 }\n precision { dtype = bf16  master_weights = fp32  grad_reduce = fp32 }\n"
                           "checkpointing { activations = full }\n train { global_batch = 3072  micro_batch = 1 }\n"
                           "cluster { nodes = 2048  gpus_per_node = 8  gpu = h100_sxm_80gb }\n");
    CHECK(mp != NULL);
    if (!mp) return;
    CHECK_EQ(mp->mem.nclasses, 64);
    Sim sim;
    sim_run(mp, &sim);
    CHECK(sim.step_time > 0 && sim.mfu > 0.05 && sim.mfu < 1);
    CHECK(sim.hfu > sim.mfu);       /* full recompute */
}

int main(void)
{
    test_bubbles();
    test_dp_under_pp();
    test_tp_under_pp();
    test_mfu_compute_only();
    test_critical_path();
    test_exposed();
    test_module_waits();
    test_deadlock();
    test_wait_cycle();
    test_1t();
    return fx_done("test_sim");
}
