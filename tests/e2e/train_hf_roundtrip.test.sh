#!/usr/bin/env bash
# The Hugging Face round trip: train, `shardc export CKPT -o DIR`, then --init
# from DIR under another layout: the first step's loss equals the exporting
# run's last evaluation.
#
# What "equals" means here.  The exporting run evaluates on VAL with
# --eval-batches 1 at its last step: its last val_loss is the mean loss of
# VAL's windows 0..15 under the exported weights.  The importing run trains
# on VAL, so its step 1 loss is the mean loss of the same 16 windows under the
# same weights, and the forward of a training step is the evaluation's.  Bit
# for bit also needs the same reduction order: the same dp, micro-batch and
# microbatch count (dp 2, 2 microbatches of 4 sequences).  pp, the ZeRO stage
# and offload do not change the forward (pp adds the other stages' zeros to
# the all-reduced loss); tp would (row-parallel partial sums), so the
# importing layouts are pp 2 x dp 2:
#   GPT fp32    dp 2 ZeRO-3 -> shards (--max-shard-size 100KB) -> pp 2 x dp 2 ZeRO-1: bit for bit
#   Llama fp32  grouped-query attention (2 kv heads of 4), dp 2 ZeRO-3 -> model.safetensors
#               -> pp 2 x dp 2 ZeRO-1 with the optimizer on the host: bit for bit
#   GPT bf16    dp 2 ZeRO-3 bf16 -> --dtype bf16 -> pp 2 x dp 2 bf16: within 2^-8 relative (bf16's
#               precision: the bf16 export is the master weights rounded, as the working copy is)
# Each exported directory is also loaded by PyTorch (hf_model.py check, as
# from_pretrained would): every config.json field against the weights'
# shapes, and the validation loss of the project's own torch GPT-2 / Llama
# against the exporting run's (1e-5 relative; 2^-8 for bf16); and `shardc
# import hf` of its config.json gives back the spec's model block.
set -u
. "$(dirname "$0")/train_lib.sh"
"$PY" -c 'import torch' 2> /dev/null || { echo "SKIP: /usr/bin/python3 has no torch"; exit 77; }
VAL=$T/val.txt
head -c 30000 "$DATA" | tail -c 8000 > "$VAL"
fail=0

# roundtrip NAME SPEC TOL TORCH_TOL "EXPORT FLAGS" -D ... -- -D ...: exporter
# (dp 2 ZeRO-3, with the -D before --) and importer (pp 2 x dp 2, with the -D
# before and after --); TOL 0: bit for bit
roundtrip() {
    local name=$1 spec=$2 tol=$3 ttol=$4 xflags=$5 edefs=() idefs=()
    shift 5
    while [ $# -gt 0 ] && [ "$1" != -- ]; do edefs+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    idefs=("$@")
    STEPS=3 train_layout "$name" "$spec" 2 -D parallel.dp=2 -D zero.stage=3 "${edefs[@]}" -- \
        --val "$VAL" --eval-every 3 --eval-batches 1 || return
    # shellcheck disable=SC2086
    if ! "$SHARDC" export "$T/$name.ck" -o "$T/$name.hf" $xflags > "$T/$name.export" 2>&1; then
        echo "FAIL: export $name:"; cat "$T/$name.export"; fail=1; return
    fi
    # one key table both ways: the exported config.json imports back into the same model block
    model() { "$SHARDC" check "$@" | sed -n '/^model/,/^}/p'; }
    if "$SHARDC" import hf "$T/$name.hf/config.json" -o "$T/$name.re.tspec" 2> "$T/$name.re.err" &&
       diff <(model "$T/$name.re.tspec") <(model "$spec") > "$T/$name.re.diff"; then
        echo "ok: $name: shardc import hf of the exported config.json gives the spec's model block"
    else
        echo "FAIL: $name: the exported config.json imports into another model:"; cat "$T/$name.re.err" "$T/$name.re.diff"
        fail=1
    fi
    local batch=16
    if "$PY" tests/e2e/hf_model.py check "$T/$name.hf" "$VAL" "$T/$name.jsonl" "$ttol" $batch > "$T/$name.check"; then
        echo "ok: $name: PyTorch: $(cat "$T/$name.check")"
    else
        echo "FAIL: $name: PyTorch:"; cat "$T/$name.check"; fail=1
    fi
    if ! "$SHARDC" build "$spec" -o "$T/$name.in" -D cluster.gpus_per_node=4 -D parallel.pp=2 -D parallel.dp=2 \
         "${edefs[@]}" "${idefs[@]}" > "$T/$name.in.build" 2>&1; then
        echo "FAIL: shardc build $name.in:"; cat "$T/$name.in.build"; fail=1; return
    fi
    if ! train_run 4 "$name.in" --data "$VAL" --steps 1 --eval-every 0 --init "$T/$name.hf" --log "$T/$name.in.jsonl"; then
        echo "FAIL: $name.in did not train:"; tail -5 "$T/$name.in.err"; fail=1; return
    fi
    "$PY" - "$T/$name.jsonl" "$T/$name.in.jsonl" "$tol" "$name" <<'EOF' || fail=1
import json, sys
run, init, tol, name = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
val = [o for o in map(json.loads, open(run)) if "val_loss" in o][-1]["val_loss"]
first = json.loads(open(init).readline())
ok = first["step"] == 1 and (first["loss"] == val if tol == 0 else abs(first["loss"] - val) <= tol * abs(val))
rel = abs(first["loss"] - val) / abs(val)
print("%s: %s: the exporting run's last val_loss %r, the importing run's step-1 loss %r (%s)" % (
    "ok" if ok else "FAIL", name, val, first["loss"],
    ("bit for bit" if rel == 0 else "relative difference %.3g" % rel) + ("" if tol == 0 else ", tolerance %g" % tol)))
sys.exit(0 if ok else 1)
EOF
}

roundtrip gpt specs/tiny-gpt.tspec 0 1e-5 "--max-shard-size 100KB" -- -D zero.stage=1
[ -f "$T/gpt.hf/model.safetensors.index.json" ] || { echo "FAIL: gpt.hf has no index: $(ls "$T/gpt.hf")"; fail=1; }
roundtrip llama specs/tiny-llama.tspec 0 1e-5 "" -- -D zero.stage=1 -D offload.optimizer=cpu
roundtrip gpt_bf16 specs/tiny-gpt.tspec 0.00390625 0.00390625 "--dtype bf16" -D precision.dtype=bf16 -- \
    -D zero.stage=1
[ $fail = 0 ] && echo PASS
exit $fail
