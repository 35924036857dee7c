#!/usr/bin/env bash
# specs/tiny-gpt.tspec on one GPU (issue 7): the CUDA trainer against the CPU
# backend's bf16 emulation, every one of 20 steps' losses and gradient norms
# within bf16 tolerance (2e-2 relative; fp32 on both: 1e-3); resume on the GPU bit for bit
# (10 steps straight against 5, a checkpoint, 5 more); the start-up and
# final lines report the device, the planned arena and the measured peak
# device memory.  Skipped (77) without a CUDA device or the CUDA runtime.
# SHARDC_CUDA_RUNTIME=DIR builds the trainers with --runtime DIR and needs no
# device: tests/e2e/train_cuda_emu.test.sh runs this very script against
# BUILD/cuda-emu, the CUDA runtime on emulated vendor libraries, with
# SHARDC_GPU_STEPS (a multiple of 4; 20 by default) steps instead of 20,
# SHARDC_GPU_SPEC instead of specs/tiny-gpt.tspec, and SHARDC_GPU_TOL_BF16 /
# SHARDC_GPU_TOL_FP32 instead of the tolerances 2e-2 / 1e-3 (and
# SHARDC_GPU_NORM_TOL_BF16 for bf16's gradient norms, else the same), the dtypes of
# SHARDC_GPU_DTYPES instead of "bf16 fp32", and the words of SHARDC_GPU_DEFS
# (-D key=value ...) added to every build.
set -u
. "$(dirname "$0")/../e2e/train_lib.sh"
RT=()
if [ -n "${SHARDC_CUDA_RUNTIME:-}" ]; then
    [ -f "$SHARDC_CUDA_RUNTIME/libshardrt_cuda.a" ] || { echo "SKIP: no $SHARDC_CUDA_RUNTIME/libshardrt_cuda.a"; exit 77; }
    RT=(--runtime "$SHARDC_CUDA_RUNTIME")
else
    [ -f "$BUILD/runtime/libshardrt_cuda.a" ] || { echo "SKIP: no libshardrt_cuda.a (nvcc was not found)"; exit 77; }
    nvidia-smi -L > /dev/null 2>&1 || { echo "SKIP: no CUDA device"; exit 77; }
fi
fail=0
N=${SHARDC_GPU_STEPS:-20}
SPEC=${SHARDC_GPU_SPEC:-specs/tiny-gpt.tspec}
ONE=(-D parallel.dp=1 -D cluster.gpus_per_node=1 -D zero.stage=1 -D cluster.gpu=h100_sxm_80gb ${SHARDC_GPU_DEFS:-})
gpu_build() {
    local name=$1
    shift
    "$SHARDC" build "$SPEC" --backend cuda "${RT[@]}" -o "$T/$name" "$@" > "$T/$name.build" 2>&1 ||
        { echo "FAIL: shardc build --backend cuda $*"; cat "$T/$name.build"; exit 1; }
}
gpu_run() {
    local name=$1
    shift
    # a guard against a hang only: the emulated CUDA stack on a loaded 2-core machine
    # took more than 120 s for one tiny-gpt run (steps of 48 and 59 s)
    timeout "${SHARDC_GPU_RUN_TIMEOUT:-600}" "$T/$name" "$@" > "$T/$name.out" 2> "$T/$name.err"
}
for dt in ${SHARDC_GPU_DTYPES:-bf16 fp32}; do
    tol=${SHARDC_GPU_TOL_BF16:-2e-2} ntol=${SHARDC_GPU_NORM_TOL_BF16:-${SHARDC_GPU_TOL_BF16:-2e-2}}
    [ $dt = fp32 ] && tol=${SHARDC_GPU_TOL_FP32:-1e-3} ntol=${SHARDC_GPU_TOL_FP32:-1e-3}
    train_build_spec "$SPEC" cpu_$dt "${ONE[@]}" -D precision.dtype=$dt
    gpu_build gpu_$dt "${ONE[@]}" -D precision.dtype=$dt
    train_run 1 cpu_$dt --data "$DATA" --steps $N --log "$T/cpu_$dt.jsonl" || { echo "FAIL: CPU $dt"; cat "$T/cpu_$dt.err"; exit 1; }
    gpu_run gpu_$dt --data "$DATA" --steps $N --log "$T/gpu_$dt.jsonl" || { echo "FAIL: GPU $dt"; cat "$T/gpu_$dt.out" "$T/gpu_$dt.err"; exit 1; }
    [ "$(grep -c '"loss"' "$T/gpu_$dt.jsonl")" = $N ] || { echo "FAIL: the GPU log has not $N steps"; fail=1; }
    train_cmp losses "$T/cpu_$dt.jsonl" "$T/gpu_$dt.jsonl" $tol "GPU $dt against the CPU backend, $N steps, tol $tol" $ntol
done
grep -q "shardrt: cuda: rank 0 on device" "$T/gpu_bf16.out" && grep -q "peak device memory measured" "$T/gpu_bf16.out" ||
    { echo "FAIL: no device / memory report"; cat "$T/gpu_bf16.out"; fail=1; }
# bf16 attention on cuDNN's graphs: always on the emulated cuDNN (a GPU's may decline, saying why)
if [ -n "${SHARDC_CUDA_RUNTIME:-}" ] &&
   ! grep -q "attention (.*forward cuDNN fused SDPA .*backward cuDNN fused SDPA" "$T/gpu_bf16.out"; then
    echo "FAIL: attention does not run on the emulated cuDNN:"; grep "attention" "$T/gpu_bf16.out"; fail=1
fi
grep "shardrt: cuda:" "$T/gpu_bf16.out"
grep -o "step $N/$N.*" "$T/gpu_bf16.out" | tail -1
# resume on the GPU, bit for bit
gpu_run gpu_bf16 --data "$DATA" --steps $((N / 2)) --log "$T/straight.jsonl" || { echo "FAIL: straight"; cat "$T/gpu_bf16.err"; exit 1; }
gpu_run gpu_bf16 --data "$DATA" --steps $((N / 4)) --log "$T/resumed.jsonl" --ckpt-dir "$T/ck" ||
    { echo "FAIL: first half"; cat "$T/gpu_bf16.err"; exit 1; }
gpu_run gpu_bf16 --data "$DATA" --steps $((N / 2)) --log "$T/resumed.jsonl" --ckpt-dir "$T/ck" --resume ||
    { echo "FAIL: resumed"; cat "$T/gpu_bf16.err"; exit 1; }
grep -q "resumed from .*step-$((N / 4))" "$T/gpu_bf16.out" || { echo "FAIL: the run did not say it resumed"; fail=1; }
if "$PY" tests/e2e/train_compare.py losses "$T/straight.jsonl" "$T/resumed.jsonl" 0 exact > "$T/c.txt"; then
    echo "ok: GPU resume bit for bit: $(tail -1 "$T/c.txt")"
else
    echo "FAIL: GPU resume is not bit for bit"; cat "$T/c.txt"; fail=1
fi
[ "$fail" = 0 ] && echo PASS
exit "$fail"
