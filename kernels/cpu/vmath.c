/* vmath.c — a vectorised exp for the softmaxes (attention, cross-entropy).
 *
 * glibc's expf is accurate but scalar: one call per score made it as costly
 * as the matmuls around it.  kc_exp1 (vmath.h) is Cephes' expf without
 * branches, so that this loop vectorises in every clone of KC_MULTIVERSION.
 */
#include "kernels.h"
#include "vmath.h"

/* y(n) = exp(x(n)). */
KC_MULTIVERSION
void kc_vexp(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = kc_exp1(x[i]);
}
