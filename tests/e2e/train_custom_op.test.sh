#!/usr/bin/env bash
# The custom-op example (examples/custom-op: a user-defined squared-ReLU
# activation compiled into the trainer, issue 8) against PyTorch: the same
# initial weights (a 1-step run at lr 1e-30, exported by `shardc export`) and
# batches, 5 AdamW steps on one rank, torch_gpt.py with its GELU replaced by
# relu(x)^2: every loss and the step-1 gradients within 1e-4 relative.  Also:
# --backend cuda compiles sqrelu.cu with nvcc and links (no GPU needed to
# link), a user op without a cuda source is refused (exit 1), the loss falls.
set -u
. "$(dirname "$0")/train_lib.sh"
"$PY" -c 'import torch' 2> /dev/null || { echo "SKIP: /usr/bin/python3 has no torch"; exit 77; }
SPEC=examples/custom-op/sqrelu.tspec

ext_build() {
    local name=$1
    shift
    if ! "$SHARDC" build "$SPEC" -o "$T/$name" -D zero.stage=0 "$@" > "$T/$name.build" 2>&1; then
        echo "FAIL: shardc build $SPEC $* :"
        cat "$T/$name.build"
        exit 1
    fi
}

# --backend cuda: sqrelu.cu through nvcc into the CUDA trainer where the CUDA
# runtime was built (it links; running it needs a GPU: tests/gpu), else a
# clear "not found" (exit 1)
"$SHARDC" build "$SPEC" -o "$T/cuda" --backend cuda > "$T/cuda.build" 2>&1
rc=$?
if [ -f "$BUILD/runtime/libshardrt_cuda.a" ]; then
    if [ $rc -ne 0 ] || [ ! -x "$T/cuda" ] || ! nm "$T/cuda" | grep -q sqrelu_forward; then
        echo "FAIL: --backend cuda with a user op: exit $rc"
        cat "$T/cuda.build"
        exit 1
    fi
elif [ $rc -ne 1 ] || ! grep -q "libshardrt_cuda.a) was not found" "$T/cuda.build"; then
    echo "FAIL: --backend cuda without the CUDA runtime: exit $rc"
    cat "$T/cuda.build"
    exit 1
fi
# a user op without a cuda source cannot go into the CUDA trainer
sed 's/  cuda = "sqrelu.cu"//' "$SPEC" > examples/custom-op/.nocuda-$$.tspec
"$SHARDC" build examples/custom-op/.nocuda-$$.tspec -o "$T/nocuda" --backend cuda > "$T/nocuda.build" 2>&1
rc=$?
rm -f examples/custom-op/.nocuda-$$.tspec
if [ $rc -ne 1 ] || ! grep -q "has no cuda source" "$T/nocuda.build"; then
    echo "FAIL: --backend cuda with a user op without a cuda source: exit $rc"
    cat "$T/nocuda.build"
    exit 1
fi

ext_build init -D train.optimizer.lr=1e-30 -D train.lr_schedule=constant
train_run 1 init --data "$DATA" --steps 1 --ckpt-dir "$T/init.ck" || { echo "FAIL: lr-1e-30 run"; cat "$T/init.err"; exit 1; }
"$SHARDC" export "$T/init.ck" -o "$T/init.safetensors" > /dev/null || { echo "FAIL: export"; exit 1; }
ext_build run
train_run 1 run --data "$DATA" --steps 5 --log "$T/run.jsonl" --ckpt-dir "$T/run.ck" --ckpt-every 1 ||
    { echo "FAIL: training"; cat "$T/run.err"; exit 1; }
# the loss falls over the 5 steps
"$PY" - "$T/run.jsonl" << 'PYEOF' || exit 1
import json, sys
l = [json.loads(x)["loss"] for x in open(sys.argv[1]) if '"loss"' in x]
print("losses:", " ".join("%.5f" % v for v in l))
if len(l) != 5 or not l[-1] < l[0]:
    print("FAIL: expected 5 falling losses")
    sys.exit(1)
PYEOF
# torch_gpt.py with F.gelu replaced by the squared ReLU of sqrelu.c
"$PY" -c '
import runpy, sys, torch
import torch.nn.functional as F
F.gelu = lambda x, approximate="none": torch.relu(x) ** 2
sys.argv = sys.argv[1:]
sys.path.insert(0, "tests/e2e")   # torch_gpt.py imports torch_common
runpy.run_path(sys.argv[0], run_name="__main__")
' tests/e2e/torch_gpt.py "$T/init.safetensors" "$DATA" "$T/run.jsonl" "$T/run.ck/step-1/rank-00000.safetensors" \
    4 64 4 0.1 0.9 0.95 1e-8 1.0 && echo PASS
