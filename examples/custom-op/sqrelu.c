/* sqrelu.c — squared ReLU on the CPU: the reference the CUDA version matches. */
#include "sqrelu.h"

/* out = relu(inp)^2, elementwise. */
void sqrelu_forward(float *out, const float *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float r = inp[i] > 0.0f ? inp[i] : 0.0f;
        out[i] = r * r;
    }
}

/* dinp += 2 relu(inp) dout: the derivative of r^2 is 2r where inp > 0, else 0. */
void sqrelu_backward(float *dinp, const float *inp, const float *dout, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float r = inp[i] > 0.0f ? inp[i] : 0.0f;
        dinp[i] += 2.0f * r * dout[i];
    }
}
