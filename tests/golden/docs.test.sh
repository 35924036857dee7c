#!/usr/bin/env bash
# docs/spec-reference.md is generated from the schema table (compiler/schema.def)
# and the cluster profiles; this fails when the committed file has drifted.
# Usage: docs.test.sh SHARDC BUILD_DIR      (run from the repository root)
set -u
shardc=$1
if ! diff -u docs/spec-reference.md <("$shardc" docs spec-reference); then
  echo "docs/spec-reference.md is out of date: regenerate it with 'make docs'" \
       "(or: $shardc docs spec-reference > docs/spec-reference.md) and commit it" >&2
  exit 1
fi
echo "ok: docs/spec-reference.md matches the schema"
