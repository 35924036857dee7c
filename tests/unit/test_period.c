/* test_period.c — period_plan (the step of m microbatches from plans of a
 * few) against the whole step planned, verified and simulated (the path
 * SHARDC_EXPANDED forces), over a spread of layouts: 1f1b and interleaved,
 * ZeRO 0-3, optimizer offload, full and selective checkpointing, tp with and
 * without sequence parallelism, pp 1..8, GPT and Llama, m from 8 to 96.
 * Equal: every memory figure and family place, every persistent buffer's and
 * every microbatch buffer's offset, the op counts, the op at the peak and its
 * label; the simulated step, per class and per stream, to 1e-9 of the step
 * (round-off of the extrapolation; NaN fails).  gpipe, ZeRO-3 across
 * stages and too few microbatches are declined. */
#include "plan_fixture.h"
#include "sim.h"
#include "../bench/costmodel/calib.h"

/* |a - b| within tol of scale; NaN fails. */
static bool near(double a, double b, double scale)
{
    return fabs(a - b) <= 1e-9 * fmax(scale, 1e-30);
}

#define NEAR(a, b, scale, what)                                                              \
    do {                                                                                     \
        if (!near((a), (b), (scale))) {                                                      \
            fprintf(stderr, "%s: %s: period %.17g, whole step %.17g\n", name, what, (double)(a), \
                    (double)(b));                                                            \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

/* Orders buffers by what they are (role, layer, microbatch, chunk, index, part, space). */
static const Buffer *g_bufs;
static int buf_key_cmp(const Buffer *a, const Buffer *b)
{
    int ka[7] = {a->role, a->layer, a->mb, a->chunk, a->idx, a->sub, a->space};
    int kb[7] = {b->role, b->layer, b->mb, b->chunk, b->idx, b->sub, b->space};
    for (int i = 0; i < 7; i++)
        if (ka[i] != kb[i]) return ka[i] < kb[i] ? -1 : 1;
    return 0;
}
static int by_key(const void *x, const void *y) { return buf_key_cmp(&g_bufs[*(const int *)x], &g_bufs[*(const int *)y]); }

/* Buffer indices of s sorted by key. */
static int *sorted(const Sched *s)
{
    int *ix = malloc(sizeof(int) * (size_t)(s->nbufs + 1));
    for (int i = 0; i < s->nbufs; i++) ix[i] = i;
    g_bufs = s->bufs;
    qsort(ix, (size_t)s->nbufs, sizeof *ix, by_key);
    return ix;
}

/* Every buffer of the period plan (microbatches 0 .. m0-1) is in the whole
 * step's at the same offset with the same bytes; returns how many matched. */
static int same_buffers(const char *name, const Sched *a, const Sched *b)
{
    int *ia = sorted(a), *ib = sorted(b), matched = 0;
    for (int i = 0, j = 0; i < a->nbufs; i++) {
        const Buffer *x = &a->bufs[ia[i]];
        while (j < b->nbufs && buf_key_cmp(&b->bufs[ib[j]], x) < 0) j++;
        if (j == b->nbufs || buf_key_cmp(&b->bufs[ib[j]], x) != 0) {
            fprintf(stderr, "%s: buffer %s is not in the whole step\n", name, x->name);
            failures++;
            continue;
        }
        const Buffer *y = &b->bufs[ib[j++]];
        if (x->offset != y->offset || x->bytes != y->bytes || x->persistent != y->persistent) {
            fprintf(stderr, "%s: buffer %s: offset %lld bytes %lld, whole step %lld, %lld\n", name, x->name,
                    (long long)x->offset, (long long)x->bytes, (long long)y->offset, (long long)y->bytes);
            failures++;
        }
        matched++;
    }
    free(ia);
    free(ib);
    return matched;
}

/* The memory plans agree in every figure, place and offset. */
static void same_memory(const char *name, const Plan *f, const Plan *w)
{
    CHECK_EQ(f->mem.nclasses, w->mem.nclasses);
    CHECK_EQ(f->mem.worst, w->mem.worst);
    CHECK_EQ(f->mem.host_node, w->mem.host_node);
    CHECK_EQ(f->mem.nvme_node, w->mem.nvme_node);
    CHECK(f->mem.fits == w->mem.fits && f->mem.fits_device == w->mem.fits_device &&
          f->mem.fits_host == w->mem.fits_host && f->mem.fits_nvme == w->mem.fits_nvme &&
          f->mem.fits_gpus == w->mem.fits_gpus);
    for (int c = 0; c < f->mem.nclasses && c < w->mem.nclasses; c++) {
        const ClassMem *x = &f->mem.classes[c], *y = &w->mem.classes[c];
        CHECK(!memcmp(x->arena, y->arena, sizeof x->arena));
        CHECK(!memcmp(x->peak, y->peak, sizeof x->peak));
        CHECK(!memcmp(x->at_peak, y->at_peak, sizeof x->at_peak));
        CHECK(!memcmp(x->max_cat, y->max_cat, sizeof x->max_cat));
        CHECK(!memcmp(x->host_cat, y->host_cat, sizeof x->host_cat));
        CHECK_EQ(x->model_states, y->model_states);
        CHECK_EQ(x->device_total, y->device_total);
        CHECK(x->ratio == y->ratio);
        CHECK_EQ(plan_step_ops(f, c), w->sched.classes[c].nops);
        CHECK_EQ(plan_peak_op(f, c), y->peak_op);
        CHECK(!strcmp(sched_op_label(x->sched, x->peak_op), sched_op_label(y->sched, y->peak_op)));
        CHECK_EQ(x->nfams, y->nfams);
        for (int k = 0; k < x->nfams && k < y->nfams; k++) {
            const BufFamily *u = &x->fams[k], *v = &y->fams[k];
            CHECK(u->role == v->role && u->idx == v->idx && u->lm == v->lm && u->w == v->w && u->size == v->size &&
                  u->base == v->base);
        }
        CHECK(same_buffers(name, x->sched, y->sched) == x->sched->nbufs);
    }
}

/* The simulated steps agree to 1e-9 of the step. */
static void same_sim(const char *name, const Plan *w, const Sim *f, const Sim *e)
{
    double T = e->step_time;
    CHECK(T > 0);
    NEAR(f->step_time, e->step_time, T, "step time");
    NEAR(f->tokens_per_s, e->tokens_per_s, e->tokens_per_s, "tokens/s");
    NEAR(f->mfu, e->mfu, e->mfu, "MFU");
    NEAR(f->hfu, e->hfu, e->hfu, "HFU");
    NEAR(f->bubble, e->bubble, 1, "bubble");
    NEAR(f->copy_time, e->copy_time, T, "copy time");
    NEAR(f->nvme_time, e->nvme_time, T, "NVMe time");
    for (int g = 0; g < NGROUPS; g++) NEAR(f->exposed[g], e->exposed[g], 1, "exposed");
    CHECK_EQ(f->ncritical, e->ncritical);
    for (int k = 0; k < NOPKINDS; k++) NEAR(f->critical_kind[k], e->critical_kind[k], T, "critical path by kind");
    for (int c = 0; c < w->mem.nclasses; c++) {
        const SimClass *a = &f->classes[c], *b = &e->classes[c];
        for (int st = 0; st < NSTREAMS; st++) NEAR(a->busy[st], b->busy[st], T, "busy");
        for (int g = 0; g < NGROUPS; g++) NEAR(a->exposed[g], b->exposed[g], T, "class exposed");
        NEAR(a->end, b->end, T, "class end");
        NEAR(a->work, b->work, T, "class work");
        NEAR(a->bubble, b->bubble, T, "class bubble");
        NEAR(a->nvme, b->nvme, T, "class NVMe");
    }
}

/* One layout: period_plan takes it (or declines, when expected) and agrees
 * with the whole step. */
static void check_layout(const char *name, const char *text, bool periodic)
{
    const Spec *s = cal_resolve(text);
    CHECK(s != NULL);
    if (!s) {
        fprintf(stderr, "%s does not resolve:\n%s", name, text);
        return;
    }
    Plan *f = arena_alloc(&g_arena, sizeof *f), *w = arena_alloc(&g_arena, sizeof *w);
    Sim fs, ws;
    bool took = period_plan(s, true, f, &fs);
    if (took != periodic) {
        fprintf(stderr, "%s: period_plan %s it\n", name, took ? "took" : "declined");
        failures++;
        return;
    }
    CHECK(plan_build(s, w, true));
    CHECK(verify_plan(w, stderr));
    const char *err = sim_simulate(w, NULL, &ws);
    CHECK(err == NULL);
    if (!took || err) return;
    CHECK(f->period_m < w->part.m);
    CHECK_EQ(f->part.m, w->part.m);
    CHECK(f->model.flops_model_step == w->model.flops_model_step);
    same_memory(name, f, w);
    same_sim(name, w, &fs, &ws);
}

/* The layouts: a small GPT or Llama with the parallel, zero, offload,
 * checkpointing blocks given. */
static void test_layouts(void)
{
    static const struct {
        const char *name, *model, *parallel, *rest;
        int gpus, batch;
        bool periodic;
    } L[] = {
        {"1f1b pp4 tp2 sp", "gpt", "tp = 2  pp = 4  dp = 1  sequence_parallel = on  schedule = 1f1b", "zero { stage = 0 }", 8, 32, true},
        {"1f1b pp8 zero1 full", "gpt", "pp = 8  dp = 1  schedule = 1f1b",
         "zero { stage = 1 }\ncheckpointing { activations = full }", 8, 40, true},
        {"1f1b pp2 dp2 zero2 selective", "llama", "pp = 2  dp = 2  schedule = 1f1b",
         "zero { stage = 2  overlap_comm = on }\ncheckpointing { activations = selective }", 4, 64, true},
        {"1f1b pp2 dp2 zero2 offload", "gpt", "pp = 2  dp = 2  schedule = 1f1b",
         "zero { stage = 2 }\noffload { optimizer = cpu }", 4, 48, true},
        {"1f1b pp1 dp4 zero3", "gpt", "dp = 4  schedule = 1f1b", "zero { stage = 3 }", 4, 64, true},
        {"1f1b pp1 dp2 zero3 offload", "llama", "dp = 2  schedule = 1f1b",
         "zero { stage = 3 }\noffload { optimizer = cpu }\ncheckpointing { activations = full }", 2, 32, true},
        {"1f1b pp4 tp2 no sp", "llama", "tp = 2  pp = 4  dp = 1  sequence_parallel = off  schedule = 1f1b",
         "zero { stage = 1 }", 8, 96, true},
        {"interleaved pp4 v2", "gpt", "pp = 4  dp = 1  schedule = interleaved  virtual_stages = 2",
         "zero { stage = 0 }", 4, 48, true},
        {"interleaved pp2 v2 tp2 sp full", "gpt",
         "tp = 2  pp = 2  dp = 1  sequence_parallel = on  schedule = interleaved  virtual_stages = 2",
         "zero { stage = 1 }\ncheckpointing { activations = full }", 4, 24, true},
        {"interleaved pp2 v2 dp2 zero2", "llama", "pp = 2  dp = 2  schedule = interleaved  virtual_stages = 2",
         "zero { stage = 2 }", 4, 48, true},
        {"gpipe pp4", "gpt", "pp = 4  dp = 1  schedule = gpipe", "zero { stage = 0 }", 4, 48, false},
        {"1f1b pp2 zero3 (not periodic)", "gpt", "pp = 2  dp = 2  schedule = 1f1b", "zero { stage = 3 }", 4, 64, false},
        {"1f1b pp4 few microbatches", "gpt", "pp = 4  dp = 1  schedule = 1f1b", "zero { stage = 0 }", 4, 8, false},
    };
    for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
        const char *model = !strcmp(L[i].model, "gpt")
            ? "model gpt { layers = 16  hidden = 256  heads = 4  vocab = 512  seq_len = 128 }"
            : "model llama { layers = 16  hidden = 256  heads = 4  kv_heads = 2  ffn_hidden = 704  vocab = 512  seq_len = 128 }";
        const char *text = arena_printf(&g_arena,
            "%s\nparallel { %s }\n%s\nprecision { dtype = bf16  master_weights = fp32 }\n"
            "train { global_batch = %d  micro_batch = 1 }\n"
            "cluster { nodes = 1  gpus_per_node = %d  gpu = a100_80gb }\n",
            model, L[i].parallel, L[i].rest, L[i].batch, L[i].gpus);
        check_layout(L[i].name, text, L[i].periodic);
    }
}

int main(void)
{
    test_layouts();
    return fx_done("test_period");
}
