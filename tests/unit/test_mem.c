/* test_mem.c — the memory plan: model states against the ZeRO paper's
 * Table 1 and Megatron's distributed-optimizer bytes per parameter; no two
 * live buffers overlap in any arena over a matrix of layouts and options; the
 * arena stays within 10% of the live-bytes lower bound; activation lifetimes
 * follow the pipeline schedule; ZeRO-3 gathers respect max_live_parameters;
 * the verdict, the fixes (each really fits when re-planned) and the JSON. */
#include "plan_fixture.h"
#include "sim.h"

#include <cjson/cJSON.h>

/* An untied GPT of 7 499 997 184 parameters (Ψ = 7.5B to 4e-7). */
static void spec_7b5(Spec *s)
{
    fx_spec(s);
    fx_gpt(s, 36, 4096, 32, 29532, 2048);
    s->model.tie_embeddings = false;
    s->precision.dtype = DT_FP16, s->precision.grad_reduce = DT_FP16;
    s->zero.param_persistence_threshold = 0;
    s->cluster.gpu_memory = 1LL << 50;      /* the verdict is not the point here */
}

/* Model states (GB) of one rank, scaled to exactly 7.5B parameters. */
static double states_gb(const Plan *mp)
{
    int64_t host = 0;
    const Sched *s = &mp->sched.classes[0];
    for (int k = 0; k < s->nbufs; k++)
        if (s->bufs[k].persistent && s->bufs[k].space != SPACE_DEVICE && s->bufs[k].cat <= CAT_OPTIMIZER)
            host += s->bufs[k].bytes;
    double b = (double)(mp->mem.classes[0].model_states + host);
    return b / 1e9 * (7.5e9 / (double)mp->model.params);
}

/* ZeRO paper Table 1, 7.5B column, K = 12: equal within the table's rounding. */
static void test_zero_table(void)
{
    static const struct { int nd; const char *v[3]; } table[] = {
        {1, {"120", "120", "120"}},     {4, {"52.5", "41.3", "30"}},    {16, {"35.6", "21.6", "7.5"}},
        {64, {"31.4", "16.6", "1.88"}}, {256, {"30.4", "15.4", "0.47"}}, {1024, {"30.1", "15.1", "0.12"}},
    };
    Spec s;
    Plan *mp = malloc(sizeof *mp);
    spec_7b5(&s);
    s.parallel.microbatches = 1;
    CHECK(plan_build(&s, mp, false));
    CHECK_EQ(mp->model.params, 7499997184LL);
    CHECK_NEAR(states_gb(mp), 120.0, 1e-4);     /* baseline 16Ψ */
    for (size_t r = 0; r < sizeof table / sizeof table[0]; r++)
        for (int stage = 1; stage <= 3; stage++) {
            s.parallel.dp = table[r].nd;
            s.zero.stage = stage;
            fx_batch(&s);
            CHECK(plan_build(&s, mp, false));
            const char *txt = table[r].v[stage - 1], *dot = strchr(txt, '.');
            double want = atof(txt), tol = dot ? 0.5 * pow(10, -(double)strlen(dot + 1)) : 0.5;
            double got = states_gb(mp);
            if (fabs(got - want) > tol * 1.0001) {
                fprintf(stderr, "ZeRO table Nd=%d stage %d: %.4f GB, the paper says %s\n", table[r].nd, stage, got, txt);
                failures++;
            }
        }
    free(mp);
}

/* Bytes of the largest fp32 gradient copy the optimizer step makes. */
static int64_t grad32(const Plan *mp)
{
    int64_t best = 0;
    const Sched *s = &mp->sched.classes[0];
    for (int k = 0; k < s->nbufs; k++)
        if (strcmp(s->bufs[k].name, "optimizer.grads_fp32") == 0 && s->bufs[k].bytes > best) best = s->bufs[k].bytes;
    return best;
}

/* Megatron's distributed optimizer (ZeRO-1), bytes per parameter: fp16
 * 4 + 16/d, bf16 with fp32 grads 6 + 12/d, fp32 8 + 8/d (d = 1: 20, 18, 16). */
static void test_megatron_table(void)
{
    Spec s;
    Plan *mp = malloc(sizeof *mp);
    const struct { int dtype, grads; double fixed, sharded; } rows[] = {
        {DT_FP16, DT_FP16, 4, 16}, {DT_BF16, DT_FP32, 6, 12}, {DT_FP32, DT_FP32, 8, 8}};
    for (int r = 0; r < 3; r++)
        for (int d = 1; d <= 64; d *= 4) {
            spec_7b5(&s);
            s.precision.dtype = rows[r].dtype, s.precision.grad_reduce = rows[r].grads;
            s.zero.stage = 1, s.parallel.dp = d;
            s.zero.sub_group_size = 1LL << 40;      /* the step's fp32 grads cover the shard, as Megatron's */
            fx_batch(&s);
            CHECK(plan_build(&s, mp, false));
            double per = (double)(mp->mem.classes[0].model_states + grad32(mp)) / (double)mp->model.params;
            CHECK_NEAR(per, rows[r].fixed + rows[r].sharded / d, 2e-4);
        }
    free(mp);
}

/* Checks one plan: no overlap, arena >= lower bound, within 10% of it. */
/* Every buffer's lifetime is what a scan of the final op list gives (the
 * schedule numbers it once, sched_events): from the first op touching a
 * transient to the last; a model state the whole step. */
static void check_lifetimes(const Sched *s, const char *what, int c)
{
    int *first = malloc(sizeof(int) * (size_t)(s->nbufs + 1)), *last = malloc(sizeof(int) * (size_t)(s->nbufs + 1));
    for (int k = 0; k < s->nbufs; k++) first[k] = last[k] = -1;
    for (int i = 0; i < s->nops; i++)
        for (int j = 0; j < s->ops[i].nrd + s->ops[i].nwr; j++) {
            int k = j < s->ops[i].nrd ? s->ops[i].rd[j] : s->ops[i].wr[j - s->ops[i].nrd];
            if (first[k] < 0) first[k] = i;
            last[k] = i;
        }
    for (int k = 0; k < s->nbufs; k++) {
        const Buffer *b = &s->bufs[k];
        int f = b->persistent ? 0 : first[k], l = b->persistent ? (s->nops > 0 ? s->nops - 1 : 0) : last[k];
        if (b->first != f || b->last != l) {
            fprintf(stderr, "%s: class %d: %s lives [%d, %d], its uses say [%d, %d]\n", what, c, b->name, b->first,
                    b->last, f, l);
            failures++;
            break;
        }
    }
    free(first), free(last);
}

static void check_plan(const Plan *mp, const char *what)
{
    for (int i = 0; i < mp->mem.nclasses; i++) {
        const ClassMem *cm = &mp->mem.classes[i];
        check_lifetimes(cm->sched, what, i);
        if (!mem_check_overlap(cm)) {
            fprintf(stderr, "%s: class %d: live buffers overlap\n", what, i);
            failures++;
        }
        for (int sp = 0; sp < NSPACES; sp++) CHECK(cm->arena[sp] >= cm->peak[sp]);
        if (cm->ratio > 1.10) {
            fprintf(stderr, "%s: class %d: arena %.3f x the lower bound\n", what, i, cm->ratio);
            failures++;
        }
        int64_t sum = 0;
        for (int c = 0; c < NCATS; c++) sum += cm->at_peak[c];
        CHECK_EQ(sum, cm->peak[SPACE_DEVICE]);
        CHECK_EQ(mem_live_at(cm, SPACE_DEVICE, cm->peak_op), cm->peak[SPACE_DEVICE]);
    }
}

/* tp {1,2,4} × pp {1,2,4} × dp {1,2,4,8} × ZeRO 0-3, with the schedule,
 * checkpointing, offload and sp varied across the matrix. */
static void test_matrix(void)
{
    Plan *mp = malloc(sizeof *mp);
    int n = 0;
    for (int tp = 1; tp <= 4; tp *= 2)
        for (int pp = 1; pp <= 4; pp *= 2)
            for (int dp = 1; dp <= 8; dp *= 2)
                for (int zero = 0; zero <= 3; zero++, n++) {
                    Spec s;
                    fx_spec(&s);
                    s.model.layers = 8, s.model.vocab = 1000;
                    s.parallel.tp = tp, s.parallel.pp = pp, s.parallel.dp = dp, s.zero.stage = zero;
                    s.parallel.schedule = n % 3;
                    s.parallel.virtual_stages = s.parallel.schedule == SCHED_INTERLEAVED && pp > 1 ? 2 : 1;
                    s.parallel.microbatches = 2 * pp;
                    s.parallel.sequence_parallel = tp > 1 && n % 2;
                    s.checkpointing.activations = n % 3 == 0 ? CKPT_FULL : n % 3 == 1 ? CKPT_SELECTIVE : CKPT_NONE;
                    s.checkpointing.every = n % 4 == 0 ? 2 : 1;
                    s.checkpointing.cpu = n % 5 == 0;
                    s.checkpointing.partition_activations = n % 7 == 0;
                    s.zero.overlap_comm = n % 2 == 0;
                    s.zero.reduce_bucket = 30000, s.zero.prefetch_bucket = 20000;
                    s.zero.param_persistence_threshold = 300, s.zero.max_live_parameters = 60000;
                    s.zero.max_reuse_distance = n % 4 == 1 ? 0 : 100000;
                    s.zero.gather_across_microbatches = n % 6 == 5;
                    s.zero.sub_group_size = 50000;
                    s.model.tie_embeddings = n % 4 < 2;
                    s.precision.dtype = n % 8 == 3 ? DT_FP32 : DT_BF16;
                    s.precision.grad_reduce = n % 8 == 3 || n % 8 == 6 ? DT_FP32 : s.precision.dtype;
                    s.train.grad_clip = n % 2 ? 1.0 : 0.0;
                    if (zero >= 1 && n % 5 == 1) s.offload.optimizer = n % 10 == 1 ? OFF_NVME : OFF_CPU;
                    if (zero == 3 && n % 3 == 2) s.offload.params = n % 6 == 2 ? OFF_NVME : OFF_CPU;
                    if (zero == 3 && n % 7 == 3 && s.offload.optimizer) s.offload.optimizer_ratio = 0.5;
                    fx_batch(&s);
                    if (!plan_build(&s, mp, false)) {
                        fprintf(stderr, "layout %d did not plan\n", n);
                        failures++;
                        continue;
                    }
                    check_plan(mp, arena_printf(&g_arena, "layout %d (tp %d pp %d dp %d zero %d)", n, tp, pp, dp, zero));
                }
    CHECK_EQ(n, 144);
    free(mp);
}

/* Buffers named like `pattern` (a substring) live at once, at most. */
static int max_live_named(const ClassMem *cm, const char *pattern)
{
    const Sched *s = cm->sched;
    int *d = calloc((size_t)s->nops + 2, sizeof(int)), best = 0;
    for (int k = 0; k < s->nbufs; k++)
        if (strstr(s->bufs[k].name, pattern)) d[s->bufs[k].first]++, d[s->bufs[k].last + 1]--;
    for (int i = 0, live = 0; i < s->nops; i++) {
        live += d[i];
        if (live > best) best = live;
    }
    free(d);
    return best;
}

/* Bytes of buffers named like `pattern` live at once, at most. */
static int64_t max_bytes_named(const ClassMem *cm, const char *pattern)
{
    const Sched *s = cm->sched;
    int64_t *d = calloc((size_t)s->nops + 2, sizeof(int64_t)), best = 0, live = 0;
    for (int k = 0; k < s->nbufs; k++)
        if (strstr(s->bufs[k].name, pattern)) d[s->bufs[k].first] += s->bufs[k].bytes, d[s->bufs[k].last + 1] -= s->bufs[k].bytes;
    for (int i = 0; i < s->nops; i++) {
        live += d[i];
        if (live > best) best = live;
    }
    free(d);
    return best;
}

/* Activations live as the schedule says: 1F1B keeps p - stage microbatches'
 * layer inputs, GPipe all m; full recompute keeps only checkpoints. */
static void test_schedule_lifetimes(void)
{
    Spec s;
    Plan *mp = malloc(sizeof *mp);
    fx_spec(&s);
    s.model.layers = 8;
    s.parallel.pp = 4, s.parallel.microbatches = 8;
    fx_batch(&s);
    for (int sch = SCHED_GPIPE; sch <= SCHED_1F1B; sch++) {
        s.parallel.schedule = sch;
        CHECK(plan_build(&s, mp, false));
        for (int st = 0; st < 4; st++) {
            int inflight = sch == SCHED_GPIPE ? 8 : 4 - st;
            CHECK_EQ(max_live_named(&mp->mem.classes[st], ".saved"), inflight * 2);     /* 2 layers per stage */
            CHECK_EQ(max_live_named(&mp->mem.classes[st], ".x"), inflight * 2);
        }
    }
    s.parallel.schedule = SCHED_1F1B;
    s.checkpointing.activations = CKPT_FULL, s.checkpointing.every = 2;
    CHECK(plan_build(&s, mp, false));
    CHECK_EQ(max_live_named(&mp->mem.classes[0], ".saved"), 0);
    CHECK_EQ(max_live_named(&mp->mem.classes[0], ".ckpt"), 4);       /* one checkpoint per 2 layers */
    CHECK_EQ(max_live_named(&mp->mem.classes[0], ".recomputed"), 2);  /* one group replayed at a time */
    free(mp);
}

/* ZeRO-3: the gathered parameters alive at once stay within
 * max_live_parameters (plus the unit in use), and every use is gathered. */
static void test_zero3_window(void)
{
    Spec s;
    Plan *mp = malloc(sizeof *mp);
    fx_spec(&s);
    s.model.layers = 12, s.parallel.dp = 4, s.zero.stage = 3, s.parallel.microbatches = 2;
    s.zero.param_persistence_threshold = 0, s.zero.max_reuse_distance = 0;
    s.zero.prefetch_bucket = 100000, s.zero.max_live_parameters = 150000;
    fx_batch(&s);
    CHECK(plan_build(&s, mp, false));
    const ClassMem *cm = &mp->mem.classes[0];
    int64_t unit = 0;
    for (int i = 0; i < cm->cls->nsegs; i++)
        if (cm->cls->segs[i].padded > unit) unit = cm->cls->segs[i].padded;
    CHECK(max_bytes_named(cm, "params.gathered") <= (150000 + unit) * 2);
    CHECK(max_bytes_named(cm, "params.gathered") > 0);
    int gathers = 0;
    for (int i = 0; i < cm->sched->nops; i++) gathers += cm->sched->ops[i].kind == OP_GATHER;
    /* per microbatch: 12 layers forward and backward, each six fetch units
     * (its submodules: ln_1, c_attn, c_proj, ln_2, c_fc, c_proj); the
     * embedding (tied: tokens and positions are two units) and the head
     * (final norm, tokens) */
    CHECK_EQ(gathers, 2 * (2 * 12 * 6 + 4));
    s.zero.max_reuse_distance = 1000000000;        /* DeepSpeed's default keeps a small model gathered */
    CHECK(plan_build(&s, mp, false));
    gathers = 0;
    for (int i = 0; i < mp->sched.classes[0].nops; i++) gathers += mp->sched.classes[0].ops[i].kind == OP_GATHER;
    CHECK(gathers < 2 * (2 * 12 * 6 + 4));
    free(mp);
}

/* Does the JSON object have this path ("a.b.c")? */
static bool has_path(const cJSON *o, const char *path)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *k = strtok(buf, "."); k; k = strtok(NULL, ".")) {
        o = cJSON_GetObjectItemCaseSensitive(o, k);
        if (!o) return false;
    }
    return true;
}

/* A 7B model on one 80 GB GPU without ZeRO does not fit; every fix that
 * claims to fit does when its change is applied and re-planned. */
static void test_verdict_and_fixes(void)
{
    Spec s;
    Plan *mp = malloc(sizeof *mp), *alt = malloc(sizeof *alt);
    fx_spec(&s);
    fx_llama(&s, 32, 4096, 32, 11008);
    s.parallel.dp = 8, s.train.micro_batch = 4, s.parallel.microbatches = 2;
    s.checkpointing.activations = CKPT_SELECTIVE;
    /* the H100 profile's rates, so that the simulated step is finite */
    s.cluster.bf16_tflops = 989, s.cluster.fp32_tflops = 67, s.cluster.hbm_bandwidth = 3350e9;
    s.cluster.intra_node = 450e9, s.cluster.inter_node = 50e9, s.cluster.network_latency_us = 5;
    s.cluster.pcie = 64e9, s.cluster.host_bandwidth = 100e9, s.cluster.nvme = 3.5e9;
    fx_batch(&s);
    CHECK(plan_build(&s, mp, false));
    CHECK(!mp->mem.fits && !mp->mem.fits_device && mp->mem.fits_gpus);
    fix_find(mp);
    CHECK(mp->nfixes >= 4);
    int fitting = 0;
    for (int i = 0; i < mp->nfixes; i++) {
        CHECK(mp->fixes[i].saves == mp->mem.classes[mp->mem.worst].device_total - mp->fixes[i].device_total);
        fitting += mp->fixes[i].fits;
        if (i > 0 && mp->fixes[i].fits) CHECK(mp->fixes[i - 1].fits);     /* fitting fixes first */
    }
    CHECK(fitting >= 1);
    /* apply "-D zero.stage=1": it must be listed with the same answer */
    Spec z = s;
    z.zero.stage = 1;
    CHECK(plan_build(&z, alt, false));
    bool listed = false;
    for (int i = 0; i < mp->nfixes; i++)
        if (strcmp(mp->fixes[i].change, "-D zero.stage=1") == 0) {
            listed = true;
            CHECK(mp->fixes[i].fits == alt->mem.fits);
            CHECK_EQ(mp->fixes[i].device_total, alt->mem.classes[alt->mem.worst].device_total);
        }
    CHECK(listed);
    /* the JSON has the documented keys, the simulated step's as sim.c computed them */
    Sim sim;
    sim_run(mp, &sim);
    char *json = report_json(mp, &sim, 3);
    cJSON *root = cJSON_Parse(json);
    CHECK(root != NULL);
    const char *keys[] = {"model.params", "model.flops_per_step", "layout.tp", "layout.pp", "layout.dp",
                          "layout.world", "fits", "fixes", "rank.buffers", "rank.owned_ranges"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) CHECK(has_path(root, keys[i]));
    const cJSON *cls = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "rank_classes"), 0);
    const char *ckeys[] = {"stage", "count", "device_bytes.params", "device_bytes.grads", "device_bytes.optimizer",
                           "device_bytes.activations", "device_bytes.workspace", "device_bytes.comm",
                           "device_bytes.reserve", "device_bytes.peak", "device_bytes.arena",
                           "host_bytes.optimizer", "host_bytes.params", "host_bytes.total", "nvme_bytes"};
    for (size_t i = 0; i < sizeof ckeys / sizeof ckeys[0]; i++) CHECK(has_path(cls, ckeys[i]));
    const char *skeys[] = {"simulation.step_time_s", "simulation.tokens_per_s", "simulation.mfu", "simulation.hfu",
                           "simulation.bubble", "simulation.exposed_comm.tp", "simulation.exposed_comm.dp",
                           "simulation.exposed_comm.pp", "simulation.exposed_comm.embed", "simulation.copy_s",
                           "simulation.critical_path.share_by_kind", "simulation.rank_classes"};
    for (size_t i = 0; i < sizeof skeys / sizeof skeys[0]; i++) CHECK(has_path(root, skeys[i]));
    const cJSON *simj = cJSON_GetObjectItemCaseSensitive(root, "simulation");
    double step = cJSON_GetObjectItemCaseSensitive(simj, "step_time_s")->valuedouble;
    CHECK(step > 0 && fabs(step - sim.step_time) <= 1e-5 * sim.step_time);
    CHECK(fabs(cJSON_GetObjectItemCaseSensitive(simj, "mfu")->valuedouble - sim.mfu) <= 1e-5 * sim.mfu);
    CHECK_EQ(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(simj, "rank_classes")), mp->mem.nclasses);
    CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(root, "fits")));
    CHECK_EQ(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "model"), "params")->valuedouble,
             6738415616LL);
    cJSON_Delete(root);
    free(mp);
    free(alt);
}

/* More GPUs than the cluster has: the verdict says so, and fewer dp or more
 * nodes fix it. */
static void test_too_many_gpus(void)
{
    Spec s;
    Plan *mp = malloc(sizeof *mp);
    fx_spec(&s);
    s.parallel.dp = 16, s.parallel.microbatches = 1;
    fx_batch(&s);
    CHECK(plan_build(&s, mp, false));
    CHECK(!mp->mem.fits && !mp->mem.fits_gpus && mp->mem.fits_device);
    fix_find(mp);
    bool dp = false, nodes = false;
    for (int i = 0; i < mp->nfixes; i++) {
        if (strcmp(mp->fixes[i].change, "-D parallel.dp=8 -D train.grad_accum=2") == 0) dp = mp->fixes[i].fits;
        if (strcmp(mp->fixes[i].change, "-D cluster.nodes=2") == 0) nodes = mp->fixes[i].fits;
    }
    CHECK(dp && nodes);
    free(mp);
}

/* `shardc plan`'s options: bad ones are usage errors (2); a plan that does
 * not fit is an answer (0). */
static void test_command(void)
{
    Spec s;
    fx_spec(&s);
    FILE *saved = stdout, *sink = fopen("/dev/null", "w");
    diag_stream = sink;
    stdout = sink;
    char *bad[] = {"--bogus"}, *rank[] = {"--rank", "99"}, *ok[] = {"--rank", "0"};
    CHECK_EQ(drv_run_spec("plan", &s, 1, bad), EXIT_USAGE);
    CHECK_EQ(drv_run_spec("plan", &s, 2, rank), EXIT_USAGE);
    CHECK_EQ(drv_run_spec("plan", &s, 2, ok), EXIT_OK);
    s.cluster.gpu_memory = 1 << 20;         /* 1 MiB: does not fit, still exit 0 */
    CHECK_EQ(drv_run_spec("plan", &s, 0, NULL), EXIT_OK);
    s.parallel.tp = 3;                      /* cannot be planned: exit 1 */
    CHECK_EQ(drv_run_spec("plan", &s, 0, NULL), EXIT_USER);
    stdout = saved;
    diag_stream = NULL;
    fclose(sink);
}

int main(void)
{
    test_zero_table();
    test_megatron_table();
    test_matrix();
    test_schedule_lifetimes();
    test_zero3_window();
    test_verdict_and_fixes();
    test_too_many_gpus();
    test_command();
    arena_free(&g_arena);
    return fx_done("test_mem");
}
