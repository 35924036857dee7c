#!/bin/sh
# run.sh [BUILD_DIR] — what a GPU machine runs for issue 7, in under 5 minutes:
# configures and builds shardc with the CUDA backend for sm_90 (H100/H200) in
# BUILD_DIR (default build-gpu), runs the tests of label gpu (the kg_ kernels
# against their CPU twins, tiny-gpt on the GPU against the CPU backend, resume
# bit for bit) and the CUDA build test, then the GPT-2 124M benchmark against
# PyTorch (tests/bench/gpu/run.sh).  Exits non-zero when a test fails.
# A GPU machine without this project's toolchain: tests/gpu/bundle.sh.
set -eu
cd "$(dirname "$0")/../.."
B=${1:-build-gpu}
t0=$(date +%s)
missing=""
for tool in cmake nvcc mpicc mpirun re2c lemon; do
    command -v "$tool" > /dev/null 2>&1 || [ -x "/usr/local/cuda/bin/$tool" ] || missing="$missing $tool"
done
[ -z "$missing" ] || { echo "tests/gpu/run.sh: missing on this machine:$missing (scripts/install-deps)"; exit 2; }
export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi -L || { echo "tests/gpu/run.sh: no CUDA device (nvidia-smi -L failed)"; exit 2; }
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$B.configure.log" 2>&1 ||
    { tail -30 "$B.configure.log"; exit 1; }
cmake --build "$B" -j"$(nproc)" > "$B.build.log" 2>&1 || { grep -E "error|Error" "$B.build.log" | head -40; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
rc=0
(cd "$B" && ctest -L gpu --output-on-failure --timeout 240) || rc=1
(cd "$B" && ctest -R 'e2e/build_cuda' --output-on-failure) || rc=1
tests/bench/gpu/run.sh "$B" || rc=1
echo "tests/gpu/run.sh: $( [ $rc = 0 ] && echo PASS || echo FAIL ) in $(( $(date +%s) - t0 )) s"
exit $rc
