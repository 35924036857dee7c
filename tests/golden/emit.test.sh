#!/bin/bash
# emit.test.sh SHARDC BUILD_DIR — the code generator (`shardc build`) end to end.
#
#  1. The C of every spec in specs/ (brought into the generator's scope with -D
#     where a spec asks for more) and of a matrix of layouts of tiny-gpt
#     compiles with -Wall -Wextra -Werror against runtime/include/shardrt.h.
#  2. What the generator does not support yet is refused (exit 1, "comes with
#     issue 6"); a C compiler that fails is exit 3 with no trainer left behind.
#  3. The 96-layer GPT-3 trainer's C is written and compiles (the time is
#     printed, not asserted: timings belong to tests/bench).
#  4. With the CPU runtime built (BUILD_DIR/runtime/libshardrt_cpu.a) and
#     mpirun present: trainers of tiny-gpt and tiny-llama run for 8 steps
#     under the race checker (SRT_CHECK=1), with tests/golden/emit-driver.c
#     standing in for srt_main, and every layout — dp 2 and 4, ZeRO 0-3, with
#     and without gradient accumulation, ZeRO-3 fetch units, small buckets and
#     optimizer sub-groups — gives the losses, gradient norms and weights of
#     the dp-1 run within 1e-5 (bf16 within 2e-3); the folded and the
#     straight-line step print the same numbers bit for bit.
#  5. With Debian's python3-torch: the dp-1 trainers of both families give the
#     losses and gradient norms of the same model written in PyTorch
#     (tests/golden/emit-torch.py) from the same weights and batches, 1e-4.
#  6. With the runtime's srt_main in the library: `shardc build -o` makes a
#     real trainer of tiny-gpt (dp 4, ZeRO-3) whose logged losses and norms
#     are the driver's.
# A part that cannot run here (no CPU runtime or MPI, no python3-torch) makes
# the test a skip (exit 77) unless an earlier part failed; every comparison
# fails on NaN or infinity.
set -u
SHARDC=$1
BUILD=$2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
CC=${CC:-cc}
INC="$SRC/runtime/include"

# Compiles a generated file warning-free (syntax and types only).
strict() { "$CC" -std=gnu11 -fsyntax-only -Wall -Wextra -Werror -I "$INC" "$1"; }

# 1. every spec, and a matrix of layouts
SCOPE=(-D parallel.tp=1 -D parallel.pp=1 -D parallel.sequence_parallel=off -D parallel.schedule=1f1b
       -D checkpointing.activations=none -D offload.optimizer=none -D offload.params=none -D cluster.nodes=1)
for spec in "$SRC"/specs/*.tspec; do
    name=$(basename "$spec" .tspec)
    if "$SHARDC" build "$spec" --emit-c "$T/$name.c" 2> "$T/$name.err"; then
        :
    elif grep -q "is not supported by the code generator" "$T/$name.err"; then
        "$SHARDC" build "$spec" "${SCOPE[@]}" --emit-c "$T/$name.c" 2> "$T/$name.err" ||
            { echo "FAIL: $name does not build in scope"; cat "$T/$name.err"; fail=1; continue; }
    else
        echo "FAIL: $name"; cat "$T/$name.err"; fail=1; continue
    fi
    strict "$T/$name.c" || { echo "FAIL: $name.c does not compile warning-free"; fail=1; }
done
n=0
for z in 0 1 2 3; do
    for dt in fp32 bf16; do
        for dp in 1 2 4; do
            for extra in "" "-D zero.param_persistence_threshold=1000 -D zero.reduce_bucket=9000 -D zero.sub_group_size=7000"; do
                # shellcheck disable=SC2086
                "$SHARDC" build "$SRC/specs/tiny-gpt.tspec" -D zero.stage=$z -D precision.dtype=$dt -D parallel.dp=$dp \
                    -D cluster.gpus_per_node=$dp $extra --emit-c "$T/m.c" 2> "$T/m.err" &&
                    strict "$T/m.c" || { echo "FAIL: tiny-gpt zero $z $dt dp $dp $extra"; cat "$T/m.err"; fail=1; }
                n=$((n + 1))
            done
        done
    done
done
for extra in "-D precision.grad_reduce=fp32 -D precision.dtype=bf16" "-D train.optimizer=sgd" "-D zero.overlap_comm=off" \
             "--no-loops" "-D model.layers=12 -D parallel.dp=1 -D cluster.gpus_per_node=1" \
             "-D parallel.tp=2 -D cluster.gpus_per_node=8" \
             "-D parallel.tp=2 -D parallel.sequence_parallel=on -D precision.dtype=bf16 -D cluster.gpus_per_node=8"; do
    # shellcheck disable=SC2086
    "$SHARDC" build "$SRC/specs/tiny-gpt.tspec" $extra --emit-c "$T/m.c" 2> "$T/m.err" && strict "$T/m.c" ||
        { echo "FAIL: tiny-gpt $extra"; cat "$T/m.err"; fail=1; }
done
for sp in off on; do    # the Llama (no biases) with tp 2, with and without sequence parallelism
    "$SHARDC" build "$SRC/specs/tiny-llama.tspec" -D parallel.tp=2 -D parallel.sequence_parallel=$sp \
        -D cluster.gpus_per_node=8 --emit-c "$T/m.c" 2> "$T/m.err" && strict "$T/m.c" ||
        { echo "FAIL: tiny-llama tp 2 sp $sp"; cat "$T/m.err"; fail=1; }
done
echo "emit: every spec and $((n + 9)) layouts of tiny-gpt and tiny-llama compile warning-free"

# 2. refusals and failures
"$SHARDC" build "$SRC/specs/tiny-gpt.tspec" -D model.activation=relu -o "$T/x" 2> "$T/r.err"
rc=$?
{ [ $rc = 1 ] && [ ! -e "$T/x" ] &&
  grep -q "an activation other than GELU and SwiGLU (or a user-defined one) is not supported by the code generator" "$T/r.err"; } ||
    { echo "FAIL: a ReLU GPT not refused (exit $rc)"; cat "$T/r.err"; fail=1; }
"$SHARDC" build 2> /dev/null; [ $? = 2 ] || { echo "FAIL: no file is not a usage error"; fail=1; }
"$SHARDC" build "$SRC/specs/tiny-gpt.tspec" 2> /dev/null; [ $? = 2 ] || { echo "FAIL: nothing to do is not a usage error"; fail=1; }
mkdir -p "$T/rt/include" && cp "$INC/shardrt.h" "$T/rt/include/" && : > "$T/rt/libshardrt_cpu.a"
if command -v mpicc > /dev/null; then
    CC=false "$SHARDC" build "$SRC/specs/tiny-gpt.tspec" --runtime "$T/rt" -o "$T/trainer" 2> "$T/f.err"
    rc=$?
    left=$(ls "$T" | grep -c '^trainer')
    { [ $rc = 3 ] && [ "$left" = 0 ] && grep -q "the C compiler failed on the generated code" "$T/f.err"; } ||
        { echo "FAIL: a failing C compiler: exit $rc, $left files left"; cat "$T/f.err"; fail=1; }
fi
"$SHARDC" build "$SRC/specs/tiny-gpt.tspec" --runtime "$T/none" -o "$T/trainer" 2> "$T/n.err"
[ $? = 1 ] && grep -q "was not found in $T/none" "$T/n.err" || { echo "FAIL: a missing runtime"; cat "$T/n.err"; fail=1; }

# 3. the 96-layer GPT-3 in the generator's scope: C written and compiled
start=$(date +%s%N)
"$SHARDC" build "$SRC/specs/gpt3-175b.tspec" "${SCOPE[@]}" --emit-c "$T/g3.c" 2> /dev/null &&
    "$CC" -std=gnu11 -O0 -c -I "$INC" "$T/g3.c" -o "$T/g3.o" || { echo "FAIL: gpt3-175b"; fail=1; }
ms=$((($(date +%s%N) - start) / 1000000))
echo "emit: gpt3-175b (96 layers, 192 microbatches): C written and compiled ($ms ms, $(wc -c < "$T/g3.c") bytes)"

# skip WHY: the rest cannot run here; a skip unless something failed already
skip() {
    echo "emit: $1"
    [ "$fail" = 0 ] && exit 77
    exit "$fail"
}

# 4. trainers that run: every layout gives the dp-1 numbers
RT="$BUILD/runtime/libshardrt_cpu.a"
if [ ! -f "$RT" ] || ! command -v mpirun > /dev/null || ! command -v mpicc > /dev/null; then
    skip "the CPU runtime or MPI is missing: the trainers are not run"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 SRT_CHECK=1
export OMPI_MCA_rmaps_base_oversubscribe=1
DATA="$SRC/examples/data/tinyshakespeare.txt"
[ -f "$DATA" ] || DATA="$T/data.txt"
[ -f "$DATA" ] || for i in $(seq 1 400); do echo "First Citizen: before we proceed any further, hear me speak. $i"; done > "$DATA"
SMALL=(-D zero.param_persistence_threshold=1000 -D zero.reduce_bucket=9000 -D zero.sub_group_size=7000
       -D zero.allgather_bucket=20000 -D zero.prefetch_bucket=30000)

# run NAME DP ZERO DTYPE [shardc args...]: builds the trainer of $SPEC, runs 8
# steps (the driver's options in $RUNOPT), output in $T/NAME.out
SPEC=tiny-gpt RUNOPT=
run() {
    local name=$1 dp=$2 z=$3 dt=$4
    shift 4
    "$SHARDC" build "$SRC/specs/$SPEC.tspec" -D parallel.dp="$dp" -D cluster.gpus_per_node="$dp" -D zero.stage="$z" \
        -D precision.dtype="$dt" "$@" --emit-c "$T/$name.c" 2> "$T/$name.err" &&
        mpicc -std=gnu11 -O1 -Dsrt_main=emit_test_main -I "$INC" -I "$SRC/runtime/core" -I "$SRC/kernels/cpu" \
            -I "$SRC/compiler" -I "$BUILD/gen" "$T/$name.c" "$SRC/tests/golden/emit-driver.c" -o "$T/$name" \
            "$RT" "$BUILD/kernels/cpu/libshardk_cpu.a" "$BUILD/libshardc_core.a" -lcjson -lopenblas -luring -fopenmp -lm \
            2>> "$T/$name.err" &&
        timeout 120 mpirun -np "$dp" "$T/$name" --data "$DATA" --steps 8 $RUNOPT > "$T/$name.out" 2>> "$T/$name.err" ||
        { echo "FAIL: $name does not run"; tail -5 "$T/$name.err"; fail=1; return 1; }
}

# same REF NAME TOL: every number of NAME's output within TOL (relative) of
# REF's; a NaN or an infinity (printed "nan", "-nan", "inf") on either side fails
same() {
    paste "$T/$1.out" "$T/$2.out" | awk -v tol="$3" -v a="$1" -v b="$2" '
        { n = NF / 2; for (i = 1; i <= n; i++) { x = $i; y = $(i + n)
            if (tolower(x) ~ /^[-+]?(nan|inf)/ || tolower(y) ~ /^[-+]?(nan|inf)/) {
                printf "FAIL: %s vs %s line %d: %s vs %s (not finite)\n", a, b, NR, x, y; bad = 1 }
            else if (x ~ /^[-0-9.e+]+$/) { d = x - y; if (d < 0) d = -d; s = x < 0 ? -x : x
                if (!(d <= tol * s + 1e-12)) { printf "FAIL: %s vs %s line %d: %s vs %s\n", a, b, NR, x, y; bad = 1 } }
            else if (x != y) { printf "FAIL: %s vs %s line %d\n", a, b, NR; bad = 1 } } }
        END { if (NR < 9) { print "FAIL: " b " printed too little"; bad = 1 } exit bad }' || fail=1
}

run ref 1 0 fp32 || exit 1
for dp in 2 4; do
    for z in 0 1 2 3; do
        run "d${dp}z$z" "$dp" "$z" fp32 && same ref "d${dp}z$z" 1e-5
        run "s${dp}z$z" "$dp" "$z" fp32 "${SMALL[@]}" && same ref "s${dp}z$z" 1e-5
    done
done
run s2z3n 2 3 fp32 "${SMALL[@]}" -D zero.overlap_comm=off && same ref s2z3n 1e-5
run bref 1 0 bf16 || exit 1
for z in 0 2 3; do run "b2z$z" 2 "$z" bf16 "${SMALL[@]}" && same bref "b2z$z" 2e-3; done
run b4z1 4 1 bf16 -D precision.grad_reduce=fp32 && same bref b4z1 2e-3
# folded loops against the straight-line step: the same ops, so the same bits
run loops 1 1 fp32 -D model.layers=6
run flat 1 1 fp32 -D model.layers=6 --no-loops
grep -q "for (int l = 0; l < " "$T/loops.c" || { echo "FAIL: the 6-layer trainer has no layer loop"; fail=1; }
same loops flat 0
SPEC=tiny-llama
mkdir -p "$T/dump-llama"
RUNOPT="--dump $T/dump-llama" run lref 1 0 fp32 || exit 1
RUNOPT=
for z in 0 1 2 3; do run "l4z$z" 4 "$z" fp32 "${SMALL[@]}" && same lref "l4z$z" 1e-5; done
run l2z2 2 2 fp32 && same lref l2z2 1e-5
echo "emit: 29 trainers ran race-free; every layout gave the dp-1 losses, norms and weights"

# 5. against PyTorch
if ! /usr/bin/python3 -c "import torch" 2> /dev/null; then
    skip "python3-torch is missing: the PyTorch comparison and the real trainer are not run"
fi
SPEC=tiny-gpt
mkdir -p "$T/dump-gpt"
RUNOPT="--dump $T/dump-gpt" run gref 1 0 fp32 || exit 1
for f in gpt llama; do
    ref=$([ $f = gpt ] && echo gref || echo lref)
    /usr/bin/python3 "$SRC/tests/golden/emit-torch.py" "$T/dump-$f" "$T/$ref.out" 1e-4 > "$T/torch-$f.out" ||
        { echo "FAIL: tiny-$f against PyTorch"; cat "$T/torch-$f.out"; fail=1; }
done
echo "emit: tiny-gpt and tiny-llama train as their PyTorch twins do (8 steps, losses and norms within 1e-4)"

# 6. the real trainer
if ! nm "$RT" 2> /dev/null | grep -q " T srt_main"; then
    echo "FAIL: $RT has no srt_main: no trainer can be linked"
    exit 1
fi
"$SHARDC" build "$SRC/specs/tiny-gpt.tspec" -o "$T/tiny_train" 2> "$T/tiny.err" &&
    timeout 120 mpirun -np 4 "$T/tiny_train" --data "$DATA" --steps 8 --log "$T/tiny.jsonl" > /dev/null 2>> "$T/tiny.err" ||
    { echo "FAIL: the tiny-gpt trainer"; tail -5 "$T/tiny.err"; exit 1; }
grep '"loss"' "$T/tiny.jsonl" | sed 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*"grad_norm":\([^,]*\),.*/step \1 loss \2 norm \3/' > "$T/real.out"
head -n 8 "$T/d4z3.out" > "$T/d4z3.steps"
paste "$T/d4z3.steps" "$T/real.out" | awk '
    function num(x) { return x ~ /^-?[0-9][0-9.]*(e[-+]?[0-9]+)?$/ }   # not "nan", "inf", "null"
    function off(x, y) { d = x - y; if (d < 0) d = -d; return !num(x) || !num(y) || !(d <= 1e-6 * (x < 0 ? -x : x)) }
    { if (off($4, $10) || off($6, $12)) bad = 1 } END { exit bad || NR != 8 }' ||
    { echo "FAIL: the trainer's losses are not the driver's"; paste "$T/d4z3.steps" "$T/real.out"; fail=1; }
echo "emit: shardc build -o: the tiny-gpt trainer (srt_main) logs the driver's losses"
exit $fail
