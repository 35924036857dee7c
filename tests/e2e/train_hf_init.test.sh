#!/usr/bin/env bash
# --init from Hugging Face weights written by PyTorch (tests/e2e/hf_model.py,
# not by shardc): under every kind of layout, step 1's loss equals PyTorch's
# loss of the same weights on the same batch (the project's own GPT-2 and
# Llama in torch_gpt.py / torch_llama.py), and the run starts at step 1.
#   GPT-2, vocabulary 300 (so the vocabulary is padded in memory), its tensors
#   named as a GPT2Model saves them (no "transformer."), with the causal-mask
#   buffers the loader skips:
#     F32 file           1 rank; tp 2 x dp 2 ZeRO-1
#     F16 file           pp 2 x dp 2 ZeRO-3, optimizer and parameters offloaded to the host
#     BF16 shards        tp 2 x pp 2, sequence parallel (an index and 8 shards); bf16 training on 1 rank
#   Llama, grouped-query attention (4 heads, 2 kv heads), untied head, vocabulary 300:
#     F32 directory      tp 2 x dp 2 ZeRO-3 (a kv head per tp rank)
#     BF16 shards        pp 2 x dp 2 ZeRO-1
# Tolerances: 1e-5 relative in fp32 (PyTorch sums in another order); 2^-8 (4e-3) for
# bf16 training (bf16 activations against PyTorch's fp32).  Then a checkpoint
# that --resume finds is taken instead of --init.
set -u
. "$(dirname "$0")/train_lib.sh"
"$PY" -c 'import torch' 2> /dev/null || { echo "SKIP: /usr/bin/python3 has no torch"; exit 77; }
H=tests/e2e/hf_model.py
TXT=$T/text.txt
head -c 20000 "$DATA" > "$TXT"
fail=0

"$PY" $H write gpt2 "$T/g32" layers=2 hidden=64 heads=4 vocab=300 seq=64 ffn=256 prefix=0 buffers=1 &&
"$PY" $H write gpt2 "$T/g16" layers=2 hidden=64 heads=4 vocab=300 seq=64 ffn=256 prefix=0 buffers=1 dtype=F16 &&
"$PY" $H write gpt2 "$T/gbf" layers=2 hidden=64 heads=4 vocab=300 seq=64 ffn=256 dtype=BF16 shard=40000 &&
"$PY" $H write llama "$T/l32" layers=2 hidden=64 heads=4 kv=2 vocab=300 seq=64 ffn=256 &&
"$PY" $H write llama "$T/lbf" layers=2 hidden=64 heads=4 kv=2 vocab=300 seq=64 ffn=256 dtype=BF16 shard=40000 ||
    { echo "FAIL: hf_model.py write"; exit 1; }
[ -f "$T/gbf/model.safetensors.index.json" ] && [ -f "$T/gbf/model-00002-of-00008.safetensors" ] ||
    { echo "FAIL: gbf is not in 8 shards: $(ls "$T/gbf")"; exit 1; }

# init NAME SPEC NP WEIGHTS TOL [-D ...]: build, train 1 step from WEIGHTS, compare with PyTorch
declare -A torch_loss
init() {
    local name=$1 spec=$2 np=$3 w=$4 tol=$5
    shift 5
    local dir=${w%/model.safetensors}
    dir=${dir##*/}
    [ -n "${torch_loss[$dir]:-}" ] || torch_loss[$dir]=$("$PY" $H loss "$T/$dir" "$TXT" 0 16)
    if ! "$SHARDC" build "$spec" -o "$T/$name" -D cluster.gpus_per_node="$np" -D model.vocab=300 "$@" \
         > "$T/$name.build" 2>&1; then
        echo "FAIL: shardc build $name:"; cat "$T/$name.build"; fail=1; return
    fi
    if ! train_run "$np" "$name" --data "$TXT" --steps 1 --init "$w" --log "$T/$name.jsonl"; then
        echo "FAIL: $name did not train:"; tail -5 "$T/$name.err"; fail=1; return
    fi
    local got
    got=$("$PY" -c 'import json,sys; print(repr(json.loads(open(sys.argv[1]).readline())["loss"]))' "$T/$name.jsonl")
    if ! grep -q "^initialised from $w " "$T/$name.out" || ! grep -q 'steps 1\.\.1' "$T/$name.out"; then
        echo "FAIL: $name: no 'initialised from $w' line, or not from step 1:"; head -3 "$T/$name.out"; fail=1
    elif "$PY" -c 'import sys; a, b, t = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) <= t * abs(b) else 1)' \
         "$got" "${torch_loss[$dir]}" "$tol"; then
        echo "ok: $name: step 1 loss $got, PyTorch ${torch_loss[$dir]} (within $tol)"
    else
        echo "FAIL: $name: step 1 loss $got, PyTorch ${torch_loss[$dir]} (tolerance $tol)"; fail=1
    fi
}

G=specs/tiny-gpt.tspec L=specs/tiny-llama.tspec
init g1 $G 1 "$T/g32/model.safetensors" 1e-5 -D parallel.dp=1
init gtp $G 4 "$T/g32" 1e-5 -D parallel.tp=2 -D parallel.dp=2 -D zero.stage=1
init gpp $G 4 "$T/g16/model.safetensors" 1e-5 -D parallel.pp=2 -D parallel.dp=2 -D offload.optimizer=cpu \
    -D offload.params=cpu
init gsp $G 4 "$T/gbf" 1e-5 -D parallel.tp=2 -D parallel.pp=2 -D parallel.dp=1 -D parallel.sequence_parallel=on \
    -D zero.stage=0
init gbf16 $G 1 "$T/gbf" 4e-3 -D parallel.dp=1 -D precision.dtype=bf16
init ltp $L 4 "$T/l32" 1e-5 -D parallel.tp=2 -D parallel.dp=2
init lpp $L 4 "$T/lbf" 1e-5 -D parallel.pp=2 -D parallel.dp=2 -D zero.stage=1

# a checkpoint that --resume finds wins over --init (a restarted fine-tuning job continues)
if train_run 1 g1 --data "$TXT" --steps 1 --init "$T/g32" --ckpt-dir "$T/g1.ck" &&
   train_run 1 g1 --data "$TXT" --steps 2 --init "$T/g32" --ckpt-dir "$T/g1.ck" --resume &&
   grep -q "^resumed from .*step-1 (step 1)" "$T/g1.out" && ! grep -q "^initialised from" "$T/g1.out"; then
    echo "ok: --resume's checkpoint is taken over --init"
else
    echo "FAIL: --resume with --init:"; cat "$T/g1.out" "$T/g1.err"; fail=1
fi
[ $fail = 0 ] && echo PASS
exit $fail
