/* Two mistakes: an unknown type and a missing semicolon. */
#include <stdint.h>
void sqrelu_forward(float *out, const float *inp, size_type n);
void sqrelu_backward(float *dinp, const float *inp, const float *dout, int64_t n)
void sqrelu_extra(void);
