#!/usr/bin/env bash
# Layouts drawn at random (tests/e2e/layout_sweep.sh), a fixed draw: 24
# layouts of seed 20261204, every one checked against its model's one-rank
# run.  The same draw every time, so the test is as repeatable as the others;
# `layout_sweep.sh SHARDC BUILD N SEED` draws others on request.
exec "$(dirname "$0")/layout_sweep.sh" "$1" "$2" 24 20261204
