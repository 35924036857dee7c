/* plan.c — the planning passes, in order: the model's inventory, the
 * partition over ranks, the schedule of one step, the memory plan.  Each
 * takes the one before's output (plan.h); `shardc plan` and `shardc build`
 * run them after loading the spec (main.c), fix.c on changed copies of it.
 */
#include "plan.h"

#include <string.h>

/* Model -> partition -> schedule -> memory plan; named: the schedule's
 * buffers named for people. */
static bool build(const Spec *s, Plan *pl, bool report, bool named)
{
    memset(pl, 0, sizeof *pl);
    pl->spec = s;
    if (!part_check(s, report)) return false;
    model_build(s, &pl->model);
    part_build(s, &pl->model, &pl->part);
    if (!part_check_staging(s, &pl->part, report)) return false;
    pl->sched.unnamed = !named;
    sched_build(&pl->part, &pl->sched);
    mem_plan(&pl->part, &pl->sched, &pl->mem);
    return true;
}

bool plan_build(const Spec *s, Plan *pl, bool report) { return build(s, pl, report, true); }

/* Formatting half a million activation names was an eighth of the 1008B
 * row's instructions; its scratch plans are read for figures only. */
bool plan_figures(const Spec *s, Plan *pl) { return build(s, pl, false, false); }

/* Class c's ops in the whole step. */
int plan_step_ops(const Plan *pl, int c)
{
    return pl->step_nops ? pl->step_nops[c] : pl->sched.classes[c].nops;
}

/* Class c's op at the device peak, counted in the whole step. */
int plan_peak_op(const Plan *pl, int c)
{
    return pl->step_peak_op ? pl->step_peak_op[c] : pl->mem.classes[c].peak_op;
}
