#!/usr/bin/env bash
# bundle.sh [BUILD_DIR [OUT_DIR]] — the GPU checks, prebuilt, for a GPU machine
# that has the NVIDIA driver and CUDA's libraries but not this project's
# toolchain (re2c, Lemon, an MPI compiler): how the first GPU runs were made
# (an H200 lent for 15 minutes, 2026-12-04; docs/trainer.md, "On a GPU").
# tests/gpu/run.sh is the check for a machine that can build.
#
# Here (BUILD_DIR configured where nvcc is found; default build), this writes
# OUT_DIR (default gpu-bundle):
#   bundle.tgz  the CUDA trainers (tiny-gpt and tiny-llama in bf16 and fp32,
#               AdamW on the host and on NVMe, full recomputation, fp16 from
#               2^24, GPT-2 124M at tests/bench/gpu/run.sh's setting),
#               test_kernels_cuda, bench_kernels_cuda, shardrt_calibrate_cuda,
#               the shared libraries they need other than CUDA's, cuBLASLt's,
#               cuDNN's, NCCL's and the C library (Open MPI's components and
#               help text among them), the data, and the PyTorch reference
#   run.sh      what the GPU machine runs: `bash run.sh RESULTS_DIR` (from any
#               folder) writes RESULTS_DIR/results.tgz and RESULTS_DIR/log.txt
#   ref/        the CPU backend's logs of the same trainers, made now
# Back here: `tests/gpu/bundle.sh --check OUT_DIR RESULTS_DIR` compares the
# GPU's logs with ref/ (the tolerances of tests/gpu/train_gpu.test.sh; bit for
# bit where the arithmetic is the same) and prints the kernel tests, the
# benchmark and the calibration's size.  Exit 0 when every check passes.
set -eu
cd "$(dirname "$0")/../.."
ROOT=$PWD
if [ "${1:-}" = --check ]; then
    B=${2:?usage: bundle.sh --check OUT_DIR RESULTS_DIR} R=${3:?usage: bundle.sh --check OUT_DIR RESULTS_DIR}
    T=$(mktemp -d)
    trap 'rm -rf "$T"' EXIT
    if [ -f "$R/results.tgz" ]; then tar xzf "$R/results.tgz" -C "$T"; else cp -r "$R"/. "$T/res"; fi
    G=$T/res fail=0
    cmp() {   # KIND REF RUN TOL LABEL [exact]: tests/e2e/train_compare.py KIND
        if [ ! -s "$3" ]; then echo "FAIL: $5: no log (the run failed: see log.txt)"; fail=1; return; fi
        if out=$(python3 "$ROOT/tests/e2e/train_compare.py" "$1" "$2" "$3" "$4" ${6:+"$6"} 2>&1); then
            echo "ok: $5: $(echo "$out" | tail -1)"
        else
            echo "FAIL: $5:"; echo "$out" | tail -5; fail=1
        fi
    }
    grep -q "checks passed" "$G/kernels.txt" 2>/dev/null && tail -1 "$G/kernels.txt" | sed 's/^/kernels: /' ||
        { echo "FAIL: test_kernels_cuda did not finish"; fail=1; }
    grep -q "^FAIL" "$G/kernels.txt" 2>/dev/null && { grep "^FAIL" "$G/kernels.txt"; fail=1; }
    cmp losses "$B/ref/tiny_bf16.jsonl" "$G/tiny_bf16.jsonl" 2e-2 "tiny-gpt bf16 against the CPU backend"
    cmp losses "$B/ref/tiny_fp32.jsonl" "$G/tiny_fp32.jsonl" 1e-3 "tiny-gpt fp32 against the CPU backend"
    cmp losses "$B/ref/llama_bf16.jsonl" "$G/llama_bf16.jsonl" 2e-2 "tiny-llama bf16 against the CPU backend"
    cmp losses "$B/ref/llama_fp32.jsonl" "$G/llama_fp32.jsonl" 1e-3 "tiny-llama fp32 against the CPU backend"
    cmp losses "$G/straight.jsonl" "$G/resumed.jsonl" 0 "resume on the GPU, bit for bit" exact
    cmp losses "$G/tiny_bf16.jsonl" "$G/off_host.jsonl" 0 "AdamW on the host, bit for bit the GPU's" exact
    cmp losses "$G/tiny_bf16.jsonl" "$G/off_nvme.jsonl" 0 "AdamW on NVMe, bit for bit the GPU's" exact
    cmp losses "$G/tiny_bf16.jsonl" "$G/ckpt_full.jsonl" 0 "full recomputation, bit for bit the GPU's" exact
    cmp scales "$B/ref/f16.jsonl" "$G/f16.jsonl" 1e-3 "fp16 from 2^24 against the CPU backend"
    grep -h "ERROR SUMMARY" "$G/memcheck.txt" 2>/dev/null | sed 's/^/memcheck: /' || echo "memcheck: not run"
    grep -q "ERROR SUMMARY: 0 errors" "$G/memcheck.txt" 2>/dev/null || [ ! -f "$G/memcheck.txt" ] || fail=1
    grep -h "ours\|torch\|ratio" "$G/bench.txt" 2>/dev/null | sed 's/^/benchmark: /' || true
    [ -s "$G/calibrate.json" ] && echo "calibration: $(grep -c '"table"' "$G/calibrate.json") rows in calibrate.json"
    [ "$fail" = 0 ] && echo PASS || echo FAIL
    exit "$fail"
fi

B=${1:-build}
OUT=${2:-gpu-bundle}
S=$B/shardc
[ -f "$B/runtime/libshardrt_cuda.a" ] || { echo "bundle.sh: $B has no CUDA runtime (configure where nvcc is found)"; exit 2; }
for tool in mpirun python3 ldd; do command -v $tool > /dev/null || { echo "bundle.sh: needs $tool"; exit 2; }; done
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 SRT_CHECK=1
rm -rf "$OUT"
W=$OUT/stage
mkdir -p "$W/bin" "$W/lib" "$W/data" "$W/ompi/share" "$OUT/ref"
DATA=examples/data/tinyshakespeare.txt
ONE=(-D parallel.dp=1 -D cluster.gpus_per_node=1 -D zero.stage=1 -D cluster.gpu=h100_sxm_80gb)
F16=(-D precision.dtype=fp16 -D precision.loss_scale.initial_scale_power=24 -D precision.loss_scale.hysteresis=2)
# pair NAME SPEC [-D ...]: the CUDA trainer into the bundle, the CPU one's 20-step log into ref/
pair() {
    local name=$1 spec=$2
    shift 2
    "$S" build "$spec" --backend cuda -o "$W/bin/$name" "$@" > "$OUT/ref/$name.build" 2>&1 ||
        { echo "bundle.sh: shardc build --backend cuda $name failed:"; cat "$OUT/ref/$name.build"; exit 1; }
    "$S" build "$spec" -o "$OUT/ref/$name.cpu" "$@" > "$OUT/ref/$name.build" 2>&1 ||
        { echo "bundle.sh: shardc build $name failed:"; cat "$OUT/ref/$name.build"; exit 1; }
    mpirun --oversubscribe -np 1 "$OUT/ref/$name.cpu" --data "$DATA" --steps 20 --log "$OUT/ref/$name.jsonl" \
        > "$OUT/ref/$name.out" 2>&1 || { echo "bundle.sh: the CPU run of $name failed:"; tail -5 "$OUT/ref/$name.out"; exit 1; }
    rm -f "$OUT/ref/$name.cpu" "$OUT/ref/$name.build"
}
gpu() {   # gpu NAME SPEC [-D ...]: a CUDA trainer only (compared with another GPU run)
    local name=$1 spec=$2
    shift 2
    "$S" build "$spec" --backend cuda -o "$W/bin/$name" "$@" > "$OUT/ref/$name.build" 2>&1 ||
        { echo "bundle.sh: shardc build --backend cuda $name failed:"; cat "$OUT/ref/$name.build"; exit 1; }
    rm -f "$OUT/ref/$name.build"
}
for dt in bf16 fp32; do
    pair tiny_$dt specs/tiny-gpt.tspec "${ONE[@]}" -D precision.dtype=$dt
    pair llama_$dt specs/tiny-llama.tspec "${ONE[@]}" -D precision.dtype=$dt
done
pair f16 specs/tiny-gpt.tspec "${ONE[@]}" "${F16[@]}"
gpu off_host specs/tiny-gpt.tspec "${ONE[@]}" -D precision.dtype=bf16 -D offload.optimizer=cpu
gpu off_nvme specs/tiny-gpt.tspec "${ONE[@]}" -D precision.dtype=bf16 -D 'offload.optimizer=nvme{path="/tmp/shardc-nvme"}'
gpu ckpt_full specs/tiny-gpt.tspec "${ONE[@]}" -D precision.dtype=bf16 -D checkpointing.activations=full
# GPT-2 124M as tests/bench/gpu/run.sh runs it, on llm.c-format random tokens
gpu gpt2 specs/gpt2-124m.tspec -D parallel.dp=1 -D cluster.gpus_per_node=1 -D cluster.gpu=h200_141gb -D zero.stage=0 \
    -D train.global_batch=16 -D train.micro_batch=16 -D train.steps=20 -D train.lr_schedule.warmup=2 \
    -D train.eval_every=0 -D train.log_every=1
python3 tests/bench/gpu/random_shard.py "$W/data/gpt2.bin" $((22 * 16 * 1024 + 1))
cp "$DATA" "$W/data/"
cp tests/bench/gpu/bench_torch_gpt2.py "$W/data/"
cp "$B/tests/gpu/test_kernels_cuda" "$B/tests/gpu/bench_kernels_cuda" "$B/runtime/shardrt_calibrate_cuda" "$W/bin/"
# the libraries, but CUDA's own (the machine's driver and toolkit) and the C library's
for f in "$W"/bin/*; do ldd "$f"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -v -E '/(libcuda|libcudart|libcublas|libcublasLt|libcudnn[^/]*|libnccl|libc|libm|libdl|libpthread|librt)\.so' |
    while read -r l; do cp -L "$l" "$W/lib/"; done
ompi=$(dirname "$(ldd "$W/bin/gpt2" | awk '/libmpi\.so/ {print $3}')")/openmpi
[ -d "$ompi/lib/openmpi3" ] && cp -rL "$ompi/lib/openmpi3" "$W/ompi/components"
[ -d /usr/share/openmpi ] && cp -r /usr/share/openmpi "$W/ompi/share/openmpi"
[ -d "$W/ompi/components" ] && for c in "$W"/ompi/components/*.so; do ldd "$c"; done | awk '$3 ~ /^\// {print $3}' |
    sort -u | grep -v -E '/(libc|libm|libdl|libpthread|librt)\.so' |
    while read -r l; do [ -f "$W/lib/$(basename "$l")" ] || cp -L "$l" "$W/lib/"; done
(cd "$W" && tar czf ../bundle.tgz .)
rm -rf "$W"
cat > "$OUT/run.sh" << 'RUNEOF'
#!/bin/bash
# run.sh RESULTS_DIR — the GPU checks of tests/gpu/bundle.sh on this machine,
# each under a timeout: writes RESULTS_DIR/results.tgz and RESULTS_DIR/log.txt.
set -u
R0=${1:?usage: run.sh RESULTS_DIR}
mkdir -p "$R0"
exec > >(tee "$R0/log.txt") 2>&1
HERE=$(cd "$(dirname "$0")" && pwd)
t0=$(date +%s)
W=$(mktemp -d)
tar xzf "$HERE/bundle.tgz" -C "$W"
R=$W/res
mkdir -p "$R"
log() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$R0/results.tgz" -C "$W" res; log done' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || log "no nvidia-smi"
CL=""   # CUDA's libraries as this machine has them
for n in libcudart.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
    p=$(find /usr/local /usr/lib /opt -name "$n" 2>/dev/null | head -1)
    echo "$n: ${p:-not found}"
    [ -n "$p" ] && CL="$CL:$(dirname "$p")"
done
# Open MPI as a singleton (no launcher), its components from the bundle
export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_mca_base_component_path=$W/ompi/components OPAL_PREFIX=$W/ompi \
       OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rn() { local t=$1; shift; env LD_LIBRARY_PATH="$W/lib$CL" timeout "$t" "$@"; }
D=$W/data/tinyshakespeare.txt
log "test_kernels_cuda"
rn 120 "$W/bin/test_kernels_cuda" > "$R/kernels.txt" 2>&1; echo "rc=$?"; tail -1 "$R/kernels.txt"
for m in tiny_bf16 tiny_fp32 llama_bf16 llama_fp32 f16 off_host off_nvme ckpt_full; do
    log "$m, 20 steps"
    mkdir -p /tmp/shardc-nvme
    SRT_CHECK=1 SRT_NVME_STATS=1 rn 90 "$W/bin/$m" --data "$D" --steps 20 --log "$R/$m.jsonl" > "$R/$m.out" 2>&1
    echo "rc=$?"; tail -2 "$R/$m.out"
done
log "resume"
SRT_CHECK=1 rn 60 "$W/bin/tiny_bf16" --data "$D" --steps 10 --log "$R/straight.jsonl" > "$R/straight.out" 2>&1
SRT_CHECK=1 rn 60 "$W/bin/tiny_bf16" --data "$D" --steps 5 --log "$R/resumed.jsonl" --ckpt-dir "$W/ck" > "$R/half1.out" 2>&1
SRT_CHECK=1 rn 60 "$W/bin/tiny_bf16" --data "$D" --steps 10 --log "$R/resumed.jsonl" --ckpt-dir "$W/ck" --resume \
    > "$R/half2.out" 2>&1; echo "rc=$?"; grep "resumed from" "$R/half2.out"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$CS" ]; then
    log "compute-sanitizer memcheck, 2 steps"
    rn 120 "$CS" --tool memcheck --leak-check no "$W/bin/tiny_bf16" --data "$D" --steps 2 > "$R/memcheck.txt" 2>&1
    tail -1 "$R/memcheck.txt"
fi
log "GPT-2 124M, ours and PyTorch's"
rn 150 "$W/bin/gpt2" --data "$W/data/gpt2.bin" --log "$R/gpt2.jsonl" > "$R/gpt2.out" 2>&1; echo "rc=$?"
python3 - "$R/gpt2.jsonl" > "$R/bench.txt" << 'PYEOF'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
r = [x for x in r if x["step"] > 5] or r
t = sorted(x["tokens_per_s"] for x in r); m = sorted(x["mfu"] for x in r)
print("ours  %.0f tokens/s, MFU %.1f%%" % (t[len(t) // 2], 100 * m[len(m) // 2]))
PYEOF
PYTHONUNBUFFERED=1 timeout 240 python3 "$W/data/bench_torch_gpt2.py" 16 1024 20 50304 "$W/data/gpt2.bin" \
    > "$R/torch.txt" 2>&1 && tail -1 "$R/torch.txt" | awk '{printf "torch %.0f tokens/s, MFU %.1f%%\n", $3, 100 * $5}' >> "$R/bench.txt"
python3 - "$R/bench.txt" >> "$R/bench.txt" << 'PYEOF'
import sys
v = [float(l.split()[1]) for l in open(sys.argv[1]) if l.split()[0] in ("ours", "torch")]
if len(v) == 2: print("ratio ours / torch: %.2fx" % (v[0] / v[1]))
PYEOF
cat "$R/bench.txt"
log "kernel micro-bench"
rn 60 "$W/bin/bench_kernels_cuda" 20 > "$R/bench_kernels.txt" 2>&1; echo "rc=$?"
log "shardrt_calibrate_cuda compute (the GPU grid)"
rn 240 "$W/bin/shardrt_calibrate_cuda" compute --out "$R/calibrate.json" > "$R/calibrate.out" 2>&1; echo "rc=$?"
RUNEOF
chmod +x "$OUT/run.sh"
echo "wrote $OUT: bundle.tgz ($(du -h "$OUT/bundle.tgz" | cut -f1)), run.sh, ref/ (the CPU backend's logs)"
echo "on the GPU machine: bash $OUT/run.sh RESULTS_DIR; then here: tests/gpu/bundle.sh --check $OUT RESULTS_DIR"
