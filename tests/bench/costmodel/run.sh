#!/bin/sh
# run.sh [--interleaved] [BUILD_DIR] — the cost model's calibration: every row
# of Megatron-LM's 2021 A100 table (REFERENCE.md) planned, simulated and
# printed as predicted vs published TFLOP/s per GPU with the error per row and
# the mean absolute error (which must stay under 10%), then the ZeRO-3 case on
# NVLink, 200 Gb/s InfiniBand and 100 Gb/s Ethernet.  The same table is asserted by
# tests/unit/test_cost.c; docs/cost-model.md explains it.
# BUILD_DIR (default: build) is a configured shardc build; the library is
# brought up to date first.  --interleaved runs the pipelined rows on the
# interleaved schedule (2 model chunks per stage where the stage's layers
# split evenly) instead of 1F1B, to show how much the assumption matters.
# Exit status 1 if the error is 10% or more.
set -eu
cd "$(dirname "$0")/../../.."
chunks=1
if [ "${1:-}" = --interleaved ]; then chunks=2; shift; fi
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
"$tmp/calibrate"
