/* The backward function returns a status the trainer would ignore. */
#include <stdint.h>
void sqrelu_forward(float *out, const float *inp, int64_t n);
int sqrelu_backward(float *dinp, const float *inp, const float *dout, int64_t n);
