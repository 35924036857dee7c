#!/bin/bash
# tune.test.sh SHARDC BUILD_DIR — shardc tune's search, checked by its properties
# (never by the cost model's numbers, which change with it):
#  - the pruned search reports the same step times as the exhaustive one, and no
#    bound is above the exact value it bounds (small spaces, every layout planned);
#  - every layout reported fits, and emits its trainer; the top ones build and their
#    schedules verify;
#  - keys the user set (in the file or with -D) stay fixed; sets are searched as given;
#  - -o writes a spec that check resolves to the winner's layout;
#  - a search spec that contradicts itself, and nothing fitting, are errors (exit 1)
#    that say where and what would help; check, plan and build refuse open keys.
set -u
SHARDC=$1
BUILD=${2:-build}
# the sanitizer build's runtime (make asan) links only with the sanitizers, as in
# tests/sanitize/trainers.test.sh
if nm "$BUILD/runtime/libshardrt_cpu.a" 2> /dev/null | grep -q "__asan_report"; then
    export CC="cc -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
fi
SRC=$(cd "$(dirname "$0")/../.." && pwd)
D=$SRC/tests/golden/tune
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

# A JSON question: python3 prints the answer, or FAIL lines and exits 1.
ask() { python3 - "$@"; }

# 1. pruning is sound: the same top step times as the exhaustive search, no bound above its value
for spec in gpt-8ranks gpt-8ranks-profile llama-tight gpt-a100 gpt-fixed gpt-h100-tpo; do
    "$SHARDC" tune "$D/$spec.tspec" --quiet --top 6 --json "$T/p.json" > "$T/p.txt" 2> "$T/p.err" || { bad "$spec: tune exit $?"; cat "$T/p.err"; continue; }
    "$SHARDC" tune "$D/$spec.tspec" --quiet --top 6 --exhaustive --json "$T/e.json" > "$T/e.txt" 2> "$T/e.err" || { bad "$spec: exhaustive exit $?"; continue; }
    if ask "$T/p.json" "$T/e.json" <<'PY'
import json, sys
p, e = (json.load(open(f)) for f in sys.argv[1:3])
bad = []
ps, es = [r["step_time_s"] for r in p["ranked"]], [r["step_time_s"] for r in e["ranked"]]
if len(ps) != len(es) or any(not (abs(a - b) <= 1e-12 * max(a, b)) for a, b in zip(ps, es)):
    bad.append(f"pruned top {ps} != exhaustive top {es}")
if e["bound_violations"] != 0: bad.append(f"{e['bound_violations']} bounds above the exact value")
for r in p["ranked"]:
    if not (r["peak_device_bytes"] <= p["gpu_memory"]): bad.append(f"a reported layout needs {r['peak_device_bytes']} > {p['gpu_memory']}")
    if not (r["time_bound_s"] <= r["step_time_s"]): bad.append("a reported layout's bound is above its step")
c = p["counts"]
looked = c["memory_bound"] + c["cannot_plan"] + c["does_not_fit"] + c["fits"] + c["pruned"]
if looked != c["layouts"]: bad.append(f"the fates add up to {looked}, not {c['layouts']} layouts")
if c["choices"] != c["layouts"] + c["duplicates"] + sum(r["count"] for r in p["invalid"]): bad.append("the choices do not add up")
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
    then ok "$spec: pruned = exhaustive, no bound above its value"; else bad "$spec: pruning"; fi
done

# 2. fixed keys stay fixed, sets are searched as given; -D fixes an open key
"$SHARDC" tune "$D/gpt-fixed.tspec" --quiet --top 50 --json "$T/f.json" > /dev/null &&
"$SHARDC" tune "$D/gpt-8ranks.tspec" --quiet --top 50 -D zero.stage=1 -D parallel.tp=2 --json "$T/d.json" > /dev/null &&
if ask "$T/f.json" "$T/d.json" <<'PY'
import json, sys
f, d = (json.load(open(x)) for x in sys.argv[1:3])
bad = []
if not f["ranked"] or not d["ranked"]: bad.append("nothing ranked")
for r in f["ranked"]:
    l = r["layout"]
    if l["tp"] != 2 or l["micro_batch"] != 2 or l["zero_stage"] not in (1, 2) or l["schedule"] not in ("1f1b", "interleaved") \
       or l["checkpointing"] not in ("none", "full"):
        bad.append(f"gpt-fixed: {l}")
for r in d["ranked"]:
    if r["layout"]["zero_stage"] != 1 or r["layout"]["tp"] != 2: bad.append(f"-D: {r['layout']}")
if [o["key"] for o in d["open"]] != [o["key"] for o in json.load(open(sys.argv[2]))["open"]] or any(o["key"] in ("zero.stage", "parallel.tp") for o in d["open"]):
    bad.append("-D left the key open")
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
then ok "fixed keys and sets"; else bad "fixed keys and sets"; fi

# 2b. tp_comm_overlap = auto: wgrad and full are both searched where tp > 1 (both
#     ranked among every layout that fits), tp = 1 counts once, as wgrad
"$SHARDC" tune "$D/gpt-h100-tpo.tspec" --quiet --top 100 --json "$T/o.json" > /dev/null &&
if ask "$T/o.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
bad = []
seen = {}
for r in j["ranked"]:
    l = r["layout"]
    seen.setdefault(l["tp"] > 1, set()).add(l["tp_comm_overlap"])
if seen.get(True) != {"wgrad", "full"}: bad.append(f"tp > 1 ranked {seen.get(True)}, not wgrad and full")
if seen.get(False, {"wgrad"}) != {"wgrad"}: bad.append(f"tp = 1 ranked {seen.get(False)}")
if len(j["ranked"]) != j["counts"]["fits"]: bad.append("not every fitting layout ranked")
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
then ok "tp_comm_overlap = auto: wgrad and full where tp > 1"; else bad "tp_comm_overlap = auto"; fi

# 3. -o: check resolves the written spec to the winner's layout; the top three build
#    (closed with -D on the keys that were open)
"$SHARDC" tune "$D/gpt-8ranks.tspec" --quiet --top 3 --json "$T/w.json" -o "$T/best.tspec" > /dev/null || bad "tune -o: exit $?"
"$SHARDC" check "$T/best.tspec" > "$T/best.txt" 2> "$T/best.err" || { bad "check best.tspec"; cat "$T/best.err"; }
if ask "$T/w.json" "$T/best.txt" <<'PY'
import json, re, sys
w = json.load(open(sys.argv[1]))["ranked"][0]["layout"]
text = open(sys.argv[2]).read()
def key(block, k):
    m = re.search(r"^%s(?: \w+)? \{\n(.*?)^\}" % block, text, re.S | re.M)
    return re.search(r"^  %s = (\S+)" % k, m.group(1), re.M).group(1) if m else None
want = {("parallel", "tp"): str(w["tp"]), ("parallel", "pp"): str(w["pp"]), ("parallel", "dp"): str(w["dp"]),
        ("parallel", "schedule"): w["schedule"], ("parallel", "microbatches"): str(w["microbatches"]),
        ("parallel", "sequence_parallel"): "on" if w["sequence_parallel"] else "off",
        ("zero", "stage"): str(w["zero_stage"]), ("train", "micro_batch"): str(w["micro_batch"]),
        ("checkpointing", "activations"): w["checkpointing"]}
bad = [f"{b}.{k} = {key(b, k)}, the winner has {v}" for (b, k), v in want.items() if key(b, k) != v]
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
then ok "-o: check resolves the winner's layout"; else bad "-o"; fi
"$SHARDC" tune "$D/gpt-fixed.tspec" --quiet --top 3 --json "$T/w3.json" > /dev/null || bad "tune gpt-fixed: exit $?"
ask "$T/w3.json" > "$T/top.args" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for r in j["ranked"]:
    l = r["layout"]
    d = {"parallel.pp": l["pp"], "parallel.schedule": l["schedule"], "zero.stage": l["zero_stage"],
         "checkpointing.activations": l["checkpointing"]}
    print(" ".join(f"-D {o['key']}={d[o['key']]}" for o in j["open"]))
PY
n=0
while read -r -a args; do
    n=$((n + 1))
    if "$SHARDC" build "$D/gpt-fixed.tspec" "${args[@]}" -o "$T/trainer$n" > /dev/null 2> "$T/build.err" && [ -x "$T/trainer$n" ]; then
        ok "rank $n builds (${args[*]})"
    else bad "rank $n does not build (${args[*]})"; cat "$T/build.err"; fi
done < "$T/top.args"
[ $n = 3 ] || bad "expected 3 ranked layouts to build, got $n"

# 4. a search spec that contradicts itself: the first choice's errors, located; exit 1
"$SHARDC" tune "$D/contradiction.tspec" --quiet > /dev/null 2> "$T/c.err"; rc=$?
if [ $rc = 1 ] && grep -qE "contradiction.tspec:4:11: error: parameter offload needs ZeRO stage 3" "$T/c.err" &&
   grep -q "hint: the open keys' values contradict the keys that are set" "$T/c.err"; then ok "contradiction"; else bad "contradiction (exit $rc)"; cat "$T/c.err"; fi

# 5. nothing fits: exit 1, the closest layout and what would make it fit; no -o file
"$SHARDC" tune "$D/llama-tight.tspec" --quiet -D cluster.gpu_memory=140MiB -o "$T/none.tspec" --json "$T/n.json" > "$T/n.txt" 2> "$T/n.err"; rc=$?
if [ $rc = 1 ] && grep -q "^nothing fits" "$T/n.txt" && grep -q "^changes, each checked by re-planning" "$T/n.txt" &&
   [ ! -e "$T/none.tspec" ] && python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j["ranked"] == [] and j["nothing_fits"]["fixes"] else 1)' "$T/n.json"
then ok "nothing fits"; else bad "nothing fits (exit $rc)"; cat "$T/n.txt" "$T/n.err"; fi

# 6. plan and build refuse open keys where they are; tune refuses a spec with none open
for cmd in plan build; do
    out=(); [ $cmd = build ] && out=(-o "$T/never")
    "$SHARDC" $cmd "$D/gpt-fixed.tspec" "${out[@]}" > /dev/null 2> "$T/r.err"; rc=$?
    if [ $rc = 1 ] && grep -qE "gpt-fixed.tspec:3:25: error: parallel.pp is left open \(auto\): shardc $cmd needs one layout" "$T/r.err" &&
       grep -q "hint: let \`shardc tune" "$T/r.err" && [ ! -e "$T/never" ]; then ok "$cmd refuses open keys"; else bad "$cmd (exit $rc)"; cat "$T/r.err"; fi
done
"$SHARDC" tune "$SRC/specs/tiny-gpt.tspec" > /dev/null 2> "$T/t.err"; rc=$?
if [ $rc = 1 ] && grep -q "leaves no layout key open" "$T/t.err"; then ok "tune wants open keys"; else bad "tune on a closed spec (exit $rc)"; fi

# 7. every layout tune reports lowers and emits its trainer (`build --emit-c`: the
#    generator's own checks of the plan, without the C compiler); missing until the
#    tune benchmark built ZeRO-2 + sequence-parallel candidates that died in lowering
"$SHARDC" tune "$D/gpt-8ranks.tspec" --quiet --top 1000 --json "$T/all.json" > /dev/null || bad "tune --top all: exit $?"
if ask "$T/all.json" "$SHARDC" "$D/gpt-8ranks.tspec" "$T/x.c" <<'EOF'
import json, subprocess, sys
j = json.load(open(sys.argv[1])); shardc, spec, out = sys.argv[2:5]
def value(key, l):
    v = {"parallel.tp": l["tp"], "parallel.pp": l["pp"], "parallel.schedule": l["schedule"],
         "parallel.virtual_stages": l["virtual_stages"], "parallel.sequence_parallel": "on" if l["sequence_parallel"] else "off",
         "zero.stage": l["zero_stage"], "train.micro_batch": l["micro_batch"],
         "checkpointing.activations": l["checkpointing"], "checkpointing.every": l["checkpointing_every"]}
    return v[key]
# virtual_stages applies only to the interleaved schedule: the others get the spec without it
flat = out + ".tspec"
text = open(spec).read()
assert "  virtual_stages = auto" in text
open(flat, "w").write(text.replace("  virtual_stages = auto", ""))
bad = 0
for i, e in enumerate(j["ranked"]):
    l = e["layout"]
    inter = l["schedule"] == "interleaved"
    keys = [o["key"] for o in j["open"] if inter or o["key"] != "parallel.virtual_stages"]
    args = [a for k in keys for a in ("-D", f"{k}={value(k, l)}")]
    r = subprocess.run([shardc, "build", spec if inter else flat, *args, "--emit-c", out], capture_output=True, text=True)
    if r.returncode != 0:
        bad += 1
        if bad <= 5: print(f"FAIL: rank {i + 1} ({' '.join(args)}): {r.stderr.strip().splitlines()[-2:]}")
print(f"{len(j['ranked']) - bad} of {len(j['ranked'])} reported layouts emit their trainer")
sys.exit(1 if bad or not j["ranked"] else 0)
EOF
then ok "every reported layout emits its trainer"; else bad "a reported layout does not emit its trainer"; fi
exit $fail
