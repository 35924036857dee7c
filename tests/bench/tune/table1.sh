#!/bin/bash
# table1.sh [BUILD_DIR] [ROW...] — shardc tune against Megatron-LM's choices: for each
# row of Narayanan et al. (SC21) Table 1 (model, GPU count and global batch as
# published), tune's best layout and its predicted TFLOP/s per GPU beside the
# prediction for the published layout, both by the one cost model.  ROW: the
# parameter labels to run (default: all ten, e.g. `table1.sh build 1.7 18.4`).
#
# Both sides share the calibration's assumptions (tests/bench/costmodel/calib.h,
# docs/cost-model.md): A100 80GB, 8 per node, ib200, GPT with vocabulary 51 200 and
# context 2048, fp16 with fp32 gradient reduction.  The published layout is the
# paper's tp and pp, dp the rest, ZeRO 0, full recompute, micro-batch 1, sequence
# parallelism where tp > 1, 1F1B.  Tune searches tp, pp, the schedule (and virtual
# stages), sequence parallelism, the ZeRO stage, the micro-batch and the
# checkpointing policy; the published layout is one of its candidates, so its choice
# is predicted at least as fast (the script checks it).  TFLOP/s are counted as the
# paper counts them, 96·B·s·l·h²·(1 + s/6h + V/16lh) per step (full recompute's
# FLOPs, whatever the layout), over the step time and the GPUs.
# Exit 1 if a choice is predicted slower than the published layout.
set -u
cd "$(dirname "$0")/../../.."
build=${1:-build}
shift || true
SHARDC=$build/shardc
[ -x "$SHARDC" ] || { echo "table1.sh: no $SHARDC (build first: make build)" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM
# label heads hidden layers tp pp gpus batch published-TFLOP/s
rows="1.7 24 2304 24 1 1 32 512 137
3.6 32 3072 30 2 1 64 512 138
7.5 32 4096 36 4 1 128 512 142
18.4 48 6144 40 8 1 256 1024 135
39.1 64 8192 48 8 2 512 1536 138
76.1 80 10240 60 8 4 1024 1792 140
145.6 96 12288 80 8 8 1536 2304 148
310.1 128 16384 96 8 16 1920 2160 155
529.6 128 20480 105 8 35 2520 2520 163
1008.0 160 25600 128 8 64 3072 3072 163"
want=" $* "
printf '%-7s %5s %9s | %-34s %8s | %-50s %8s %6s %6s\n' params GPUs batch "published layout" "TFLOP/s" "tune's choice" "TFLOP/s" "gain" "secs"
fail=0
while read -r label a h l tp pp gpus B pub; do
    [ "$want" = "  " ] || [[ "$want" == *" $label "* ]] || continue
    common="model gpt { layers = $l  hidden = $h  heads = $a  vocab = 51200  seq_len = 2048 }
precision { dtype = fp16  master_weights = fp32  grad_reduce = fp32 }
cluster { nodes = $((gpus / 8))  gpus_per_node = 8  gpu = a100_80gb  network = ib200 }"
    sp=off; [ "$tp" -gt 1 ] && sp=on
    # the published layout, as a one-layout search (zero.stage = (0)) so that tune prices it
    cat > "$T/pub.tspec" <<SPEC
$common
parallel { tp = $tp  pp = $pp  sequence_parallel = $sp  schedule = 1f1b }
zero { stage = (0)  reduce_bucket = 1e12 }
checkpointing { activations = full }
train { global_batch = $B  micro_batch = 1 }
SPEC
    cat > "$T/open.tspec" <<SPEC
$common
parallel { tp = auto  pp = auto  schedule = auto  virtual_stages = auto  sequence_parallel = auto }
zero { stage = auto  reduce_bucket = 1e12 }
checkpointing { activations = auto }
train { global_batch = $B  micro_batch = auto }
SPEC
    "$SHARDC" tune "$T/pub.tspec" --quiet --top 1 --json "$T/pub.json" > /dev/null 2> "$T/err" || { echo "$label: the published layout: $(cat "$T/err")"; fail=1; continue; }
    t0=$(date +%s.%N)
    "$SHARDC" tune "$T/open.tspec" --quiet --top 1 --json "$T/open.json" > /dev/null 2> "$T/err" || { echo "$label: tune: $(cat "$T/err")"; fail=1; continue; }
    t1=$(date +%s.%N)
    python3 - "$T/pub.json" "$T/open.json" "$label" "$a" "$h" "$l" "$gpus" "$B" "$pub" "$t0" "$t1" <<'PY' || fail=1
import json, sys
pubj, openj = (json.load(open(f)) for f in sys.argv[1:3])
label, (a, h, l, gpus, B), published, t0, t1 = sys.argv[3], map(int, sys.argv[4:9]), float(sys.argv[9]), float(sys.argv[10]), float(sys.argv[11])
s, V = 2048, 51200
flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
def lay(r):
    x = r["layout"]
    sched = x["schedule"] + (f"/{x['virtual_stages']}" if x["schedule"] == "interleaved" else "")
    ck = x["checkpointing"] + (f"/{x['checkpointing_every']}" if x["checkpointing"] == "full" and x["checkpointing_every"] > 1 else "")
    return f"tp{x['tp']} pp{x['pp']} dp{x['dp']} {sched} {'sp ' if x['sequence_parallel'] else ''}z{x['zero_stage']} mb{x['micro_batch']} {ck}"
p, o = pubj["ranked"][0], openj["ranked"][0]
tp, to = flops / p["step_time_s"] / gpus / 1e12, flops / o["step_time_s"] / gpus / 1e12
print(f"{label:<7} {gpus:5d} {B:9d} | {lay(p):<34} {tp:8.1f} | {lay(o):<50} {to:8.1f} {100 * (to / tp - 1):5.1f}% {t1 - t0:6.1f}")
sys.exit(0 if o["step_time_s"] <= p["step_time_s"] else 1)
PY
done <<< "$rows"
exit $fail
