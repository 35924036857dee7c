#!/usr/bin/env bash
# The reference specs that use pipeline parallelism (pp > 1 in specs/: today
# gpt3-175b, tp 8 · pp 16 interleaved · dp 8, sequence parallelism, selective
# checkpointing) build into CPU trainers: planned, verified, emitted, compiled
# and linked (no training).  Only offload, which other issues bring, is turned
# off with -D, so what is built is the spec's own layout.
set -u
SHARDC=${1:?usage: $0 SHARDC BUILD_DIR}
BUILD=${2:?usage: $0 SHARDC BUILD_DIR}
if [ ! -f "$BUILD/runtime/libshardrt_cpu.a" ] || ! command -v mpicc > /dev/null; then
    echo "SKIP: needs mpicc and the CPU runtime"
    exit 77
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
n=0
# the reference specs that use pp build into CPU trainers (compile and link, no
# training); only offload is turned off
for sp in specs/*.tspec; do
    grep -Eq '\<pp *= *([2-9]|[1-9][0-9]+)' "$sp" || continue
    if "$SHARDC" build "$sp" -o "$T/spec" -D offload.optimizer=none -D offload.params=none > "$T/spec.build" 2>&1 &&
       [ -x "$T/spec" ]; then
        echo "ok: $sp builds (pp $(grep -Eo '\<pp *= *[0-9]+' "$sp" | grep -Eo '[0-9]+$'))"
    else
        echo "FAIL: $sp does not build:"
        tail -20 "$T/spec.build"
        fail=1
    fi
    rm -f "$T/spec"
    n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "FAIL: no spec of specs/ uses pp > 1"; fail=1; }
[ "$fail" = 0 ] && echo PASS
exit "$fail"
