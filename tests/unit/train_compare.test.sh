#!/usr/bin/env bash
# tests/e2e/train_compare.py cannot pass by accident: NaN weights, a null
# (non-finite) loss, a grad_norm off by more than the tolerance, a missing
# step each fail it; equal runs and differences within the tolerance pass.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export PYTHONDONTWRITEBYTECODE=1
command -v python3 > /dev/null || { echo "SKIP: no python3"; exit 77; }
python3 - "$T" << 'PY'
import array, json, math, struct, sys
d = sys.argv[1]
def st(name, vals):
    data = array.array("f", vals).tobytes()
    h = json.dumps({"w": {"dtype": "F32", "shape": [len(vals)], "data_offsets": [0, len(data)]}}).encode()
    open(d + "/" + name, "wb").write(struct.pack("<Q", len(h)) + h + data)
st("w.st", [1, 2, 3, 4]); st("near.st", [1, 2, 3, 4.00001]); st("nan.st", [1, 2, math.nan, 4])
st("allnan.st", [math.nan] * 4); st("far.st", [1, 2, 3, 5])
def log(name, rows):
    with open(d + "/" + name, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
a = [{"step": 1, "loss": 2.0, "grad_norm": 1.0}, {"step": 2, "loss": 1.5, "grad_norm": 0.5}]
log("a.jsonl", a)
log("norm.jsonl", [a[0], dict(a[1], grad_norm=0.6)])
log("nullloss.jsonl", [dict(a[0], loss=None), a[1]])
log("short.jsonl", [a[0]])
log("skip.jsonl", [dict(a[0], grad_norm=None, skipped=True), a[1]])
PY
fail=0
cmp() {   # cmp WANT MODE REF RUN TOL [exact]
    local want=$1
    shift
    python3 "$root/tests/e2e/train_compare.py" "$1" "$T/$2" "$T/$3" "${@:4}" > "$T/out" 2>&1
    local rc=$? got=fail
    [ $rc = 0 ] && got=pass
    if [ "$want" = "$got" ]; then
        echo "ok: $want: $*"
    else
        echo "FAIL: expected $want, exit $rc: $*"; cat "$T/out"; fail=1
    fi
}
cmp pass weights w.st w.st 0
cmp pass weights w.st near.st 1e-5
cmp fail weights w.st far.st 1e-5
cmp fail weights w.st nan.st 1e-5
cmp fail weights allnan.st allnan.st 1e-5
cmp pass losses a.jsonl a.jsonl 0 exact
cmp fail losses a.jsonl norm.jsonl 1e-5
cmp fail losses a.jsonl nullloss.jsonl 1e-5
cmp fail losses nullloss.jsonl nullloss.jsonl 1e-5
cmp fail losses a.jsonl short.jsonl 1e-5
cmp pass losses skip.jsonl skip.jsonl 0 exact
cmp fail losses skip.jsonl a.jsonl 1e-5
[ $fail = 0 ] && echo PASS
exit $fail
