#!/bin/sh
# kernels_torch.test.sh SHARDC BUILD_DIR — the CPU kernels against PyTorch.
# The kernels' unit-test binary dumps inputs, outputs and gradients of every
# kernel; tests/unit/kernels_ref.py recomputes them with torch and compares
# (1e-5 relative, fp32).  Skipped (77) where torch cannot be imported.
set -eu
PY=/usr/bin/python3                       # Debian's python3-torch lives here
[ -x "$PY" ] || PY=python3
if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
    echo "skipped: torch is not importable by $PY"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# The test binary from the build directory, or one compiled here by hand.
bin=
for c in "${2:-.}/tests/test_kernels_cpu"; do
    if [ -x "$c" ]; then bin=$c; break; fi
done
if [ -z "$bin" ]; then
    src=tests/unit/test_kernels_cpu.c
    ${CC:-cc} -std=gnu11 -O2 -fopenmp -fno-math-errno -fno-trapping-math -Ikernels/cpu "$src" kernels/cpu/*.c \
        -o "$tmp/kernels_test" -lopenblas -lm
    bin=$tmp/kernels_test
fi
echo "using $bin"
"$bin" --dump "$tmp"
OMP_NUM_THREADS=1 "$PY" tests/unit/kernels_ref.py "$tmp"
