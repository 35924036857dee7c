#!/usr/bin/env bash
# Round trip: `shardc check` prints every spec in specs/ in canonical form; that
# output, checked again, must print the same text (the first line, which names
# the source file, aside).  Also under a few -D overrides, which reach the keys
# of enum blocks (offload, loss scaling, the lr schedule).
# Usage: roundtrip.test.sh SHARDC BUILD_DIR      (run from the repository root)
set -u
shardc=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
overrides=(
  ""
  '-D zero.stage=3 -D offload.optimizer=cpu -D precision.dtype=fp16'
  '-D zero.stage=3 -D offload.params=nvme{path=\"/nvme\"} -D train.lr_schedule=linear -D checkpointing.activations=full'
)
n=0
for spec in specs/*.tspec; do
  for ov in "${overrides[@]}"; do
    eval "args=($ov)"     # the sets are shell words: quotes inside them survive
    name=$(basename "$spec" .tspec)
    if ! "$shardc" check "$spec" "${args[@]}" > "$tmp/$name.1.tspec" 2> "$tmp/err"; then
      echo "FAIL $spec $ov: does not check"; cat "$tmp/err"; fail=1; continue
    fi
    if ! "$shardc" check "$tmp/$name.1.tspec" > "$tmp/$name.2.tspec" 2> "$tmp/err"; then
      echo "FAIL $spec $ov: its canonical form does not check"; cat "$tmp/err"; fail=1; continue
    fi
    if ! diff -u <(tail -n +2 "$tmp/$name.1.tspec") <(tail -n +2 "$tmp/$name.2.tspec"); then
      echo "FAIL $spec $ov: the canonical form changes when checked again"; fail=1; continue
    fi
    n=$((n + 1))
  done
done
[ "$n" -gt 0 ] || { echo "FAIL: no specs in specs/"; exit 1; }
[ "$fail" = 0 ] && echo "ok: $n round trips"
exit $fail
