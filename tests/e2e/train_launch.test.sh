#!/usr/bin/env bash
# The trainer's launch check (runtime/cpu/threads.c; docs/trainer.md,
# "Launching") on this machine: a rank OpenMPI binds to one core of several
# (`mpirun -np 1`) prints the one line that says so and names
# `--bind-to none`; the documented launches print nothing — one rank with
# `--bind-to none` or without mpirun, and the README's four ranks
# (`mpirun -np 4 --oversubscribe --bind-to none`) with no OMP_NUM_THREADS —
# and OMP_NUM_THREADS=2 for four ranks on fewer than 8 CPUs is named.  Each
# run trains 2 steps and must succeed.  Skipped (77) on one CPU, where no
# binding can leave a CPU idle.
set -u
. "$(dirname "$0")/train_lib.sh"
unset OMP_NUM_THREADS OPENBLAS_NUM_THREADS OMPI_MCA_mpi_yield_when_idle OMP_WAIT_POLICY GOMP_SPINCOUNT
cpus=$(nproc)
[ "$cpus" -ge 2 ] || { echo "skipped: one CPU"; exit 77; }
train_build one -D parallel.dp=1 -D cluster.gpus_per_node=1
train_build four
fail=0
# launch LABEL WANT(warn|quiet) NEEDLE COMMAND...: run it, check stderr for the line
launch() {
    local label=$1 want=$2 needle=$3
    shift 3
    if ! timeout 120 "$@" --data "$DATA" --steps 2 --eval-every 0 > "$T/l.out" 2> "$T/l.err"; then
        echo "FAIL: $label: the run failed"; cat "$T/l.err"; fail=1; return
    fi
    local line
    line=$(grep "shardrt: cpu: warning:" "$T/l.err")
    if [ "$want" = quiet ] && [ -z "$line" ]; then echo "ok: $label: nothing to say"
    elif [ "$want" = warn ] && [ "$(printf '%s\n' "$line" | grep -c .)" = 1 ] && [[ "$line" == *"$needle"* ]]; then
        echo "ok: $label: $line"
    else echo "FAIL: $label: expected $want ($needle), got: ${line:-nothing}"; fail=1
    fi
}
launch "mpirun -np 1 (bound to a core)" warn "--bind-to none" mpirun -np 1 "$T/one"
launch "mpirun -np 1 --bind-to none" quiet "" mpirun -np 1 --bind-to none "$T/one"
launch "no launcher" quiet "" "$T/one"
launch "README: mpirun -np 4 --oversubscribe --bind-to none" quiet "" \
    mpirun -np 4 --oversubscribe --bind-to none "$T/four"
if [ "$cpus" -lt 8 ]; then
    launch "four ranks with OMP_NUM_THREADS=2" warn "OpenMP threads (OMP_NUM_THREADS) on $cpus CPUs" \
        mpirun -np 4 --oversubscribe --bind-to none -x OMP_NUM_THREADS=2 "$T/four"
fi
# spin LABEL WANT [VAR=VALUE]: the OpenMP wait (runtime/cpu/threads.c) that libgomp
# reports last (OMP_DISPLAY_ENV: the process shows it again after it re-executes)
spin() {
    local label=$1 want=$2 got
    shift 2
    if ! env OMP_DISPLAY_ENV=verbose "$@" timeout 120 "$T/one" --data "$DATA" --steps 1 --eval-every 0 \
            > "$T/s.out" 2> "$T/s.err"; then
        echo "FAIL: $label: the run failed"; cat "$T/s.err"; fail=1; return
    fi
    got=$(sed -n "s/^ *GOMP_SPINCOUNT = '\([0-9]*\)'.*/\1/p" "$T/s.err" | tail -1)
    if [ "$got" = "$want" ]; then echo "ok: $label: GOMP_SPINCOUNT $got"
    else echo "FAIL: $label: expected GOMP_SPINCOUNT $want, got ${got:-none}"; fail=1
    fi
}
spin "default wait: spin 1000 rounds, then sleep" 1000
spin "the user's OMP_WAIT_POLICY stands" 30000000000 OMP_WAIT_POLICY=active
spin "the user's GOMP_SPINCOUNT stands" 5000 GOMP_SPINCOUNT=5000
# blas LABEL WANT [VAR=VALUE]: OpenBLAS's kernels (kernels/cpu/matmul.c,
# kc_blas_core_upgrade) as it reports them last (OPENBLAS_VERBOSE=2: "Core: X" when it
# is loaded, again after the process re-executes)
blas() {
    local label=$1 want=$2 got
    shift 2
    if ! env OPENBLAS_VERBOSE=2 "$@" timeout 120 "$T/one" --data "$DATA" --steps 1 --eval-every 0 \
            > "$T/b.out" 2> "$T/b.err"; then
        echo "FAIL: $label: the run failed"; cat "$T/b.err"; fail=1; return
    fi
    got=$(sed -n 's/^Core: *\([A-Za-z0-9]*\).*/\1/p' "$T/b.out" "$T/b.err" | tail -1)
    if [ "$got" = "$want" ]; then echo "ok: $label: OpenBLAS core $got"
    else echo "FAIL: $label: expected OpenBLAS core $want, got ${got:-none}"; fail=1
    fi
}
# what OpenBLAS chooses by itself, and what the CPU can run (the kernel's flags)
first=$(env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 timeout 120 "$T/one" --help 2>&1 | sed -n 's/^Core: *\([A-Za-z0-9]*\).*/\1/p' | head -1)
flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
case "$first" in
    Prescott|Core2|Penryn|Dunnington|Nehalem|Atom|Sandybridge)
        if [[ $flags == *" avx512f "* && $flags == *" avx512bw "* && $flags == *" avx512dq "* && $flags == *" avx512vl "* ]]; then want=SkylakeX
        elif [[ $flags == *" avx2 "* && $flags == *" fma "* ]]; then want=Haswell
        else want=$first; fi;;
    *) want=$first;;
esac
blas "OpenBLAS chose $first on this CPU: the trainer runs $want's kernels" "$want"
blas "the user's OPENBLAS_CORETYPE stands" Prescott OPENBLAS_CORETYPE=Prescott
[ "$fail" = 0 ] && echo PASS
exit "$fail"
