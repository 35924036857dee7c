#!/usr/bin/env bash
# The inspection views of `shardc plan` on GPT-3 175B (16 rank classes, the
# whole step: 782 720 ops, 300 MB of trace), checked without a browser: --trace writes valid Chrome trace
# JSON (every op a complete event, flows paired, counters in time order, no
# overlapping slices on a thread), and --html writes one self-contained page
# (nothing outside itself, under 12 MiB).  tests/golden/html.test.sh renders
# the page in headless Chromium.
# Usage: trace.test.sh SHARDC BUILD_DIR      (run from the repository root)
set -u
shardc=$1
spec=specs/gpt3-175b.tspec
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

if ! "$shardc" plan "$spec" --trace "$tmp/t.json" --html "$tmp/r.html" >"$tmp/plan.txt" 2>&1; then
  cat "$tmp/plan.txt"
  bad "shardc plan $spec --trace --html exited with an error"
  exit 1
fi
[ -s "$tmp/t.json" ] || bad "no trace written"
[ -s "$tmp/r.html" ] || bad "no HTML written"
[ $fail = 0 ] || exit 1

# ---- the trace ------------------------------------------------------------------------
# (json.load refuses a file that is not valid JSON: one parse of the 300 MB, not two)
python3 - "$tmp/t.json" <<'EOF' || bad "t.json is not valid JSON or not a well-formed trace"
import collections, json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
assert d.get("displayTimeUnit") == "ms", "displayTimeUnit"
x = [e for e in ev if e["ph"] == "X"]
assert len(x) > 1000, f"only {len(x)} ops"
assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in x), "negative time or duration"
assert all({"layer", "microbatch", "bytes"} <= e["args"].keys() for e in x), "op args"
threads = collections.defaultdict(list)
for e in x:
    threads[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
for k, v in threads.items():
    v.sort()
    assert all(b[0] >= a[1] - 1e-3 for a, b in zip(v, v[1:])), f"overlapping slices on thread {k}"
meta = [e for e in ev if e["ph"] == "M"]
procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
names = {e["args"]["name"] for e in meta if e["name"] == "thread_name"}
assert len(procs) == 16 and all(n.startswith("stage ") for n in procs.values()), procs
assert "compute" in names and names <= {"compute", "tp-comm", "dp-comm", "pp-comm", "copy", "host"}, names
flows = collections.Counter((e["ph"], e["id"]) for e in ev if e["ph"] in ("s", "f"))
ids = {i for _, i in flows}
assert ids and all(flows[("s", i)] == 1 and flows[("f", i)] == 1 for i in ids), "unpaired flow events"
assert any(e["ph"] == "s" and e["cat"] == "pipeline" for e in ev), "no pipeline flows"
counters = collections.defaultdict(list)
for e in ev:
    if e["ph"] == "C":
        counters[(e["pid"], e["name"])].append(e["ts"])
assert len(counters) >= 16, "a device counter per class"
assert all(all(a < b for a, b in zip(v, v[1:])) for v in counters.values()), "counter not in time order"
print(f"trace: {len(x)} ops on {len(threads)} threads of {len(procs)} classes, {len(ids)} flows")
EOF

# ---- the page: self-contained ---------------------------------------------------------
# (url(#id) is a reference inside the page: the live curve's clip path)
if grep -n -o -E '(src|href)=|https?:|@import|url\([^#]' "$tmp/r.html" | head -n 3 | grep .; then
  bad "r.html refers to something outside itself"
fi
size=$(wc -c <"$tmp/r.html")
[ "$size" -lt $((12 << 20)) ] || bad "r.html is $size bytes (over 12 MiB)"

[ $fail = 0 ] && echo "ok: trace and self-contained HTML of $spec"
exit $fail
