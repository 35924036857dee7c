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
common=(-D parallel.dp=1 -D zero.stage=0)
STEPS=1 train_layout init "$SPEC" 1 "${common[@]}" -D train.optimizer.lr=1e-30 -D train.lr_schedule=constant || exit 1
STEPS=5 train_layout run "$SPEC" 1 "${common[@]}" -- --ckpt-every 1 || exit 1
"$PY" tests/e2e/torch_llama.py "$T/init.safetensors" "$DATA" "$T/run.jsonl" "$T/run.ck/step-1/rank-00000.safetensors" \
    4 64 16 0.1 0.9 0.95 1e-8 1.0 1e-5 10000 && echo PASS
