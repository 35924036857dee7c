#!/usr/bin/env bash
# The custom-op example: its spec passes `shardc check` (the libclang ABI check),
# `shardc ops` lists its functions, and sqrelu.c computes max(x,0)^2 with a
# backward that matches central finite differences and accumulates.
# Usage: custom_op.test.sh SHARDC BUILD_DIR
set -eu
shardc=$1
ex=examples/custom-op
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$shardc" check $ex/sqrelu.tspec > /dev/null
"$shardc" ops $ex/sqrelu.tspec > "$tmp/ops.txt"
grep -q '^void sqrelu_forward(float \*out, const float \*inp, int64_t n)$' "$tmp/ops.txt"
grep -q '^void sqrelu_backward(float \*dinp, const float \*inp, const float \*dout, int64_t n)$' "$tmp/ops.txt"
grep -q '^void srt_matmul_fwd(' "$tmp/ops.txt"
cat > "$tmp/driver.c" <<'C'
#include "sqrelu.h"
#include <math.h>
#include <stdio.h>
/* forward against the formula, backward against central differences */
int main(void)
{
    enum { N = 64 };
    float x[N], y[N], g[N], dy[N];
    int bad = 0;
    for (int i = 0; i < N; i++) { x[i] = (float)(i - 32) / 8.0f + 0.0625f; dy[i] = 0.5f + (float)(i % 5); g[i] = 1.0f; }
    sqrelu_forward(y, x, N);
    sqrelu_backward(g, x, dy, N);
    for (int i = 0; i < N; i++) {
        double r = x[i] > 0 ? x[i] : 0, h = 1e-3;
        float xp = x[i] + (float)h, xm = x[i] - (float)h, yp, ym;
        sqrelu_forward(&yp, &xp, 1);
        sqrelu_forward(&ym, &xm, 1);
        double fd = (yp - ym) / (xp - xm) * dy[i];
        if (fabs(y[i] - r * r) > 1e-6 * (1 + r * r)) bad++, fprintf(stderr, "forward %d: %g vs %g\n", i, y[i], r * r);
        if (fabs((g[i] - 1.0) - fd) > 2e-2 * (1 + fabs(fd))) bad++, fprintf(stderr, "backward %d: %g vs %g\n", i, g[i] - 1, fd);
    }
    return bad != 0;
}
C
cc -std=c11 -O1 -Wall -Wextra -Werror -I$ex "$tmp/driver.c" $ex/sqrelu.c -lm -o "$tmp/driver"
"$tmp/driver"
echo "custom-op example: check, ops and the CPU kernels agree"
