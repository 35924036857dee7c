#!/bin/sh
# run.sh [BUILD_DIR [ROUNDS]] — times the CUDA kernels (kernels/cuda) at
# GPT-2 124M's shapes in bf16: ms per call and effective GB/s against the
# device's peak.  Builds bench_kernels_cuda in BUILD_DIR (default build,
# configured with nvcc found).  Exit 77 when no CUDA device is present.
set -eu
cd "$(dirname "$0")/../../../.."
build=${1:-build}
rounds=${2:-20}
cmake --build "$build" --target bench_kernels_cuda >/dev/null
exec "$build/tests/gpu/bench_kernels_cuda" "$rounds"
