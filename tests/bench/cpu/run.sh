#!/bin/sh
# run.sh [BUILD_DIR] — the CPU training benchmark (issues 5 and 16; run on
# request, not by `make test`), every figure against a reference measured in
# the same run, with the same threads (OMP_NUM_THREADS, default nproc):
#  1. the machine's sgemm peak: OpenBLAS on a 4096^3 problem with that many
#     of its own threads (bench_sgemm.c), median of the calls in 5 s;
#  2. training, one rank, fp32, batch 4, launched as docs/trainer.md says (a
#     one-rank trainer without mpirun), STEPS_64 / STEPS_256 steps: GPT-2 124M
#     (specs/gpt2-124m.tspec, vocabulary 50257) at T = 64 and T = 256, and a
#     Llama of the same size (12 layers, hidden 768, 12 heads, 4 kv heads,
#     SwiGLU 2048, vocabulary 32000, untied) at T = 256; each against PyTorch
#     eager on the same model and batch (bench_torch.py).  Per case: the
#     median ms per step over the steps after the second and their spread
#     (min..max), tokens/s, the model FLOP/s (the trainer's MFU numerator,
#     from `shardc plan`, over the median step) as a fraction of the sgemm
#     peak, ours / torch in tokens/s, and the ceiling: torch's median step over
#     the model FLOPs at 100% of the peak, the most any fp32 trainer could
#     gain on torch here;
#  3. the host AdamW (kc_adamw_step) in parameters/s against
#     torch.optim.AdamW(foreach=True), and in GB/s against the machine's copy
#     bandwidth (bench_adamw.c).
# Data: tiny Shakespeare read as bytes (timing only); torch trains on random
# bytes.  Prints the load (uptime) before and after: on a shared machine the
# figures move with it.  About 4-5 minutes on 2 cores.
set -eu
cd "$(dirname "$0")/../../.."
B=${1:-build}
THREADS=${OMP_NUM_THREADS:-$(nproc)}
export OMP_NUM_THREADS=$THREADS
S64=${STEPS_64:-12}
S256=${STEPS_256:-10}
N=${ADAMW_N:-16777216}
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
echo "load before: $(uptime)"
echo "threads: $THREADS (OMP_NUM_THREADS), $(nproc) CPUs usable, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"

${CC:-cc} -std=gnu11 -O2 tests/bench/cpu/bench_sgemm.c -o "$tmp/sgemm" -lopenblas
"$tmp/sgemm" 4096 "$THREADS" 5 > "$tmp/sgemm.txt"

GPT="specs/gpt2-124m.tspec -D parallel.dp=1 -D cluster.gpus_per_node=1 -D zero.stage=0 -D precision.dtype=fp32
     -D train.global_batch=4 -D train.micro_batch=4 -D data.format=text"
LLAMA="specs/tiny-llama.tspec -D parallel.dp=1 -D cluster.gpus_per_node=1 -D zero.stage=0 -D model.layers=12
       -D model.hidden=768 -D model.heads=12 -D model.kv_heads=4 -D model.ffn_hidden=2048 -D model.vocab=32000
       -D train.global_batch=4 -D train.micro_batch=4"
# bench NAME STEPS "SPEC AND OVERRIDES" TORCH-ARGS: build, plan, train ours, then torch
bench() {
    name=$1 steps=$2 spec=$3
    shift 3
    # shellcheck disable=SC2086
    "$B/shardc" build $spec -o "$tmp/$name" > "$tmp/$name.build" 2>&1 ||
        { cat "$tmp/$name.build"; exit 1; }
    # shellcheck disable=SC2086
    "$B/shardc" plan $spec | awk '$1 == "flops" { print $2 }' > "$tmp/$name.flops"
    "$tmp/$name" --data examples/data/tinyshakespeare.txt --steps "$steps" --eval-every 0 \
        --log "$tmp/$name.jsonl" > "$tmp/$name.out" 2>&1 || { cat "$tmp/$name.out"; exit 1; }
    grep "shardrt: cpu: warning" "$tmp/$name.out" || true
    "$PY" tests/bench/cpu/bench_torch.py train "$@" "$steps" > "$tmp/$name.torch"
}
bench gpt2_t64 "$S64" "$GPT -D model.seq_len=64" gpt 12 768 12 12 3072 50257 64 4
bench gpt2_t256 "$S256" "$GPT -D model.seq_len=256" gpt 12 768 12 12 3072 50257 256 4
bench llama_t256 "$S256" "$LLAMA -D model.seq_len=256" llama 12 768 12 4 2048 32000 256 4

"$PY" - "$tmp" "$THREADS" <<'PY'
import json, statistics, sys
tmp, threads = sys.argv[1], sys.argv[2]
med = statistics.median
peaks = [float(x) for x in open(f"{tmp}/sgemm.txt").read().split()[2:]]
peak = med(peaks)
print(f"sgemm peak, OpenBLAS 4096^3, {threads} threads: median {peak:.1f} GFLOP/s "
      f"(min {min(peaks):.1f}, max {max(peaks):.1f}; {len(peaks)} calls)")
print(f"{'training, fp32, batch 4':28} {'ours ms/step (min..max)':>25} {'tok/s':>7} {'GFLOP/s':>8} {'of peak':>8}"
      f" | {'torch ms/step (min..max)':>25} {'tok/s':>7} | {'ours/torch':>10} {'ceiling':>8}")
cases = [("gpt2_t64", "GPT-2 124M, T = 64", 64), ("gpt2_t256", "GPT-2 124M, T = 256", 256),
         ("llama_t256", "Llama 125M, T = 256", 256)]
for key, label, T in cases:
    rows = [json.loads(l) for l in open(f"{tmp}/{key}.jsonl")]
    ours = [r["step_ms"] for r in rows if "step_ms" in r and r["step"] > 2]
    torch = [1e3 * float(x) for x in open(f"{tmp}/{key}.torch").read().split()[2:-2]]
    flops = float(open(f"{tmp}/{key}.flops").read())
    tokens = 4 * T
    mo, mt = med(ours), med(torch)
    gf = flops / (mo / 1e3) / 1e9
    ceiling = mt / 1e3 / (flops / (peak * 1e9))
    print(f"{label:28} {mo:8.0f} ({min(ours):6.0f}..{max(ours):6.0f}) {tokens / mo * 1e3:7.0f} {gf:8.1f} "
          f"{100 * gf / peak:7.1f}% | {mt:8.0f} ({min(torch):6.0f}..{max(torch):6.0f}) {tokens / mt * 1e3:7.0f} | "
          f"{mt / mo:9.2f}x {ceiling:7.2f}x")
print("(medians over the steps after the second: ours", len(ours), "steps, torch", len(torch), "of the last case;"
      " ceiling: torch's step over the model FLOPs at 100% of the sgemm peak)")
PY

${CC:-cc} -std=gnu11 -O3 -march=native -fopenmp -fno-math-errno -fno-trapping-math -Ikernels/cpu \
    tests/bench/cpu/bench_adamw.c kernels/cpu/*.c -o "$tmp/adamw" -lopenblas -lm
"$tmp/adamw" "$N" 2 > "$tmp/adamw.txt"
"$PY" tests/bench/cpu/bench_torch.py adamw "$N" 2 > "$tmp/tadamw.txt"
awk 'FNR == NR && $1 == "adamw" { pps = $7; gbs = $9 } FNR == NR && $1 == "copy" { copy = $3 }
     FNR != NR { tpps = $4 }
     END { printf "host AdamW, %d parameters:\n  ours %.3g params/s, torch.optim.AdamW(foreach=True) %.3g params/s, ratio %.2fx\n", n, pps, tpps, pps / tpps
           printf "  ours %.2f GB/s (28 bytes/parameter) vs the copy loop %.2f GB/s (read + write, its write-allocate reads not counted): %.0f%%\n", gbs, copy, 100 * gbs / copy }' \
    n="$N" "$tmp/adamw.txt" "$tmp/tadamw.txt"
echo "load after: $(uptime)"
