#!/usr/bin/env bash
# layout_sweep.sh SHARDC BUILD_DIR [N] [SEED] — on request (not in make test):
# the promise that every parallel layout trains the same model to the same
# losses, checked on N (default 24) layouts drawn at random (SEED, default 1)
# from everything the CPU trainer combines: GPT (tied or not) or Llama (1, 2
# or 4 kv heads) at 4, 6 or 8 layers, tp 1/2/4 (sequence parallelism,
# `tp_comm_overlap` and its chunks, pp scatter/gather, partitioned
# checkpoints), pp 1/2/4 (1f1b and GPipe, evenly or with uneven
# `stage_layers`, and interleaved with 2 or 4 virtual stages where the layers
# divide), dp 1/2/4/8, the rank order, ZeRO 0-3 with its
# buckets, prefetch, live-parameter and reuse limits, persistence and
# gather-across-microbatches, optimizer offload to the host or NVMe (all or
# part of it) and parameter offload, full (every 1 or 2, on the host or not)
# and selective checkpointing, fp32 or bf16, and the micro-batch, with the
# global batch fixed at 16 sequences.  Each layout is built, trained 4 steps
# (race checker on) and exported, and its every step's loss and gradient norm,
# its final weights and its arenas compared with the same model's one-rank run
# of the same precision: fp32 within 1e-5 (AdamW eps 1e-6, as
# train_sp3d.test.sh says why), bf16 within 2e-3 (losses) and 1e-2 (weights),
# as train_equivalence.test.sh.  A layout the checker refuses (`shardc plan`
# exits 1 with a diagnostic) is counted and skipped; any other failure fails
# the sweep.  Prints each layout's -D options, so that a failure is one
# command to rerun.
set -u
. "$(dirname "$0")/train_lib.sh"
N=${3:-24}
SEED=${4:-1}
fail=0
COMMON=(-D train.optimizer.eps=1e-6)
# model_of MODEL: its spec (MSPEC) and its own keys (MDEFS); MODEL is a name
# below and its layer count, as gpt-untied.6
model_of() {
    case ${1%.*} in
    gpt) MSPEC=specs/tiny-gpt.tspec MDEFS=() ;;
    gpt-untied) MSPEC=specs/tiny-gpt.tspec MDEFS=(-D model.tie_embeddings=off) ;;
    llama) MSPEC=specs/tiny-llama.tspec MDEFS=() ;;
    llama-kv4) MSPEC=specs/tiny-llama.tspec MDEFS=(-D model.kv_heads=4) ;;
    llama-kv1) MSPEC=specs/tiny-llama.tspec MDEFS=(-D model.kv_heads=1) ;;
    esac
    MDEFS+=(-D model.layers="${1##*.}")
}
# ref MODEL DTYPE: that model's one-rank run in that precision, trained once
ref() {
    [ -f "$T/$1-$2-ref.safetensors" ] && return 0
    model_of "$1"
    train_3d "$1-$2-ref" "$MSPEC" 1 1 1 "${COMMON[@]}" "${MDEFS[@]}" -D precision.dtype="$2" -D zero.stage=0 \
        -D train.micro_batch=4
}
# One layout a line: MODEL DTYPE RANKS -D key=value ...
"$PY" - "$N" "$SEED" > "$T/layouts.txt" <<'EOF'
import random, sys
n, seed = int(sys.argv[1]), int(sys.argv[2])
r = random.Random(seed)
c = r.choice
for _ in range(n):
    model = c(["gpt", "gpt", "gpt-untied", "llama", "llama", "llama-kv4", "llama-kv1"])
    layers = c([4, 4, 6, 8])
    dtype = "bf16" if r.random() < 0.2 else "fp32"
    while True:     # at most 8 ranks
        tp, pp, dp = c([1, 2, 4]), c([1, 2, 4]), c([1, 2, 2, 4, 8])
        if tp * pp * dp <= 8:
            break
    d = {"parallel.tp": tp, "parallel.pp": pp, "parallel.dp": dp,
         "parallel.rank_order": c(["tp_dp_pp", "tp_pp_dp"])}
    if tp > 1:
        d["parallel.sequence_parallel"] = c(["on", "off"])
        d["parallel.tp_comm_overlap"] = c(["none", "wgrad", "full"])
        if d["parallel.tp_comm_overlap"] == "full":
            d["parallel.tp_overlap_chunks"] = c([2, 4])
    if pp > 1:
        vs = [v for v in (2, 4) if layers % (pp * v) == 0]
        s = c(["1f1b", "gpipe"] + (["interleaved"] if vs else []))
        d["parallel.schedule"] = s
        if s == "interleaved":
            d["parallel.virtual_stages"] = c(vs)
        elif r.random() < 0.3:  # an uneven split: pp stages of at least one layer each
            cuts = sorted(r.sample(range(1, layers), pp - 1))
            d["parallel.stage_layers"] = "[" + ",".join(str(b - a) for a, b in zip([0] + cuts, cuts + [layers])) + "]"
        if tp > 1 and d.get("parallel.sequence_parallel") == "off":
            d["parallel.pp_scatter_gather"] = c(["on", "off"])
    z = c([0, 1, 2, 3])
    d["zero.stage"] = z
    d["zero.overlap_comm"] = c(["on", "off"])
    d["zero.reduce_bucket"] = c(["1e3", "5e4", "1e12"])
    if z in (1, 2):
        d["zero.overlap_param_gather"] = c(["on", "off"])
    if z == 3:
        d["zero.prefetch_bucket"] = c(["1e3", "5e4", "5e7"])
        d["zero.max_live_parameters"] = c(["1e4", "1e5", "1e9"])
        d["zero.max_reuse_distance"] = c(["0", "1e5", "1e9"])
        d["zero.param_persistence_threshold"] = c(["0", "1e3", "1e5"])
        if pp > 1:
            d["zero.gather_across_microbatches"] = c(["on", "off"])
    if z >= 1 and r.random() < 0.3:
        dev = c(["cpu", "cpu", "nvme"])
        d["offload.optimizer"] = dev
        if dev == "nvme":
            d["offload.optimizer.path"] = "NVME"
        if z == 3 and r.random() < 0.3:
            d["offload.optimizer.ratio"] = 0.5
        if z == 3 and r.random() < 0.5:
            d["offload.params"] = "cpu"
    k = c(["none", "full", "selective"])
    d["checkpointing.activations"] = k
    if k == "full":
        d["checkpointing.every"] = c([1, 2])
        d["checkpointing.cpu"] = c(["on", "off"])
    if k != "none" and tp > 1 and r.random() < 0.3:
        d["checkpointing.partition_activations"] = "on"
    d["train.micro_batch"] = c([m for m in (1, 2, 4, 8) if 16 % (m * dp) == 0])
    d["precision.dtype"] = dtype
    print(f"{model}.{layers}", dtype, tp * pp * dp, " ".join(f"-D {k}={v}" for k, v in d.items()))
EOF
mkdir -p "$T/nvme"
i=0 ran=0 refused=0
while read -r model dtype np defs <&3; do    # (fd 3: mpirun reads stdin)
    i=$((i + 1))
    name=$model-$i
    # shellcheck disable=SC2086  # defs is a list of -D options (NVME: a folder of $T)
    set -f; set -- ${defs//=NVME/=\"$T/nvme\"}; set +f   # (stage_layers' [..] is no pattern)
    echo "layout $i: $model, $dtype, on $np ranks: $defs"
    model_of "$model"
    "$SHARDC" plan "$MSPEC" "${COMMON[@]}" "${MDEFS[@]}" -D cluster.gpus_per_node="$np" "$@" > "$T/$name.plan" 2>&1
    rc=$?
    if [ "$rc" = 1 ]; then
        echo "  refused by the checker: $(grep -m1 error "$T/$name.plan")"
        refused=$((refused + 1))
        continue
    elif [ "$rc" != 0 ]; then
        echo "FAIL: $name: shardc plan exited $rc:"
        tail -20 "$T/$name.plan"
        fail=1
        continue
    fi
    ref "$model" "$dtype" || { echo "FAIL: the $model $dtype reference did not train"; exit 1; }
    model_of "$model"
    train_layout "$name" "$MSPEC" "$np" "${COMMON[@]}" "${MDEFS[@]}" "$@" || continue
    if [ "$dtype" = bf16 ]; then
        train_check "$model-$dtype-ref" "$name" 2e-3 1e-2 "$name"
    else
        train_check "$model-$dtype-ref" "$name" 1e-5 1e-5 "$name"
    fi
    train_arenas "$name"
    ran=$((ran + 1))
done 3< "$T/layouts.txt"
echo "$ran layouts trained and compared, $refused refused by the checker, of $N (seed $SEED)"
[ "$fail" = 0 ] && echo PASS
exit "$fail"
