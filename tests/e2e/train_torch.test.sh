#!/usr/bin/env bash
# Against PyTorch (/usr/bin/python3 with torch): the tiny GPT on one rank, the
# same initial weights (a 1-step run at lr 1e-30 (the spec refuses 0; every update is below 1e-29) exported by `shardc export`, Hugging Face
# GPT-2 names) and the same batches, 5 AdamW steps (torch.optim.AdamW at the
# trainer's lr of each step, clipping at the spec's grad_clip): every loss
# within 1e-4 relative, and the step-1 gradients (the step-1 checkpoint's first
# moments / (1 - beta1)) within 1e-4 relative.  tests/e2e/torch_gpt.py.
set -u
. "$(dirname "$0")/train_lib.sh"
"$PY" -c 'import torch' 2> /dev/null || { echo "SKIP: /usr/bin/python3 has no torch"; exit 77; }
common=(-D parallel.dp=1 -D zero.stage=0)
STEPS=1 train_layout init specs/tiny-gpt.tspec 1 "${common[@]}" -D train.optimizer.lr=1e-30 \
    -D train.lr_schedule=constant || exit 1
STEPS=5 train_layout run specs/tiny-gpt.tspec 1 "${common[@]}" -- --ckpt-every 1 || exit 1
"$PY" tests/e2e/torch_gpt.py "$T/init.safetensors" "$DATA" "$T/run.jsonl" "$T/run.ck/step-1/rank-00000.safetensors" \
    4 64 16 0.1 0.9 0.95 1e-8 1.0 && echo PASS
