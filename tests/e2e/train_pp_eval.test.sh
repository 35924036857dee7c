#!/usr/bin/env bash
# Validation and --sample under pipeline parallelism (issue 6): tiny GPT (tied
# embeddings) and tiny Llama at 4 layers, 4 steps, validation every 2 steps on
# the training text (--val), the race checker on.  The eval step runs
# microbatch 0's forward through the pipeline; its val_loss records (steps 2
# and 4) must equal the pp 1 reference's within 1e-5 relative: GPT pp 2 under
# 1f1b and under interleaved virtual stages, GPT dp 2 ZeRO-3, and Llama pp 2 · dp 2
# (ZeRO 1 under 1f1b; ZeRO 3, its gathers in the eval, interleaved), each
# against one rank: an evaluation covers every sequence of the global batch
# (each rank its microbatches), so val_loss does not depend on the layout.
# The training losses must agree too (the
# eval between steps must not disturb training), and GPT pp 2's --sample
# (drawn on the last stage, the byte given to every rank) must print the
# reference's text.
set -u
. "$(dirname "$0")/train_lib.sh"
fail=0
# run SPEC NAME PP DP [-D ...]: build, train 4 steps evaluating every 2, sample 24 bytes
run() {
    local spec=$1 name=$2 pp=$3 dp=$4 np=$(($3 * $4))
    shift 4
    if ! "$SHARDC" build "$spec" -o "$T/$name" -D model.layers=4 -D parallel.pp="$pp" -D parallel.dp="$dp" \
         -D cluster.gpus_per_node="$np" -D train.eval_every=2 "$@" > "$T/$name.build" 2>&1; then
        echo "FAIL: shardc build $name:"
        cat "$T/$name.build"
        fail=1
        return 1
    fi
    if ! train_run "$np" "$name" --data "$DATA" --val "$DATA" --steps 4 --log "$T/$name.jsonl" --sample 24; then
        echo "FAIL: $name did not train:"
        tail -20 "$T/$name.err"
        fail=1
        return 1
    fi
}
# check REF NAME: val_loss (two records, within 1e-5), the losses, the sample
check() {
    if ! "$PY" - "$T/$1.jsonl" "$T/$2.jsonl" > "$T/val.txt" <<'EOF'
import json, sys
def val(p):
    return {r["step"]: r["val_loss"] for r in map(json.loads, open(p)) if "val_loss" in r}
r, q = val(sys.argv[1]), val(sys.argv[2])
if sorted(r) != [2, 4] or sorted(q) != sorted(r):
    sys.exit("val_loss steps: %s vs reference %s" % (sorted(q), sorted(r)))
worst = max(abs(q[s] - r[s]) / abs(r[s]) for s in r)
print("val_loss: steps %s, %s vs %s, worst relative difference %.3g" % (sorted(r), [q[s] for s in sorted(q)],
                                                                       [r[s] for s in sorted(r)], worst))
sys.exit(worst > 1e-5)
EOF
    then
        echo "FAIL: $2: val_loss"
        cat "$T/val.txt"
        fail=1
    else
        echo "ok: $2: $(tail -1 "$T/val.txt")"
    fi
    train_cmp losses "$T/$1.jsonl" "$T/$2.jsonl" 1e-5 "$2"
    if grep -q "skipped" "$T/$2.out"; then
        echo "FAIL: $2: $(grep skipped "$T/$2.out")"
        fail=1
    fi
}
# the sampled text of NAME equals REF's (and is there)
check_sample() {
    local a b
    a=$(sed -n '/^--- sample/,/^--- end of sample/p' "$T/$1.out")
    b=$(sed -n '/^--- sample/,/^--- end of sample/p' "$T/$2.out")
    if [ -z "$a" ] || [ "$a" != "$b" ]; then
        echo "FAIL: $2: the sample differs from $1's:"
        echo "$b"
        echo "reference:"
        echo "$a"
        fail=1
    else
        echo "ok: $2: the sample is the reference's ($(echo "$a" | sed -n 2p | wc -c) bytes on its line)"
    fi
}
run specs/tiny-gpt.tspec gpt-ref 1 1 -D zero.stage=0 || exit 1
run specs/tiny-gpt.tspec gpt-pp2 2 1 -D zero.stage=0 -D parallel.schedule=1f1b && check gpt-ref gpt-pp2 &&
    check_sample gpt-ref gpt-pp2
run specs/tiny-gpt.tspec gpt-pp2-inter 2 1 -D zero.stage=0 -D parallel.schedule=interleaved \
    -D parallel.virtual_stages=2 && check gpt-ref gpt-pp2-inter
run specs/tiny-gpt.tspec gpt-dp2 1 2 -D zero.stage=3 && check gpt-ref gpt-dp2
run specs/tiny-llama.tspec llama-ref 1 1 -D zero.stage=1 || exit 1
run specs/tiny-llama.tspec llama-pp2dp2 2 2 -D zero.stage=1 -D parallel.schedule=1f1b && check llama-ref llama-pp2dp2
run specs/tiny-llama.tspec llama-pp2dp2z3 2 2 -D zero.stage=3 -D parallel.schedule=interleaved \
    -D parallel.virtual_stages=2 && check llama-ref llama-pp2dp2z3
[ "$fail" = 0 ] && echo PASS
exit "$fail"
