#!/usr/bin/env bash
# Tensor parallelism (Megatron, issue 6): tiny Llama (GQA: 4 heads, 2 kv heads,
# one per tp rank), 4 steps, the global batch fixed at 16 sequences.  dp 1
# (ZeRO 0, 4 microbatches) is the reference; tp 2 · dp 1, and tp 2 · dp 2 with
# ZeRO 1 (two microbatches), 2 and 3 (four: accumulation), and tp 2 with
# sequence parallelism (dp 1, and dp 2 ZeRO-1): every step's loss within 1e-5
# relative, the final weights (shardc export) within 1e-5.  One kv head for
# tp 2 (kv_heads = 1: replicated on both ranks, its gradients summed over tp)
# against its own dp-1 reference, with and without sequence parallelism.  The
# race checker is on.  GPT's fused QKV with kv_heads not a multiple of tp is
# refused by the code generator, as Megatron-LM refuses it (docs/codegen.md):
# checked too.  GPT tp:
# train_tp_gpt.test.sh.
set -u
. "$(dirname "$0")/train_lib.sh"
SPEC=specs/tiny-llama.tspec
fail=0
# run NAME TP DP [-D ...]: train_3d of tp · dp (4 steps, checkpoint, export)
run() { train_3d "$1" "$SPEC" "$2" 1 "$3" "${@:4}"; }
run ref 1 1 -D zero.stage=0 -D train.micro_batch=4 || exit 1
for v in "tp2 2 1 0 4 off" "tp2dp2z1 2 2 1 4 off" "tp2dp2z2 2 2 2 2 off" "tp2dp2z3 2 2 3 2 off" \
         "tp2sp 2 1 0 4 on" "tp2dp2z1sp 2 2 1 2 on"; do
    set -- $v
    run "$1" "$2" "$3" -D zero.stage="$4" -D train.micro_batch="$5" -D parallel.sequence_parallel="$6" || continue
    train_check ref "$1" 1e-5 1e-5 "llama $1 ZeRO-$4"
done
if run refkv1 1 1 -D zero.stage=0 -D train.micro_batch=4 -D model.kv_heads=1; then
    for v in "tp2kv1 2 1 0 4 off" "tp2dp2z3kv1sp 2 2 3 2 on"; do
        set -- $v
        run "$1" "$2" "$3" -D zero.stage="$4" -D train.micro_batch="$5" -D parallel.sequence_parallel="$6" \
            -D model.kv_heads=1 || continue
        train_check refkv1 "$1" 1e-5 1e-5 "llama $1 ZeRO-$4"
    done
fi
# still refused, at the key that asks for it: GPT's fused QKV with one kv head for two tp ranks
"$SHARDC" build specs/tiny-gpt.tspec -o "$T/refused" -D parallel.tp=2 -D parallel.dp=1 -D model.kv_heads=1 \
    -D cluster.gpus_per_node=2 > "$T/refused.out" 2>&1
rc=$?
if [ "$rc" != 1 ] || ! grep -q "fused QKV with kv_heads 1 not a multiple of tp 2" "$T/refused.out" || [ -e "$T/refused" ]; then
    echo "FAIL: a GPT with kv_heads 1 and tp 2 should be refused (exit $rc):"
    cat "$T/refused.out"
    fail=1
else
    echo "ok: a GPT with kv_heads 1 and tp 2 refused"
fi
[ "$fail" = 0 ] && echo PASS
exit "$fail"
