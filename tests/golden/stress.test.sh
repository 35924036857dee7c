#!/usr/bin/env bash
# Hostile inputs for the front end: each must give a diagnostic and exit 1,
# quickly, never a crash (exit >= 128) or a hang.
# Usage: stress.test.sh SHARDC BUILD_DIR
set -u
shardc=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# run NAME FILE: one line saying how `shardc check FILE` went.
run() {
    local name=$1 file=$2 start end rc secs
    start=$(date +%s.%N)
    timeout 20 "$shardc" check "$file" >/dev/null 2>"$tmp/$name.err"
    rc=$?
    end=$(date +%s.%N)
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
    local first
    first=$(head -n 1 "$tmp/$name.err" | cut -c1-100)
    if [ "$rc" = 1 ] && [ -s "$tmp/$name.err" ]; then
        printf 'ok    %-16s exit 1 in %5s s: %s\n' "$name" "$secs" "$first"
    else
        if [ "$rc" = 124 ]; then why="hung (killed after 20 s)"
        elif [ "$rc" -ge 128 ]; then why="crashed (exit $rc)"
        elif [ ! -s "$tmp/$name.err" ]; then why="no diagnostic (exit $rc)"
        else why="exit $rc, want 1"; fi
        printf 'FAIL  %-16s %s in %s s: %s\n' "$name" "$why" "$secs" "$first"
        fail=1
    fi
}

head -c 4000000 /dev/urandom > "$tmp/garbage.tspec"
run garbage-4MB "$tmp/garbage.tspec"

yes 'model gpt { layers = 12 }' | head -c 100000000 > "$tmp/big.tspec"
run file-100MB "$tmp/big.tspec"

# 16 MiB exactly is accepted for parsing (and then fails for its content).
{ printf 'x = 1 '; head -c $((16 * 1024 * 1024 - 6)) /dev/zero | tr '\0' ' '; } > "$tmp/limit.tspec"
printf 'y' >> "$tmp/limit.tspec"   # one byte over the limit
run file-16MiB+1 "$tmp/limit.tspec"

awk 'BEGIN { for (i = 0; i < 10000; i++) printf "a{"; print "" }' > "$tmp/deep.tspec"
run nesting-10000 "$tmp/deep.tspec"

awk 'BEGIN { printf "x = ["; for (i = 0; i < 10000; i++) printf "["; print "" }' > "$tmp/deeplist.tspec"
run lists-10000 "$tmp/deeplist.tspec"

awk 'BEGIN { printf "model gpt { layers = "; for (i = 0; i < 400; i++) printf "%d", (i % 9) + 1; print " }" }' \
    > "$tmp/digits.tspec"
run digits-400 "$tmp/digits.tspec"

printf 'model gpt { layers = 12 }\ninclude "b.tspec"\n' > "$tmp/a.tspec"
printf 'include "a.tspec"\n' > "$tmp/b.tspec"
run include-cycle "$tmp/a.tspec"

printf 'include "self.tspec"\n' > "$tmp/self.tspec"
run include-self "$tmp/self.tspec"

awk 'BEGIN { for (i = 0; i < 200000; i++) printf "}"; print "" }' > "$tmp/closers.tspec"
run closers-200000 "$tmp/closers.tspec"

awk 'BEGIN { for (i = 0; i < 100000; i++) print "x = \"unterminated"; }' > "$tmp/strings.tspec"
run strings-100000 "$tmp/strings.tspec"

exit $fail
