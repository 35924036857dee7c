#!/usr/bin/env bash
# The reliability review's cases (issue 13), each reproduced on the tiny GPT
# (dp 4, ZeRO-3) with what must happen now:
#  - a checkpoint damaged or mixed up — a flipped byte in a tensor, a rank
#    file of step 1 copied into step 2, index.json's step edited, a string
#    or negative step, trailing garbage after its JSON, 4 KiB appended to a
#    rank file — is refused on resume (non-zero exit, no hang, a message
#    naming the file, and the tensor for a damaged piece), by `shardc ckpt
#    verify` and by `shardc export` (which leaves no output behind); the
#    intact checkpoint verifies and resumes;
#  - `latest` left naming step-2 while step-4 is complete (its update
#    failed): the resume takes step-4 and says so;
#  - a second trainer on a --ckpt-dir in use stops at start-up with a clear
#    message, and the first one finishes its checkpoints undisturbed;
#  - a FIFO as --data, as --resume's checkpoint file, and to `shardc check`
#    and `shardc import`: refused at once, not a hang;
#  - a usage error (and --help) on 4 ranks is printed once.
set -u
. "$(dirname "$0")/train_lib.sh"
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
train_build t4
# a good checkpoint directory: step-1 and step-2
train_run 4 t4 --data "$DATA" --steps 2 --ckpt-dir "$T/good" --ckpt-every 1 --log "$T/good.jsonl" ||
    { echo "FAIL: the good run"; cat "$T/t4.err"; exit 1; }
"$SHARDC" ckpt verify "$T/good" > "$T/v.out" 2>&1 && grep -q "ok: step 2 of 'tiny-gpt.tspec', 4 rank files" "$T/v.out" &&
    ok "shardc ckpt verify of the good checkpoint: $(cat "$T/v.out")" || { bad "verify of the good checkpoint:"; cat "$T/v.out"; }

# refused NAME PATTERN EDIT...: a copy of the good directory, EDIT run in it
# (a shell command, $C its step-2), then resume, verify and export must all
# refuse it with PATTERN
refused() {
    local name=$1 pat=$2 C
    shift 2
    rm -rf "$T/$name" && cp -r "$T/good" "$T/$name" && C=$T/$name/step-2
    (cd "$T/$name" && C=$C eval "$*") || { bad "$name: the edit failed"; return; }
    local t0=$SECONDS
    timeout 60 mpirun --oversubscribe -np 4 "$T/t4" --data "$DATA" --steps 3 --resume "$T/$name" > "$T/r.out" 2> "$T/r.err"
    local rc=$?
    if [ $rc = 0 ] || [ $rc = 124 ] || ! grep -Eq "^shardrt: rank [0-9]: error: .*$pat" "$T/r.err"; then
        bad "$name: resume: exit $rc, no error matching '$pat':"; head -5 "$T/r.err"; return
    fi
    "$SHARDC" ckpt verify "$T/$name" > "$T/v.out" 2>&1
    local vrc=$?
    if [ $vrc != 1 ] || ! grep -Eq "$pat" "$T/v.out"; then bad "$name: ckpt verify: exit $vrc:"; cat "$T/v.out"; return; fi
    "$SHARDC" export "$T/$name" -o "$T/$name.safetensors" > "$T/e.out" 2>&1
    local erc=$?
    if [ $erc != 1 ] || ! grep -Eq "$pat" "$T/e.out" || ls "$T" | grep -q "^$name.safetensors"; then
        bad "$name: export: exit $erc (or an output was left):"; cat "$T/e.out"; return
    fi
    ok "$name: resume exit $rc in $((SECONDS - t0)) s, verify and export refuse it: $(grep -Em1 "error: .*$pat" "$T/r.err")"
}
# a flipped bit in rank 1's last piece (its data end the file)
flip='"$PY" -c "import sys; p = sys.argv[1]; b = bytearray(open(p, \"rb\").read()); b[-9] ^= 1; open(p, \"wb\").write(b)" $C/rank-00001.safetensors'
refused flipped-byte "rank-00001.safetensors: tensor '[^']+' \([a-z_]+, piece '[^']+'\): its [0-9]+ bytes do not match their checksum" "$flip"
refused step1-file "rank-00002.safetensors: written at step 1 \(its own metadata\) into the checkpoint of step 2" \
    'cp ../good/step-1/rank-00002.safetensors $C/'
refused index-step "index.json: \"step\" is 1 but the checkpoint's directory is step-2" \
    'sed -i "s/\"step\":\t2,/\"step\":\t1,/" $C/index.json'
refused index-string-step "index.json: \"step\" is \"2\", not a step number" \
    'sed -i "s/\"step\":\t2,/\"step\":\t\"2\",/" $C/index.json'
refused index-negative-step "index.json: \"step\" is -9, not a step number" \
    'sed -i "s/\"step\":\t2,/\"step\":\t-9,/" $C/index.json'
refused index-trailing "index.json: 7 bytes follow the JSON object" 'printf "garbage" >> $C/index.json'
refused appended-4k "rank-00003.safetensors: 4096 bytes follow the last tensor's data" \
    'head -c 4096 /dev/zero >> $C/rank-00003.safetensors'

# latest's update failed after step-4 was published: step-4 is taken, and said so
train_run 4 t4 --data "$DATA" --steps 4 --ckpt-dir "$T/stale" --ckpt-every 2 ||
    { bad "the stale-latest run"; cat "$T/t4.err"; }
echo step-2 > "$T/stale/latest"
if train_run 4 t4 --data "$DATA" --steps 5 --ckpt-dir "$T/stale" --resume &&
   grep -q "shardrt: note: .*/latest names step-2, but step-4 was saved after it and is complete: taking step-4" "$T/t4.out" &&
   grep -q "resumed from .*step-4 (step 4)" "$T/t4.out"; then
    ok "a stale latest: $(grep -m1 "note:" "$T/t4.out")"
else
    bad "a stale latest:"; cat "$T/t4.out" "$T/t4.err" | head -20
fi

# two trainers on one --ckpt-dir: the second stops at start-up, the first is undisturbed
timeout 120 mpirun --oversubscribe -np 4 "$T/t4" --data "$DATA" --steps 40 --ckpt-dir "$T/shared" --ckpt-every 10 \
    > "$T/first.out" 2> "$T/first.err" &
first=$!
for _ in $(seq 1 300); do grep -q "^step " "$T/first.out" 2> /dev/null && break; sleep 0.1; done
timeout 60 mpirun --oversubscribe -np 4 "$T/t4" --data "$DATA" --steps 40 --ckpt-dir "$T/shared" --ckpt-every 10 \
    > "$T/second.out" 2> "$T/second.err"
rc2=$?
wait $first
rc1=$?
if [ $rc2 = 1 ] && grep -q "^shardrt: rank 0: error: .*/shared: another trainer is writing checkpoints here (pid [0-9]* on .*): one trainer per checkpoint directory" "$T/second.err" &&
   [ $rc1 = 0 ] && [ "$(cat "$T/shared/latest")" = step-40 ] && "$SHARDC" ckpt verify "$T/shared" > /dev/null 2>&1; then
    ok "a second trainer on one --ckpt-dir: exit $rc2: $(grep -m1 "error:" "$T/second.err"); the first finished (exit 0, step-40 verifies)"
else
    bad "two trainers: first exit $rc1, second exit $rc2:"; head -5 "$T/second.err" "$T/first.err"
fi

# FIFOs: refused at open, never waited on
mkfifo "$T/fifo.txt" "$T/fifo.tspec" "$T/fifo.json"
timeout 30 mpirun --oversubscribe -np 4 "$T/t4" --data "$T/fifo.txt" --steps 1 > "$T/f.out" 2> "$T/f.err"
rc=$?
[ $rc = 1 ] && [ "$(grep -c "error: .*fifo.txt: not a regular file (a FIFO)" "$T/f.err")" = 4 ] &&
    ok "a FIFO as --data: exit $rc, every rank: $(grep -m1 error: "$T/f.err")" || { bad "a FIFO as --data: exit $rc"; cat "$T/f.err"; }
rm -rf "$T/fifock" && cp -r "$T/good" "$T/fifock" && rm "$T/fifock/step-2/index.json" && mkfifo "$T/fifock/step-2/index.json"
timeout 30 mpirun --oversubscribe -np 4 "$T/t4" --data "$DATA" --steps 3 --resume "$T/fifock/step-2" > "$T/f.out" 2> "$T/f.err"
rc=$?
[ $rc = 1 ] && grep -q "error: .*index.json: not a regular file" "$T/f.err" &&
    ok "a FIFO as a checkpoint's index.json: exit $rc: $(grep -m1 error: "$T/f.err")" ||
    { bad "a FIFO in a checkpoint: exit $rc"; cat "$T/f.err"; }
timeout 10 "$SHARDC" check "$T/fifo.tspec" > /dev/null 2> "$T/f.err"
rc=$?
[ $rc = 1 ] && grep -q "cannot read '.*fifo.tspec': not a regular file" "$T/f.err" &&
    ok "a FIFO to shardc check: exit $rc: $(cat "$T/f.err")" || { bad "shardc check of a FIFO: exit $rc"; cat "$T/f.err"; }
timeout 10 "$SHARDC" import deepspeed "$T/fifo.json" --nodes 1 --gpus-per-node 8 > /dev/null 2> "$T/f.err"
rc=$?
[ $rc = 1 ] && grep -q "fifo.json: not a regular file" "$T/f.err" &&
    ok "a FIFO to shardc import: exit $rc" || { bad "shardc import of a FIFO: exit $rc"; cat "$T/f.err"; }

# a usage error, and --help, on 4 ranks: printed once
timeout 30 mpirun --oversubscribe -np 4 "$T/t4" --stpes 3 > "$T/u.out" 2> "$T/u.err"
rc=$?
n=$(grep -c "unknown option '--stpes'" "$T/u.err")
h=$(grep -c "^usage:" "$T/u.err")
[ $rc = 2 ] && [ "$n" = 1 ] && [ "$h" = 1 ] && ok "a usage error on 4 ranks: exit 2, the message and the help once" ||
    { bad "a usage error: exit $rc, the message $n times, the help $h times"; head -5 "$T/u.err"; }
timeout 30 mpirun --oversubscribe -np 4 "$T/t4" --help > "$T/u.out" 2> "$T/u.err"
h=$(grep -c "^usage:" "$T/u.out")
[ "$h" = 1 ] && ok "--help on 4 ranks: printed once" || { bad "--help printed $h times"; }
[ "$fail" = 0 ] && echo PASS
exit "$fail"
