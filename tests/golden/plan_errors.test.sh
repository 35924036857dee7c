#!/bin/bash
# plan_errors.test.sh SHARDC BUILD_DIR — errors only the planner can find
# (they need the partition), reported like the front end's: file:line:col
# of the key, a hint, exit 1, and no trainer (or partial file) left behind.
#
# The NVMe parameter staging (offload.params buffer_count x buffer_size)
# must hold each segment's shard and a host optimizer sub-group; tiny-gpt at
# dp 1 keeps all of its 120576 parameters in one persistent segment.
set -u
SHARDC=$1
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ONE=(-D parallel.dp=1 -D cluster.gpus_per_node=1 -D zero.stage=3 -D "offload.optimizer=nvme{path=\"$T\"}")
# expect NAME EXIT PATTERN... : the command's exit code and stderr lines
expect() {
    local name=$1 want=$2
    shift 2
    if [ "$rc" != "$want" ]; then echo "FAIL: $name: exit $rc, expected $want"; cat "$T/err"; fail=1; return; fi
    for pat in "$@"; do
        grep -qE -- "$pat" "$T/err" || { echo "FAIL: $name: no line matching '$pat'"; cat "$T/err"; fail=1; return; }
    done
    echo "ok: $name"
}
staging() { echo "offload.params=nvme{path=\"$T\" buffer_count=2 buffer_size=$1}"; }
cd "$T"
for cmd in plan build; do
    out=()
    [ $cmd = build ] && out=(-o "$T/trainer")
    "$SHARDC" $cmd "$SRC/specs/tiny-gpt.tspec" "${ONE[@]}" -D "$(staging 25000)" "${out[@]}" > /dev/null 2> "$T/err"
    rc=$?
    expect "$cmd: staging smaller than the persistent segment" 1 \
        '^-D:1:[0-9]+: error: the NVMe parameter staging holds 50000 elements \(buffer_count 2 x buffer_size 25000\), but the persistent small parameters. shard on one rank is 120576 elements' \
        '^  hint: make offload.params buffer_count x buffer_size at least 120576 elements'
    grep -q "internal error" "$T/err" && { echo "FAIL: $cmd: an internal error"; fail=1; }
done
[ -z "$(ls -A "$T" | grep -v '^err$')" ] || { echo "FAIL: files left behind: $(ls "$T")"; fail=1; }
# a sub-group larger than the staging (the segment fits)
"$SHARDC" plan "$SRC/specs/tiny-gpt.tspec" "${ONE[@]}" -D "$(staging 60288)" -D zero.sub_group_size=200000 \
    -D model.layers=4 -D zero.param_persistence_threshold=10 > /dev/null 2> "$T/err"
rc=$?
expect "plan: host sub-group larger than the staging" 1 'but one host optimizer sub-group .* is [0-9]+ elements' \
    'or lower zero.sub_group_size'
# exactly enough: the trainer's C is generated (not linked: this test also
# runs in the sanitizer build, whose runtime a plain link cannot take)
"$SHARDC" build "$SRC/specs/tiny-gpt.tspec" "${ONE[@]}" -D "$(staging 60288)" --emit-c "$T/trainer.c" > /dev/null 2> "$T/err"
rc=$?
expect "build --emit-c: staging of exactly 120576 elements" 0
grep -q "srt_nvme_read" "$T/trainer.c" || { echo "FAIL: the generated trainer reads no NVMe parameters"; fail=1; }
# an output that cannot be written (its directory is a file): a located
# error, exit 1, and no temporary left beside it, for the streamed trace and
# for the JSON report
mkdir "$T/out" && : > "$T/out/file"
for o in --trace --json; do
    "$SHARDC" plan "$SRC/specs/tiny-gpt.tspec" $o "$T/out/file/x.json" > /dev/null 2> "$T/err"
    rc=$?
    expect "plan $o into a file's path" 1 "^shardc: error: plan: cannot write $T/out/file/x.json: Not a directory"
done
"$SHARDC" plan "$SRC/specs/tiny-gpt.tspec" --trace "$T/out/t.json" > /dev/null 2> "$T/err"
rc=$?
expect "plan --trace" 0
[ "$(ls "$T/out")" = "$(printf 'file\nt.json')" ] || { echo "FAIL: plan --trace left: $(ls "$T/out")"; fail=1; }
[ "$fail" = 0 ] && echo PASS
exit "$fail"
