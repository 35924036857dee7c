/* sqrelu.h — a squared-ReLU activation, f(x) = max(x, 0)^2 (Primer, So et al.
 * 2021), as a user-defined op for shardc.  The signatures are the activation
 * kind's ABI (docs/custom-ops.md); shardc checks them with libclang when it
 * compiles the spec.  The CPU build (sqrelu.c) takes host pointers, the CUDA
 * build (sqrelu.cu) device pointers; both are fp32 and synchronous. */
#ifndef SQRELU_H
#define SQRELU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] = max(inp[i], 0)^2 for i < n; overwrites out. */
void sqrelu_forward(float *out, const float *inp, int64_t n);

/* dinp[i] += 2 max(inp[i], 0) dout[i] for i < n; accumulates, as the runtime's ops do. */
void sqrelu_backward(float *dinp, const float *inp, const float *dout, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
