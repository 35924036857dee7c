#!/usr/bin/env bash
# The CPU runtime over MPI: tests/e2e/runtime_mpi.c under `mpirun -np 4`.
#  - tp 2 x dp 2, dp 2 x pp 2 (both rank orders): every group's members and
#    collectives in fp32 and bf16 against the fixed-order result, send/recv
#    both ways at once, the lazy completion of the CPU's non-blocking sends
#    and receives, the vocab-parallel cross-entropy, the exact norm
#    (checking mode on: any race fails the run);
#  - a race on one rank (the default handler) while the others wait in an
#    all-reduce: every rank gone within a few seconds, exit code non-zero,
#    the message naming both ops;
#  - a 4-rank program launched on 2 ranks: a clear error, exit 1.
# Usage: runtime_mpi.test.sh SHARDC BUILD_DIR.  Exit 77 (skipped) without mpirun.
set -u
build=${2:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 77; }
bin=$build/runtime/runtime_mpi
[ -x "$bin" ] || { echo "FAIL: $bin not built"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none   # containers often forbid CMA
# In a sanitizer build, Open MPI's and hwloc's allocations alive at exit read as
# leaks; the runtime's own are covered by the unit tests, which run without MPI.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
mpi=(mpirun -np 4 --oversubscribe)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

for mode in tpdp dppp dppp1; do
  if timeout 120 "${mpi[@]}" "$bin" $mode >"$tmp/$mode.out" 2>&1; then
    tail -n 1 "$tmp/$mode.out"
  else
    echo "FAIL $mode"; cat "$tmp/$mode.out"; fail=1
  fi
done

# One rank dies; the others sit in a collective.  MPI_Abort must end them all.
start=$(date +%s)
timeout 60 "${mpi[@]}" "$bin" abort >"$tmp/abort.out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $took -gt 10 ]; then
  echo "FAIL abort: exit $rc after ${took}s (want non-zero within 10 s)"; cat "$tmp/abort.out"; fail=1
elif ! grep -q "rank 2: internal error: race: zero on copy writes device arena bytes \[0, 64) written by zero on compute" "$tmp/abort.out"; then
  echo "FAIL abort: no race message"; cat "$tmp/abort.out"; fail=1
elif grep -q "returned although" "$tmp/abort.out"; then
  echo "FAIL abort: a rank went on"; cat "$tmp/abort.out"; fail=1
else
  echo "abort: every rank gone in ${took}s, exit $rc"
fi

# The plan's world size against the launcher's.
timeout 60 mpirun -np 2 --oversubscribe "$bin" world >"$tmp/world.out" 2>&1
rc=$?
if [ $rc -ne 1 ] || ! grep -q "was planned for 4 ranks (tp 2 x dp 2 x pp 1) but runs on 2: launch it with mpirun -np 4" "$tmp/world.out"; then
  echo "FAIL world: exit $rc"; cat "$tmp/world.out"; fail=1
else
  echo "world: a 4-rank program on 2 ranks is refused, exit 1"
fi
exit $fail
