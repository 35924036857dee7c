#!/usr/bin/env bash
# Trains every layout of tests/bench/codegen/layouts.txt for a few steps on the
# CPU backend and keeps each run's log, so that two builds of shardc can be
# compared: a change to the compiler that must not change the arithmetic
# (the schedule's IR, the memory layout, the form of the generated C) must
# give the same losses bit for bit.
#   losses.sh SHARDC OUT_DIR          train; OUT_DIR/NAME.jsonl per layout
#   losses.sh --compare DIR_A DIR_B   every step's loss, lr, gradient norm,
#                                     loss scale and validation loss equal as
#                                     text (the %.17g the trainer logs)
# STEPS (default 3) steps, validation (on the training text) every 2; LAYOUTS=FILE for another list;
# ONLY=REGEX trains the names matching it.  Needs mpirun, mpicc, the CPU runtime.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)

if [ "${1:-}" = --compare ]; then
    a=${2:?usage: $0 --compare DIR_A DIR_B} b=${3:?usage: $0 --compare DIR_A DIR_B}
    n=0 same=0 bad=0
    for f in "$a"/*.jsonl; do
        name=$(basename "$f" .jsonl)
        n=$((n + 1))
        if [ ! -f "$b/$name.jsonl" ]; then echo "MISSING: $name in $b"; bad=$((bad + 1)); continue; fi
        # the numbers of the arithmetic, without the timings and the arena size
        pick() { grep -o '"\(step\|loss\|lr\|grad_norm\|loss_scale\|skipped\|val_loss\)":[^,}]*' "$1"; }
        if [ -n "$(pick "$f")" ] && cmp -s <(pick "$f") <(pick "$b/$name.jsonl"); then
            same=$((same + 1))
        else
            echo "DIFFER: $name"
            diff <(pick "$f") <(pick "$b/$name.jsonl") | head -6
            bad=$((bad + 1))
        fi
    done
    echo "$n runs: $same bit-identical, $bad not"
    [ "$bad" = 0 ]
    exit
fi

shardc=${1:?usage: $0 SHARDC OUT_DIR | --compare DIR_A DIR_B}
out=${2:?usage: $0 SHARDC OUT_DIR}
shardc=$(cd "$(dirname "$shardc")" && pwd)/$(basename "$shardc")
mkdir -p "$out"
out=$(cd "$out" && pwd)
layouts=${LAYOUTS:-$here/layouts.txt}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_mpi_yield_when_idle=1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
NVME=$T/nvme
mkdir -p "$NVME"
cd "$root" || exit 1
fail=0 n=0
while read -r name rest; do
    case "$name" in ''|'#'*) continue ;; esac
    [ -n "${ONLY:-}" ] && ! [[ $name =~ $ONLY ]] && continue
    rest=${rest//\$NVME/$NVME}
    eval "args=($rest)"     # the file's quoting
    n=$((n + 1))
    if ! "$shardc" plan "${args[@]}" -D data.format=text --json "$T/plan.json" > /dev/null 2> "$T/err" ||
       ! "$shardc" build "${args[@]}" -D data.format=text -o "$T/trainer" > /dev/null 2>> "$T/err"; then
        echo "FAIL: $name does not build"; tail -3 "$T/err"; fail=1; continue
    fi
    world=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["layout"]["world"])' "$T/plan.json")
    rm -f "$out/$name.jsonl"
    if ! timeout 300 mpirun --oversubscribe -np "$world" "$T/trainer" --data examples/data/tinyshakespeare.txt \
         --val examples/data/tinyshakespeare.txt \
         --steps "${STEPS:-3}" --eval-every 2 --log "$out/$name.jsonl" < /dev/null > "$T/out" 2>&1; then
        echo "FAIL: $name does not train"; tail -3 "$T/out"; fail=1; continue
    fi
    echo "ok: $name ($world ranks)"
done < "$layouts"
echo "$n layouts trained into $out"
exit "$fail"
