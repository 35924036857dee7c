#!/usr/bin/env bash
# fp16 with loss scaling (DeepSpeed's dynamic loss scaler), tiny-gpt, dp 2 ZeRO-1:
#  - an initial scale of 2^24 overflows fp16's gradients: the first steps are
#    skipped, the scale halves after each overflow past the hysteresis, and the
#    logged scale follows the rule exactly (replayed from the skip flags);
#    training then goes on and the loss falls;
#  - with a scale that does not overflow (2^10), every step's loss is within
#    fp16's tolerance of the fp32 run;
#  - a run with a scale window of 3 (the scale doubles during it), stopped at
#    step 4 and resumed, equals the straight run bit for bit (the scale's state
#    is in the checkpoint).
set -u
. "$(dirname "$0")/train_lib.sh"
fail=0
LAYOUT=(-D parallel.dp=2 -D cluster.gpus_per_node=2 -D zero.stage=1)
train_build f32 "${LAYOUT[@]}"
train_build f16 "${LAYOUT[@]}" -D precision.dtype=fp16 -D precision.loss_scale.initial_scale_power=10
train_build big "${LAYOUT[@]}" -D precision.dtype=fp16 -D precision.loss_scale.initial_scale_power=24 \
    -D precision.loss_scale.hysteresis=2 -D precision.loss_scale.window=1000
train_build win "${LAYOUT[@]}" -D precision.dtype=fp16 -D precision.loss_scale.initial_scale_power=12 \
    -D precision.loss_scale.window=3
for r in f32 f16; do
    train_run 2 "$r" --data "$DATA" --steps 8 --log "$T/$r.jsonl" || { echo "FAIL: $r did not train"; cat "$T/$r.err"; exit 1; }
done
train_cmp losses "$T/f32.jsonl" "$T/f16.jsonl" 1e-3 "fp16 (scale 2^10) against fp32"
grep -q '"skipped":true' "$T/f16.jsonl" && { echo "FAIL: scale 2^10 overflowed"; fail=1; }

train_run 2 big --data "$DATA" --steps 16 --log "$T/big.jsonl" || { echo "FAIL: big did not train"; cat "$T/big.err"; exit 1; }
"$PY" - "$T/big.jsonl" <<'PYEOF' || fail=1
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
scale, hyst, good, bad = 2.0 ** 24, 2, 0, []
for r in rows:
    if r["loss_scale"] != scale:
        bad.append(f"step {r['step']}: scale {r['loss_scale']}, the rule says {scale}")
    if r["skipped"]:                      # DeepSpeed: hysteresis, then halve (min 1)
        good = 0
        if hyst > 1: hyst -= 1
        else: scale = max(scale / 2, 1.0)
    else:
        good += 1
        if good == 1000: scale, good, hyst = scale * 2, 0, 2
skipped = sum(r["skipped"] for r in rows)
if bad: print("FAIL: the loss scale does not follow the rule:", *bad[:5], sep="\n  "); sys.exit(1)
if not 0 < skipped < len(rows) or rows[-1]["skipped"]:
    print(f"FAIL: {skipped} of {len(rows)} steps skipped"); sys.exit(1)
first = next(r for r in rows if not r["skipped"])
if not rows[-1]["loss"] < first["loss"]:
    print(f"FAIL: the loss did not fall after the overflows ({first['loss']} -> {rows[-1]['loss']})"); sys.exit(1)
print(f"ok: 2^24 overflowed: {skipped} steps skipped, the scale settled at 2^{math.log2(rows[-1]['loss_scale']):.0f}, "
      f"loss {first['loss']:.4f} -> {rows[-1]['loss']:.4f}")
PYEOF

train_run 2 win --data "$DATA" --steps 8 --log "$T/straight.jsonl" || { echo "FAIL: window run"; cat "$T/win.err"; exit 1; }
train_run 2 win --data "$DATA" --steps 4 --log "$T/resumed.jsonl" --ckpt-dir "$T/ck" || { echo "FAIL: first half"; exit 1; }
train_run 2 win --data "$DATA" --steps 8 --log "$T/resumed.jsonl" --ckpt-dir "$T/ck" --resume ||
    { echo "FAIL: resumed run"; cat "$T/win.err"; exit 1; }
if "$PY" tests/e2e/train_compare.py losses "$T/straight.jsonl" "$T/resumed.jsonl" 0 exact > "$T/c.txt"; then
    echo "ok: fp16 resume bit for bit: $(tail -1 "$T/c.txt")"
else
    echo "FAIL: fp16 resume is not bit for bit"; cat "$T/c.txt"; fail=1
fi
s1=$(grep -o '"loss_scale":[0-9.e+]*' "$T/straight.jsonl" | sort -u | wc -l)
[ "$s1" -ge 2 ] || { echo "FAIL: the scale never changed in the window run (so resume did not test its state)"; fail=1; }
[ "$fail" = 0 ] && echo PASS
exit "$fail"
