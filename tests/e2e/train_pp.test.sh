#!/usr/bin/env bash
# Pipeline parallelism (issue 6): tiny GPT (tied embeddings: the head's copy on
# the last stage, its gradient summed between the first and the last stage) and
# tiny Llama, both at 4 layers, 4 steps, the global batch fixed at 16 sequences
# (4 microbatches of 4).  The single-rank run of each model is the reference;
# pp 2 under gpipe and interleaved (2 virtual stages), pp 4 under gpipe and 1f1b,
# pp 2 · dp 2 with ZeRO 1 (1f1b) and ZeRO 3 (interleaved), pp 2 with ZeRO 3
# and no persistent parameters (GPT gpipe, Llama interleaved; with tp 2:
# train_sp3d.test.sh), pp 2 with one microbatch and full checkpoints on the
# host (GPT), GPT at 8 layers
# under pp 4 interleaved (2 virtual stages) against the 8-layer single rank,
# and the 3D layout
# tp 2 · pp 2 · dp 2 (Llama, 8 ranks) with ZeRO 1 and ZeRO 3: every step's loss
# within 1e-5 relative, the final weights (shardc export of each layout's
# checkpoint) within 1e-5.  The race checker is on.  (That the specs of specs/
# with pp > 1 build: tests/golden/emit_pp_specs.test.sh.)
set -u
. "$(dirname "$0")/train_lib.sh"
fail=0
# run SPEC NAME TP PP DP [-D ...]: train_3d at LAYERS (4) layers (4 steps, checkpoint, export)
run() { train_3d "$2" "$1" "$3" "$4" "$5" -D model.layers="${LAYERS:-4}" "${@:6}"; }
# check FAMILY NAME: losses and weights of NAME against FAMILY's reference
check() { train_check "$1-ref" "$2" 1e-5 1e-5 "$2"; }
for fam in gpt llama; do
    spec=specs/tiny-$fam.tspec
    run "$spec" "$fam-ref" 1 1 1 -D zero.stage=0 || exit 1
    # NAME PP DP ZERO SCHEDULE VIRTUAL
    for v in "pp2-gpipe 2 1 0 gpipe 1" "pp2-inter 2 1 0 interleaved 2" \
             "pp4-gpipe 4 1 0 gpipe 1" "pp4-1f1b 4 1 0 1f1b 1" "pp2dp2z1 2 2 1 1f1b 1" "pp2dp2z3 2 2 3 interleaved 2"; do
        set -- $v
        vs=()
        [ "$5" = interleaved ] && vs=(-D parallel.virtual_stages="$6")
        run "$spec" "$fam-$1" 1 "$2" "$3" -D zero.stage="$4" -D parallel.schedule="$5" "${vs[@]}" || continue
        check "$fam" "$fam-$1"
    done
    # ZeRO-3 with nothing persistent: the final norm is a fetch unit with its
    # gradient in a bucket, and under GPipe (GPT) and interleaved (Llama, two
    # microbatches of 8) each microbatch's head runs ahead of the backward,
    # accumulating into the bucket instance the first head opened (the trainer
    # once wrote it at its own microbatch's place, which that microbatch's
    # backward then zeroed; tests/e2e/layout_sweep.sh found it)
    sched=(-D parallel.schedule=gpipe)
    [ "$fam" = llama ] && sched=(-D parallel.schedule=interleaved -D parallel.virtual_stages=2 -D train.micro_batch=8)
    run "$spec" "$fam-pp2-z3p0" 1 2 1 -D zero.stage=3 -D zero.param_persistence_threshold=0 "${sched[@]}" &&
        check "$fam" "$fam-pp2-z3p0"
done
# ... with buckets so small that the untied head's weight and the final norm
# are in two (GPipe, Llama): each head finishes one of them; it is reduced
# with the next backward, so that the heads that run ahead accumulate into
# one instance of each (reduced at each head, the next head wrote instances
# of two microbatches, which the code generator refused)
run specs/tiny-llama.tspec llama-pp2-z3p0-small 1 2 1 -D zero.stage=3 -D zero.param_persistence_threshold=0 \
    -D zero.reduce_bucket=1e3 -D parallel.schedule=gpipe && check llama llama-pp2-z3p0-small
# one microbatch a step (of 16) with full checkpoints on the host: the backward
# follows the forward at once, and the checkpoint's copy back to the device
# waits for its copy to the host (the plan once stopped: two device instances
# of one layer's checkpoint alive at once)
run specs/tiny-gpt.tspec gpt-pp2-m1-ckptcpu 1 2 1 -D zero.stage=0 -D train.micro_batch=16 \
    -D checkpointing.activations=full -D checkpointing.cpu=on && check gpt gpt-pp2-m1-ckptcpu
# pp 4 under interleaved (2 virtual stages: 8 model chunks) needs 8 layers: GPT against its 8-layer reference
if LAYERS=8 run specs/tiny-gpt.tspec gpt8-ref 1 1 1 -D zero.stage=0; then
    LAYERS=8 run specs/tiny-gpt.tspec gpt8-pp4-inter 1 4 1 -D zero.stage=0 -D parallel.schedule=interleaved \
        -D parallel.virtual_stages=2 && check gpt8 gpt8-pp4-inter
fi
# 3D: tp 2 · pp 2 · dp 2, eight ranks (Llama: tp splits its q, k, v by heads)
for z in 1 3; do
    run specs/tiny-llama.tspec "llama-tp2pp2dp2z$z" 2 2 2 -D zero.stage="$z" || continue
    check llama "llama-tp2pp2dp2z$z"
done
[ "$fail" = 0 ] && echo PASS
exit "$fail"
