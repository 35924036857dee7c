#!/bin/sh
# run.sh — does this machine drop the mappings of pages left alone?  (Run on
# request; not part of `make test`.)  shardc calibrate times each benchmark on
# copies of its operands cycled through tens of megabytes; a trainer touches
# its whole arena every step.  On a VM whose hypervisor drops the mapping of a
# page nobody touched for a fraction of a second, the next access costs a
# fault, and a benchmark whose timed calls all came in its first cycle through
# its copies timed those faults instead of its kernel; calibrate now reads
# every page of its arena before each benchmark (docs/cost-model.md, "Every
# page of the arena is read before each benchmark").  pages.c measures it:
# 48 MB written, then IDLE seconds busy elsewhere, then every page read twice;
# REPS launches per idle time; then 18 MB (the fidelity benchmark's gpt-1
# arena) read every P ms, 40 rounds, as a trainer touches its arena every
# step.  On bare metal the two reads cost about the same; on this VM the
# first one costs a fault a page, which the CPU model does not price in a
# trainer's step (docs/cost-model.md, "Limits").
set -eu
cd "$(dirname "$0")"
REPS=${REPS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
cc -O2 -Wall -Wextra -o "$tmp/pages" pages.c
echo "pages benchmark: 48 MB, $REPS launches an idle time"
for idle in 0 0.05 0.2 0.5 2; do
    i=0
    while [ $i -lt "$REPS" ]; do
        "$tmp/pages" 48 "$idle"
        i=$((i + 1))
    done
done
echo "18 MB touched every P ms (a trainer's arena, its step P ms)"
for p in 0.005 0.02 0.045 0.1; do
    "$tmp/pages" 18 "$p" 40
done
