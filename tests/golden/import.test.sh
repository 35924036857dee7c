#!/usr/bin/env bash
# Golden tests of `shardc import deepspeed`.
#
# Each tests/import/NAME.json is a DeepSpeed config; NAME.args holds the rest of
# the command line (--hf, --nodes, ...), paths relative to tests/import/.
#   NAME.expected        stderr, then a line `exit: N` (every case)
#   NAME.expected.tspec  the spec on stdout (the cases that succeed)
# A successful import must also pass `shardc check`; with -o it must write
# exactly what it prints, and a failing import with -o must leave no file.
#
# Usage: import.test.sh SHARDC [BUILD_DIR]      REGEN=1 rewrites the expectations.
set -u
shardc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root/tests/import" || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 n=0

# Reports one failure for case $1 with message $2.
bad() { echo "FAIL $1: $2" >&2; fail=$((fail + 1)); }

for ds in *.json; do
  name=${ds%.json}
  n=$((n + 1))
  args=()
  [ -f "$name.args" ] && read -r -a args < "$name.args"
  timeout 20 "$shardc" import deepspeed "$ds" "${args[@]}" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  { cat "$tmp/err"; echo "exit: $rc"; } >"$tmp/actual"

  if [ "${REGEN:-0}" = 1 ]; then
    cp "$tmp/actual" "$name.expected"
    if [ $rc = 0 ]; then cp "$tmp/out" "$name.expected.tspec"; else rm -f "$name.expected.tspec"; fi
  else
    diff -u "$name.expected" "$tmp/actual" >&2 || bad "$name" "stderr or exit code differ"
    if [ -f "$name.expected.tspec" ]; then
      diff -u "$name.expected.tspec" "$tmp/out" >&2 || bad "$name" "the spec differs"
    elif [ $rc = 0 ]; then
      bad "$name" "succeeded but has no $name.expected.tspec"
    fi
  fi
  [ $rc -ge 3 ] && bad "$name" "internal error (exit $rc)"

  if [ $rc = 0 ]; then
    # the promise: what import prints, check accepts
    cp "$tmp/out" "$tmp/$name.tspec"
    timeout 20 "$shardc" check "$tmp/$name.tspec" >/dev/null 2>"$tmp/check.err" ||
      { cat "$tmp/check.err" >&2; bad "$name" "the imported spec fails shardc check"; }
    [ -s "$tmp/out" ] || bad "$name" "exit 0 but nothing printed"
  else
    [ -s "$tmp/out" ] && bad "$name" "failed (exit $rc) but printed a spec"
  fi

  # -o: the same text on success; no file (and no temporary) on failure
  mkdir -p "$tmp/o"
  timeout 20 "$shardc" import deepspeed "$ds" "${args[@]}" -o "$tmp/o/$name.tspec" >"$tmp/o.out" 2>/dev/null
  orc=$?
  [ $orc = $rc ] || bad "$name" "-o changed the exit code ($rc -> $orc)"
  [ -s "$tmp/o.out" ] && bad "$name" "-o also printed to stdout"
  if [ $rc = 0 ]; then
    cmp -s "$tmp/out" "$tmp/o/$name.tspec" || bad "$name" "-o wrote something else than stdout showed"
    rm -f "$tmp/o/$name.tspec"
  fi
  left=$(ls -A "$tmp/o")
  [ -z "$left" ] || { bad "$name" "-o left files behind: $left"; rm -f "$tmp"/o/*; }
done

# -o over an existing file: a failing import leaves it untouched.
echo "# precious" >"$tmp/keep.tspec"
"$shardc" import deepspeed bad-types.json --hf hf/gpt2.json --nodes 1 --gpus-per-node 8 -o "$tmp/keep.tspec" 2>/dev/null
[ "$(cat "$tmp/keep.tspec")" = "# precious" ] || bad "-o" "a failing import changed an existing output file"

# docs/import-deepspeed.md names every DeepSpeed key the importer maps or ignores.
for key in $(sed -n '/^static const DsKey ds_keys/,/^};/p' "$root/compiler/import.c" |
             grep -o '{"[a-z0-9_.]*", K_\(VAL\|IGN\)' | sed 's/{"//; s/", K_.*//'); do
  grep -q "\`$key\`" "$root/docs/import-deepspeed.md" || bad docs "docs/import-deepspeed.md does not mention \`$key\`"
done

# The worked example: its README shows the warnings (2nd fenced block) and the
# spec (3rd) exactly as the importer prints them.
fenced() { awk -v n="$1" '/^```/ { k++; next } k == 2 * n - 1' "$2"; }
ex=$root/examples/deepspeed-import
(cd "$ex" && "$shardc" import deepspeed ds_config.json --hf config.json --nodes 1 --gpus-per-node 8 \
   >"$tmp/ex.out" 2>"$tmp/ex.err") || bad example "the example's import fails"
if [ "${REGEN:-0}" = 1 ]; then
  awk -v e="$tmp/ex.err" -v o="$tmp/ex.out" '
    /^```/ { k++; print; if (k == 3 || k == 5) { f = k == 3 ? e : o; while ((getline l < f) > 0) print l } next }
    k != 3 && k != 5' "$ex/README.md" >"$tmp/README.md" && cp "$tmp/README.md" "$ex/README.md"
else
  diff -u <(fenced 2 "$ex/README.md") "$tmp/ex.err" >&2 || bad example "README.md's warnings differ"
  diff -u <(fenced 3 "$ex/README.md") "$tmp/ex.out" >&2 || bad example "README.md's spec differs"
fi

# -D with a value that carries a block (not expressible in NAME.args): the
# block's keys replace the config's, and keys the new value lacks are dropped.
"$shardc" import deepspeed overrides.json --hf hf/gpt2.json --nodes 1 --gpus-per-node 8 -D train.steps=5000 \
  -D 'offload.optimizer=nvme { path = "/scratch"  buffer_count = 2 }' -D offload.optimizer=cpu \
  -D 'offload.optimizer=nvme { path = "/nvme 2" }' >"$tmp/blk.out" 2>/dev/null || bad "-D block" "the import fails"
grep -q '^  optimizer = nvme {  *# -D offload.optimizer$' "$tmp/blk.out" &&
  grep -q '^    path = "/nvme 2"  *# -D offload.optimizer.path$' "$tmp/blk.out" &&
  ! grep -q 'buffer_count' "$tmp/blk.out" || { cat "$tmp/blk.out" >&2; bad "-D block" "the spec is not the -D's"; }
"$shardc" import --help 2>&1 | grep -q -- '-D key.path=value' || bad "--help" "shardc import --help does not document -D"

if [ "${REGEN:-0}" = 1 ]; then
  echo "regenerated the expectations of $n imports; review with git diff tests/import"
  exit 0
fi
if [ $fail -gt 0 ]; then
  echo "$fail failure(s) in $n imports (regenerate with REGEN=1 $0 SHARDC)" >&2
  exit 1
fi
echo "all $n imports as expected"
