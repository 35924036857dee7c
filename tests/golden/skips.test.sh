#!/usr/bin/env bash
# A test whose tool is missing is a skip (exit 77), never a pass: html.test.sh
# run with a PATH that has no Chromium (only the few commands it needs before
# looking for one) must exit 77 and say why.  ($2, the build folder, unused.)
set -u
shardc=$1
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
for c in bash mktemp rm dirname; do ln -s "$(command -v "$c")" "$bin/$c"; done
PATH=$bin bash tests/golden/html.test.sh "$shardc" > "$bin/out" 2>&1
rc=$?
if [ $rc = 77 ] && grep -q "chromium is not installed" "$bin/out"; then
    echo "ok: html.test.sh without Chromium: exit 77: $(head -1 "$bin/out")"
else
    echo "FAIL: html.test.sh without Chromium: exit $rc:"; cat "$bin/out"; exit 1
fi
