#!/usr/bin/env bash
# Golden plans: `shardc plan SPEC --json` for every spec in specs/, compared with
# tests/golden/plans/NAME.json; every rank class's arena must be within 10% of
# its live-bytes lower bound, and the text report must end in a verdict.
# Usage: plans.test.sh SHARDC [BUILD_DIR]     REGEN=1 rewrites the goldens (review with git diff).
set -u
shardc=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
gold=$root/tests/golden/plans
cd "$root" || exit 1
shopt -s nullglob
specs=(specs/*.tspec)
if [ ${#specs[@]} -eq 0 ]; then echo "no specs in specs/"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# max_ratio FILE: the largest arena_ratio of a plan
max_ratio() {
  if command -v jq >/dev/null; then jq '[.rank_classes[].arena_ratio] | max' "$1"
  else python3 -c 'import json,sys; print(max(c["arena_ratio"] for c in json.load(open(sys.argv[1]))["rank_classes"]))' "$1"; fi
}

fail=0
for spec in "${specs[@]}"; do
  name=$(basename "$spec" .tspec)
  json=$tmp/$name.json
  "$shardc" plan "$spec" --json "$json" >"$tmp/$name.txt" 2>&1
  rc=$?
  if [ $rc -ne 0 ] || [ ! -s "$json" ]; then
    echo "FAIL $name: shardc plan exited $rc"; cat "$tmp/$name.txt"; fail=1; continue
  fi
  grep -q '^verdict: ' "$tmp/$name.txt" || { echo "FAIL $name: no verdict in the report"; fail=1; }
  ratio=$(max_ratio "$json")
  if ! awk -v r="$ratio" 'BEGIN { exit !(r <= 1.10) }'; then
    echo "FAIL $name: arena is $ratio x the lower bound (limit 1.10)"; fail=1
  fi
  if [ "${REGEN:-0}" = 1 ]; then
    cp "$json" "$gold/$name.json"
  elif [ ! -f "$gold/$name.json" ]; then
    echo "FAIL $name: no golden $gold/$name.json (regenerate with REGEN=1 $0 $shardc)"; fail=1
  elif ! diff -u "$gold/$name.json" "$json"; then
    echo "FAIL $name: plan differs from the golden (regenerate with REGEN=1 $0 $shardc)"; fail=1
  else
    echo "ok   $name (arena ratio $ratio)"
  fi
done
if [ "${REGEN:-0}" = 1 ]; then echo "regenerated ${#specs[@]} golden plans in $gold"; fi

# The command line: a plan that does not fit is an answer (exit 0) with fixes;
# --rank lists buffers; bad options are usage errors (exit 2).
spec=specs/llama2-7b.tspec
if [ -f "$spec" ]; then
  big=(-D zero.stage=0 -D train.micro_batch=8 -D train.grad_accum=1 -D train.global_batch=256)
  "$shardc" plan "$spec" "${big[@]}" >"$tmp/nofit.txt" 2>&1
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q '^verdict: DOES NOT FIT' "$tmp/nofit.txt" || ! grep -q '^  FITS ' "$tmp/nofit.txt"; then
    echo "FAIL cli: a plan that does not fit must exit 0 with the verdict and a fix that fits (exit $rc)"
    cat "$tmp/nofit.txt"; fail=1
  else
    echo "ok   cli: does not fit, exit 0, $(grep -c '^  FITS ' "$tmp/nofit.txt") fitting fix(es)"
  fi
  "$shardc" plan "$spec" --rank 31 >"$tmp/rank.txt" 2>&1
  if [ $? -ne 0 ] || ! grep -q '^rank 31: tp index 0, dp index 31, stage 0' "$tmp/rank.txt" ||
     ! grep -q ' persistent  *params  *params.shard$' "$tmp/rank.txt"; then
    echo "FAIL cli: --rank 31"; cat "$tmp/rank.txt"; fail=1
  fi
  for bad in "--rank 32" "--bogus" "--json"; do
    # shellcheck disable=SC2086
    "$shardc" plan "$spec" $bad >/dev/null 2>&1
    rc=$?
    [ $rc -eq 2 ] || { echo "FAIL cli: 'plan $bad' exited $rc, want 2"; fail=1; }
  done
fi
exit $fail
