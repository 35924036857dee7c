#!/usr/bin/env bash
# Trainers under AddressSanitizer and UndefinedBehaviorSanitizer (label
# sanitize: `make asan` runs it in build-asan, whose compiler, runtime and
# kernels are instrumented; `make test`'s plain pass leaves it out).  One
# trainer of each kind, every rank instrumented (CC gives shardc build the
# sanitizers' flags), any report ending the rank with an error:
#   dp 4 with ZeRO-3 (collectives, the ZeRO-3 gathers, checkpoints),
#   tp 2 · pp 2 (tensor parallel ops, pipeline sends and receives),
#   dp 2 ZeRO-3 with the optimizer on NVMe (io_uring where the kernel has it),
#   the dp 4 ZeRO-3 checkpoint resumed under tp 2 · pp 2 (the slice reads),
# the last two against the runs they must reproduce (losses within 1e-5).
# Leaks inside MPI and OpenBLAS are suppressed (lsan.supp says which and why);
# none of shardc's own is.  Skipped (77) where the runtime is not
# instrumented (a plain build) or MPI is missing.
set -u
. "$(dirname "$0")/../e2e/train_lib.sh"
if ! nm "$BUILD/runtime/libshardrt_cpu.a" 2> /dev/null | grep -q "__asan_report"; then
    echo "SKIP: $BUILD/runtime/libshardrt_cpu.a is not built with the sanitizers (make asan builds build-asan)"
    exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
export CC="cc -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
sym=$(command -v llvm-symbolizer || ls /usr/lib/llvm-*/bin/llvm-symbolizer 2> /dev/null | tail -1)
[ -n "$sym" ] && export ASAN_SYMBOLIZER_PATH=$sym
# (fast_unwind_on_malloc=0: whole stacks through MPI's libraries, which keep no
# frame pointers, so that the suppressions can see MPI below a leak)
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=86:fast_unwind_on_malloc=0"
export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0:exitcode=87"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=88"
export SRT_NVME_STATS=1
fail=0
# clean NAME: no sanitizer report in NAME's output (a report that did not end the rank is one too)
clean() {
    if grep -Eq "ERROR: (Address|Leak)Sanitizer|runtime error:" "$T/$1.err"; then
        echo "FAIL: $1: a sanitizer report:"
        grep -E -A12 "ERROR: (Address|Leak)Sanitizer|runtime error:" "$T/$1.err" | head -40
        fail=1
    else
        echo "ok: $1: trained under ASan and UBSan, no report"
    fi
}
G=specs/tiny-gpt.tspec
STEPS=4 train_layout dp4z3 "$G" 4 -D model.layers=2 -- --ckpt-every 2 && clean dp4z3
STEPS=4 train_3d tp2pp2 "$G" 2 2 1 -D model.layers=2 -D zero.stage=1 && clean tp2pp2
mkdir -p "$T/swap"
if STEPS=2 train_layout nvme "$G" 2 -D model.layers=2 -D parallel.dp=2 -D zero.stage=3 \
        -D "offload.optimizer=nvme{path=\"$T/swap\"}"; then
    clean nvme
    grep -o "nvme: path [^,]*" "$T/nvme.out" "$T/nvme.err" | head -1 | sed 's/^/   /'
fi
# the dp 4 checkpoint of step 2 resumed under tp 2 · pp 2: steps 3 and 4 as dp 4 trained them
if [ -x "$T/tp2pp2" ] && [ -d "$T/dp4z3.ck/step-2" ]; then
    if train_run 4 tp2pp2 --data "$DATA" --steps 4 --log "$T/reshard.jsonl" --resume "$T/dp4z3.ck/step-2"; then
        cp "$T/tp2pp2.err" "$T/reshard.err"
        clean reshard
        train_cmp losses "$T/reshard.jsonl" "$T/dp4z3.jsonl" 1e-5 "dp 4 ZeRO-3's step-2 resumed under tp 2 pp 2"
    else
        echo "FAIL: the resharded resume:"; tail -20 "$T/tp2pp2.err"; fail=1
    fi
fi
[ "$fail" = 0 ] && echo PASS
exit "$fail"
