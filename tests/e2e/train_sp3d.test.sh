#!/usr/bin/env bash
# Sequence parallelism together with pipeline parallelism and with activation
# checkpointing (issue 6): tiny GPT and tiny Llama at 4 layers, 4 steps, the
# global batch fixed at 16 sequences.  The single-rank run of each model is the
# reference; tp 2 + SP + pp 2 (GPT 1f1b, Llama interleaved: the stages send
# each other the sequence shards, (N/tp)·C per rank), tp 2 + SP with full (GPT)
# and selective (Llama) checkpointing (the recompute starts from the shard the
# forward kept), tp 2 + SP with full checkpointing (Llama: SwiGLU's tensors in
# the forward's scratch, which shares space by lifetime), tp 2 · pp 2 · dp 2 + SP + selective (Llama, 8 ranks),
# and tp 2 + SP + pp 2 under GPipe with ZeRO-3 and no persistent parameters (Llama):
# every step's loss within 1e-5 relative, the final weights (shardc export)
# within 1e-5.  The race checker is on.  AdamW's eps is 1e-6 here, not 1e-8:
# the GPT at 4 layers has a weight (h.2.mlp.c_proj[47, 9]) whose gradient is
# a rounding residue of about 1e-8, and at step 1 AdamW moves it by
# lr·g/(|g| + eps), which for |g| ~ eps turns a last-bit difference between
# layouts into 1e-5 of weight (the layouts' other weights differ by 1e-6 or
# less); an eps above the gradients' rounding noise keeps the comparison a
# test of the layouts, not of that one residue.
set -u
. "$(dirname "$0")/train_lib.sh"
fail=0
# run SPEC NAME TP PP DP [-D ...]: train_3d at 4 layers (4 steps, checkpoint, export)
run() { train_3d "$2" "$1" "$3" "$4" "$5" -D model.layers=4 -D train.optimizer.eps=1e-6 "${@:6}"; }
# check FAMILY NAME: losses and weights of NAME against FAMILY's reference
check() { train_check "$1-ref" "$2" 1e-5 1e-5 "$2"; }
SP=(-D parallel.sequence_parallel=on)
for fam in gpt llama; do
    run "specs/tiny-$fam.tspec" "$fam-ref" 1 1 1 -D zero.stage=0 || exit 1
done
run specs/tiny-gpt.tspec gpt-sp-pp2-1f1b 2 2 1 "${SP[@]}" -D zero.stage=0 -D parallel.schedule=1f1b &&
    check gpt gpt-sp-pp2-1f1b
run specs/tiny-llama.tspec llama-sp-pp2-inter 2 2 1 "${SP[@]}" -D zero.stage=0 -D parallel.schedule=interleaved \
    -D parallel.virtual_stages=2 && check llama llama-sp-pp2-inter
run specs/tiny-gpt.tspec gpt-sp-full2cpu 2 1 1 "${SP[@]}" -D zero.stage=0 -D checkpointing.activations=full \
    -D checkpointing.every=2 -D checkpointing.cpu=on &&
    check gpt gpt-sp-full2cpu
run specs/tiny-llama.tspec llama-sp-sel 2 1 1 "${SP[@]}" -D zero.stage=0 -D checkpointing.activations=selective &&
    check llama llama-sp-sel
run specs/tiny-llama.tspec llama-sp-full 2 1 1 "${SP[@]}" -D zero.stage=0 -D checkpointing.activations=full &&
    check llama llama-sp-full
run specs/tiny-llama.tspec llama-sp-tp2pp2dp2-sel 2 2 2 "${SP[@]}" -D zero.stage=1 \
    -D checkpointing.activations=selective && check llama llama-sp-tp2pp2dp2-sel
# ZeRO-3 with nothing persistent under GPipe: every microbatch's head runs
# before the backward and accumulates the final norm's partial gradients into
# one bucket instance, all-reduced over tp once before the bucket's reduction
# (an all-reduce after each head summed the earlier heads' over tp again)
run specs/tiny-llama.tspec llama-sp-pp2-gpipe-z3p0 2 2 1 "${SP[@]}" -D zero.stage=3 \
    -D zero.param_persistence_threshold=0 -D parallel.schedule=gpipe && check llama llama-sp-pp2-gpipe-z3p0
[ "$fail" = 0 ] && echo PASS
exit "$fail"
