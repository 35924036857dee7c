#!/usr/bin/env bash
# Golden tests of `shardc import hf config.json`.
#
# The published configs (tests/import/hf/: GPT-2 124M, 355M, 774M and 1.5B;
# Llama-2 7B and 13B; Llama-3 8B, written from their Hugging Face hub
# values) import with --nodes 1 --gpus-per-node 8 into specs that
# `shardc plan` accepts, and whose parameter counts are the published ones.
# Each one's spec and diagnostics are golden files beside it
# (NAME.hf.expected.tspec, NAME.hf.expected).  Configs of what shardc cannot
# train (tests/import/hf-bad/) fail with an error at the JSON key
# (NAME.expected), write nothing, and leave no file with -o.
#
# Usage: import_hf.test.sh SHARDC [BUILD_DIR]      REGEN=1 rewrites the expectations.
set -u
shardc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root/tests/import" || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 n=0
bad() { echo "FAIL $1: $2" >&2; fail=$((fail + 1)); }

# config, published parameter count
published=(
    "hf/gpt2.json 124439808" "hf/gpt2-medium.json 354823168" "hf/gpt2-large.json 774030080"
    "hf/gpt2-xl.json 1557611200" "hf/llama2-7b.json 6738415616" "hf/llama2-13b.json 13015864320"
    "hf/llama3-8b.json 8030261248")
for entry in "${published[@]}"; do
    cfg=${entry% *} want=${entry#* } name=${cfg%.json}
    n=$((n + 1))
    timeout 20 "$shardc" import hf "$cfg" --nodes 1 --gpus-per-node 8 > "$tmp/out" 2> "$tmp/err"
    rc=$?
    { cat "$tmp/err"; echo "exit: $rc"; } > "$tmp/actual"
    if [ "${REGEN:-0}" = 1 ]; then
        cp "$tmp/actual" "$name.hf.expected"
        cp "$tmp/out" "$name.hf.expected.tspec"
        continue
    fi
    diff -u "$name.hf.expected" "$tmp/actual" >&2 || bad "$cfg" "stderr or exit code differ"
    diff -u "$name.hf.expected.tspec" "$tmp/out" >&2 || bad "$cfg" "the spec differs"
    [ $rc = 0 ] || continue
    cp "$tmp/out" "$tmp/spec.tspec"
    got=$(timeout 60 "$shardc" plan "$tmp/spec.tspec" 2> "$tmp/plan.err" | awk '$1 == "params" { print $2; exit }')
    if [ "$got" = "$want" ]; then
        echo "ok: $cfg: $got parameters, as published"
    else
        bad "$cfg" "shardc plan counts '$got' parameters, published: $want"
        head -5 "$tmp/plan.err" >&2
    fi
done

for cfg in hf-bad/*.json; do
    name=${cfg%.json}
    n=$((n + 1))
    timeout 20 "$shardc" import hf "$cfg" -o "$tmp/o.tspec" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    { cat "$tmp/err"; echo "exit: $rc"; } > "$tmp/actual"
    if [ "${REGEN:-0}" = 1 ]; then
        cp "$tmp/actual" "$name.expected"
        continue
    fi
    diff -u "$name.expected" "$tmp/actual" >&2 || bad "$cfg" "stderr or exit code differ"
    [ $rc = 1 ] || bad "$cfg" "exit $rc, not 1"
    [ -e "$tmp/o.tspec" ] && { bad "$cfg" "-o wrote a spec"; rm -f "$tmp/o.tspec"; }
    [ -s "$tmp/out" ] && bad "$cfg" "printed a spec"
    grep -q '^hf-bad/[a-z0-9-]*\.json:[0-9]*:[0-9]*: error: ' "$tmp/err" || bad "$cfg" "no error located in the JSON"
done

# usage: the format's argument, --hf is deepspeed's
"$shardc" import hf > /dev/null 2> "$tmp/err"; [ $? = 2 ] && grep -q 'shardc import: which config.json' "$tmp/err" ||
    bad usage "import hf without a config is not a usage error"
"$shardc" import hf hf/gpt2.json --hf hf/gpt2.json > /dev/null 2>&1; [ $? = 2 ] || bad usage "--hf is accepted by import hf"

if [ "${REGEN:-0}" = 1 ]; then
    echo "regenerated the expectations of $n imports; review with git diff tests/import"
    exit 0
fi
[ $fail -gt 0 ] && { echo "$fail failure(s) in $n imports (regenerate with REGEN=1 $0 SHARDC)" >&2; exit 1; }
echo "all $n imports as expected"
