#!/usr/bin/env bash
# The CUDA backend's host queue (runtime/cuda/hostq.c: the SRT_HOST stream's
# worker thread and its tickets) built alone with cc: it needs no CUDA and no
# GPU, so it runs everywhere.  Twice: as it is, and under ThreadSanitizer
# (every race between the issuing thread and the worker fails it: a
# use-after-free of a closure's ticket was found there).  $1 (shardc) is
# unused; $2 is the build folder.
set -eu
BUILD=${2:?usage: $0 SHARDC BUILD_DIR}
out="$BUILD/hostq_test"
cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O1 -pthread -I runtime/cuda \
    runtime/cuda/hostq.c tests/unit/hostq_test.c -o "$out"
"$out"
cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O1 -g -fsanitize=thread -pthread -I runtime/cuda \
    runtime/cuda/hostq.c tests/unit/hostq_test.c -o "$out-tsan"
TSAN_OPTIONS="halt_on_error=1 exitcode=66" "$out-tsan"
echo "ok: hostq under ThreadSanitizer: no race"
