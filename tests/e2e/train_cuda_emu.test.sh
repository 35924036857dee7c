#!/usr/bin/env bash
# The CUDA trainer on the CPU (docs/cuda-emulation.md): trainers built with
# --backend cuda --runtime BUILD/cuda-emu (runtime/cuda against emulated
# libcudart, cuBLASLt, cuDNN and NCCL) against CPU-backend trainers of the
# same spec and layout, race checker on.  tests/gpu/train_gpu.test.sh itself
# (one rank, bf16 and fp32, resume bit for bit) for specs/tiny-gpt.tspec and
# specs/tiny-llama.tspec, 4 steps each of a quarter of the specs' batch,
# with the emulation's tolerances: its cuBLASLt and cuDNN accumulate in fp32
# like the CPU backend, so the losses agree far closer than a GPU's (seen:
# bf16 2.7e-5, fp32 5.9e-9 relative; tolerances 1e-4 and 1e-6).  Then
# 2 steps each of: the optimizer offloaded to the host (the SRT_HOST worker
# thread) and to NVMe, and under mpirun -np 2 dp 2 ZeRO-3 (its parameters
# persistent, then every one partitioned: per-module waits), tp 2 (also with
# tp_comm_overlap = full, bit for bit tp 2's wgrad run, and with it under
# sequence parallelism, its chunks' strided-batched GEMMs bit for bit the
# per-block GEMMs of tp 2's sequence-parallel wgrad run) and pp 2 (NCCL over MPI), losses and exported weights
# against the CPU backend; full
# activation checkpointing bit for bit the emulated run without it; fp16
# from a loss scale of 2^24, the same steps skipped and the same scales as
# on the CPU backend; no host synchronisation inside a step; and a user op's
# CUDA source refused (the emulation does not compile one).
# Slow by nature (every CUDA thread a fiber): about 50 s of CPU on 2 cores.
# Skipped (77) where BUILD/cuda-emu was not built (no nvcc, not x86-64).
set -u
. "$(dirname "$0")/train_lib.sh"
RTD=$BUILD/cuda-emu
[ -f "$RTD/libshardrt_cuda.a" ] || { echo "SKIP: no $RTD/libshardrt_cuda.a (built where nvcc is found, on x86-64)"; exit 77; }
fail=0
TOL_BF16=1e-4 TOL_FP32=1e-6
# bf16's gradient norms: every gradient element is rounded to bf16 where the
# backends' GEMMs round differently (seen: 3.4e-4 relative, tiny-gpt step 2;
# 4.6e-4, tp 2 step 1); 2e-3 is half of bf16's precision 2^-8
NTOL_BF16=2e-3
# a quarter of the specs' batch (4 sequences, microbatches of 2): a step of
# the emulation costs about 0.5 s then
SMALL="-D train.global_batch=4 -D train.micro_batch=2"

# tests/gpu/train_gpu.test.sh on the emulated runtime, for both specs
for spec in specs/tiny-gpt.tspec specs/tiny-llama.tspec; do
    if SHARDC_CUDA_RUNTIME=$RTD SHARDC_GPU_STEPS=4 SHARDC_GPU_SPEC=$spec SHARDC_GPU_TOL_BF16=$TOL_BF16 \
       SHARDC_GPU_NORM_TOL_BF16=$NTOL_BF16 \
       SHARDC_GPU_TOL_FP32=$TOL_FP32 SHARDC_GPU_DEFS=$SMALL bash tests/gpu/train_gpu.test.sh "$SHARDC" "$BUILD" > "$T/gpu.txt" 2>&1; then
        echo "ok: tests/gpu/train_gpu.test.sh on the emulated CUDA runtime, $spec:"
    else
        echo "FAIL: tests/gpu/train_gpu.test.sh on the emulated CUDA runtime, $spec:"
        fail=1
    fi
    grep -v '^shardrt: cuda: \(cuBLASLt\|attention\|device memory\)' "$T/gpu.txt" | sed 's/^/   /'
done

# The other features and layouts, 2 steps each (checkpoint, export), against
# one CPU-backend reference of the same model and batch (one rank, bf16):
# offload and the layouts change no arithmetic beyond the order of sums.
# The weights' tolerance is Adam's first steps: a gradient near 0 whose sign
# differs by a rounding moves a weight by up to 2 lr a step (3e-3 in two).
# The gradient norms' is NTOL_BF16 (above).
export SRT_NVME_STATS=1
CU=(--backend cuda --runtime "$RTD")
GPU=(-D cluster.gpu=h100_sxm_80gb -D precision.dtype=bf16 $SMALL)
STEPS=2 train_layout ref specs/tiny-gpt.tspec 1 "${GPU[@]}" -D parallel.dp=1 -D zero.stage=1 || exit 1
# emu NAME NP [-D ...]: the layout on the emulated CUDA runtime against ref
emu() {
    local name=$1 np=$2
    shift 2
    STEPS=2 train_layout "$name" specs/tiny-gpt.tspec "$np" "${GPU[@]}" "$@" "${CU[@]}" &&
        train_check ref "$name" $TOL_BF16 5e-3 "emulated CUDA, $name, against the CPU backend" $NTOL_BF16
}
NV=$T/nvme
mkdir -p "$NV"
emu offload_host 1 -D parallel.dp=1 -D zero.stage=1 -D offload.optimizer=cpu
if emu offload_nvme 1 -D parallel.dp=1 -D zero.stage=1 -D "offload.optimizer=nvme{path=\"$NV\"}"; then
    grep -m1 -o "nvme: path.*" "$T/offload_nvme.err" | sed 's/^/   /'
    grep "nvme: path" "$T/offload_nvme.err" | grep -qv "read 0 bytes" || { echo "FAIL: the NVMe optimizer read nothing"; fail=1; }
fi
emu dp2_zero3 2 -D parallel.dp=2 -D zero.stage=3
# every parameter partitioned: each module's unit gathered on the NCCL stream and
# waited for inside the layer call just before the module's GEMM (AWAIT/UWAIT)
emu dp2_zero3_units 2 -D parallel.dp=2 -D zero.stage=3 -D zero.param_persistence_threshold=0
emu tp2 2 -D parallel.tp=2 -D parallel.dp=1 -D zero.stage=1
# tp_comm_overlap = full: the forward's row-parallel GEMMs in 4 token-row
# chunks (NR-row GEMM shapes planned at start-up), each chunk's all-reduce, or
# under sequence parallelism reduce-scatter, on the tp-comm stream's NCCL
# communicator behind the next chunk: the same sums, bit for bit the wgrad run
if emu tp2_full 2 -D parallel.tp=2 -D parallel.dp=1 -D zero.stage=1 -D parallel.tp_comm_overlap=full; then
    train_same tp2 tp2_full 0 "emulated CUDA, tp_comm_overlap = full against wgrad"
fi
# under sequence parallelism each chunk's tp blocks are one strided-batched
# cuBLASLt call (srt_matmul_fwd_batched, planned at start-up: no plan made on
# first use), bit for bit the wgrad run's per-block GEMMs under the emulation
# (it runs a batch matrix by matrix; a GPU's kernel may sum in another order)
if emu tp2_sp 2 -D parallel.tp=2 -D parallel.dp=1 -D zero.stage=1 -D parallel.sequence_parallel=on &&
    emu tp2_sp_full 2 -D parallel.tp=2 -D parallel.dp=1 -D zero.stage=1 -D parallel.sequence_parallel=on \
        -D parallel.tp_comm_overlap=full; then
    train_same tp2_sp tp2_sp_full 0 "emulated CUDA, sequence parallel, tp_comm_overlap = full against wgrad"
    if grep -q "planned on first use" "$T/tp2_sp_full.out" "$T/tp2_sp_full.err"; then
        echo "FAIL: tp2_sp_full planned a GEMM on first use:"
        grep -h "planned on first use" "$T/tp2_sp_full.out" "$T/tp2_sp_full.err" | head -3
        fail=1
    fi
fi
emu pp2 2 -D parallel.pp=2 -D parallel.dp=1 -D zero.stage=1
# full activation checkpointing: the recompute on the CUDA path, bit for bit
# the emulated run without it (the same kernels in the same order)
STEPS=2 train_layout ckpt_none specs/tiny-gpt.tspec 1 "${GPU[@]}" -D parallel.dp=1 -D zero.stage=1 "${CU[@]}" &&
    STEPS=2 train_layout ckpt_full specs/tiny-gpt.tspec 1 "${GPU[@]}" -D parallel.dp=1 -D zero.stage=1 \
        -D checkpointing.activations=full "${CU[@]}" &&
    train_same ckpt_none ckpt_full 0 "emulated CUDA, full checkpointing against none"
# fp16 with dynamic loss scaling from 2^24 (hysteresis 2): the overflow check
# (kg_all_finite, the norm's flag) skips the same steps and the scale takes
# the same values as on the CPU backend, and the losses of the steps taken agree
F16=(-D cluster.gpu=h100_sxm_80gb -D precision.dtype=fp16 -D precision.loss_scale.initial_scale_power=24
     -D precision.loss_scale.hysteresis=2 -D parallel.dp=1 -D cluster.gpus_per_node=1 -D zero.stage=1 $SMALL)
train_build f16_cpu "${F16[@]}"
train_build f16_cuda "${F16[@]}" "${CU[@]}"
if train_run 1 f16_cpu --data "$DATA" --steps 12 --log "$T/f16_cpu.jsonl" &&
   train_run 1 f16_cuda --data "$DATA" --steps 12 --log "$T/f16_cuda.jsonl"; then
    [ "$(grep -c '"loss"' "$T/f16_cpu.jsonl")" = 12 ] || { echo "FAIL: fp16: the CPU log has not 12 steps"; fail=1; }
    train_cmp scales "$T/f16_cpu.jsonl" "$T/f16_cuda.jsonl" 1e-3 "fp16 from 2^24 on the emulated CUDA runtime against the CPU backend"
else
    echo "FAIL: fp16 did not train"; tail -n 5 "$T/f16_cpu.err" "$T/f16_cuda.err"; fail=1
fi
# no host synchronisation inside a step (issue 7): the emulated runtime counts
# the calls that make the host wait for the device (CUEMU_SYNC_STATS=1); two
# more steps may add only cudaStreamSynchronize, on each rank as many as the generated
# step function's srt_stream_sync calls and srt_main's end-of-step sync of
# every stream (SRT_NSTREAMS), nothing else: a batch's staging, the loss,
# the gradient norm and the overflow flag wait for none, and no
# cudaEventQuery asks about work the host has not seen complete (a GPU could
# answer "not ready", and the staging's fallback would wait).  One rank with
# 2 and with 6 microbatches (more than the old 4 staging slots), and dp 2
# ZeRO-3, the optimizer on the device (the host optimizer's worker thread
# waits for its own copies by design).
syncs() {   # NAME NP STEPS: "stream event device memcpy memset query" of one run, summed over its ranks
    CUEMU_SYNC_STATS=1 train_run "$2" "$1" --data "$DATA" --steps "$3" || { echo "FAIL: $1 did not train"; return 1; }
    grep "host synchronisations" "$T/$1.err" |
        sed 's/.*cudaStreamSynchronize \([0-9]*\), cudaEventSynchronize \([0-9]*\), cudaDeviceSynchronize \([0-9]*\), cudaMemcpy \([0-9]*\), cudaMemset \([0-9]*\), cudaEventQuery maybe pending \([0-9]*\).*/\1 \2 \3 \4 \5 \6/' |
        awk '{ for (i = 1; i <= 6; i++) n[i] += $i } END { print n[1], n[2], n[3], n[4], n[5], n[6] }'
}
for v in "sync1 1 -D parallel.dp=1 -D zero.stage=1" "sync6 1 -D parallel.dp=1 -D zero.stage=1 -D train.global_batch=12" \
         "sync2 2 -D parallel.dp=2 -D zero.stage=3"; do
    set -- $v
    name=$1 np=$2
    shift 2
    train_build "$name" "${GPU[@]}" -D cluster.gpus_per_node="$np" "$@" "${CU[@]}" --emit-c "$T/$name.c"
    want=$(( $(awk '/^static void s0_step\(/,/^}/' "$T/$name.c" | grep -c 'srt_stream_sync(c,') + 6 ))
    a=$(syncs "$name" "$np" 2) && b=$(syncs "$name" "$np" 4) || { fail=1; continue; }
    per=$(echo "$a $b $np" | awk '{ for (i = 1; i <= 6; i++) printf "%s%g", (i > 1 ? " " : ""), ($(i+6) - $i) / (2 * $13) }')
    if [ "$per" = "$want 0 0 0 0 0" ]; then
        echo "ok: $name: a step's host synchronisations are its $want end-of-step cudaStreamSynchronize calls, nothing else"
    else
        echo "FAIL: $name: host synchronisations per step (stream event device memcpy memset query): $per, expected $want 0 0 0 0 0"
        fail=1
    fi
done
# a user op's CUDA source is refused by the emulated runtime's nvcc, saying why
"$SHARDC" build examples/custom-op/sqrelu.tspec -o "$T/cop" -D zero.stage=0 "${CU[@]}" > "$T/cop.build" 2>&1
rc=$?
if [ $rc -ne 1 ] || ! grep -q "CUDA emulator .* cannot compile a user op's CUDA source" "$T/cop.build"; then
    echo "FAIL: a user op on the emulated CUDA runtime: exit $rc"; cat "$T/cop.build"; fail=1
else
    echo "ok: a user op's CUDA source is refused by the emulated runtime (exit 1)"
fi
[ "$fail" = 0 ] && echo PASS
exit "$fail"
