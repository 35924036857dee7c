#!/usr/bin/env bash
# Regenerates every tests/golden/bad/*.expected from the current compiler.
# Review the result with `git diff tests/golden`.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
shardc=${1:-$root/build/shardc}
for f in "$root"/tests/golden/bad/*.tspec; do
  REGEN=1 "$root/tests/golden/check-one.sh" "$shardc" "$f"
done
echo "regenerated $(ls "$root"/tests/golden/bad/*.expected | wc -l) expectations"
