#!/usr/bin/env bash
# Activation checkpointing in the generated trainer (issue 6): full (every 1
# and every 2 of 4 layers), selective (the attention core), cpu checkpointing
# (the checkpoints in the pinned host arena) and partitioned activations (tp 2,
# tiny Llama: each tp rank keeps half of a checkpoint, gathered again before
# the recompute).  Every case trains 4 steps (global batch 16) against the same
# layout without checkpointing: the recompute replays the forward's kernels on
# the forward's inputs, so the losses must be bit-identical (fp32) and the
# exported weights within 1e-5.  Layouts: dp 1 (ZeRO-0), dp 2 ZeRO-3, pp 2
# (ZeRO-1), tp 2 and tp 2 · dp 2 ZeRO-3 (both ZeRO-3 layouts with per-module
# fetch units, nothing persistent, a small prefetch).  The plan's activation memory must shrink (`shardc plan
# --json`), and the trainer's measured arenas equal the plan's.  Race checker on.
set -u
. "$(dirname "$0")/train_lib.sh"
fail=0
# act SPEC ARGS...: the plan's peak activation bytes of rank class 0 (device, plus host)
act() {
    local spec=$1
    shift
    "$SHARDC" plan "$spec" "$@" --json "$T/plan.json" > /dev/null || return 1
    "$PY" -c 'import json, sys
c = json.load(open(sys.argv[1]))["rank_classes"][0]
print(c["device_max_bytes"]["activations"], c["host_bytes"]["activations"])' "$T/plan.json"
}
# run NAME SPEC NP [-D ...]: train_layout (4 steps, checkpoint, export), then
# the trainer's arenas against the plan's: "device arena A bytes (plan A), host arena H bytes (plan H)"
run() {
    train_layout "$@" || return 1
    train_arenas "$1"
}
# layout REF SPEC NP "LAYOUT ARGS" CASE... ; a CASE is "NAME ARGS": the reference
# without checkpointing, then every case against it (losses exact, weights 1e-5)
layout() {
    local ref=$1 spec=$2 np=$3 base=$4
    shift 4
    run "$ref" "$spec" "$np" $base || return
    local ra rh
    read -r ra rh <<< "$(act "$spec" -D cluster.gpus_per_node="$np" $base)"
    for c in "$@"; do
        set -- $c
        local name=$1
        shift
        run "$name" "$spec" "$np" $base "$@" || continue
        train_same "$ref" "$name" 1e-5 "$name"
        local ca ch
        read -r ca ch <<< "$(act "$spec" -D cluster.gpus_per_node="$np" $base "$@")"
        if [ "${ca:-x}" -lt "$ra" ] 2> /dev/null; then
            echo "ok: $name: planned activations $ca bytes (host $ch) < $ra without checkpointing"
        else
            echo "FAIL: $name: planned activations ${ca:-?} bytes, without checkpointing $ra"
            fail=1
        fi
    done
}
F="-D checkpointing.activations=full"
GPT=specs/tiny-gpt.tspec LLAMA=specs/tiny-llama.tspec
D1="-D parallel.dp=1 -D zero.stage=0 -D train.micro_batch=4"
layout g "$GPT" 1 "$D1" "g.full $F" "g.sel -D checkpointing.activations=selective" "g.cpu $F -D checkpointing.cpu=on"
layout g4 "$GPT" 1 "$D1 -D model.layers=4" "g4.full1 $F" "g4.full2 $F -D checkpointing.every=2"
# ZeRO-3 with every parameter in a per-module fetch unit (nothing persistent),
# each gathered around its use with a prefetch smaller than most units
Z3U="-D zero.param_persistence_threshold=0 -D zero.prefetch_bucket=5000 -D zero.max_reuse_distance=0"
layout gz "$GPT" 2 "-D parallel.dp=2 -D zero.stage=3 -D train.micro_batch=4 -D model.layers=4 $Z3U" \
    "gz.full2cpu $F -D checkpointing.every=2 -D checkpointing.cpu=on" "gz.sel -D checkpointing.activations=selective"
layout gp "$GPT" 2 "-D parallel.pp=2 -D parallel.dp=1 -D zero.stage=1 -D train.micro_batch=4 -D model.layers=4" \
    "gp.full2cpu $F -D checkpointing.every=2 -D checkpointing.cpu=on" "gp.sel -D checkpointing.activations=selective"
P="$F -D checkpointing.partition_activations=on"
layout l "$LLAMA" 2 "-D parallel.tp=2 -D parallel.dp=1 -D zero.stage=0 -D train.micro_batch=4" \
    "l.part $P" "l.sel -D checkpointing.activations=selective"
layout lz "$LLAMA" 4 "-D parallel.tp=2 -D parallel.dp=2 -D zero.stage=3 -D train.micro_batch=4 -D model.layers=4 $Z3U" \
    "lz.partcpu2 $P -D checkpointing.cpu=on -D checkpointing.every=2"
[ "$fail" = 0 ] && echo PASS
exit "$fail"
