#!/usr/bin/env bash
# The CUDA backend's cuDNN attention graphs (runtime/cuda/attention.c) finalize
# against the installed cuDNN without a GPU: tests/e2e/cudnn_graph.c builds the
# forward and backward graphs' descriptors of the tiny, GPT-2 and GQA shapes.
# Skipped (77) where the build has no CUDA runtime.  (The operation graph,
# heuristics and plans need a device: tests/gpu covers them.)
set -u
SHARDC=${1:?usage: $0 SHARDC BUILD_DIR}
BUILD=$(cd "${2:?usage: $0 SHARDC BUILD_DIR}" && pwd)
LINK=$BUILD/runtime/shardrt_cuda.link
[ -f "$BUILD/runtime/libshardrt_cuda.a" ] && [ -f "$LINK" ] || { echo "SKIP: no libshardrt_cuda.a (nvcc was not found)"; exit 77; }
CUDNN=$(grep -m1 'libcudnn' "$LINK")
NVCC=$(sed -n 's/^nvcc=//p' "$LINK")
INC=$(dirname "$(dirname "$NVCC")")/include
[ -f "$INC/cudnn.h" ] || INC=$(dirname "$(dirname "$CUDNN")")/include
CUDART=$(grep -m1 'libcudart' "$LINK")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
R=$PWD
if ! cc -std=gnu11 -Wall -Wextra -Werror -I"$R/runtime/cuda" -I"$R/runtime/core" -I"$R/runtime/include" -I"$INC" \
        "$R/tests/e2e/cudnn_graph.c" -o "$T/cudnn_graph" "$CUDNN" "$CUDART" -lm \
        -Wl,-rpath,"$(dirname "$CUDNN")" -Wl,-rpath,"$(dirname "$CUDART")" > "$T/cc.log" 2>&1; then
    echo "FAIL: tests/e2e/cudnn_graph.c does not compile:"; cat "$T/cc.log"; exit 1
fi
"$T/cudnn_graph"
