/* lscale.h — fp16's loss scale: dynamic (DeepSpeed's DynamicLossScaler) or
 * static.  The head multiplies the loss gradient by the scale
 * (srt_loss_scale); srt_grad_norm_finish divides the norm by it and flags an
 * overflow (a non-finite norm), the optimizer steps skip and divide their
 * gradients by it.  After the step srt_main calls lscale_update with the
 * step's overflow flag.  Every rank computes the same flag (the norm is
 * all-reduced over the world), so every rank keeps the same scale. */
#ifndef SHARDRT_LSCALE_H
#define SHARDRT_LSCALE_H

#include <stdbool.h>
#include <stdint.h>

#include "shardrt.h"

typedef struct lscale {
    int mode;                   /* SRT_LOSS_SCALE_NONE / _STATIC / _DYNAMIC      */
    double scale;               /* the scale of the next step                    */
    int64_t good;               /* steps without an overflow since the last change */
    int64_t hyst;               /* overflows still tolerated before a decrease   */
    int64_t skipped;            /* steps skipped so far (for the log)            */
} lscale;

/* The state at step 1, from the program's settings. */
void lscale_init(lscale *ls, const srt_program *p);
/* After a step: an overflow skips it and (past the hysteresis) halves the
 * scale, down to the minimum; `window` clean steps in a row double it. */
void lscale_update(lscale *ls, const srt_program *p, bool overflow);

#endif
