#!/usr/bin/env bash
# `shardc plan`'s text report of a step planned from a few microbatches
# (compiler/period.c) is the report of the whole step (SHARDC_EXPANDED=1),
# byte for byte: GPT-3 175B on the interleaved schedule (specs/), and on
# 1F1B over 1536 GPUs with ZeRO-1 and selective checkpointing (Table 2's
# 175B layout).  The report prints the whole step's op count, which the
# few microbatches' plan does not have: the diff fails if it is not
# extrapolated.  tests/unit/test_period.c compares every figure.
# Usage: plan_period.test.sh SHARDC [BUILD_DIR]      (run from the repository root)
set -u
shardc=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {   # NAME ARGS...: the two reports must be equal
  local name=$1; shift
  if ! "$shardc" plan "$@" >"$tmp/$name.fast" 2>&1; then
    echo "FAIL $name: shardc plan exited non-zero"; cat "$tmp/$name.fast"; fail=1; return
  fi
  if ! SHARDC_EXPANDED=1 "$shardc" plan "$@" >"$tmp/$name.whole" 2>&1; then
    echo "FAIL $name: shardc plan (whole step) exited non-zero"; cat "$tmp/$name.whole"; fail=1; return
  fi
  if ! diff -u "$tmp/$name.whole" "$tmp/$name.fast"; then
    echo "FAIL $name: the report from a few microbatches differs from the whole step's"; fail=1
  else
    echo "ok: $name"
  fi
}
check gpt3-175b-interleaved specs/gpt3-175b.tspec
cat >"$tmp/175b-1f1b.tspec" <<'SPEC'
model gpt { layers = 96  hidden = 12288  heads = 96  vocab = 51200  seq_len = 2048 }
parallel { tp = 8  pp = 12  dp = 16  sequence_parallel = on  schedule = 1f1b }
zero { stage = 1 }
precision { dtype = fp16  master_weights = fp32 }
checkpointing { activations = selective }
train { global_batch = 1536  micro_batch = 1 }
cluster { nodes = 192  gpus_per_node = 8  gpu = a100_80gb  network = ib200 }
SPEC
check gpt3-175b-1f1b-zero1-selective "$tmp/175b-1f1b.tspec"
exit $fail
