#!/usr/bin/env bash
# The host reaches the device arena only through ctx_dev_read / ctx_dev_write
# (issue 7: on the CUDA backend the arena is cudaMalloc'd device memory the
# host cannot address).  SRT_DEV_GUARD=1 makes the CPU backend's device arena
# PROT_NONE whenever srt_main's own code runs (everything but the step and
# eval functions), so any direct host access there faults.  Tiny GPT, dp 2:
# bf16 ZeRO-1 and fp32 ZeRO-3, 4 steps with validation every 2; guarded, 2
# steps with a checkpoint then a resume to 4 and --sample 16 (initialisation,
# checkpoint save and load, the sampler's logits).  The losses and val_loss
# must equal an unguarded straight run's bit for bit, the sample its text,
# and the final checkpoints must hold the same pieces, bit for bit.
set -u
. "$(dirname "$0")/train_lib.sh"
fail=0
# case NAME [-D ...]
case_run() {
    local name=$1
    shift
    train_build "$name" -D parallel.dp=2 -D cluster.gpus_per_node=2 -D train.eval_every=2 "$@"
    local opts=(--data "$DATA" --val "$DATA")
    train_run 2 "$name" "${opts[@]}" --steps 4 --log "$T/$name-ref.jsonl" --ckpt-dir "$T/$name-ckA" --sample 16 ||
        { echo "FAIL: $name: unguarded run"; tail -20 "$T/$name.err"; fail=1; return; }
    cp "$T/$name.out" "$T/$name-ref.out"
    SRT_DEV_GUARD=1 train_run 2 "$name" "${opts[@]}" --steps 2 --log "$T/$name-g.jsonl" --ckpt-dir "$T/$name-ckB" ||
        { echo "FAIL: $name: guarded run (steps 1-2)"; tail -20 "$T/$name.err"; fail=1; return; }
    SRT_DEV_GUARD=1 train_run 2 "$name" "${opts[@]}" --steps 4 --log "$T/$name-g.jsonl" --ckpt-dir "$T/$name-ckB" \
        --resume --sample 16 ||
        { echo "FAIL: $name: guarded resumed run (steps 3-4)"; tail -20 "$T/$name.err"; fail=1; return; }
    grep -q "resumed from .*step-2" "$T/$name.out" || { echo "FAIL: $name: did not resume"; fail=1; }
    if "$PY" tests/e2e/train_compare.py losses "$T/$name-ref.jsonl" "$T/$name-g.jsonl" 0 exact > "$T/c.txt"; then
        echo "ok: $name: guarded init, checkpoint, resume: losses bit for bit: $(tail -1 "$T/c.txt")"
    else
        echo "FAIL: $name: guarded losses differ"; cat "$T/c.txt"; fail=1
    fi
    local a b
    a=$(grep -h '"val_loss"' "$T/$name-ref.jsonl" | sed 's/.*"val_loss": *\([^,}]*\).*/\1/')
    b=$(grep -h '"val_loss"' "$T/$name-g.jsonl" | sed 's/.*"val_loss": *\([^,}]*\).*/\1/')
    if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "ok: $name: val_loss the same: $(echo $a)"
    else echo "FAIL: $name: val_loss $(echo $b) vs $(echo $a)"; fail=1; fi
    a=$(sed -n '/^--- sample/,/^--- end of sample/p' "$T/$name-ref.out")
    b=$(sed -n '/^--- sample/,/^--- end of sample/p' "$T/$name.out")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "ok: $name: guarded sample is the reference's: $(echo "$a" | sed -n 2p)"
    else echo "FAIL: $name: sample differs:"; echo "$b"; echo "reference:"; echo "$a"; fail=1; fi
    local f n=0
    for f in "$T/$name-ckA"/step-4/*; do
        case "$f" in *.json) continue ;; esac
        n=$((n + 1))
        # every piece bit for bit (the files' headers differ: each save has its own identity token)
        "$PY" tests/e2e/train_compare.py weights "$f" "$T/$name-ckB/step-4/$(basename "$f")" 0 > /dev/null ||
            { echo "FAIL: $name: checkpoint file $(basename "$f") differs"; fail=1; }
    done
    [ "$n" -gt 0 ] && echo "ok: $name: $n checkpoint data files of step 4 identical" ||
        { echo "FAIL: $name: no checkpoint data files"; fail=1; }
}
case_run bf16z1 -D precision.dtype=bf16 -D zero.stage=1
case_run f32z3 -D zero.stage=3
[ "$fail" = 0 ] && echo PASS
exit "$fail"
