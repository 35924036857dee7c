#!/bin/sh
# run.sh — do ranks that share their cores in time progress as processor
# sharing says?  (Run on request; not part of `make test`.)  The CPU cost
# model prices ranks that oversubscribe a node's cores (W ranks of t threads,
# W·t > cores) by processor sharing: a rank that waits — a pipeline's bubble,
# a late peer — costs no core time, and the busy ranks share the cores
# (compiler/cost.c, cost_shared_step; docs/cost-model.md, "the waits' yield
# phase").  sharing.c measures it without a trainer: four patterns of pure
# compute (no memory traffic) and waits exactly as the runtime waits (yield,
# then nap), each launched REPS times under mpirun --oversubscribe --bind-to
# none as the README launches trainers, at W = 2·cores and 4·cores ranks (the
# groups of four at 4·cores only) and X = 1 and 3 ms of compute between the
# waits.  Prints each launch's ratio of
# the wall time to processor sharing's prediction and, per case, the
# smallest, median and largest: 1.0 is processor sharing; 2.0 is two busy
# ranks that never leave one core while waiting ranks hold the other.
set -eu
cd "$(dirname "$0")"
REPS=${REPS:-5}
ITERS=${ITERS:-60}
cores=$(nproc)
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
mpicc -O2 -Wall -Wextra -o "$tmp/sharing" sharing.c
echo "sharing benchmark: $cores cores, $REPS launches a case, $ITERS iterations a launch"
for W in $((2 * cores)) $((4 * cores)); do
    for case in lockstep turns turns4 idle; do
        for x in 1 3; do
            if [ "$case" = turns4 ] && [ $((W % 4)) -ne 0 -o "$W" -lt $((4 * cores)) ]; then continue; fi
            : > "$tmp/r"
            i=0
            while [ $i -lt "$REPS" ]; do
                mpirun --oversubscribe --bind-to none -np "$W" "$tmp/sharing" "$case" "$x" "$ITERS" | tee -a "$tmp/r"
                i=$((i + 1))
            done
            awk '{ print $NF }' "$tmp/r" | sort -n | awk -v c="$case" -v w="$W" -v x="$x" '{ r[NR] = $1 } END {
                printf "  => %-9s %2d ranks X %d ms: ratio min %.3f median %.3f max %.3f\n", c, w, x, r[1], r[int((NR + 1) / 2)], r[NR] }'
        done
    done
done
