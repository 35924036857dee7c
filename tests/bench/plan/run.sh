#!/usr/bin/env bash
# The planner benchmark: plans a 1T-parameter GPT (128 layers, hidden 25600,
# 160 heads) on 16 384 GPUs (tp 8, pp 64, dp 32) and prints the time; the
# target is under 1 s.  The same model on 512 GPUs (dp 1) is timed beside it:
# the plan is per rank class, so its cost does not grow with the GPU count.
# Usage: tests/bench/plan/run.sh [SHARDC]        (default: build/shardc)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
shardc=${1:-$root/build/shardc}
spec=$here/gpt-1t-16k.tspec
runs=${RUNS:-3}

# best_ms ARGS...: the fastest of $runs runs of `shardc plan ARGS`, in ms
best_ms() {
  local best= t0 t1 ms
  for _ in $(seq "$runs"); do
    t0=$(date +%s%N)
    "$shardc" plan "$@" >/dev/null
    t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 ))
    if [ -z "$best" ] || [ "$ms" -lt "$best" ]; then best=$ms; fi
  done
  echo "$best"
}

"$shardc" plan "$spec" | grep -E '^(params|layout|verdict)'
big=$(best_ms "$spec")
small=$(best_ms "$spec" -D parallel.dp=1 -D cluster.nodes=64 -D train.global_batch=96)
echo "plan time, 16 384 GPUs (tp 8, pp 64, dp 32): ${big} ms   (best of $runs; target < 1000 ms)"
echo "plan time,    512 GPUs (tp 8, pp 64, dp  1): ${small} ms   (same model, same microbatches per pipeline)"

# the simulation alone against the planning, in one process (bench_sim.c)
build=$(dirname "$shardc")
if [ -f "$build/libshardc_core.a" ] && [ -f "$build/CMakeCache.txt" ]; then
  cmake --build "$build" --target shardc_core >/dev/null
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  ${CC:-cc} -std=gnu11 -O2 -I"$root/compiler" -I"$build/gen" "$here/bench_sim.c" "$build/libshardc_core.a" \
    -lcjson -lclang-14 -L/usr/lib/llvm-14/lib -lm -o "$tmp/bench_sim"
  "$tmp/bench_sim" "$runs"
fi
if [ "$big" -ge 1000 ]; then echo "SLOW: over 1 s"; exit 1; fi
