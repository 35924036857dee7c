#!/bin/bash
# The fidelity benchmark's noise ceiling and OS record (tests/bench/fidelity):
# fidelity.py on made-up runs whose fastest steps keep one order in every round
# while the medians shuffle, so the rank verdict must be given on the fastest
# step only; and osrun.py's record and exit status.  No trainer runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
/usr/bin/python3 - "$d" <<'PY'
import json, sys
d = sys.argv[1]
# 5 layouts, 4 rounds.  Fastest step: 100 + 10 * i in every round (one order).
# Median: a different order in every round (rotated), so rounds disagree.
runs = open(d + "/runs.txt", "w")
for i in range(5):
    name = "l%d" % i
    open(f"{d}/{name}.plan", "w").write("step %.4f s predicted\n" % ((100 + 10 * i) / 1e3))
    json.dump({"rank_classes": [{"stage": 0, "device_bytes": {"arena": 64}, "host_bytes": {"total": 0}}]},
              open(f"{d}/{name}.plan.json", "w"))
    logs = []
    for k in range(4):
        med = 200 + 20 * ((i + k * 2) % 5)
        steps = [999, 999] + [100 + 10 * i] + [med] * 9
        log = f"{d}/{name}.r{k + 1}.jsonl"
        with open(log, "w") as f:
            for s, ms in enumerate(steps):
                f.write(json.dumps({"step": s + 1, "step_ms": ms}) + "\n")
            f.write(json.dumps({"allocated": {"stage": [0], "device_arena": [64], "host_arena": [0]}}) + "\n")
        json.dump({"own_voluntary_switches": 7, "own_cpu_s": 1.0, "others_cpu_s": 0.5, "steal_s": 0.0,
                   "canary_before_s": [0.04, 0.05], "canary_after_s": [0.04, 0.04]},
                  open(log[:-len(".jsonl")] + ".os.json", "w"))
        logs.append(log)
    runs.write(f"{name} 1 {d}/{name}.plan {d}/{name}.plan.json {','.join(logs)}\n")
PY
out=$(/usr/bin/python3 tests/bench/fidelity/fidelity.py "$d/runs.txt")
echo "$out"
fail() { echo "FAIL: $1"; exit 1; }
grep -q "rank verdict on the fastest step (split half 1.000 > 0.9): the model's Spearman 1.000, target met" <<< "$out" ||
    fail "no rank verdict on the fastest step"
grep -q "rank verdict on the median step" <<< "$out" && fail "a rank verdict on the median step, whose rounds disagree"
grep -Eq "^  median step +mean -?0\.[0-9]+ " <<< "$out" || fail "the median step's self-agreement is not printed below 1"
grep -q "what the OS saw, per round" <<< "$out" || fail "the OS record is not printed"
# osrun.py: the record's fields, and the command's exit status passed on
/usr/bin/python3 tests/bench/fidelity/osrun.py "$d/t.json" -- true
/usr/bin/python3 -c 'import json, sys; o = json.load(open(sys.argv[1])); assert o["rc"] == 0 and o["wall_s"] >= 0 and \
    len(o["canary_before_s"]) >= 1 and "steal_s" in o and o["others_cpu_s"] >= 0, o' "$d/t.json" || fail "osrun.py's record"
rc=0; /usr/bin/python3 tests/bench/fidelity/osrun.py "$d/f.json" -- false || rc=$?
[ "$rc" = 1 ] || fail "osrun.py passed on exit $rc for false"
echo "PASS"
