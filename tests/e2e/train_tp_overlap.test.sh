#!/usr/bin/env bash
# parallel.tp_comm_overlap (issue 15): each tp part's backward as a data call,
# its collective, then a weight-gradient call while the collective runs.  For
# GPT (tiny-gpt) and Llama (tiny-llama: 2 kv heads, replicated under tp 4), tp 2
# and tp 4, with and without sequence parallelism, selective and full
# checkpointing, and the custom-op example's GPT (a user-defined activation) at
# tp 2, 4 steps (a global batch of 16; the example's, 4): with the key at its default
# (wgrad) every step's loss and the final weights within 1e-5 of one rank's,
# and bit for bit those of tp_comm_overlap = none (the same GEMMs, split in
# two calls); the trainer's measured arenas equal the plan's (the weight call
# keeps its part's scratch and inputs live).  The race checker is on.
set -u
. "$(dirname "$0")/train_lib.sh"
fail=0
# layouts NAME SPEC: one rank, then each "TP SP CKPT" with the key on and off
layouts() {
    local ref=$1 spec=$2
    train_3d "$ref" "$spec" 1 1 1 -D zero.stage=0 -D train.micro_batch=4 || return
    shift 2
    for v in "$@"; do
        set -- $v
        local n="$ref-tp$1-sp$2-$3"
        train_3d "$n" "$spec" "$1" 1 1 -D zero.stage=0 -D train.micro_batch=4 -D parallel.sequence_parallel="$2" \
            -D checkpointing.activations="$3" || continue
        train_arenas "$n"
        train_check "$ref" "$n" 1e-5 1e-5 "$n against one rank"
        train_3d "$n-none" "$spec" "$1" 1 1 -D zero.stage=0 -D train.micro_batch=4 -D parallel.sequence_parallel="$2" \
            -D checkpointing.activations="$3" -D parallel.tp_comm_overlap=none || continue
        train_arenas "$n-none"
        train_same "$n-none" "$n" 0 "$n against tp_comm_overlap = none"
    done
}
layouts gpt specs/tiny-gpt.tspec "2 off selective" "2 on full" "4 off full" "4 on selective"
layouts llama specs/tiny-llama.tspec "2 on selective" "4 off full"
# a user-defined activation (examples/custom-op): dfc1 from its own backward
layouts sqrelu examples/custom-op/sqrelu.tspec "2 on none"
# ZeRO-2 over dp 2 under SP, split: the MLP data op writes c_fc's bias
# gradient (GELU's fused backward), the weight op the linears', the norm op
# the norm's; a bucket zeroed after the data op's write lost the bias
# gradient (grad norm 0.14 % off) until the schedule declared it; tune
# reports such layouts
n=gpt-tp2-sp-dp2-z2
if train_3d "$n" specs/tiny-gpt.tspec 2 1 2 -D zero.stage=2 -D train.micro_batch=4 -D parallel.sequence_parallel=on \
        -D checkpointing.activations=none; then
    train_arenas "$n"
    train_check gpt "$n" 1e-5 1e-5 "$n against one rank"
    if train_3d "$n-none" specs/tiny-gpt.tspec 2 1 2 -D zero.stage=2 -D train.micro_batch=4 \
            -D parallel.sequence_parallel=on -D checkpointing.activations=none -D parallel.tp_comm_overlap=none; then
        train_arenas "$n-none"
        train_same "$n-none" "$n" 0 "$n against tp_comm_overlap = none"
    fi
fi
[ "$fail" = 0 ] && echo PASS
exit "$fail"
