#!/usr/bin/env bash
# Grouped-query attention with fewer kv heads than tp (Megatron, issue 6): a
# tiny Llama with 8 heads and 2 kv heads at tp 4, each kv head replicated on
# the 2 tp ranks that share it (SRT_SPLIT_KV; their k/v gradients summed over
# SRT_TP_KV).  tp 1 (dp 1, 4 microbatches) is the reference; tp 4 · dp 1,
# tp 4 with sequence parallelism, tp 4 · dp 2 with ZeRO-1 (8 ranks) and with
# ZeRO-3 + sequence parallelism (two microbatches a rank): every
# step's loss within 1e-5 relative, the final weights (shardc export, each kv
# head once) within 1e-5.  4 steps, global batch 16, race checker on.  Then
# resharded resumes across kv layouts (below).
set -u
. "$(dirname "$0")/train_lib.sh"
SPEC=specs/tiny-llama.tspec
fail=0
# run NAME TP DP [-D ...]: train_3d of tp · dp with 8 heads and 2 kv heads (4 steps, checkpoint, export)
run() { train_3d "$1" "$SPEC" "$2" 1 "$3" -D model.heads=8 -D model.kv_heads=2 "${@:4}"; }
run ref 1 1 -D zero.stage=0 -D train.micro_batch=4 || exit 1
for v in "tp4 4 1 0 4 off" "tp4sp 4 1 0 4 on" "tp4dp2z1 4 2 1 4 off" "tp4dp2z3sp 4 2 3 2 on"; do
    set -- $v
    run "$1" "$2" "$3" -D zero.stage="$4" -D train.micro_batch="$5" -D parallel.sequence_parallel="$6" || continue
    train_check ref "$1" 1e-5 1e-5 "llama kv 2 $1 ZeRO-$4"
done
# Resharded resume: tp 4 · dp 2's checkpoint (each kv head written by both of
# its replicas) resumed under tp 2 (kv heads split plainly), and tp 1's resumed
# under tp 4 (each replica reads its head): 4 + 4 steps against 8 of tp 1.
resume() {   # resume NAME LABEL NP TRAINER CKPT LOG0: steps 5-8 appended to a copy of LOG0
    cp "$6" "$T/$1.jsonl"
    if ! train_run "$3" "$4" --data "$DATA" --steps 8 --log "$T/$1.jsonl" --ckpt-dir "$T/$1.ck" --resume "$5"; then
        echo "FAIL: $2 did not resume:"
        tail -20 "$T/$4.err"
        fail=1
        return 1
    fi
    grep -q "resumed from .*step-4" "$T/$4.out" || { echo "FAIL: $2 did not resume"; fail=1; }
    [ "$(grep -c '"loss"' "$T/$1.jsonl")" = 8 ] || { echo "FAIL: $2 did not log 8 steps"; fail=1; }
    train_cmp losses "$T/ref8.jsonl" "$T/$1.jsonl" 1e-5 "$2"
}
train_build_spec "$SPEC" tp2 -D parallel.tp=2 -D parallel.dp=1 -D cluster.gpus_per_node=2 -D model.heads=8 \
    -D model.kv_heads=2 -D zero.stage=0 -D train.micro_batch=4
if train_run 1 ref --data "$DATA" --steps 8 --log "$T/ref8.jsonl" --ckpt-dir "$T/ref8.ck"; then
    resume ab "tp 4 · dp 2 ZeRO-1 then tp 2" 2 tp2 "$T/tp4dp2z1.ck/step-4" "$T/tp4dp2z1.jsonl"
    resume ba "tp 1 then tp 4" 4 tp4 "$T/ref.ck/step-4" "$T/ref.jsonl"
else
    echo "FAIL: the 8-step reference did not train"
    fail=1
fi
[ "$fail" = 0 ] && echo PASS
exit "$fail"
