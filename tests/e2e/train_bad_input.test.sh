#!/usr/bin/env bash
# Bad input: a missing, empty, truncated or wrong-magic data file, a checkpoint
# of another model, a wrong world size.  Each: a clear error on every rank
# (`shardrt: rank R: error: ...` for every R), a non-zero exit, every rank gone
# well within the timeout (20 s), and no checkpoint (not even a partial one)
# left in the --ckpt-dir.
set -u
. "$(dirname "$0")/train_lib.sh"
fail=0
# expect NAME NP RANKS PATTERN [trainer args]: fails clearly on ranks 0..RANKS-1
expect() {
    local name=$1 np=$2 ranks=$3 pat=$4
    shift 4
    rm -rf "$T/ck"
    local t0=$SECONDS
    timeout 20 mpirun --oversubscribe -np "$np" "$T/$name" --steps 3 --ckpt-dir "$T/ck" "$@" > "$T/out" 2> "$T/err"
    local rc=$? took=$((SECONDS - t0))
    if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then
        echo "FAIL: $pat: exit $rc after ${took}s"; cat "$T/err"; fail=1; return
    fi
    for ((r = 0; r < ranks; r++)); do
        if ! grep -q "^shardrt: rank $r: error: .*$pat" "$T/err"; then
            echo "FAIL: rank $r did not report '$pat':"; cat "$T/err"; fail=1; return
        fi
    done
    # (.lock, the one-writer lock, stays: removing it while held would race a second trainer)
    if [ -e "$T/ck" ] && [ -n "$(ls -A "$T/ck" | grep -vx .lock)" ]; then
        echo "FAIL: $pat: something was left in the checkpoint folder: $(ls -A "$T/ck")"; fail=1; return
    fi
    echo "ok: exit $rc in ${took}s, every rank: $(grep -m1 "rank 0: error" "$T/err")"
}
train_build t4
: > "$T/empty.txt"
"$PY" - "$T" <<'PY'
import struct, sys
d = sys.argv[1]
def shard(path, magic, version, ntok, actual):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", magic, version, ntok, *([0] * 253)))
        f.write(struct.pack("<%dH" % actual, *([65] * actual)))
shard(d + "/trunc.bin", 20240520, 1, 100000, 5000)     # says 100000 tokens, holds 5000
shard(d + "/magic.bin", 12345678, 1, 5000, 5000)
PY
expect t4 4 4 "missing.txt" --data "$T/missing.txt"
expect t4 4 4 "empty" --data "$T/empty.txt"
train_build tl -D data.format=llmc
expect tl 4 4 "trunc.bin" --data "$T/trunc.bin"
expect tl 4 4 "magic.bin" --data "$T/magic.bin"
# a checkpoint of another model (three layers)
train_build other -D model.layers=3
train_run 4 other --data "$DATA" --steps 1 --ckpt-dir "$T/otherck" || { echo "FAIL: the other model"; cat "$T/other.err"; exit 1; }
expect t4 4 4 "another model.*h.2.ln_1.weight" --data "$DATA" --resume "$T/otherck"
# the wrong world size
expect t4 2 2 "planned for 4 ranks .* runs on 2" --data "$DATA"
[ "$fail" = 0 ] && echo PASS
exit "$fail"
