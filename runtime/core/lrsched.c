/* lrsched.c — constant, cosine and linear schedules with a linear warm-up (formulas in lrsched.h). */
#include "lrsched.h"

#include <math.h>

/* The learning rate of step `step` (from 1). */
double lrsched_lr(const srt_program *p, int64_t step)
{
    double lr = p->lr, m = p->min_lr;
    int64_t W = p->warmup > 0 ? p->warmup : 0;
    int64_t D = p->decay_steps > 0 ? p->decay_steps : p->steps;
    if (step < 1) step = 1;
    if (step <= W) return lr * (double)step / (double)W;
    if (p->lr_schedule != LRSCHED_COSINE && p->lr_schedule != LRSCHED_LINEAR) return lr;
    double q = D > W ? (double)(step - W) / (double)(D - W) : 1.0;
    if (q > 1.0) q = 1.0;
    if (p->lr_schedule == LRSCHED_COSINE) return m + (lr - m) * 0.5 * (1.0 + cos(M_PI * q));
    return lr - (lr - m) * q;
}
