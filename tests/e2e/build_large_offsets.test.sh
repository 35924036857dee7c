#!/usr/bin/env bash
# Arena offsets past 2 GiB in the generated C (found on an H200, 2026-12-04:
# a Llama of 1B parameters, 16 layers of hidden 2048, stopped at its first
# backward with "device offset -2074980352 ... is outside the arena": a
# layer row's gradient base was an int constant, and the base plus a role's
# offset wrapped).  The rows now carry LL and the generated C is compiled
# with -Werror=overflow, so the old emitter's C fails this build.  Builds
# (does not run: its arena is 11 GB) that model's CPU trainer and checks
# that the case is exercised: some layer's gradients lie past 2^31 bytes.
set -u
. "$(dirname "$0")/train_lib.sh"
fail=0
L1B=(-D parallel.dp=1 -D parallel.tp=1 -D parallel.pp=1 -D cluster.nodes=1 -D cluster.gpus_per_node=1 -D cluster.gpu=cpu
     -D zero.stage=1 -D model.layers=16 -D model.hidden=2048 -D model.heads=16 -D model.seq_len=64
     -D train.global_batch=1 -D train.micro_batch=1 -D train.steps=1 -D train.lr_schedule.warmup=1)
if "$SHARDC" build specs/llama2-7b.tspec -o "$T/l1b" "${L1B[@]}" --emit-c "$T/l1b.c" > "$T/l1b.build" 2>&1 && [ -x "$T/l1b" ]; then
    echo "ok: a trainer with offsets past 2 GiB builds under -Werror=overflow"
else
    echo "FAIL: shardc build of the 1B Llama:"; cat "$T/l1b.build"; fail=1
fi
# the largest gradient base of a layer row, plus the row's largest relative offset
"$PY" - "$T/l1b.c" << 'PYEOF' || fail=1
import re, sys
c = open(sys.argv[1]).read()
rows = [(int(w), int(g)) for w, g in re.findall(r"S0_ROW\((\d+)LL, (\d+)LL\)", c)]
rel = [int(x) for x in re.findall(r"\(G\) \+ (\d+)", c)]
if not rows or not rel:
    sys.exit("FAIL: no S0_ROW rows with LL offsets in the generated C")
top = max(g for _, g in rows) + max(rel)
if not top >= 2**31:
    sys.exit("FAIL: the test does not reach 2 GiB (largest gradient offset %d)" % top)
print("ok: %d layer rows, gradient offsets up to %d bytes (2^31 = %d)" % (len(rows), top, 2**31))
PYEOF
[ "$fail" = 0 ] && echo PASS
exit "$fail"
