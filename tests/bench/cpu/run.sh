#!/bin/sh
# run.sh [BUILD_DIR] — the CPU benchmarks of issue 5, each against its reference
# measured in the same run (run on request; not part of `make test`):
#  1. training throughput (tokens/s) of a GPT-2-shaped model — 6 layers, hidden
#     384, 6 heads, seq 256, byte vocabulary, batch 8, fp32, one rank, all cores
#     (OMP_NUM_THREADS, default nproc) — our trainer (`shardc build`, its JSONL
#     tokens_per_s, the median of steps 3..STEPS) against PyTorch's CPU training
#     of the same model with the same threads (bench_torch.py);
#  2. the host AdamW (kc_adamw_step) in parameters/s against
#     torch.optim.AdamW(foreach=True), and in GB/s against this machine's memory
#     bandwidth from a copy loop (bench_adamw.c).
# Prints the numbers and the ratios (> 1: ours is faster).
set -eu
cd "$(dirname "$0")/../../.."
B=${1:-build}
STEPS=${STEPS:-12}
N=${ADAMW_N:-16777216}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)} OPENBLAS_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
"$B/shardc" build specs/tiny-gpt.tspec -o "$tmp/trainer" -D parallel.dp=1 -D cluster.gpus_per_node=1 \
    -D zero.stage=0 -D model.layers=6 -D model.hidden=384 -D model.heads=6 -D model.seq_len=256 \
    -D train.global_batch=8 -D train.micro_batch=8 -D train.steps="$STEPS"
mpirun -np 1 "$tmp/trainer" --data examples/data/tinyshakespeare.txt --log "$tmp/log.jsonl" > /dev/null
ours=$(/usr/bin/python3 -c 'import json,sys
r=sorted(json.loads(l)["tokens_per_s"] for l in open(sys.argv[1]) if "loss" in l)
r=r if len(r)<3 else sorted(json.loads(l)["tokens_per_s"] for l in open(sys.argv[1]) if "loss" in l and json.loads(l)["step"]>2)
print(r[len(r)//2])' "$tmp/log.jsonl")
torch=$(/usr/bin/python3 tests/bench/cpu/bench_torch.py train 6 384 6 256 8 "$STEPS" | awk '{print $4}')
echo "training, 6 layers, hidden 384, 6 heads, seq 256, batch 8, fp32, $OMP_NUM_THREADS threads:"
awk -v o="$ours" -v t="$torch" 'BEGIN { printf "  ours %.0f tokens/s, torch %.0f tokens/s, ratio %.2fx\n", o, t, o / t }'
${CC:-cc} -std=gnu11 -O3 -march=native -fopenmp -fno-math-errno -Ikernels/cpu tests/bench/cpu/bench_adamw.c \
    kernels/cpu/*.c -o "$tmp/adamw" -lopenblas -lm
"$tmp/adamw" "$N" 2 > "$tmp/adamw.txt"
/usr/bin/python3 tests/bench/cpu/bench_torch.py adamw "$N" 2 > "$tmp/tadamw.txt"
awk 'FNR == NR && $1 == "adamw" { pps = $7; gbs = $9 } FNR == NR && $1 == "copy" { copy = $3 }
     FNR != NR { tpps = $4 }
     END { printf "host AdamW, %d parameters:\n  ours %.3g params/s, torch.optim.AdamW(foreach=True) %.3g params/s, ratio %.2fx\n", n, pps, tpps, pps / tpps
           printf "  ours %.2f GB/s (28 bytes/parameter) vs the copy loop %.2f GB/s (read + write, its write-allocate reads not counted): %.0f%%\n", gbs, copy, 100 * gbs / copy }' \
    n="$N" "$tmp/adamw.txt" "$tmp/tadamw.txt"
