#!/usr/bin/env bash
# Tensor parallelism for the GPT family (issue 6): tiny GPT (fused c_attn split
# per head, tied vocab-parallel wte), 4 steps, the global batch fixed at 16
# sequences.  dp 1 (ZeRO 0, 4 microbatches) is the reference; tp 2 · dp 1 and
# tp 2 · dp 2 with ZeRO 1 and 3, and tp 2 with sequence parallelism (dp 1, and
# dp 2 ZeRO-3): every step's loss within 1e-5 relative, the
# final weights (shardc export: the same Hugging Face tensors whatever the
# layout) within 1e-5.  Resharded resume: 2 steps at tp 2 with sequence
# parallelism, then 2 more from its checkpoint by the tp-1 trainer: the 4
# losses of the reference.  The race checker is on.
set -u
. "$(dirname "$0")/train_lib.sh"
SPEC=specs/tiny-gpt.tspec
fail=0
# run NAME TP DP [-D ...]: train_3d of tp · dp (4 steps, checkpoint, export)
run() { train_3d "$1" "$SPEC" "$2" 1 "$3" "${@:4}"; }
run ref 1 1 -D zero.stage=0 -D train.micro_batch=4 || exit 1
for v in "tp2 2 1 0 4 off" "tp2dp2z1 2 2 1 4 off" "tp2dp2z3 2 2 3 2 off" "tp2sp 2 1 0 4 on" "tp2dp2z3sp 2 2 3 2 on"; do
    set -- $v
    run "$1" "$2" "$3" -D zero.stage="$4" -D train.micro_batch="$5" -D parallel.sequence_parallel="$6" || continue
    train_check ref "$1" 1e-5 1e-5 "gpt $1 ZeRO-$4"
done
if [ -x "$T/tp2sp" ]; then
    if train_run 2 tp2sp --data "$DATA" --steps 2 --log "$T/half.jsonl" --ckpt-dir "$T/half.ck" &&
       train_run 1 ref --data "$DATA" --steps 4 --resume "$T/half.ck/step-2" --log "$T/rest.jsonl"; then
        cat "$T/half.jsonl" "$T/rest.jsonl" > "$T/resumed.jsonl"
        train_cmp losses "$T/ref.jsonl" "$T/resumed.jsonl" 1e-5 "gpt tp 2 + SP, resumed at tp 1"
    else
        echo "FAIL: the resharded resume did not run:"
        tail -20 "$T/ref.err"
        fail=1
    fi
fi
[ "$fail" = 0 ] && echo PASS
exit "$fail"
