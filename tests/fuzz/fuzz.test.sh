#!/usr/bin/env bash
# libFuzzer in CI (label fuzz): the five targets of scripts/run-fuzz (spec,
# import, ckpt, llmc, plan), each over its committed seeds once under ASan and
# UBSan (SHARDC_FUZZ_REPLAY): the same inputs on every run of a commit.  A
# timed run explores from a fresh random seed, so it could fail one run of a
# commit and pass the next; exploring is `make fuzz`, and an input that found
# a crash is committed to tests/fuzz/corpus/ with its fix.
# Usage: fuzz.test.sh SHARDC BUILD_DIR   (exit 77: no libFuzzer, skipped)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
SHARDC_FUZZ_REPLAY=1 exec "$root/scripts/run-fuzz"
