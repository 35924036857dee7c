/* The backward function is missing (misspelled). */
#include <stdint.h>
void sqrelu_forward(float *out, const float *inp, int64_t n);
void sqrelu_bwd(float *dinp, const float *inp, const float *dout, int64_t n);
