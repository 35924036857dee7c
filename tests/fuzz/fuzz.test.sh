#!/usr/bin/env bash
# 60 s of libFuzzer over lexer + parser + checker (label fuzz).
# Usage: fuzz.test.sh SHARDC BUILD_DIR   (exit 77: no libFuzzer, skipped)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
exec "$root/scripts/run-fuzz" "${SHARDC_FUZZ_SECONDS:-60}"
