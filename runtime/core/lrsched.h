/* lrsched.h — the learning rate of a step, from the program's schedule.
 *
 * Steps count from 1 (srt_step).  With lr = p->lr, W = p->warmup, m = p->min_lr
 * and D = p->decay_steps (0: p->steps), the step the decay reaches m:
 *
 *   warm-up, every schedule, s <= W:     lr · s / W
 *       (step 1 gets lr / W and step W the full lr, as llm.c's (step+1)/W
 *        with its 0-based steps)
 *   constant, s > W:                     lr
 *   after warm-up, cosine and linear, with the decay progress
 *       q = (s - W) / (D - W) clamped to [0, 1]  (q = 1 when D <= W):
 *   cosine:                              m + (lr - m) · (1 + cos(π q)) / 2
 *   linear:                              lr - (lr - m) · q
 *   s >= D:                              m   (cosine and linear)
 *
 * This is nanoGPT's get_lr / llm.c's get_learning_rate (cosine with a linear
 * warm-up) with the decay measured to the absolute step D.
 */
#ifndef SHARDRT_LRSCHED_H
#define SHARDRT_LRSCHED_H

#include <stdint.h>

#include "shardrt.h"

enum { LRSCHED_CONSTANT = 0, LRSCHED_COSINE = 1, LRSCHED_LINEAR = 2 };   /* = srt_program.lr_schedule */

/* The learning rate of step `step` (from 1) under p's schedule. */
double lrsched_lr(const srt_program *p, int64_t step);

#endif
