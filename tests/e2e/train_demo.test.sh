#!/usr/bin/env bash
# The demo (scripts/demo, what `make demo` runs), shortened to 150 steps: it
# plans, builds and trains specs/tiny-gpt.tspec with 4 ranks (dp 4, ZeRO-3),
# the loss falls (the mean of the last 20 steps below the first step's by at
# least 1.5 nats), the validation loss falls, a sample of text is printed, and
# the export is written.  Also: --trace writes one Chrome trace per rank with
# every op (3 steps: 3 step spans, 8 matmuls and the fused head a step, the
# ZeRO-3 gathers).
# Under mpirun with its output in a file (rank 0's stdout is still a
# pseudo-terminal) the progress is plain lines: no carriage return, no escape.
set -u
. "$(dirname "$0")/train_lib.sh"
out=$T/demo
if ! SHARDC=$SHARDC DEMO_STEPS=150 DEMO_DIR=$out scripts/demo > "$T/demo.out" 2>&1; then
    echo "FAIL: scripts/demo"; tail -30 "$T/demo.out"; exit 1
fi
fail=0
grep -q "^verdict: FITS" "$T/demo.out" || { echo "FAIL: no plan summary"; fail=1; }
sample=$(sed -n '/^--- sample/,/^--- end of sample/p' "$T/demo.out" | sed '1d;$d')
letters=$(printf '%s' "$sample" | tr -cd 'a-zA-Z' | wc -c)
if [ "$letters" -lt 200 ]; then echo "FAIL: no text sample ($letters letters):"; echo "$sample"; fail=1; fi
"$PY" - "$out/train.jsonl" <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
loss = [r["loss"] for r in rows if "loss" in r]
val = [r["val_loss"] for r in rows if "val_loss" in r]
last = sum(loss[-20:]) / 20
print("loss: step 1 %.3f, mean of the last 20 %.3f; val %s" % (loss[0], last, " ".join("%.3f" % v for v in val)))
ok = len(loss) == 150 and last < loss[0] - 1.5 and len(val) >= 2 and val[-1] < val[0]
if not ok:
    print("FAIL: the loss did not fall")
sys.exit(0 if ok else 1)
PY
[ -s "$out/tiny-gpt.safetensors" ] || { echo "FAIL: no export"; fail=1; }
# a measured trace per rank
train_build t
train_run 4 t --data "$DATA" --steps 3 --trace "$T/tr.json" || { echo "FAIL: --trace run"; cat "$T/t.err"; fail=1; }
if grep -q $'[\r\033]' "$T/t.out" || [ "$(grep -c '^step [123]/3 ' "$T/t.out")" != 3 ]; then
    echo "FAIL: the progress under mpirun is not 3 plain lines:"; od -c "$T/t.out" | head; fail=1
else
    echo "ok: the progress under mpirun, redirected: 3 plain lines"
fi
for r in 0 1 2 3; do
    "$PY" -c 'import json,sys; e=json.load(open(sys.argv[1]))["traceEvents"]; n=lambda k: sum(1 for x in e if x.get("name")==k and x.get("ph")=="X"); sys.exit(0 if n("step")==3 and n("matmul_fwd")+n("matmul_gelu_fwd")==3*8 and n("matmul_gelu_fwd")>=3 and n("head_xent")==3 and n("all_gather")>=3 else 1)' \
        "$T/tr.rank$r.json" || { echo "FAIL: trace of rank $r"; fail=1; }
done
[ "$fail" = 0 ] && echo PASS
exit "$fail"
