#!/usr/bin/env bash
# Runs `shardc check` on one bad spec and compares stderr + exit code with NAME.expected.
# Usage: check-one.sh SHARDC path/to/NAME.tspec      (REGEN=1 rewrites NAME.expected)
set -u
shardc=$1; spec=$2
dir=$(dirname "$spec"); name=$(basename "$spec" .tspec)
cd "$dir" || exit 1
args=()
[ -f "$name.args" ] && read -r -a args < "$name.args"
actual=$(timeout 20 "$shardc" check "$name.tspec" "${args[@]}" 2>&1 >/dev/null; echo "exit: $?")
if [ "${REGEN:-0}" = 1 ]; then
  printf '%s\n' "$actual" > "$name.expected"
  exit 0
fi
if ! diff -u "$name.expected" <(printf '%s\n' "$actual"); then
  echo "golden mismatch for $name (regenerate with tests/golden/regen.sh)" >&2
  exit 1
fi
