#!/bin/sh
# run.sh [SECONDS [ROUNDS]] — the CPU kernels against PyTorch, same cases,
# same threads (OMP_NUM_THREADS, default 2).  The two programs run in turn
# ROUNDS times (default 3) and each case keeps its fastest time, so that load
# from other processes on a shared machine distorts the ratios less.
# Prints per case our and torch's best ms and GFLOP/s, and torch ms / our ms
# (> 1: we are faster); for the matmuls also OpenBLAS's own threaded GEMM
# called whole (`bench_kernels SECONDS whole`) and its ms / ours: what the
# kernels' split into single-threaded chunks (for bits that do not depend on
# the thread count) costs or gains.
set -eu
cd "$(dirname "$0")/../../.."
secs=${1:-1}
rounds=${2:-3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
${CC:-cc} -std=gnu11 -O3 -fopenmp -fno-math-errno -fno-trapping-math -Ikernels/cpu tests/bench/kernels/bench_kernels.c \
    kernels/cpu/*.c -o "$tmp/bench" -lopenblas -lm
# the OpenBLAS kernels a trainer runs on this CPU (its start upgrades OpenBLAS's SSE3
# fallback, docs/kernels.md), for ours and torch's alike; a set OPENBLAS_CORETYPE stands
OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$("$tmp/bench" core)}
export OPENBLAS_CORETYPE
echo "OpenBLAS kernels: $OPENBLAS_CORETYPE"
: > "$tmp/all.txt"
r=0
while [ $r -lt "$rounds" ]; do
    "$tmp/bench" "$secs" | sed 's/^/ours /' >> "$tmp/all.txt"
    "$tmp/bench" "$secs" whole | sed 's/^/whole /' >> "$tmp/all.txt"
    /usr/bin/python3 tests/bench/kernels/bench_torch.py "$secs" | sed 's/^/torch /' >> "$tmp/all.txt"
    r=$((r + 1))
done
grep '^torch threads' "$tmp/all.txt" | head -1
echo "threads $OMP_NUM_THREADS, best of $rounds rounds of ${secs}s per case"
# a line: WHO CASE... fwd MS ms GF GFLOP/s bwd MS ms GF GFLOP/s
awk '$2 == "matmul" || $2 == "attention" || $2 == "layernorm" || $2 == "rmsnorm" {
    split($0, p, " fwd "); key = substr(p[1], index(p[1], " ") + 1); who = $1
    n = split(p[2], f, " "); fwd = f[1]; bwd = f[6]
    flf = f[1] * f[3]; flb = f[6] * f[8]          # ms * GFLOP/s (GB/s): the FLOPs (bytes)
    if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
    if (!((who, key) in bf) || fwd < bf[who, key]) bf[who, key] = fwd
    if (!((who, key) in bb) || bwd < bb[who, key]) bb[who, key] = bwd
    FL[key] = flf; BL[key] = flb }
  END {
    printf "%-40s %20s %20s %16s\n", "case", "ours fwd/bwd ms", "torch fwd/bwd ms", "speed-up f/b"
    for (i = 1; i <= nk; i++) { k = order[i]
        printf "%-40s %9.3f/%-9.3f %9.3f/%-9.3f %6.2fx/%5.2fx   (ours %.0f/%.0f %s)", k,
            bf["ours", k], bb["ours", k], bf["torch", k], bb["torch", k],
            bf["torch", k] / bf["ours", k], bb["torch", k] / bb["ours", k],
            FL[k] / bf["ours", k], BL[k] / bb["ours", k], (k ~ /norm/ ? "GB/s" : "GFLOP/s")
        if (("whole", k) in bf)
            printf "  OpenBLAS whole %.2f/%.2f ms: %.2fx/%.2fx", bf["whole", k], bb["whole", k],
                bf["whole", k] / bf["ours", k], bb["whole", k] / bb["ours", k]
        printf "\n" } }' "$tmp/all.txt"
