/* tune.h — shardc tune (tune.c): the fastest layout of a spec whose layout
 * keys are left open that fits its cluster, found by branch and bound over
 * the planner (plan_build), the simulation (sim_run) and cheap lower bounds.
 */
#ifndef SHARDC_TUNE_H
#define SHARDC_TUNE_H

#include "plan.h"

typedef struct TuneOpts {
    int top;                    /* how many of the best to report (--top)        */
    bool exhaustive;            /* plan and simulate every layout; count the
                                   bounds above the exact values (the tests)     */
    bool quiet;                 /* no progress line                              */
    const char *json;           /* --json FILE, or NULL                          */
    const char *out;            /* -o FILE: the winner as a spec, or NULL        */
} TuneOpts;

/* Searches the open spec's layouts and prints the ranked table and the
 * rejected by reason (stdout), writing o->json and o->out; returns the exit
 * code: 0 with a layout that fits, 1 when nothing fits or every choice is an
 * invalid spec (the errors located at its keys). */
int tune_main(const Spec *open, const TuneOpts *o);

#endif
