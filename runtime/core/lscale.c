/* lscale.c — the fp16 loss scale (lscale.h).  The rules are DeepSpeed's
 * DynamicLossScaler with its defaults (scale factor 2, hysteresis counted
 * down by overflows and restored only when the scale changes), so a spec
 * imported from a DeepSpeed config scales its loss the same way. */
#include "lscale.h"

#include <math.h>

/* The state at step 1, from the program's settings. */
void lscale_init(lscale *ls, const srt_program *p)
{
    *ls = (lscale){.mode = p->loss_scaling, .scale = 1.0, .hyst = p->ls_hysteresis > 0 ? p->ls_hysteresis : 1};
    if (p->loss_scaling != SRT_LOSS_SCALE_NONE && p->ls_scale > 0) ls->scale = p->ls_scale;
}

/* After a step: an overflow skips it and (past the hysteresis) halves the
 * scale, down to the minimum; `window` clean steps in a row double it. */
void lscale_update(lscale *ls, const srt_program *p, bool overflow)
{
    if (overflow) ls->skipped++;
    if (ls->mode != SRT_LOSS_SCALE_DYNAMIC) return;
    if (overflow) {
        ls->good = 0;
        if (ls->hyst > 1) {         /* tolerated: the scale stays, one fewer left */
            ls->hyst--;
            return;
        }
        double min = p->ls_min > 0 ? p->ls_min : 1.0;
        ls->scale = fmax(ls->scale / 2.0, min);
        return;
    }
    if (++ls->good >= (p->ls_window > 0 ? p->ls_window : 1000)) {
        ls->scale *= 2.0;
        ls->good = 0;
        ls->hyst = p->ls_hysteresis > 0 ? p->ls_hysteresis : 1;
    }
}
