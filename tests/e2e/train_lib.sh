# train_lib.sh — sourced by the training e2e tests (tests/e2e/train_*.test.sh):
# skips without MPI or the CPU runtime, builds trainers of specs/tiny-gpt.tspec
# and runs them under mpirun with the race checker on.
#   (sourcing it: SHARDC, BUILD, T (a temporary folder), DATA, PY)
#   train_build NAME [-D key=value ...]   $T/NAME from specs/tiny-gpt.tspec
#   train_build_spec SPEC NAME [-D ...]   $T/NAME from SPEC
#   train_run NP NAME [trainer options]   mpirun -np NP, output in $T/NAME.out/.err
#   train_cmp KIND REF RUN TOL LABEL [NORM_TOL]  train_compare.py; prints ok/FAIL, sets fail=1
#   train_layout NAME SPEC NP [-D ...] [-- trainer options]
#                                         build, train $STEPS (4) with a checkpoint, export
#   train_3d NAME SPEC TP PP DP [-D ...]  train_layout with the layout's parallel.* keys
#   train_check REF RUN TOL_LOSS TOL_W LABEL [TOL_NORM]
#                                         losses, gradient norms (TOL_NORM, default
#                                         TOL_LOSS) and exported weights against REF
#   train_same REF RUN TOL_W LABEL        losses bit for bit, weights within TOL_W
SHARDC=${1:?usage: $0 SHARDC BUILD_DIR}
BUILD=${2:?usage: $0 SHARDC BUILD_DIR}
SHARDC=$(cd "$(dirname "$SHARDC")" && pwd)/$(basename "$SHARDC")
BUILD=$(cd "$BUILD" && pwd)
DATA=$PWD/examples/data/tinyshakespeare.txt
PY=/usr/bin/python3
# torch_common.py imports train_compare.py: no __pycache__ in the source tree
export PYTHONDONTWRITEBYTECODE=1
if [ ! -f "$BUILD/runtime/libshardrt_cpu.a" ] || ! command -v mpirun > /dev/null || ! command -v mpicc > /dev/null ||
   [ ! -x "$PY" ]; then
    echo "SKIP: needs mpirun, mpicc, /usr/bin/python3 and the CPU runtime"
    exit 77
fi
# Four ranks on two cores: one thread each, and MPI yields while it waits.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export SRT_CHECK=1 OMPI_MCA_mpi_yield_when_idle=1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# train_build NAME [-D ...]: $T/NAME from specs/tiny-gpt.tspec; exits 1 when it does not build
train_build() {
    train_build_spec specs/tiny-gpt.tspec "$@"
}

# train_build_spec SPEC NAME [-D ...]: $T/NAME from SPEC; exits 1 when it does not build
train_build_spec() {
    local spec=$1 name=$2
    shift 2
    if ! "$SHARDC" build "$spec" -o "$T/$name" "$@" > "$T/$name.build" 2>&1; then
        echo "FAIL: shardc build $name $* :"
        cat "$T/$name.build"
        exit 1
    fi
}

# The timeout guards a hang, not a speed: under load on a shared 2-core
# machine an emulated-CUDA run of 12 steps took over 120 s while training.
train_run() {
    local np=$1 name=$2
    shift 2
    timeout 600 mpirun --oversubscribe -np "$np" "$T/$name" "$@" > "$T/$name.out" 2> "$T/$name.err"
}

train_cmp() {
    if ! "$PY" tests/e2e/train_compare.py "$1" "$2" "$3" "$4" ${6:+"$6"} > "$T/cmp.txt"; then
        echo "FAIL: $5: $1"
        cat "$T/cmp.txt"
        fail=1
    else
        echo "ok: $5: $(tail -1 "$T/cmp.txt")"
    fi
}

# train_layout NAME SPEC NP [-D ...] [-- trainer options]: build $T/NAME from
# SPEC for NP ranks (SPEC "-": reuse the trainer built before), train $STEPS
# steps (4 by default) logging to $T/NAME.jsonl with a checkpoint in $T/NAME.ck,
# export $T/NAME.safetensors.  A failure prints why, sets fail=1 and returns 1,
# so that the callers skip the comparisons of a run that did not happen.
train_layout() {
    local name=$1 spec=$2 np=$3 defs=()
    shift 3
    while [ $# -gt 0 ] && [ "$1" != -- ]; do defs+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    if [ "$spec" != - ] && ! "$SHARDC" build "$spec" -o "$T/$name" -D cluster.gpus_per_node="$np" "${defs[@]}" \
         > "$T/$name.build" 2>&1; then
        echo "FAIL: shardc build $name:"
        cat "$T/$name.build"
        fail=1
        return 1
    fi
    if ! train_run "$np" "$name" --data "$DATA" --steps "${STEPS:-4}" --log "$T/$name.jsonl" --ckpt-dir "$T/$name.ck" \
         "$@"; then
        echo "FAIL: $name did not train:"
        tail -20 "$T/$name.err"
        fail=1
        return 1
    fi
    if ! "$SHARDC" export "$T/$name.ck" -o "$T/$name.safetensors" > /dev/null; then
        echo "FAIL: export $name"
        fail=1
        return 1
    fi
}

# train_3d NAME SPEC TP PP DP [-D ...] [-- trainer options]: train_layout of
# the tp · pp · dp layout on tp·pp·dp ranks
train_3d() {
    local name=$1 spec=$2 tp=$3 pp=$4 dp=$5
    shift 5
    train_layout "$name" "$spec" $((tp * pp * dp)) -D parallel.tp="$tp" -D parallel.pp="$pp" -D parallel.dp="$dp" "$@"
}

# train_check REF RUN TOL_LOSS TOL_W LABEL [TOL_NORM]: every step's loss of
# $T/RUN.jsonl within TOL_LOSS relative of $T/REF.jsonl, its gradient norm
# within TOL_NORM (default TOL_LOSS), the exported weights within TOL_W
train_check() {
    train_cmp losses "$T/$1.jsonl" "$T/$2.jsonl" "$3" "$5" "${6:-}"
    train_cmp weights "$T/$1.safetensors" "$T/$2.safetensors" "$4" "$5"
}

# train_arenas NAME: the trainer's measured arena use ("device arena A bytes
# (plan A), host arena H bytes (plan H)" in $T/NAME.out) equals the plan's
train_arenas() {
    if ! grep -Eq 'device arena ([0-9]+) bytes \(plan \1\), host arena ([0-9]+) bytes \(plan \2\)' "$T/$1.out"; then
        echo "FAIL: $1: measured arena use differs from the plan:"
        grep arena "$T/$1.out"
        fail=1
    fi
}

# train_same REF RUN TOL_W LABEL: RUN's losses equal REF's bit for bit (a
# feature that must not change the arithmetic), its weights within TOL_W
train_same() {
    if ! "$PY" tests/e2e/train_compare.py losses "$T/$1.jsonl" "$T/$2.jsonl" 0 exact > "$T/cmp.txt"; then
        echo "FAIL: $4: losses not bit-identical"
        cat "$T/cmp.txt"
        fail=1
    else
        echo "ok: $4: $(tail -1 "$T/cmp.txt") (bit-identical)"
    fi
    train_cmp weights "$T/$1.safetensors" "$T/$2.safetensors" "$3" "$4"
}
