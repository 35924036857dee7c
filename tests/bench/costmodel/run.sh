#!/bin/sh
# run.sh [--interleaved | --zero3-rates] [BUILD_DIR] — the cost model against published
# training throughput: the calibration set (the rows its constants were
# fitted on) and the disjoint validation set, for A100 and H100, each row
# planned, simulated and printed as predicted vs published TFLOP/s per GPU
# with its source and error, then each set's mean absolute error; then the
# check rows of a later DeepSpeed's ZeRO-3 and of MT-NLG's Megatron-DeepSpeed
# 3D parallelism on the same A100 nodes (in neither set); then the ZeRO-3
# case on NVLink, 200 Gb/s InfiniBand and 100 Gb/s Ethernet.  The
# calibration set is asserted by tests/unit/test_cost.c; docs/cost-model.md
# explains the rows and the model.
# BUILD_DIR (default: build) is a configured shardc build; the library is
# brought up to date first.  --interleaved runs the pipelined rows on the
# interleaved schedule (2 model chunks per stage where the stage's layers
# split evenly) instead of 1F1B, to show how much the assumption matters.
# --zero3-rates prints instead every ZeRO-3 row (Table 2 and the DeepSpeed
# 0.6.2 check rows) as priced and with the dp ring held to 55, 40, 30, 25 and 20
# GB/s per GPU: the experiment of docs/cost-model.md, "Why the ZeRO-3 rows miss".
# Self-contained: it needs no GPU and no network; about a minute on one core.
# Exit status 1 if the A100 calibration error is 10% or more, or a row does
# not plan.
set -eu
cd "$(dirname "$0")/../../.."
chunks=1
mode=
if [ "${1:-}" = --interleaved ]; then chunks=2; shift
elif [ "${1:-}" = --zero3-rates ]; then mode=--zero3-rates; shift; fi
build=${1:-build}
if [ ! -f "$build/CMakeCache.txt" ]; then
    echo "run.sh: $build is not a configured build directory (cmake -S . -B $build)" >&2
    exit 2
fi
cmake --build "$build" --target shardc_core >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
${CC:-cc} -std=gnu11 -O2 -DCAL_V=$chunks -Icompiler tests/bench/costmodel/calibrate.c "$build/libshardc_core.a" -lcjson -lm \
    -o "$tmp/calibrate"
"$tmp/calibrate" $mode
