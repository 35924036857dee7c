#!/usr/bin/env bash
# Resume: dp 4 ZeRO-3, 10 steps straight against 5 steps, a checkpoint, and a
# resumed run of 5 more: identical losses bit for bit (the JSONL of the resumed
# run is appended).  Then the same checkpoint resumed under another layout (dp 2
# ZeRO-1): steps 6-10 within 1e-5, and by dp 2 ZeRO-1 with
# zero.overlap_param_gather bit for bit with it.  Also: the trainer allocates its arenas at
# start-up only (arena_allocations is the same for 2 and 10 steps), and
# --ckpt-every writes step-2, step-4 and the final checkpoint with `latest`.
set -u
. "$(dirname "$0")/train_lib.sh"
fail=0
train_build t4
train_run 4 t4 --data "$DATA" --steps 10 --log "$T/straight.jsonl" || { echo "FAIL: straight run"; cat "$T/t4.err"; exit 1; }
cp "$T/t4.out" "$T/straight.out"
train_run 4 t4 --data "$DATA" --steps 5 --log "$T/resumed.jsonl" --ckpt-dir "$T/ck" --ckpt-every 2 ||
    { echo "FAIL: first half"; cat "$T/t4.err"; exit 1; }
for d in step-2 step-4 step-5; do
    [ -f "$T/ck/$d/index.json" ] || { echo "FAIL: no checkpoint $d"; fail=1; }
done
[ "$(cat "$T/ck/latest")" = step-5 ] || { echo "FAIL: latest is not step-5: $(cat "$T/ck/latest")"; fail=1; }
if ls "$T/ck" | grep -q tmp; then echo "FAIL: a temporary checkpoint was left: $(ls "$T/ck")"; fail=1; fi
train_run 4 t4 --data "$DATA" --steps 10 --log "$T/resumed.jsonl" --ckpt-dir "$T/ck" --resume ||
    { echo "FAIL: resumed run"; cat "$T/t4.err"; exit 1; }
grep -q "resumed from .*step-5" "$T/t4.out" || { echo "FAIL: the run did not say it resumed"; cat "$T/t4.out"; fail=1; }
[ "$(grep -c '"loss"' "$T/resumed.jsonl")" = 10 ] || { echo "FAIL: the resumed log has not 10 steps"; fail=1; }
if "$PY" tests/e2e/train_compare.py losses "$T/straight.jsonl" "$T/resumed.jsonl" 0 exact > "$T/c.txt"; then
    echo "ok: resume bit for bit: $(tail -1 "$T/c.txt")"
else
    echo "FAIL: resume is not bit for bit"; cat "$T/c.txt"; fail=1
fi
# another layout resumes the same checkpoint
train_build t2 -D parallel.dp=2 -D cluster.gpus_per_node=2 -D zero.stage=1
train_run 2 t2 --data "$DATA" --steps 10 --log "$T/other.jsonl" --resume "$T/ck/step-5" ||
    { echo "FAIL: dp 2 resume"; cat "$T/t2.err"; exit 1; }
if "$PY" tests/e2e/train_compare.py losses "$T/other.jsonl" "$T/straight.jsonl" 1e-5 > "$T/c.txt"; then
    echo "ok: dp 4 ZeRO-3 checkpoint resumed by dp 2 ZeRO-1: $(tail -1 "$T/c.txt")"
else
    echo "FAIL: cross-layout resume"; cat "$T/c.txt"; fail=1
fi
# the distributed optimizer gathering the parameters at the start of each step
# (zero.overlap_param_gather): the first step after a resume gathers the
# checkpoint's shards, so the same checkpoint resumed by it equals the layout
# without it bit for bit; and its own checkpoint, saved after step 7 with the
# parameters not yet gathered, resumes bit for bit
train_build t2pg -D parallel.dp=2 -D cluster.gpus_per_node=2 -D zero.stage=1 -D zero.reduce_bucket=20000 \
    -D zero.overlap_param_gather=on
train_run 2 t2pg --data "$DATA" --steps 10 --log "$T/pg.jsonl" --resume "$T/ck/step-5" --ckpt-dir "$T/ckpg" \
    --ckpt-every 7 || { echo "FAIL: overlap_param_gather resume"; cat "$T/t2pg.err"; exit 1; }
if "$PY" tests/e2e/train_compare.py losses "$T/other.jsonl" "$T/pg.jsonl" 0 exact > "$T/c.txt"; then
    echo "ok: the checkpoint resumed with overlap_param_gather as without it: $(tail -1 "$T/c.txt")"
else
    echo "FAIL: overlap_param_gather changes the resumed losses"; cat "$T/c.txt"; fail=1
fi
train_run 2 t2pg --data "$DATA" --steps 10 --log "$T/pg2.jsonl" --resume "$T/ckpg/step-7" ||
    { echo "FAIL: overlap_param_gather's own checkpoint"; cat "$T/t2pg.err"; exit 1; }
if [ "$(grep -c '"loss"' "$T/pg2.jsonl")" = 3 ] &&
    "$PY" tests/e2e/train_compare.py losses "$T/pg2.jsonl" "$T/pg.jsonl" 0 exact > "$T/c.txt"; then
    echo "ok: overlap_param_gather's step-7 checkpoint resumed bit for bit: $(tail -1 "$T/c.txt")"
else
    echo "FAIL: overlap_param_gather's checkpoint does not resume bit for bit"; cat "$T/c.txt"; fail=1
fi
# the arenas: allocated at start-up, the same count whatever the number of steps
a10=$(grep -o 'done: 10 steps, arena_allocations [0-9]*' "$T/straight.out" | awk '{print $NF}')
train_run 4 t4 --data "$DATA" --steps 2 || { echo "FAIL: 2 steps"; exit 1; }
a2=$(grep -o 'done: 2 steps, arena_allocations [0-9]*' "$T/t4.out" | awk '{print $NF}')
a0=$(grep -o 'host arena [0-9]* bytes (plan [0-9]*), arena_allocations [0-9]*' "$T/t4.out" | awk '{print $NF}')
if [ -n "$a10" ] && [ "$a10" = "$a2" ] && [ "$a2" = "$a0" ]; then
    echo "ok: $a0 allocations at start-up (context, device arena, host arena, backend scratch, checker), none after"
else
    echo "FAIL: allocations start $a0, after 2 steps $a2, after 10 steps $a10"; fail=1
fi
[ "$fail" = 0 ] && echo PASS
exit "$fail"
