# train_lib.sh — sourced by the training e2e tests (tests/e2e/train_*.test.sh):
# skips without MPI or the CPU runtime, builds trainers of specs/tiny-gpt.tspec
# and runs them under mpirun with the race checker on.
#   train_setup "$@"                      SHARDC, BUILD, T (a temporary folder), DATA
#   train_build NAME [-D key=value ...]   $T/NAME from specs/tiny-gpt.tspec
#   train_run NP NAME [trainer options]   mpirun -np NP, output in $T/NAME.out/.err
#   train_cmp KIND REF RUN TOL LABEL      train_compare.py; prints ok/FAIL, sets fail=1
SHARDC=${1:?usage: $0 SHARDC BUILD_DIR}
BUILD=${2:?usage: $0 SHARDC BUILD_DIR}
SHARDC=$(cd "$(dirname "$SHARDC")" && pwd)/$(basename "$SHARDC")
BUILD=$(cd "$BUILD" && pwd)
DATA=$PWD/examples/data/tinyshakespeare.txt
PY=/usr/bin/python3
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

train_build() {
    local name=$1
    shift
    if ! "$SHARDC" build specs/tiny-gpt.tspec -o "$T/$name" "$@" > "$T/$name.build" 2>&1; then
        echo "FAIL: shardc build $* :"
        cat "$T/$name.build"
        exit 1
    fi
}

train_run() {
    local np=$1 name=$2
    shift 2
    timeout 120 mpirun --oversubscribe -np "$np" "$T/$name" "$@" > "$T/$name.out" 2> "$T/$name.err"
}

train_cmp() {
    if ! "$PY" tests/e2e/train_compare.py "$1" "$2" "$3" "$4" > "$T/cmp.txt"; then
        echo "FAIL: $5: $1"
        cat "$T/cmp.txt"
        fail=1
    else
        echo "ok: $5: $(tail -1 "$T/cmp.txt")"
    fi
}
