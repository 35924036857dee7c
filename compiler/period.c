/* period.c — a step of many microbatches planned from a few: the 1F1B and
 * interleaved schedules are a warm-up, a steady state that repeats per
 * microbatch (per pp microbatches interleaved) and a cool-down, so the step
 * is planned and simulated with m0, m0 + d and m0 + 2d microbatches (m0 ≡ m
 * mod d, every warm-up inside; the m0 plan, the one the report shows, is
 * verified), and the step of m is extrapolated:
 *  - the memory plan must be the same for the three (every arena, peak,
 *    category, family place and the verdict; the peak at the same op, or at
 *    an op that moves by the same count each time, of the same label);
 *  - every simulated figure of every class (busy per stream, exposed per
 *    group, end, work, bubble, NVMe seconds), the op counts and the critical
 *    path (its ops and its seconds by kind) must advance by the same amount
 *    from m0 to m0 + d as from m0 + d to m0 + 2d (integers exactly, seconds
 *    to PERIOD_TOL of the step): the steady state is periodic;
 * then the step of m is m0's plus (m - m0) / d periods, and the step's own
 * figures (bubble, exposure, tokens/s, MFU, HFU) are derived from those as
 * sim.c derives them.  Anything else (gpipe, whose activations grow with m;
 * ZeRO-3 across stages; a figure that is not periodic; too few microbatches
 * for it to pay) plans the whole step.  SHARDC_EXPANDED=1 in the environment plans the whole step
 * always (the tests compare the two).
 */
#include "sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Seconds figures must advance by the same period to this fraction of the step. */
#define PERIOD_TOL 1e-9

/* The period of s's schedule in microbatches (0: none: gpipe, whose
 * activations grow with m; ZeRO-3 with pp > 1), and in *m0 the fewest it is
 * planned with. */
static int64_t period_of(const Spec *s, int64_t *m0)
{
    int64_t d, lo, pp = s->parallel.pp, m = s->parallel.microbatches;
    switch (s->parallel.schedule) {
    /* 1F1B: stage 0 keeps pp microbatches in flight once m >= pp; one more
     * gives every stage two forward-backward pairs in its steady state, and
     * each microbatch more adds one pair */
    case SCHED_1F1B: d = 1, lo = pp + 1; break;
    /* interleaved: Megatron's order repeats per pp microbatches (each a
     * forward and a backward of every chunk); its warm-up reaches past the
     * first pp, so the steady state starts in the second group of pp, and
     * ZeRO-2's per-microbatch reductions settle only in the third (a plan
     * that is not periodic from m0 is refused by the checks below and the
     * whole step planned: tests/unit/test_period.c requires the period for
     * each schedule, ZeRO-2 included) */
    case SCHED_INTERLEAVED: d = pp, lo = (s->zero.stage == 2 ? 3 : 2) * pp; break;
    default: *m0 = 0; return 0;
    }
    /* ZeRO-3 across stages: its figures did not settle into a period at the
     * m0 tried (pp + 1 on 1F1B; up to 4·pp interleaved; tune's 175B space) */
    if (s->zero.stage == 3 && pp > 1) return *m0 = 0, 0;
    *m0 = lo + ((m - lo) % d + d) % d;
    return d;
}

/* The spec with m microbatches per step (global batch scaled). */
static Spec *with_microbatches(const Spec *s, int64_t m)
{
    Spec *r = arena_alloc(&g_arena, sizeof *r);
    *r = *s;
    r->parallel.microbatches = m;
    r->train.grad_accum = m;
    r->train.global_batch = s->train.micro_batch * m * s->parallel.dp;
    return r;
}

/* Whether two memory plans of the same partition are the same but for the op
 * at the peak. */
static bool same_memory(const MemPlan *a, const MemPlan *b)
{
    if (a->nclasses != b->nclasses || a->worst != b->worst || a->host_node != b->host_node ||
        a->nvme_node != b->nvme_node || a->fits != b->fits || a->fits_gpus != b->fits_gpus ||
        a->fits_device != b->fits_device || a->fits_host != b->fits_host || a->fits_nvme != b->fits_nvme)
        return false;
    for (int c = 0; c < a->nclasses; c++) {
        const ClassMem *x = &a->classes[c], *y = &b->classes[c];
        if (memcmp(x->arena, y->arena, sizeof x->arena) || memcmp(x->peak, y->peak, sizeof x->peak) ||
            memcmp(x->at_peak, y->at_peak, sizeof x->at_peak) || memcmp(x->max_cat, y->max_cat, sizeof x->max_cat) ||
            memcmp(x->host_cat, y->host_cat, sizeof x->host_cat) || x->model_states != y->model_states ||
            x->reserve != y->reserve || x->device_total != y->device_total || x->ratio != y->ratio ||
            x->nfams != y->nfams)
            return false;
        for (int f = 0; f < x->nfams; f++) {
            const BufFamily *u = &x->fams[f], *v = &y->fams[f];
            if (u->role != v->role || u->sub != v->sub || u->idx != v->idx || u->chunk != v->chunk ||
                u->space != v->space || u->lm != v->lm || u->w != v->w || u->size != v->size || u->base != v->base)
                return false;
        }
    }
    return true;
}

/* One plan's figures, kept once its plan and simulation are freed: per class
 * its op count and the op at the device peak, and the simulated step (no
 * per-op times, no critical-path ops). */
typedef struct Sample {
    MemPlan mem;                /* its classes and families copied (no buffers)  */
    const char **peak_label;    /* per class: the op at the device peak          */
    int *nops;                  /* per class: ops of the step                     */
    Sim sim;                    /* no per-op times, no critical-path ops          */
} Sample;

/* Copies what the comparison and the extrapolation read of plan pl and its
 * simulation (in g_arena, about to be freed) into arena a. */
static void keep(Arena *a, const Plan *pl, const Sim *sim, Sample *out)
{
    int nc = pl->mem.nclasses;
    out->mem = pl->mem;
    out->mem.classes = arena_alloc(a, sizeof(ClassMem) * (size_t)nc);
    out->peak_label = arena_alloc(a, sizeof(char *) * (size_t)nc);
    out->nops = arena_alloc(a, sizeof(int) * (size_t)nc);
    for (int c = 0; c < nc; c++) {
        const ClassMem *cm = &pl->mem.classes[c];
        ClassMem *k = &out->mem.classes[c];
        *k = *cm;
        k->cls = NULL, k->sched = NULL;
        k->fams = arena_alloc(a, sizeof(BufFamily) * (size_t)(cm->nfams + 1));
        for (int f = 0; f < cm->nfams; f++) k->fams[f] = cm->fams[f], k->fams[f].slot = NULL;
        out->peak_label[c] = arena_strdup(a, sched_op_label(cm->sched, cm->peak_op));
        out->nops[c] = cm->sched->nops;
    }
    out->sim = *sim;
    out->sim.critical = NULL;
    out->sim.classes = arena_alloc(a, sizeof(SimClass) * (size_t)(nc + 1));
    for (int c = 0; c < nc; c++) out->sim.classes[c] = sim->classes[c], out->sim.classes[c].ops = NULL;
}

/* Plans and simulates s with m microbatches and keeps its figures in
 * g_arena.  pl NULL: the plan (plan_figures: its activations unnamed) and
 * its simulation live in a scratch arena, freed after; else the plan is
 * built in pl, in g_arena (it stays: the step's report shows it), and
 * verified if asked; its simulation is scratch.  False when a step fails. */
static bool sample(const Spec *s, int64_t m, Plan *pl, bool verify, Sample *out)
{
    bool stays = pl != NULL;
    bool ok = !stays || (plan_build(with_microbatches(s, m), pl, false) && (!verify || verify_plan(pl, stderr)));
    Arena kept = g_arena;
    g_arena = (Arena){0};
    if (!stays) {
        pl = arena_alloc(&g_arena, sizeof *pl);
        ok = plan_figures(with_microbatches(s, m), pl);
    }
    Sim sim;
    ok = ok && !sim_simulate(pl, NULL, &sim);
    if (ok) keep(&kept, pl, &sim, out);
    arena_free(&g_arena);
    g_arena = kept;
    return ok;
}

/* Whether two samples planned the same memory, the peak at an op of the
 * same label. */
static bool same_peaks(const Sample *a, const Sample *b)
{
    if (!same_memory(&a->mem, &b->mem)) return false;
    for (int c = 0; c < a->mem.nclasses; c++)
        if (strcmp(a->peak_label[c], b->peak_label[c])) return false;
    return true;
}

/* Extrapolates seconds: f0, f1, f2 at m0, m0 + d, m0 + 2d to n periods past
 * m0; false when the two steps differ by more than PERIOD_TOL of scale. */
static bool extend(double f0, double f1, double f2, double n, double scale, double *out)
{
    double d1 = f1 - f0, d2 = f2 - f1;
    if (!(fabs(d2 - d1) <= PERIOD_TOL * scale)) return false;
    *out = f0 + n * d1;
    return true;
}

/* The same for a count, exactly. */
static bool extend_int(int64_t f0, int64_t f1, int64_t f2, int64_t n, int *out)
{
    if (f2 - f1 != f1 - f0) return false;
    int64_t v = f0 + n * (f1 - f0);
    if (v < 0 || v > 0x7fffffff) return false;
    *out = (int)v;
    return true;
}

/* The step's simulation from the three samples, or false when it is not
 * periodic. */
static bool extend_sim(const Sample *r, int nc, int64_t n, const Plan *step, Sim *out)
{
    memset(out, 0, sizeof *out);
    const Sim *sim[3] = {&r[0].sim, &r[1].sim, &r[2].sim};
    double scale = sim[2]->timeline;
    out->classes = arena_alloc(&g_arena, sizeof(SimClass) * (size_t)(nc + 1));
    bool ok = extend(sim[0]->timeline, sim[1]->timeline, sim[2]->timeline, (double)n, scale, &out->timeline);
    for (int c = 0; c < nc && ok; c++) {
        const SimClass *a = &sim[0]->classes[c], *b = &sim[1]->classes[c], *e = &sim[2]->classes[c];
        SimClass *o = &out->classes[c];
        for (int st = 0; st < NSTREAMS && ok; st++) ok = extend(a->busy[st], b->busy[st], e->busy[st], (double)n, scale, &o->busy[st]);
        for (int g = 0; g < NGROUPS && ok; g++)
            ok = extend(a->exposed[g], b->exposed[g], e->exposed[g], (double)n, scale, &o->exposed[g]);
        ok = ok && extend(a->end, b->end, e->end, (double)n, scale, &o->end) &&
             extend(a->work, b->work, e->work, (double)n, scale, &o->work) &&
             extend(a->bubble, b->bubble, e->bubble, (double)n, scale, &o->bubble) &&
             extend(a->nvme, b->nvme, e->nvme, (double)n, scale, &o->nvme);
    }
    for (int k = 0; k < NOPKINDS && ok; k++)
        ok = extend(sim[0]->critical_kind[k], sim[1]->critical_kind[k], sim[2]->critical_kind[k], (double)n, scale,
                    &out->critical_kind[k]);
    ok = ok && extend_int(sim[0]->ncritical, sim[1]->ncritical, sim[2]->ncritical, n, &out->ncritical);
    if (ok) sim_step_figures(step, out);
    return ok;
}

/* The per-class op counts and peak ops of the step, or false when they do not
 * advance by a period. */
static bool extend_ops(const Sample *r, int nc, int64_t n, Plan *step)
{
    step->step_nops = arena_alloc(&g_arena, sizeof(int) * (size_t)nc);
    step->step_peak_op = arena_alloc(&g_arena, sizeof(int) * (size_t)nc);
    for (int c = 0; c < nc; c++)
        if (!extend_int(r[0].nops[c], r[1].nops[c], r[2].nops[c], n, &step->step_nops[c]) ||
            !extend_int(r[0].mem.classes[c].peak_op, r[1].mem.classes[c].peak_op, r[2].mem.classes[c].peak_op, n,
                        &step->step_peak_op[c]))
            return false;
    return true;
}

bool period_plan(const Spec *s, bool verify, Plan *pl, Sim *sim)
{
    const char *env = getenv("SHARDC_EXPANDED");
    int64_t m = s->parallel.microbatches, m0, d = period_of(s, &m0);
    /* three plans of m0 .. m0 + 2d microbatches cost about what one of m does */
    if ((env && *env && strcmp(env, "0")) || d == 0 || m < 3 * (m0 + d) || !part_check(s, false)) return false;
    /* the two longer plans first, each freed once its figures are taken;
     * then m0's, built in pl (whose passes point into it): the step's */
    Sample r[3];
    for (int k = 2; k >= 0; k--)
        if (!sample(s, m0 + k * d, k ? NULL : pl, verify, &r[k])) return false;
    if (!same_peaks(&r[0], &r[1]) || !same_peaks(&r[0], &r[2])) return false;
    int nc = pl->mem.nclasses;
    int64_t n = (m - m0) / d;
    if (!extend_ops(r, nc, n, pl)) return false;
    /* the spec's model and microbatches over m0's schedule and memory plan */
    pl->spec = s;
    model_build(s, &pl->model);
    pl->part.spec = s;
    pl->part.m = m;
    part_hw_flops(&pl->part);
    pl->period_m = m0;
    return extend_sim(r, nc, n, pl, sim);
}
