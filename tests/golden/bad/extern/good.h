/* A squared-ReLU activation with the ABI's exact signatures. */
#include <stdint.h>
void sqrelu_forward(float *out, const float *inp, int64_t n);
void sqrelu_backward(float *dinp, const float *inp, const float *dout, int64_t n);
