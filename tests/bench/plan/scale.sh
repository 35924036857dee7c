#!/usr/bin/env bash
# Plan time and memory at scale: `shardc plan` of every spec in specs/ and of
# the published rows issue 15 names (Narayanan SC21 Table 1's 1008B row,
# Table 2's 175B and 530B PTD-P rows, as tests/bench/costmodel/calib.h writes
# them), each with the step planned from a few microbatches (compiler/period.c,
# the default) and with the whole step (SHARDC_EXPANDED=1), by /usr/bin/time:
# wall seconds and peak memory.  The target: under 1 s and 300 MB each.
# Usage: tests/bench/plan/scale.sh [SHARDC]        (default: build/shardc)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
shardc=${1:-$root/build/shardc}
[ -x /usr/bin/time ] || { echo "scale.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 77; }
# the argument is the binary, not the build directory: a wrong one used to print rows of 0.00 s
[ -f "$shardc" ] && [ -x "$shardc" ] || { echo "scale.sh: $shardc is not the shardc binary (usage: $0 [build/shardc])" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# row NAME L H A TP PP GPUS B: a PTD-P row as calib.h's cal_spec writes it
row() {
  cat >"$tmp/$1.tspec" <<SPEC
model gpt { layers = $2  hidden = $3  heads = $4  vocab = 51200  seq_len = 2048 }
parallel { tp = $5  pp = $6  dp = $(( $7 / ($5 * $6) ))  sequence_parallel = on  schedule = 1f1b  tp_comm_overlap = none }
zero { stage = 0  reduce_bucket = 1e12 }
precision { dtype = fp16  master_weights = fp32  grad_reduce = fp32 }
checkpointing { activations = full }
train { global_batch = $8  micro_batch = 1 }
cluster { nodes = $(( $7 / 8 ))  gpus_per_node = 8  gpu = a100_80gb  network = ib200 }
SPEC
  echo "$tmp/$1.tspec"
}

# measure SPEC: "seconds MB" of one plan
measure() {
  if ! /usr/bin/time -f '%e %M' -o "$tmp/time" "$shardc" plan "$@" >/dev/null; then
    echo "scale.sh: $shardc plan $* failed" >&2
    exit 1      # the row's $(...) fails, and with it the script (set -e)
  fi
  awk '{ printf "%6.2f s %6.0f MB", $1, $2 / 1024 }' "$tmp/time"
}

specs=("$root"/specs/*.tspec
       "$(row t1-1008b 128 25600 160 8 64 3072 3072)"
       "$(row t2-175b-dp4 96 12288 96 8 12 384 1536)"
       "$(row t2-175b-dp8 96 12288 96 8 12 768 1536)"
       "$(row t2-175b-dp16 96 12288 96 8 12 1536 1536)"
       "$(row t2-530b-dp2 105 20480 128 8 35 560 2240)"
       "$(row t2-530b-dp4 105 20480 128 8 35 1120 2240)"
       "$(row t2-530b-dp8 105 20480 128 8 35 2240 2240)")
printf '%-28s %20s %20s\n' spec "few microbatches" "whole step"
for spec in "${specs[@]}"; do
  fast=$(measure "$spec")
  whole=$(SHARDC_EXPANDED=1 measure "$spec")
  printf '%-28s %20s %20s\n' "$(basename "$spec" .tspec)" "$fast" "$whole"
done
