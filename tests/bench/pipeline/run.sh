#!/bin/sh
# [P=2] run.sh [BUILD_DIR] — the pipeline benchmark of issue 6 (on request; not part
# of `make test`): p = 4 stages, m = 8 microbatches on the CPU backend, under
# gpipe, 1f1b and interleaved (v = 2).  The model: tiny-gpt at 8 layers, hidden
# 128, two sequences of 64 bytes per microbatch, fp32, one dp rank.  For each
# schedule the trainer runs STEPS steps with --trace; bubble.py measures, per
# stage, the compute stream's idle time over the step (steps after the first),
# and it is set against the planner's simulated idle time of that stage
# (`shardc plan`: the schedule summary) and the formula (p-1)/m (/v).  Both
# fractions are printed: idle/step, and idle/compute (the formula's measure).
# Four ranks on fewer than four cores share them (MPI's waiting ranks poll), so
# there the measured idle is high: run it where nproc >= 4 for a fair number.
# The CPU backend posts sends and receives non-blocking and completes them
# lazily (docs/runtime-api.md, streams), as a GPU's pp stream would: a stage
# waits only where an op needs a transfer.  Before that, every send settled at
# the event recorded after it, i.e. waited for the peer to take the message,
# and the interleaved schedule (the most transfers) measured ~3x the planner's
# bubble.  The machine's other load shows up as idle: compare runs made
# back to back, and take the least idle of a few.
set -eu
cd "$(dirname "$0")/../../.."
B=${1:-build}
STEPS=${STEPS:-5}
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
P=${P:-4} M=8   # P=2 fits a 2-core machine
MODEL="-D parallel.pp=$P -D parallel.dp=1 -D zero.stage=0 -D model.layers=8 -D model.hidden=128 -D train.micro_batch=2
       -D train.global_batch=16 -D cluster.gpus_per_node=$P"
echo "pipeline bubble, p = $P, m = $M, CPU backend, $(nproc --all) cores (idle/step | idle/compute)"
printf '%-12s %5s | %-15s | %-15s | %s\n' schedule stage "measured" "planner" "formula (p-1)/m/v (idle/compute)"
for sch in gpipe 1f1b interleaved; do
    v=1
    extra=""
    if [ "$sch" = interleaved ]; then v=2; extra="-D parallel.virtual_stages=2"; fi
    # shellcheck disable=SC2086
    "$B/shardc" build specs/tiny-gpt.tspec -o "$tmp/t" $MODEL -D parallel.schedule=$sch $extra > /dev/null
    # shellcheck disable=SC2086
    "$B/shardc" plan specs/tiny-gpt.tspec $MODEL -D parallel.schedule=$sch $extra > "$tmp/plan.txt"
    mpirun -np $P --oversubscribe --bind-to none "$tmp/t" --data examples/data/tinyshakespeare.txt --steps "$STEPS" \
        --trace "$tmp/tr.json" > /dev/null
    /usr/bin/python3 tests/bench/pipeline/bubble.py "$tmp/tr" $P 1 > "$tmp/m.txt"
    # the planner: per class idle seconds and idle / ideal compute, and the predicted step
    step=$(awk '$1 == "step" && $3 == "s" { print $2 }' "$tmp/plan.txt")
    sed -n '/^schedule summary/,/^$/p' "$tmp/plan.txt" | awk '$1 ~ /^[0-9]+$/ { print $2, $(NF-1), $NF }' > "$tmp/p.txt"
    awk -v sch="$sch" -v step="$step" -v p=$P -v m=$M -v v=$v '
        FNR == NR { idle[$1] = $2; bub[$1] = $3; next }
        { printf "%-12s %5d | %6.1f%% %6.1f%% | %6.1f%% %6.1f%% | %6.1f%%\n", sch, $1, 100 * $2, 100 * $3,
                  100 * idle[$1] / step, bub[$1], 100 * (p - 1) / m / v }' "$tmp/p.txt" "$tmp/m.txt"
done
