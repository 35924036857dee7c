#!/bin/bash
# gemm_shapes.test.sh SHARDC BUILD_DIR — the generated program declares every
# GEMM shape its code calls (srt_program.gemms, which the CUDA backend plans
# at start-up), and nothing else.
#
# For several layouts (tiny-gpt dp 2 bf16, tp 2 with its rank-0-only biases,
# folded and straight-line; tiny-llama tp 2 with sequence parallelism;
# tiny-gpt's and tiny-llama's with tp_comm_overlap = full under sequence
# parallelism, their chunks' batched GEMMs (whose batch and strides are part
# of the shape; GPT's c_fc with its GELU epilogue); pp 2
# interleaved; full checkpointing; the custom op of examples/custom-op) the
# generated C is compiled warning-free and read: every srt_matmul_* call's
# N, C, OC arguments and its optional operands give the shapes it needs
# (fwd: with and/or without a bias; bwd: dinp -> data GEMM, dw -> weight
# GEMM; the fused head srt_head_xent: its forward GEMM, and the backward ones
# of the gradients it is given), and the gemm_shapes table must hold exactly
# those.  The check is on
# the text of the calls, not on a run: it sees every path the code has (eval,
# recompute, every pipeline stage's class, sequence parallelism), also the
# ones a short run never takes, and any call written outside rt_call; the
# table's expressions are the calls' own (enum constants), so they compare
# as text.  A call to a srt_matmul* op the checker does not know fails it, so
# a new GEMM op cannot go unchecked.  Finally the checker must catch a table
# with one entry removed.
set -u
SHARDC=$1
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
CC=${CC:-cc}
fail=0

cat > "$T/check.py" <<'EOF'
import re, sys

def call_args(text, start):
    """The top-level arguments of the call whose '(' is at start."""
    depth, args, cur, i = 0, [], "", start
    while True:
        ch = text[i]
        if ch == "(":
            depth += 1
            if depth > 1: cur += ch
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append(cur.strip()); return args
            cur += ch
        elif ch == "," and depth == 1:
            args.append(cur.strip()); cur = ""
        else:
            cur += ch
        i += 1

def variants(b):
    """The bias variants an optional operand needs: NONE, COND ? X : NONE, X."""
    if b == "NONE": return [False]
    if re.search(r":\s*NONE$", b): return [True, False]
    return [True]

src = open(sys.argv[1]).read()
need = set()
for m in re.finditer(r"\bsrt_(matmul\w*|head_xent)\s*\(", src):
    op, a = m.group(1), call_args(src, m.end() - 1)[2:]   # after (c, stream
    if op == "matmul_fwd":
        need |= {("SRT_GEMM_FWD", a[4], a[5], a[6], b) for b in variants(a[3])}
    elif op == "matmul_fwd_batched":   # its batch and strides are part of the shape
        need |= {("SRT_GEMM_FWD_BATCHED", a[4], a[5], a[6], b, a[7], a[8], a[9]) for b in variants(a[3])}
    elif op == "matmul_gelu_fwd":
        need |= {("SRT_GEMM_FWD_GELU", a[5], a[6], a[7], b) for b in variants(a[4])}
    elif op == "matmul_gelu_fwd_batched":
        need |= {("SRT_GEMM_FWD_GELU_BATCHED", a[5], a[6], a[7], b, a[8], a[9], a[10]) for b in variants(a[4])}
    elif op == "matmul_bwd_dgelu":
        need |= {("SRT_GEMM_BWD_DGELU", a[5], a[6], a[7], b) for b in variants(a[1])}
    elif op == "matmul_bwd":
        if a[0] != "NONE": need.add(("SRT_GEMM_BWD_DATA", a[6], a[7], a[8], False))
        if a[1] != "NONE": need.add(("SRT_GEMM_BWD_WEIGHT", a[6], a[7], a[8], False))
    elif op == "head_xent":   # the head's matmul_fwd, and its matmul_bwd's GEMMs
        need.add(("SRT_GEMM_FWD", a[7], a[8], a[9], False))
        if a[1] != "NONE": need.add(("SRT_GEMM_BWD_DATA", a[7], a[8], a[9], False))
        if a[2] != "NONE": need.add(("SRT_GEMM_BWD_WEIGHT", a[7], a[8], a[9], False))
    else:
        print(f"  srt_{op}: a GEMM op this checker does not know"); sys.exit(1)
have = set()
for m in re.finditer(r"\{\.kind = (\w+), \.N = ([^,]+), \.C = ([^,]+), \.OC = ([^,]+), \.bias = (\w+),[^}\n]*?"
                     r"(?:, \.batch = (\d+), \.out_stride = ([^,]+), \.inp_stride = ([^}]+))?\}", src):
    batch = (m.group(6), m.group(7), m.group(8)) if m.group(6) else ()
    have.add((m.group(1), m.group(2), m.group(3), m.group(4), m.group(5) == "true") + batch)
decl = re.search(r"\.gemms = gemm_shapes, \.ngemms = (\d+),", src)
ok = True
if not need: print("  no srt_matmul calls found"); ok = False
if not decl or int(decl.group(1)) != len(have):
    print("  srt_program.gemms / ngemms do not name the table's", len(have), "entries"); ok = False
for s in sorted(need - have): print("  called but not declared:", s); ok = False
for s in sorted(have - need): print("  declared but never called:", s); ok = False
print(f"  {len(need)} GEMM shapes called, {len(have)} declared")
sys.exit(0 if ok else 1)
EOF

# layout NAME SPEC [shardc args...]: generate, compile, check
layout() {
    local name=$1 spec=$2
    shift 2
    if ! "$SHARDC" build "$SRC/$spec" "$@" --emit-c "$T/$name.c" > "$T/$name.err" 2>&1; then
        echo "FAIL: $name: shardc build"; cat "$T/$name.err"; fail=1; return
    fi
    "$CC" -std=gnu11 -fsyntax-only -Wall -Wextra -Werror -I "$SRC/runtime/include" -I "$(dirname "$SRC/$spec")" \
        "$T/$name.c" || { echo "FAIL: $name: the generated C does not compile warning-free"; fail=1; }
    if "$PY" "$T/check.py" "$T/$name.c" > "$T/$name.out"; then
        echo "ok: $name: $(tail -1 "$T/$name.out" | sed 's/^ *//')"
    else
        echo "FAIL: $name"; cat "$T/$name.out"; fail=1
    fi
}
layout gpt-dp2-bf16 specs/tiny-gpt.tspec -D parallel.dp=2 -D cluster.gpus_per_node=2 -D precision.dtype=bf16
layout gpt-tp2 specs/tiny-gpt.tspec -D parallel.tp=2 -D parallel.dp=1 -D cluster.gpus_per_node=2
layout gpt-tp2-noloops specs/tiny-gpt.tspec -D parallel.tp=2 -D parallel.dp=1 -D cluster.gpus_per_node=2 --no-loops
layout llama-tp2-sp specs/tiny-llama.tspec -D parallel.tp=2 -D parallel.sequence_parallel=on -D parallel.dp=1 \
    -D cluster.gpus_per_node=2
# tp_comm_overlap = full under sequence parallelism: each chunk one strided-batched GEMM (the
# column chunks' c_fc with GELU in its epilogue; Llama's q, k, v, gate, up)
layout llama-tp2-sp-full specs/tiny-llama.tspec -D parallel.tp=2 -D parallel.sequence_parallel=on -D parallel.dp=1 \
    -D cluster.gpus_per_node=2 -D parallel.tp_comm_overlap=full
layout gpt-tp2-sp-full specs/tiny-gpt.tspec -D parallel.tp=2 -D parallel.sequence_parallel=on -D parallel.dp=1 \
    -D cluster.gpus_per_node=2 -D parallel.tp_comm_overlap=full
layout gpt-pp2-interleaved specs/tiny-gpt.tspec -D model.layers=4 -D parallel.pp=2 -D parallel.dp=1 \
    -D cluster.gpus_per_node=2 -D zero.stage=0 -D parallel.schedule=interleaved -D parallel.virtual_stages=2
layout llama-full-ckpt specs/tiny-llama.tspec -D checkpointing.activations=full -D parallel.dp=1 \
    -D cluster.gpus_per_node=1
layout gpt-full-ckpt specs/tiny-gpt.tspec -D checkpointing.activations=full -D parallel.dp=1 -D cluster.gpus_per_node=1
layout custom-op examples/custom-op/sqrelu.tspec -D zero.stage=0

# the checker must fail on a table that lacks a shape the code calls
if [ -f "$T/gpt-dp2-bf16.c" ]; then
    awk '/^    \{\.kind = SRT_GEMM_BWD_WEIGHT/ && !done { done = 1; next } { print }' "$T/gpt-dp2-bf16.c" > "$T/cut.c"
    if "$PY" "$T/check.py" "$T/cut.c" > "$T/cut.out"; then
        echo "FAIL: the checker passed a table with one entry removed"; fail=1
    elif grep -q "called but not declared" "$T/cut.out"; then
        echo "ok: a table with one entry removed is caught"
    else
        echo "FAIL: the checker failed for another reason:"; cat "$T/cut.out"; fail=1
    fi
fi
exit $fail
