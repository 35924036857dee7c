#!/usr/bin/env bash
# The CUDA trainer on more than one rank, on the CPU (BUILD/cuda-emu: the
# real runtime/cuda over the emulated CUDA runtime, cuBLASLt, cuDNN and NCCL;
# tests/gpu/emu/nccl.c runs NCCL's collectives over MPI, one rank a process):
# tiny GPT at a small batch (4 sequences of 32 tokens), 2 steps, against the
# emulated CUDA trainer's own single rank (so that only runtime/cuda/comm.c
# and the layout differ): dp 2 ZeRO-3, tp 2, pp 2 under 1f1b, tp 2 · dp 2
# ZeRO-1, pp 2 · dp 2 ZeRO-1, dp 2 ZeRO-1 with zero.overlap_param_gather,
# dp 2 ZeRO-3 with the optimizer on the host
# (and dp 2 ZeRO-3 resumed from its step-1 checkpoint: bit for bit);
# every step's loss within 1e-6 relative, the exported weights within 5e-5
# (the layouts' GEMM splits round differently; an all-reduce that drops a
# rank moves the losses by 1e-1 and the weights by 3e-3).  bf16 dp 2 ZeRO-2 against the bf16 single rank at bf16's tolerance
# (losses 2e-3, weights 1e-2); tiny Llama tp 2 with sequence parallelism,
# and tp 2 · pp 2 · dp 2 on 8 ranks, against its single rank.  The race checker is on.  Skipped (77) without
# BUILD/cuda-emu.
set -u
. "$(dirname "$0")/train_lib.sh"
[ -f "$BUILD/cuda-emu/libcuemu.a" ] || { echo "SKIP: no $BUILD/cuda-emu (the CUDA emulation is not built)"; exit 77; }
fail=0
STEPS=2
EMU=(--backend cuda --runtime "$BUILD/cuda-emu")
SMALL=(-D train.global_batch=4 -D model.seq_len=32)
# run NAME SPEC TP PP DP [-D ...]: the emulated CUDA trainer of that layout, trained and exported
run() { train_3d "$1" "$2" "$3" "$4" "$5" "${SMALL[@]}" "${EMU[@]}" "${@:6}"; }
G=specs/tiny-gpt.tspec
run ref "$G" 1 1 1 -D zero.stage=0 -D train.micro_batch=2 || exit 1
# NAME TP PP DP ZERO MICRO_BATCH
for v in "dp2z3 1 1 2 3 2" "tp2 2 1 1 0 2" "pp2 1 2 1 0 1" "tp2dp2z1 2 1 2 1 1" "pp2dp2z1 1 2 2 1 1"; do
    set -- $v
    run "$1" "$G" "$2" "$3" "$4" -D zero.stage="$5" -D train.micro_batch="$6" -D parallel.schedule=1f1b || continue
    train_check ref "$1" 1e-6 5e-5 "cuda-emu gpt $1"
done
# the distributed optimizer's parameter all-gather per bucket at the start of
# the step (zero.overlap_param_gather): NCCL on the dp stream, each layer's
# forward waiting on its own bucket's event
run dp2z1pg "$G" 1 1 2 -D zero.stage=1 -D train.micro_batch=2 -D zero.reduce_bucket=20000 \
    -D zero.overlap_param_gather=on && train_check ref dp2z1pg 1e-6 5e-5 "cuda-emu gpt dp2 ZeRO-1 overlap_param_gather"
# ZeRO-3's checkpoint on 2 ranks: 1 step, then resumed to 2, as the straight run bit for bit
if [ -x "$T/dp2z3" ]; then
    if train_run 2 dp2z3 --data "$DATA" --steps 1 --log "$T/rs.jsonl" --ckpt-dir "$T/rs.ck" --ckpt-every 1 &&
       train_run 2 dp2z3 --data "$DATA" --steps 2 --log "$T/rs.jsonl" --ckpt-dir "$T/rs.ck" --resume; then
        if "$PY" tests/e2e/train_compare.py losses "$T/dp2z3.jsonl" "$T/rs.jsonl" 0 exact > "$T/cmp.txt"; then
            echo "ok: cuda-emu gpt dp2z3 resumed: $(tail -1 "$T/cmp.txt") (bit-identical)"
        else
            echo "FAIL: cuda-emu gpt dp2z3 resumed: losses not bit-identical"; cat "$T/cmp.txt"; fail=1
        fi
    else
        echo "FAIL: cuda-emu gpt dp2z3 checkpoint and resume:"; tail -20 "$T/dp2z3.err"; fail=1
    fi
fi
# the optimizer on the host (SRT_HOST's worker thread): found hostq.c's push
# reading its ticket from a closure the worker had already freed
run off2 "$G" 1 1 2 -D zero.stage=3 -D train.micro_batch=2 -D offload.optimizer=cpu &&
    train_check ref off2 1e-6 5e-5 "cuda-emu gpt dp2 ZeRO-3 optimizer on the host"
if run bref "$G" 1 1 1 -D zero.stage=0 -D train.micro_batch=2 -D precision.dtype=bf16; then
    run bdp2z2 "$G" 1 1 2 -D zero.stage=2 -D train.micro_batch=1 -D precision.dtype=bf16 &&
        train_check bref bdp2z2 2e-3 1e-2 "cuda-emu gpt bf16 dp2 ZeRO-2"
fi
L=specs/tiny-llama.tspec
if run lref "$L" 1 1 1 -D zero.stage=0 -D train.micro_batch=2; then
    run ltp2sp "$L" 2 1 1 -D zero.stage=0 -D train.micro_batch=2 -D parallel.sequence_parallel=on &&
        train_check lref ltp2sp 1e-6 5e-5 "cuda-emu llama tp2 sequence parallel"
fi
# all three at once on 8 ranks: tp 2 · pp 2 · dp 2 (Llama at 4 layers, 1f1b)
if run l4ref "$L" 1 1 1 -D zero.stage=0 -D train.micro_batch=2 -D model.layers=4; then
    run l3d "$L" 2 2 2 -D zero.stage=1 -D train.micro_batch=1 -D model.layers=4 -D parallel.schedule=1f1b &&
        train_check l4ref l3d 1e-6 5e-5 "cuda-emu llama tp2 pp2 dp2"
fi
[ "$fail" = 0 ] && echo PASS
exit "$fail"
