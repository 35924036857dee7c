/* real is double, not float: the canonical type decides. */
#include <stdint.h>
typedef double real;
void sqrelu_forward(float *out, const real *inp, int64_t n);
void sqrelu_backward(float *dinp, const float *inp, const float *dout, int64_t n);
