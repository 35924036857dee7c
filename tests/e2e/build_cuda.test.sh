#!/usr/bin/env bash
# The CUDA trainer builds without a GPU (issue 7's CI leg): `shardc build
# --backend cuda` compiles specs/tiny-gpt.tspec's generated C (the same C as
# the CPU backend's: only the link differs) and links it against
# libshardrt_cuda.a, cuBLASLt, cuDNN and NCCL, for the spec's dp 4 layout, a
# one-GPU bf16 layout and a GPU cluster (whose plan holds cuBLASLt's 32 MiB
# workspace), specs/tiny-llama.tspec and an NVMe-offload layout (the host
# worker, liburing linked); examples/custom-op's sqrelu.cu goes through nvcc
# into its trainer.  Where no GPU is present the trainer says so and exits 1.
# Skipped (77) where the build has no CUDA runtime (nvcc not found).
set -u
. "$(dirname "$0")/train_lib.sh"
[ -f "$BUILD/runtime/libshardrt_cuda.a" ] || { echo "SKIP: no libshardrt_cuda.a (nvcc was not found)"; exit 77; }
fail=0
cuda_build() {
    local name=$1 spec=$2
    shift 2
    if "$SHARDC" build "$spec" --backend cuda -o "$T/$name" "$@" > "$T/$name.build" 2>&1 && [ -x "$T/$name" ]; then
        echo "ok: --backend cuda $spec $*"
    else
        echo "FAIL: shardc build $spec --backend cuda $*"; cat "$T/$name.build"; fail=1
    fi
}
cuda_build dp4 specs/tiny-gpt.tspec
cuda_build one specs/tiny-gpt.tspec -D parallel.dp=1 -D cluster.gpus_per_node=1 -D zero.stage=0 -D precision.dtype=bf16
cuda_build h100 specs/tiny-gpt.tspec -D parallel.dp=1 -D cluster.gpus_per_node=1 -D cluster.gpu=h100_sxm_80gb --emit-c "$T/h100.c"
cuda_build sqrelu examples/custom-op/sqrelu.tspec
cuda_build llama specs/tiny-llama.tspec
# offload on the GPU path: host AdamW on the SRT_HOST worker, the states on NVMe through io_uring
cuda_build nvme specs/tiny-gpt.tspec -D zero.stage=3 -D train.micro_batch=2 -D zero.param_persistence_threshold=1000 \
    -D 'offload.optimizer=nvme{path="/tmp"}' -D zero.sub_group_size=20000 -D offload.aio.block_size=65536 \
    -D offload.aio.queue_depth=4
ldd "$T/nvme" | grep -q liburing || { echo "FAIL: the offload trainer does not link liburing"; fail=1; }
for sym in cu_host_init cu_host_optimizer_step io_uring_queue_init; do
    nm "$T/nvme" | grep -q " $sym$\| $sym@" || { echo "FAIL: $sym is not in the offload trainer"; fail=1; }
done
# the CUDA libraries are linked, the CPU backend is not
for lib in libcudart libcublasLt libcudnn libnccl; do
    ldd "$T/one" | grep -q "$lib" || { echo "FAIL: the trainer does not link $lib"; fail=1; }
done
nm "$T/one" | grep -q ' cu_matmul_fwd$' || { echo "FAIL: no CUDA backend in the trainer"; fail=1; }
if nm "$T/one" | grep -q ' cpu_matmul_fwd$'; then echo "FAIL: the CPU backend is linked into the CUDA trainer"; fail=1; fi
nm "$T/sqrelu" | grep -q 'sqrelu_forward_kernel' || { echo "FAIL: sqrelu.cu's kernel is not in the trainer"; fail=1; }
# the generated C does not depend on the backend
"$SHARDC" build specs/tiny-gpt.tspec --emit-c "$T/cpu.c" > /dev/null 2>&1
"$SHARDC" build specs/tiny-gpt.tspec --backend cuda --emit-c "$T/cuda.c" > /dev/null 2>&1
cmp -s "$T/cpu.c" "$T/cuda.c" && echo "ok: the same generated C for both backends" ||
    { echo "FAIL: the generated C differs between the backends"; fail=1; }
# a GPU cluster plans cuBLASLt's workspace, which the CUDA backend uses
grep -q '"cublaslt.workspace"' "$T/h100.c" && echo "ok: the GPU plan holds cublaslt.workspace" ||
    { echo "FAIL: no cublaslt.workspace in a GPU cluster's plan"; fail=1; }
# without a device: a clear error, exit 1
if ! nvidia-smi -L > /dev/null 2>&1; then
    "$T/one" --data "$DATA" --steps 1 > "$T/one.out" 2> "$T/one.err"
    rc=$?
    if [ $rc -eq 1 ] && grep -q "no CUDA device is usable" "$T/one.err"; then
        echo "ok: no GPU: exit 1, $(head -1 "$T/one.err")"
    else
        echo "FAIL: the CUDA trainer without a GPU: exit $rc"; cat "$T/one.out" "$T/one.err"; fail=1
    fi
fi
[ "$fail" = 0 ] && echo PASS
exit "$fail"
