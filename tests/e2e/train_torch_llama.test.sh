#!/usr/bin/env bash
# Against PyTorch (/usr/bin/python3 with torch): the tiny Llama (RoPE, RMSNorm,
# SwiGLU, GQA with 2 kv heads for 4 heads, untied head) on one rank, the same
# initial weights (a 1-step run at lr 1e-30 exported by `shardc export`,
# Hugging Face Llama names) and the same batches, 5 AdamW steps (torch.optim.AdamW
# at the trainer's lr of each step, clipping at the spec's grad_clip): every
# loss within 1e-5 relative, and the step-1 gradients (the step-1 checkpoint's
# first moments / (1 - beta1)) within 1e-4 relative.  tests/e2e/torch_llama.py.
set -u
. "$(dirname "$0")/train_lib.sh"
"$PY" -c 'import torch' 2> /dev/null || { echo "SKIP: /usr/bin/python3 has no torch"; exit 77; }
SPEC=specs/tiny-llama.tspec
# lbuild NAME [-D ...]: a one-rank trainer of the tiny Llama
lbuild() {
    local name=$1
    shift
    if ! "$SHARDC" build "$SPEC" -o "$T/$name" -D parallel.dp=1 -D cluster.gpus_per_node=1 -D zero.stage=0 "$@" \
         > "$T/$name.build" 2>&1; then
        echo "FAIL: shardc build $name:"
        cat "$T/$name.build"
        exit 1
    fi
}
lbuild init -D train.optimizer.lr=1e-30 -D train.lr_schedule=constant
train_run 1 init --data "$DATA" --steps 1 --ckpt-dir "$T/init.ck" || { echo "FAIL: lr-1e-30 run"; cat "$T/init.err"; exit 1; }
"$SHARDC" export "$T/init.ck" -o "$T/init.safetensors" > /dev/null || { echo "FAIL: export"; exit 1; }
lbuild run
train_run 1 run --data "$DATA" --steps 5 --log "$T/run.jsonl" --ckpt-dir "$T/run.ck" --ckpt-every 1 ||
    { echo "FAIL: training"; cat "$T/run.err"; exit 1; }
"$PY" tests/e2e/torch_llama.py "$T/init.safetensors" "$DATA" "$T/run.jsonl" "$T/run.ck/step-1/rank-00000.safetensors" \
    4 64 16 0.1 0.9 0.95 1e-8 1.0 1e-5 10000 && echo PASS
