#!/bin/sh
# run.sh [BUILD_DIR] — the GPU benchmark of issue 7 (run by tests/gpu/run.sh on
# a GPU machine; not part of `make test`): GPT-2 124M (specs/gpt2-124m.tspec on
# one GPU), bf16 with fp32 master weights, seq 1024, micro batch = global
# batch = BATCH (default 16) sequences, STEPS (default 20) steps on a
# synthetic llm.c token shard: our CUDA trainer's tokens/s and MFU (its JSONL,
# the median of the steps after the 5th) against PyTorch's on the same model
# and batch (bench_torch_gpt2.py: torch.compile, F.scaled_dot_product_attention,
# fused AdamW), measured in the same run.  Prints both and the ratio (> 1: ours
# is faster).  PY: the Python with CUDA torch (default /usr/bin/python3).
set -eu
cd "$(dirname "$0")/../../.."
B=${1:-build}
BATCH=${BATCH:-16}
STEPS=${STEPS:-20}
PY=${PY:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
# the data: (STEPS + 2) batches of random GPT-2 token ids, llm.c's uint16 shard
"$PY" tests/bench/gpu/random_shard.py "$tmp/train.bin" $(( (STEPS + 2) * BATCH * 1024 + 1 ))
"$B/shardc" build specs/gpt2-124m.tspec --backend cuda -o "$tmp/gpt2" -D parallel.dp=1 -D cluster.gpus_per_node=1 \
    -D cluster.gpu=h200_141gb -D zero.stage=0 -D train.global_batch="$BATCH" -D train.micro_batch="$BATCH" \
    -D train.steps="$STEPS" -D train.lr_schedule.warmup=2 -D train.eval_every=0 -D train.log_every=1 \
    --emit-c "$tmp/gpt2.c"
"$tmp/gpt2" --data "$tmp/train.bin" --log "$tmp/log.jsonl" > "$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt"; exit 1; }
grep "shardrt: cuda:" "$tmp/out.txt" || true
ours=$("$PY" -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if "\"loss\"" in l]
r=[x for x in r if x["step"]>5] or r
t=sorted(x["tokens_per_s"] for x in r); m=sorted(x.get("mfu",0) for x in r)
print(t[len(t)//2], m[len(m)//2])' "$tmp/log.jsonl")
vpad=$(grep -o 'vocab_pad = [0-9]*' "$tmp/gpt2.c" | head -1 | awk '{print $3}')
echo "GPT-2 124M, bf16, seq 1024, batch $BATCH, one GPU ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)):"
echo "$ours" | awk '{ printf "  ours  %.0f tokens/s, MFU %.1f%% (the trainer'"'"'s: plan flops / the cluster'"'"'s peak)\n", $1, 100 * $2 }'
if torch_line=$("$PY" tests/bench/gpu/bench_torch_gpt2.py "$BATCH" 1024 "$STEPS" "${vpad:-50304}" "$tmp/train.bin" 2> "$tmp/torch.err" | tail -1) &&
   [ -n "$torch_line" ]; then
    echo "$torch_line" | awk '{ printf "  torch %.0f tokens/s, MFU %.1f%% ((6N + 12LHT) / 989 TFLOP/s)\n", $3, 100 * $5 }'
    echo "$ours $torch_line" | awk '{ printf "  ratio ours / torch: %.2fx\n", $1 / $5 }'
else
    echo "  torch: not measured (no CUDA torch for $PY):"; tail -3 "$tmp/torch.err"
fi
