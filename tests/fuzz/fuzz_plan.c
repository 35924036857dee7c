/* fuzz_plan.c — libFuzzer target over the compiler's middle and back: every
 * spec that checks is planned as `shardc plan` plans it (the periodic plan
 * from a few microbatches where it applies, then the whole step), verified,
 * simulated, reported (text, JSON, trace, HTML) and emitted as C.
 *
 * A spec that checks must plan or say why (a diagnostic), the verifier must
 * accept every plan (the schedule's collectives, sends, events and arena:
 * a rejection is the planner's bug, as `shardc plan` exits 3 for it), the
 * simulation must finish, and nothing may crash, leak or hang.  Specs are
 * bounded so one input plans in milliseconds (the layouts the fuzzer reaches
 * matter, not their size): at most 64 ranks, 16 layers, hidden 2048, 32
 * microbatches a pipeline, a 4096-token context and a 2^17 vocabulary; the
 * rest are skipped, as are user-defined ops.  Includes and profiles are
 * files, which the fuzzer does not open.
 *
 * An input is spec text, or, when its first byte is 0, a layout: each byte
 * after it picks one choice of a small GPT or Llama and of every parallel
 * feature (layout_text), so that the fuzzer walks the space of layouts
 * instead of spending its mutations on syntax.  FUZZ_PLAN_SHOW=1 prints each
 * input's spec text (to read a saved crash: run the target on it).
 * Build and run with scripts/run-fuzz (target `plan`).
 */
#include "emit.h"
#include "plan.h"
#include "shardc.h"
#include "sim.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    spec_allow_include = false;
    diag_color = false;
    devnull = fopen("/dev/null", "w");
    if (!devnull) abort();
    diag_stream = devnull;
    return 0;
}

/* Whether a checked spec is small enough to plan per input. */
static bool small(const Spec *s)
{
    int64_t world = s->parallel.tp * s->parallel.pp * s->parallel.dp;
    return s->nopen == 0 && s->model.activation != ACT_EXTERN && world >= 1 && world <= 64 &&
           s->model.layers <= 16 && s->model.hidden <= 2048 && s->model.ffn_hidden <= 8192 &&
           s->parallel.microbatches <= 32 && s->model.seq_len <= 4096 && s->model.vocab <= (1 << 17) &&
           s->parallel.virtual_stages <= 8;
}

/* What `shardc plan` prints of a plan. */
static void print(Plan *pl, Sim *sim)
{
    fix_find(pl);
    report_text(devnull, pl);
    sim_summary(devnull, pl, sim);
}

/* Everything `shardc plan` and `shardc build --emit-c` do with a plan. */
static void use(Plan *pl, Sim *sim)
{
    print(pl, sim);
    if (pl->part.world > 0) report_rank(devnull, pl, pl->part.world - 1);
    report_json(pl, sim, 0);
    if (!trace_write(devnull, pl, sim)) abort();
    html_report(pl, sim);
    if (emit_supported(pl->spec, false)) emit_c(pl, NULL, "fuzz.tspec", true);
}

/* Appends to *t (an arena string). */
static void sf(const char **t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sf(const char **t, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    *t = arena_printf(&g_arena, "%s%s", *t, buf);
}

/* The layout's choices, one byte each (past the end: 0). */
typedef struct Pick { const uint8_t *d; size_t n, at; } Pick;
static int pick(Pick *p, int k) { return (int)(p->at < p->n ? p->d[p->at++] : 0) % k; }

/* Spec text of the layout the bytes choose: the model, tp · pp · dp and the
 * schedule, ZeRO and its knobs, offload, checkpointing, precision, the batch
 * and a CPU or GPU cluster.  Many choices are refused by the checker (which
 * must then say why); the rest are planned. */
static const char *layout_text(const uint8_t *d, size_t n)
{
    static const char *const on[] = {"off", "on"};
    Pick p = {d, n, 0};
    bool llama = pick(&p, 2);
    int layers = 1 + pick(&p, 8), heads = 1 << pick(&p, 4), hidden = heads * 16 * (1 + pick(&p, 4));
    int kv = llama ? heads >> pick(&p, 3) : heads, vocab = (int[]){256, 300, 512, 1000}[pick(&p, 4)];
    int seq = 16 << pick(&p, 4), tp = 1 << pick(&p, 4), pp = 1 + pick(&p, 4), dp = 1 + pick(&p, 4);
    int sched = pick(&p, 3), vstages = 2 + pick(&p, 2), zero = pick(&p, 4), mb = 1 << pick(&p, 3);
    int m = 1 + pick(&p, 12), ckpt = pick(&p, 3), dtype = pick(&p, 3), gpu = pick(&p, 3);
    const char *t = "";
    sf(&t, "model %s { layers = %d  hidden = %d  heads = %d%s  vocab = %d  seq_len = %d%s }\n",
       llama ? "llama" : "gpt", layers, hidden, heads, llama ? arena_printf(&g_arena, "  kv_heads = %d", kv ? kv : 1) : "",
       vocab, seq, pick(&p, 2) ? "  tie_embeddings = off" : "");
    sf(&t, "parallel { tp = %d  pp = %d  dp = %d  sequence_parallel = %s  tp_comm_overlap = %s  rank_order = %s", tp, pp,
       dp, on[pick(&p, 2)], (const char *[]){"none", "wgrad", "full"}[pick(&p, 3)],
       pick(&p, 2) ? "tp_pp_dp" : "tp_dp_pp");
    if (pp > 1)
        sf(&t, "  schedule = %s%s  pp_scatter_gather = %s", (const char *[]){"1f1b", "gpipe", "interleaved"}[sched],
           sched == 2 ? arena_printf(&g_arena, "  virtual_stages = %d", vstages) : "", on[pick(&p, 2)]);
    sf(&t, " }\n");
    sf(&t, "zero { stage = %d  overlap_comm = %s  reduce_bucket = %s", zero, on[pick(&p, 2)],
       (const char *[]){"1e3", "5e4", "1e12"}[pick(&p, 3)]);
    if (zero >= 1 && zero <= 2) sf(&t, "  overlap_param_gather = %s", on[pick(&p, 2)]);
    if (zero == 3)
        sf(&t, "  prefetch_bucket = %s  max_live_parameters = %s  max_reuse_distance = %s  param_persistence_threshold = %s"
               "  gather_across_microbatches = %s",
           (const char *[]){"1e3", "5e4", "5e7"}[pick(&p, 3)], (const char *[]){"1e4", "3e5", "1e9"}[pick(&p, 3)],
           (const char *[]){"0", "1e5", "1e9"}[pick(&p, 3)], (const char *[]){"0", "1e3", "1e5"}[pick(&p, 3)],
           pp > 1 ? on[pick(&p, 2)] : "off");
    sf(&t, " }\n");
    int off = pick(&p, 3);
    if (off && zero >= 1)
        sf(&t, "offload { optimizer = cpu%s }\n", off == 2 && zero == 3 ? "  params = cpu" : "");
    if (ckpt)
        sf(&t, "checkpointing { activations = %s%s }\n", ckpt == 1 ? "full" : "selective",
           ckpt == 1 && pick(&p, 2) ? "  every = 2" : "");
    sf(&t, "precision { dtype = %s }\n", (const char *[]){"fp32", "bf16", "fp16"}[dtype]);
    sf(&t, "train { global_batch = %d  micro_batch = %d }\n", mb * dp * m, mb);
    int world = tp * pp * dp;
    if (gpu == 0)
        sf(&t, "cluster { nodes = 1  gpus_per_node = %d  gpu = cpu }\n", world);
    else {
        int per = world % 8 == 0 ? 8 : world % 4 == 0 ? 4 : world;
        sf(&t, "cluster { nodes = %d  gpus_per_node = %d  gpu = %s  network = %s }\n", world / per, per,
           gpu == 1 ? "a100_80gb" : "h100_sxm_80gb", gpu == 1 ? "ib200" : "ib400");
    }
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    diag_reset();
    const char *text = (const char *)data;
    if (size > 0 && data[0] == 0) {
        text = layout_text(data + 1, size - 1);
        size = strlen(text);
    }
    static int show = -1;
    if (show < 0) show = getenv("FUZZ_PLAN_SHOW") && *getenv("FUZZ_PLAN_SHOW") == '1';
    if (show) fprintf(stderr, "%.*s\n", (int)size, text);
    Item *items = spec_parse_text("fuzz.tspec", text, size);
    Spec *spec = arena_alloc(&g_arena, sizeof *spec);
    if (diag_errors == 0 && sema_resolve(items, NULL, 0, spec) && small(spec)) {
        Plan *pl = arena_alloc(&g_arena, sizeof *pl);
        Sim *sim = arena_alloc(&g_arena, sizeof *sim);
        /* the step from a few microbatches, as `shardc plan` prints it ... */
        if (period_plan(spec, true, pl, sim)) print(pl, sim);
        /* ... and the whole step, as the files and `shardc build` use it */
        int before = diag_errors;
        if (plan_build(spec, pl, true)) {
            if (!verify_plan(pl, devnull)) abort();       /* the planner's bug */
            const char *why = sim_simulate(pl, NULL, sim);
            if (why) abort();                               /* a verified plan that deadlocks */
            use(pl, sim);
        } else if (diag_errors == before) {
            abort();                                        /* refused without saying why */
        }
    }
    diag_reset();
    arena_free(&g_arena);
    return 0;
}
