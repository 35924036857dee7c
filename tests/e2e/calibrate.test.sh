#!/bin/bash
# calibrate.test.sh SHARDC BUILD_DIR — `shardc calibrate` end to end: a --quick
# calibration of this machine through the CPU runtime (2 ranks a node for the
# collectives), its progress (a line per benchmark), the profile it writes
# (every table there, the activation and sum-of-squares rows at every thread
# count, read back by `shardc check`), and plans made with it:
# the derived cluster keys, a predicted step, and a spec that sets a key still
# overriding the profile; with SRT_CHECK=1 no calibration pass left subnormal operands
# (and the check finds the one a seam writes).  Usage errors and a failing phase (no profile left
# behind).  Two nodes simulated on this machine (--nodes 2, --smoke).  Then the CUDA backend's path on the emulated CUDA stack
# (BUILD/cuda-emu, docs/cuda-emulation.md) with --smoke, planned for an H100; the
# emulator as a node of one GPU (CUEMU_DEVICES=1): the compute phase once and no
# collectives; and the real CUDA build without a GPU: an error, no profile.
set -u
SHARDC=$1
BUILD=$2
if ! command -v mpirun > /dev/null || [ ! -x "$BUILD/runtime/shardrt_calibrate" ]; then
    echo "SKIP: needs mpirun and BUILD/runtime/shardrt_calibrate"
    exit 77
fi
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# the CPU runtime, --quick, collectives on 2 ranks; SRT_CHECK=1: no pass leaves subnormal
# operands in the compute phase's arena (check_operands in runtime/calibrate/calibrate.c)
if ! SRT_CHECK=1 "$SHARDC" calibrate --quick --ranks 2 -o "$T/machine.json" > "$T/cal.out" 2> "$T/cal.err"; then
    bad "shardc calibrate --quick failed:"; tail -20 "$T/cal.err"
else
    grep -q '^\[phase 1/2\] \[1/[0-9]*\] pass 1/2 gemm fp32 fwd 64x64x64: .* GFLOP/s$' "$T/cal.err" || bad "no progress line per benchmark"
    grep -q '^\[phase 1/2\] \[[0-9]*/[0-9]*\] gemm fp32 fwd 64x64x64: .* GFLOP/s$' "$T/cal.err" || bad "no last pass's line"
    grep -q '^\[phase 2/2\] \[[0-9]*/[0-9]*\] pass 1/2 all_reduce intra' "$T/cal.err" || bad "the collectives ran in one pass"
    grep -q 'sharing, 2 ranks at once against one alone' "$T/cal.err" || bad "no sharing test"
    grep -q 'activation gelu fp32 fwd [0-9]* elements: .* ns/element$' "$T/cal.err" || bad "no activation benchmark"
    grep -q "gradient norm's sum of squares fp32: .* M elements/s$" "$T/cal.err" || bad "no sum-of-squares benchmark"
    grep -q "^wrote $T/machine.json: cpu backend" "$T/cal.out" || bad "no summary: $(cat "$T/cal.out")"
    /usr/bin/python3 - "$T/machine.json" <<'PY' || fail=1
import json, sys
p = json.load(open(sys.argv[1]))
tables = {r["table"] for r in p["rows"]}
want = {"gemm", "attention", "elementwise", "launch", "optimizer", "copy", "nvme", "collective", "sharing", "skew",
        "activation", "sumsq", "norm"}
threads = {r["threads"] for r in p["rows"] if r["table"] == "gemm"}
acts = {(r["op"], r["dtype"], r["pass"], r["threads"]) for r in p["rows"] if r["table"] == "activation"}
if acts != {(o, d, s, t) for o in ("gelu", "swiglu") for d in ("fp32", "bf16") for s in ("fwd", "bwd") for t in threads} or \
   not all(r["elements"] > 0 and r["seconds"] > 0 for r in p["rows"] if r["table"] in ("activation", "sumsq")) or \
   {r["threads"] for r in p["rows"] if r["table"] == "sumsq"} != threads:
    sys.exit("FAIL: the activation and sumsq rows are not one per (op, dtype, pass) and thread count: %s" % sorted(acts))
# the norms: a full grid of rows x cols for each norm, dtype, pass and thread count
norms = {}
for r in p["rows"]:
    if r["table"] == "norm" and r["seconds"] > 0:
        norms.setdefault((r["op"], r["dtype"], r["pass"], r["threads"]), set()).add((r["rows"], r["cols"]))
shapes = set.union(*norms.values()) if norms else set()
if set(norms) != {(o, d, s, t) for o in ("layernorm", "rmsnorm") for d in ("fp32", "bf16") for s in ("fwd", "bwd") for t in threads} or \
   len({r for r, c in shapes}) < 2 or len({c for r, c in shapes}) < 2 or any(v != shapes for v in norms.values()):
    sys.exit("FAIL: the norm rows are not a grid of rows and columns per (op, dtype, pass) and thread count: %s" % sorted(norms))
ops = {r["op"] for r in p["rows"] if r["table"] == "collective"}
skew = {(r["op"], r["ranks_per_node"]) for r in p["rows"] if r["table"] == "skew"}
if p["shardc_profile"] != 1 or p["backend"] != "cpu" or p["grid"] != "quick" or tables != want or \
   ops != {"all_reduce", "all_gather", "reduce_scatter", "send_recv"} or \
   not {("all_reduce", w) for w in {r["ranks_per_node"] for r in p["rows"] if r["table"] == "sharing"}} <= skew or \
   not all(r["seconds"] >= 0 and r["compute_seconds"] > 0 for r in p["rows"] if r["table"] == "skew"):
    sys.exit("FAIL: the profile lacks tables or ops: %s %s %s" % (sorted(tables), sorted(ops), sorted(skew)))
# warm GEMM rows at every dtype, pass and thread count, never for a dimension over 512; the cache's size
warm = [r for r in p["rows"] if r["table"] == "gemm" and r.get("cache") == "warm"]
if {(r["dtype"], r["pass"], r["threads"]) for r in warm} != {(d, s, t) for d in ("fp32", "bf16") for s in ("fwd", "bwd") for t in threads} or \
   max(max(r["m"], r["n"], r["k"]) for r in warm) > 512 or not p.get("llc_bytes", 1) > 0:
    sys.exit("FAIL: the warm GEMM rows are not one grid per (dtype, pass) and thread count: %d rows" % len(warm))
# one compute phase at one thread and at all the cores, each benchmark at both in turn: a
# shape's one-thread row is followed by its row at all the cores (calibrate's at_threads)
import os
cores = len(os.sched_getaffinity(0))
if threads != ({1, cores} if cores > 1 else {1}):
    sys.exit("FAIL: the GEMM rows are at %s threads, not at one and at all %d cores" % (sorted(threads), cores))
gemm = [r for r in p["rows"] if r["table"] == "gemm"]
shape = lambda r: (r["dtype"], r["pass"], r["m"], r["n"], r["k"], r.get("cache"))
if cores > 1 and not all(a["threads"] == 1 and b["threads"] == cores and shape(a) == shape(b)
                         for a, b in zip(gemm[0::2], gemm[1::2])):
    sys.exit("FAIL: the GEMM rows of one shape at one thread and at %d are not measured in turn" % cores)
# the passes over the tables record each benchmark once, from the last pass (the copy and
# NVMe rows, which name no thread count, once)
keys = [tuple(sorted((k, v) for k, v in r.items() if not k.endswith("seconds"))) for r in p["rows"]
        if r["table"] not in ("skew", "copy", "nvme")]
if len(keys) != len(set(keys)):
    sys.exit("FAIL: a benchmark has several rows (the passes recorded it more than once)")
# the BLAS kernels the compute rows ran (OpenBLAS's name for them)
if not (isinstance(p.get("blas"), str) and p["blas"]):
    sys.exit("FAIL: the profile does not say which BLAS kernels it measured: %r" % p.get("blas"))
print("ok: the profile has every table and collective (%d rows, one per benchmark)" % len(p["rows"]))
PY
    spec=(specs/tiny-gpt.tspec -D cluster.gpus_per_node=2 -D parallel.dp=2 -D "cluster.profile=\"$T/machine.json\"")
    "$SHARDC" check "${spec[@]}" > "$T/check.txt" 2>&1 || bad "check with the profile: $(cat "$T/check.txt")"
    grep -q "profile = \"$T/machine.json\"" "$T/check.txt" || bad "the resolved spec does not name the profile"
    grep -q "gpu = cpu" "$T/check.txt" || bad "a CPU profile did not plan the CPU backend"
    # a key the spec sets wins over the profile's
    "$SHARDC" check "${spec[@]}" -D cluster.pcie=3GB/s | grep -q "pcie = 3GB/s" || bad "cluster.pcie set in the spec lost to the profile"
    if "$SHARDC" plan "${spec[@]}" > "$T/plan.txt" 2>&1 && grep -q '^step .* s predicted' "$T/plan.txt"; then
        echo "ok: planned with the profile: $(grep '^step' "$T/plan.txt")"
    else
        bad "plan with the profile:"; tail -5 "$T/plan.txt"
    fi
    # the profile in the spec's folder, named relatively
    mkdir "$T/sub" && cp "$T/machine.json" "$T/sub/m.json" &&
        printf 'include "%s/specs/tiny-gpt.tspec"\ncluster { profile = "m.json" }\n' "$PWD" > "$T/sub/s.tspec"
    "$SHARDC" plan "$T/sub/s.tspec" > /dev/null 2>&1 || bad "a relative profile path is not read from the spec's folder"
fi

# the operands' check finds a subnormal (the seam writes one): the phase fails, no profile
SRT_CHECK=1 SRT_TEST_SUBNORMAL=1 "$SHARDC" calibrate --smoke --ranks 2 -o "$T/sub.json" > /dev/null 2> "$T/sub.err"; rc=$?
if [ $rc != 0 ] && [ ! -e "$T/sub.json" ] && grep -q "pass 1 left 1 subnormal operands in the arena" "$T/sub.err"; then
    echo "ok: SRT_CHECK=1 finds a subnormal operand left in the arena (exit $rc, no profile)"
else
    bad "a subnormal operand in the arena: exit $rc, $(tail -3 "$T/sub.err")"
fi

# two nodes of 2 ranks on this machine: the rows across nodes, and a plan across nodes with them
if "$SHARDC" calibrate --smoke --ranks 2 --nodes 2 -o "$T/nodes.json" > /dev/null 2> "$T/nodes.err" &&
   /usr/bin/python3 -c 'import json, sys
ops = {r["op"] for r in json.load(open(sys.argv[1]))["rows"] if r["table"] == "collective" and r["span"] == "inter"}
sys.exit(ops != {"all_reduce", "all_gather", "reduce_scatter", "send_recv"})' "$T/nodes.json" &&
   "$SHARDC" plan specs/tiny-gpt.tspec -D cluster.nodes=2 -D cluster.gpus_per_node=2 -D "cluster.profile=\"$T/nodes.json\"" \
       > "$T/nodes.plan" 2>&1 && grep -q '^step .* s predicted' "$T/nodes.plan"; then
    echo "ok: --nodes 2 measured every collective across the nodes, and a 2-node plan used the profile"
else
    bad "--nodes 2:"; tail -5 "$T/nodes.err" "$T/nodes.plan"
fi

# usage errors exit 2; a failing phase exits 1 and leaves no profile
"$SHARDC" calibrate --quick > /dev/null 2>&1; [ $? = 2 ] || bad "calibrate without -o did not exit 2"
"$SHARDC" calibrate -o "$T/x.json" --backend tpu > /dev/null 2>&1; [ $? = 2 ] || bad "--backend tpu did not exit 2"
"$SHARDC" calibrate -o "$T/x.json" --ranks 0 > /dev/null 2>&1; [ $? = 2 ] || bad "--ranks 0 did not exit 2"
"$SHARDC" calibrate -o "$T/x.json" --runtime "$T/none" > /dev/null 2> "$T/rt.err"; rc=$?
{ [ $rc = 1 ] && grep -q "shardrt_calibrate was not found in $T/none" "$T/rt.err"; } || bad "a missing runtime: exit $rc, $(cat "$T/rt.err")"
"$SHARDC" calibrate --smoke --ranks 2 --mpirun false -o "$T/x.json" > /dev/null 2> "$T/mpi.err"; rc=$?
{ [ $rc = 1 ] && [ ! -e "$T/x.json" ] && grep -q "the communication benchmarks on 2 ranks failed" "$T/mpi.err"; } ||
    bad "a failing launcher: exit $rc, profile left: $([ -e "$T/x.json" ] && echo yes || echo no)"

# the CUDA backend's path on the emulated CUDA stack
if [ -x "$BUILD/cuda-emu/shardrt_calibrate_cuda" ]; then
    if "$SHARDC" calibrate --backend cuda --runtime "$BUILD/cuda-emu" --smoke --ranks 2 -o "$T/cuda.json" \
           > "$T/cu.out" 2> "$T/cu.err" &&
       "$SHARDC" plan specs/gpt2-124m.tspec -D "cluster.profile=\"$T/cuda.json\"" > "$T/cu.plan" 2>&1 &&
       grep -q '^step .* s predicted' "$T/cu.plan"; then
        echo "ok: calibrated the CUDA backend on the emulated stack and planned an H100 with it"
    else
        bad "the CUDA path on the emulator:"; tail -5 "$T/cu.err" "$T/cu.plan"
    fi
    # one GPU (the emulator standing for a node of one): no --ranks, no collectives to
    # measure; the compute phase once (a GPU's ops do not depend on the host's threads)
    if CUEMU_DEVICES=1 "$SHARDC" calibrate --backend cuda --runtime "$BUILD/cuda-emu" --smoke -o "$T/one.json" \
           > "$T/one.out" 2> "$T/one.err" && grep -q "one GPU: no collectives to measure" "$T/one.err" &&
       grep -q "0 collective fits" "$T/one.out" &&
       /usr/bin/python3 -c 'import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert not [r for r in rows if r["table"] in ("collective", "sharing", "skew")], "collectives on one GPU"
assert {r.get("threads", 1) for r in rows} == {1}, "a compute phase per thread count"' "$T/one.json" &&
       "$SHARDC" plan specs/gpt2-124m.tspec -D parallel.dp=1 -D cluster.gpus_per_node=1 \
           -D "cluster.profile=\"$T/one.json\"" 2>&1 | grep -q '^step .* s predicted'; then
        echo "ok: one GPU: the compute phase once, no collectives, and the profile plans one GPU"
    else
        bad "the one-GPU calibration:"; tail -3 "$T/one.err" "$T/one.out"
    fi
    # a CUDA profile cannot plan the CPU backend
    "$SHARDC" check specs/tiny-gpt.tspec -D "cluster.profile=\"$T/cuda.json\"" > /dev/null 2> "$T/cu.bad"
    grep -q "measured the CUDA backend" "$T/cu.bad" || bad "a CUDA profile with cluster.gpu = cpu was accepted"
else
    echo "(no BUILD/cuda-emu: the CUDA path is not exercised here)"
fi
# the CUDA build on a machine without a GPU: a clear error, nothing written
if [ -x "$BUILD/runtime/shardrt_calibrate_cuda" ] && ! nvidia-smi -L > /dev/null 2>&1; then
    "$SHARDC" calibrate --backend cuda -o "$T/nogpu.json" > /dev/null 2> "$T/nogpu.err"; rc=$?
    { [ $rc = 1 ] && [ ! -e "$T/nogpu.json" ] && grep -q "found no CUDA device" "$T/nogpu.err"; } ||
        bad "--backend cuda without a GPU: exit $rc, $(head -2 "$T/nogpu.err")"
fi
[ $fail = 0 ] && echo "ok: shardc calibrate"
exit $fail
