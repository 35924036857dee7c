#!/usr/bin/env bash
# libFuzzer in CI (label fuzz): the five targets of scripts/run-fuzz (spec,
# import, ckpt, llmc, plan), SHARDC_FUZZ_SECONDS each (default 15).
# Usage: fuzz.test.sh SHARDC BUILD_DIR   (exit 77: no libFuzzer, skipped)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
exec "$root/scripts/run-fuzz" "${SHARDC_FUZZ_SECONDS:-15}"
