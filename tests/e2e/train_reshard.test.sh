#!/usr/bin/env bash
# Resharded resume (issue 6): tiny Llama trains 4 steps under dp 4 ZeRO-3 and
# checkpoints; the checkpoint is resumed under tp 2 · pp 2 (dp 1, ZeRO 0) for 4
# more steps.  The 8 losses of the two runs (the resumed run appends to the same
# JSONL) equal 8 uninterrupted steps of the single-rank reference within 1e-5
# relative, and the final weights (shardc export) within 1e-5.  Checkpoints are
# layout-independent: every rank writes its owned slices by logical index, and
# each pipeline stage reads its own layers' slices back.  The race checker is on.
set -u
. "$(dirname "$0")/train_lib.sh"
SPEC=specs/tiny-llama.tspec
fail=0
# build NAME TP PP DP [-D ...]: the trainer of that layout (exits 1 when it does not build)
build() {
    train_build_spec "$SPEC" "$1" -D parallel.tp="$2" -D parallel.pp="$3" -D parallel.dp="$4" \
        -D cluster.gpus_per_node=$(($2 * $3 * $4)) "${@:5}"
}
build ref 1 1 1 -D zero.stage=0
build a 1 1 4 -D zero.stage=3
build b 2 2 1 -D zero.stage=0
train_run 1 ref --data "$DATA" --steps 8 --log "$T/ref.jsonl" --ckpt-dir "$T/ref.ck" ||
    { echo "FAIL: reference"; tail -20 "$T/ref.err"; exit 1; }
train_run 4 a --data "$DATA" --steps 4 --log "$T/ab.jsonl" --ckpt-dir "$T/ck" ||
    { echo "FAIL: dp 4 ZeRO-3, steps 1-4"; tail -20 "$T/a.err"; exit 1; }
train_run 4 b --data "$DATA" --steps 8 --log "$T/ab.jsonl" --ckpt-dir "$T/ck" --resume "$T/ck/step-4" ||
    { echo "FAIL: tp 2 · pp 2, steps 5-8"; tail -20 "$T/b.err"; exit 1; }
grep -q "resumed from .*step-4" "$T/b.out" || { echo "FAIL: the tp 2 · pp 2 run did not resume"; cat "$T/b.out"; fail=1; }
[ "$(grep -c '"loss"' "$T/ab.jsonl")" = 8 ] || { echo "FAIL: the two runs did not log 8 steps"; fail=1; }
train_cmp losses "$T/ref.jsonl" "$T/ab.jsonl" 1e-5 "dp 4 ZeRO-3 (steps 1-4) then tp 2 · pp 2 (steps 5-8)"
"$SHARDC" export "$T/ref.ck" -o "$T/ref.safetensors" > /dev/null &&
    "$SHARDC" export "$T/ck" -o "$T/ab.safetensors" > /dev/null || { echo "FAIL: export"; exit 1; }
train_cmp weights "$T/ref.safetensors" "$T/ab.safetensors" 1e-5 "the weights after step 8 (written by tp 2 · pp 2)"
[ "$fail" = 0 ] && echo PASS
exit "$fail"
