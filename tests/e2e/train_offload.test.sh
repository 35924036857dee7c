#!/usr/bin/env bash
# Offload (issue 6): tiny GPT, dp 2 ZeRO-3, two microbatches (gradient
# accumulation), 4 steps, the race checker on.  Against the same layout without
# offload: the optimizer on the host, on NVMe (a temporary folder as the spec's
# offload path; several pipelined sub-groups; the spec's aio block size and queue
# depth), the parameters on the host and on NVMe (with the optimizer on NVMe),
# a partial offload (ratio 0.5: half of each rank's shard stepped on the device),
# dp 1 with the parameters on the host and on NVMe (losses bit for bit, weights
# equal: the persistent parameters must reach the device),
# bf16 with all three, and pp 2 · dp 2 with all three — every step's loss within
# 1e-5 relative (bit for bit is expected; the worst difference is printed) and
# the exported weights within 1e-5; with the parameters offloaded the validation
# losses (every 2 steps) too, bit for bit; bf16 at bf16 tolerance (losses 1e-4, weights
# 1e-2, gradient norms 2e-3 as in train_bf16_3d): the host accumulates the microbatches'
# bf16 gradients in fp32 (as DeepSpeed's CPU optimizer does), the device in bf16.  Then checkpoints across offload: 2 steps
# with the optimizer on NVMe resumed without offload; 2 steps without resumed
# with a partial offload, and with the parameters and the optimizer on NVMe:
# steps 3-4 equal the reference's.  The test prints which path the NVMe swap
# file took, and requires O_DIRECT with io_uring where they are to be had: the
# kernel has io_uring (a probe built against liburing sets up a ring) and the
# folder takes O_DIRECT (dd oflag=direct); otherwise it says which of the
# fallbacks ran and why.  About 50 s on 2 cores.
set -u
. "$(dirname "$0")/train_lib.sh"
fail=0
NV="$T/swap"
mkdir -p "$NV"
unset SRT_NVME_DIR
export SRT_NVME_STATS=1
# only the norms and biases persistent: the layers' weights are fetched and gathered per use
PERSIST=(-D zero.param_persistence_threshold=1000)
# evaluation every 2 steps: with the parameters offloaded it fetches them too
BASE=(-D parallel.dp=2 -D zero.stage=3 -D train.micro_batch=2 -D train.eval_every=2 "${PERSIST[@]}")
NVOPT="offload.optimizer=nvme{path=\"$NV\"}"
NVPAR="offload.params=nvme{path=\"$NV\" buffer_count=2 buffer_size=100000}"
# run NAME [-D ...]: dp 2 ZeRO-3 with the -D; train_layout (4 steps, checkpoint, export)
run() { train_layout "$1" specs/tiny-gpt.tspec 2 "${BASE[@]}" "${@:2}"; }
# again NAME STEPS [trainer options]: NAME's trainer once more, STEPS steps (checkpoint, export)
again() { STEPS=$2 train_layout "$1" - 2 -- "${@:3}"; }
run ref || exit 1
run host -D offload.optimizer=cpu && train_check ref host 1e-5 1e-5 "optimizer on the host"
run nvme -D "$NVOPT" -D zero.sub_group_size=20000 -D offload.aio.block_size=65536 -D offload.aio.queue_depth=4 &&
    train_check ref nvme 1e-5 1e-5 "optimizer on NVMe (sub-groups of 20000)"
# what the machine offers: io_uring in the kernel, O_DIRECT in the folder
printf '#include <liburing.h>\nint main(void) { struct io_uring r; if (io_uring_queue_init(4, &r, 0)) return 1; io_uring_queue_exit(&r); return 0; }\n' \
    > "$T/probe.c"
uring=no direct=no
cc "$T/probe.c" -o "$T/probe" -luring 2> /dev/null && "$T/probe" && uring=yes
dd if=/dev/zero of="$NV/probe" bs=4096 count=1 oflag=direct status=none 2> /dev/null && direct=yes
rm -f "$NV/probe"
if grep -q "nvme: path" "$T/nvme.err"; then
    echo "   NVMe swap file: $(grep -m1 -o 'nvme: path.*' "$T/nvme.err") (kernel io_uring: $uring, O_DIRECT in $NV: $direct)"
    if [ $uring = yes ] && [ $direct = yes ] && ! grep -q "nvme: path O_DIRECT + io_uring" "$T/nvme.err"; then
        echo "FAIL: the kernel has io_uring and the folder takes O_DIRECT, but the swap file did not use them"; fail=1
    fi
    # the spec's aio settings reach the runtime
    grep -q "block 65536, queue depth 4" "$T/nvme.err" ||
        { echo "FAIL: the aio block size / queue depth are not the spec's"; fail=1; }
    grep -q "read 0 bytes" "$T/nvme.err" && { echo "FAIL: the NVMe optimizer read nothing"; fail=1; }
else
    echo "FAIL: no NVMe statistics from the trainer"; tail -5 "$T/nvme.err"; fail=1
fi
grep -m1 "refuses O_DIRECT" "$T/nvme.err" | sed 's/^/   /'
# same_val REF RUN LABEL: RUN's validation losses are REF's, as logged (numbers, not null)
same_val() {
    local a b
    a=$(grep -o '"val_loss":[^}]*' "$T/$1.jsonl") b=$(grep -o '"val_loss":[^}]*' "$T/$2.jsonl")
    if [ -n "$a" ] && [ "$a" = "$b" ] && ! grep -q '"val_loss":null' "$T/$2.jsonl"; then
        echo "ok: $3: validation losses bit for bit"
    else
        echo "FAIL: $3: validation losses $(echo $b) against $(echo $a)"
        fail=1
    fi
}
run pcpu -D offload.params=cpu && train_check ref pcpu 1e-5 1e-5 "parameters on the host" &&
    same_val ref pcpu "parameters on the host"
run pnvme -D "$NVPAR" -D "$NVOPT" && train_check ref pnvme 1e-5 1e-5 "parameters and optimizer on NVMe" &&
    same_val ref pnvme "parameters and optimizer on NVMe"
run half -D offload.optimizer=cpu -D offload.optimizer.ratio=0.5 && train_check ref half 1e-5 1e-5 "optimizer ratio 0.5"
run bref -D precision.dtype=bf16 &&
    run bhalf -D precision.dtype=bf16 -D offload.params=cpu -D "$NVOPT" -D offload.optimizer.ratio=0.5 &&
    train_check bref bhalf 1e-4 1e-2 "bf16, parameters on the host, optimizer ratio 0.5 on NVMe" 2e-3
# one dp rank (ZeRO-Infinity on one GPU): each unit fetched from the host or
# NVMe shard, the persistent parameters copied to the device after each step
# one NAME [-D ...]: dp 1 ZeRO-3 with the -D; train_layout (4 steps, checkpoint, export)
one() { train_layout "$1" specs/tiny-gpt.tspec 1 -D parallel.dp=1 -D zero.stage=3 -D train.micro_batch=2 \
            -D train.eval_every=2 "${PERSIST[@]}" "${@:2}"; }
if one ref1; then
    one pcpu1 -D offload.params=cpu && train_same ref1 pcpu1 0 "dp 1, parameters on the host" &&
        same_val ref1 pcpu1 "dp 1, parameters on the host"
    one pnvme1 -D "$NVPAR" -D "$NVOPT" && train_same ref1 pnvme1 0 "dp 1, parameters and optimizer on NVMe" &&
        same_val ref1 pnvme1 "dp 1, parameters and optimizer on NVMe"
fi
# with pipeline parallelism: pp 2 · dp 2 (four ranks), the same offloads
# pp NAME [-D ...]: pp 2 · dp 2 ZeRO-3 with the -D; train_3d (4 steps, checkpoint, export)
pp() { train_3d "$1" specs/tiny-gpt.tspec 1 2 2 -D zero.stage=3 -D train.micro_batch=2 "${PERSIST[@]}" "${@:2}"; }
pp ppref && pp ppoff -D offload.params=cpu -D "$NVOPT" -D offload.optimizer.ratio=0.5 &&
    train_check ppref ppoff 1e-5 1e-5 "pp 2 · dp 2, parameters on the host, optimizer ratio 0.5 on NVMe"
# checkpoints across offload: the first half under one, the second under the
# other (the resumed runs log steps 3-4 only: they are the reference here)
cp "$T/ref.jsonl" "$T/ref4.jsonl"
rm -rf "$T/nvme.ck" "$T/ref.ck" "$T/ref.jsonl"
again nvme 2 && again ref 4 --resume "$T/nvme.ck/step-2" &&
    train_cmp losses "$T/ref.jsonl" "$T/ref4.jsonl" 1e-5 "NVMe-offloaded checkpoint resumed without offload"
rm -rf "$T/ref.ck" "$T/half.ck" "$T/half.jsonl"
again ref 2 && again half 4 --resume "$T/ref.ck/step-2" &&
    train_cmp losses "$T/half.jsonl" "$T/ref4.jsonl" 1e-5 "checkpoint without offload resumed with ratio 0.5"
rm -rf "$T/pnvme.ck" "$T/pnvme.jsonl"
again pnvme 4 --resume "$T/ref.ck/step-2" &&
    train_cmp losses "$T/pnvme.jsonl" "$T/ref4.jsonl" 1e-5 "checkpoint without offload resumed with all on NVMe"
[ "$fail" = 0 ] && echo PASS
exit "$fail"
