#!/usr/bin/env bash
# Options that train but that no other e2e test trains, each against the right
# reference, 4 steps, the race checker on (train_lib), the global batch 16.
# Options that must not change the arithmetic (ZeRO-3's gathering schedule:
# small max_live_parameters / prefetch_bucket / max_reuse_distance;
# data.format = llmc on the same tokens;
# parallel.rank_order = tp_pp_dp; zero.gather_across_microbatches;
# parallel.stage_layers = [1, 3], which moves a layer between the stages but
# computes each layer alike; zero.overlap_param_gather, which moves ZeRO 1-2's
# parameter all-gather to the start of the next step; parallel.pp_scatter_gather
# = off, which sends whole stage boundaries instead of tp slices) equal the
# same layout without them: losses bit for
# bit (train_same), weights within 1e-5; the base layouts themselves (dp 2
# ZeRO-3; 4 layers pp 2 · dp 2 ZeRO-3) against the single rank at 1e-5 as
# below.  Options that change the arithmetic (sgd with momentum,
# adam, GPT with swiglu, GPT with untied embeddings) train on 2 or 4 ranks
# against the same model and optimizer on one rank: every loss within 1e-5
# relative and the exported weights within 1e-5, the fp32 tolerances of
# train_equivalence / train_tp (the layouts differ only in the order of fp32
# sums; measured worst 4e-9 and 3e-6).  bf16 with precision.grad_reduce = fp32
# at dp 2 against bf16 at one rank: losses within 1e-4 relative, weights within
# 5e-3, the tolerances of train_bf16_3d (each layout rounds its bf16 partial
# sums in another order; measured 1.1e-5 and 1.7e-3, while a batch of 8 instead
# of 16, what a missing gradient reduction gives, differs by more).  A
# negative: a ZeRO-3 trainer whose layer forward waits for a module's gathered
# unit after that module's GEMM (moved in the generated C) stops with a race.
set -u
. "$(dirname "$0")/train_lib.sh"
fail=0
G=specs/tiny-gpt.tspec
# run NAME NP [-D ...] [-- trainer options]: train_layout of tiny-gpt on NP ranks
run() { train_layout "$1" "$G" "${@:2}"; }
# ZeRO-3 with every parameter partitioned (no persistent ones: tiny-gpt's
# tensors are all under the default threshold of 1e5 elements, which would keep
# them all gathered and leave the gathering schedule nothing to do)
Z3=(-D zero.stage=3 -D zero.param_persistence_threshold=0)

run ref 1 -D parallel.dp=1 -D zero.stage=0 -D train.micro_batch=4 || exit 1
if run z3 2 -D parallel.dp=2 "${Z3[@]}" -D train.micro_batch=4; then
    train_check ref z3 1e-5 1e-5 "dp 2 ZeRO-3 (no persistent parameters)"
    # the gathering schedule at small budgets: gathers each unit around its use
    # (max_reuse_distance 0), at most 20000 live elements (wte is 16384), a
    # prefetch of 5000
    run z3small 2 -D parallel.dp=2 "${Z3[@]}" -D train.micro_batch=4 -D zero.max_live_parameters=20000 \
        -D zero.prefetch_bucket=5000 -D zero.max_reuse_distance=0 &&
        train_same z3 z3small 1e-5 "ZeRO-3 max_live_parameters/prefetch_bucket/max_reuse_distance small"
    run z3nopf 2 -D parallel.dp=2 "${Z3[@]}" -D train.micro_batch=4 -D zero.prefetch_bucket=0 &&
        train_same z3 z3nopf 1e-5 "ZeRO-3 prefetch_bucket = 0 (every unit gathered on demand)"
    # DeepSpeed's per-module fetch units (each linear and norm its own) under full
    # checkpointing: every unit gathered for the forward, again for the recompute
    # and for the backward, a prefetch (5000) smaller than most units
    run z3ckpt 2 -D parallel.dp=2 "${Z3[@]}" -D train.micro_batch=4 -D checkpointing.activations=full \
        -D zero.max_live_parameters=20000 -D zero.prefetch_bucket=5000 -D zero.max_reuse_distance=0 &&
        train_check ref z3ckpt 1e-5 1e-5 "dp 2 ZeRO-3 per-module units, full checkpointing, small prefetch"
    # llm.c's uint16 shard of the same bytes: the same tokens as format = text
    "$PY" - "$DATA" "$T/shard.bin" << 'EOF'
import sys, numpy as np
tok = np.frombuffer(open(sys.argv[1], 'rb').read(), dtype=np.uint8).astype('<u2')
hdr = np.zeros(256, dtype='<i4')
hdr[:3] = (20240520, 1, tok.size)   # runtime/core/data.h: DATA_LLMC_MAGIC16, VERSION16, count
with open(sys.argv[2], 'wb') as f:
    f.write(hdr.tobytes()); f.write(tok.tobytes())
EOF
    run llmc 2 -D parallel.dp=2 "${Z3[@]}" -D train.micro_batch=4 -D data.format=llmc -- --data "$T/shard.bin" &&
        train_same z3 llmc 1e-5 "data.format = llmc (uint16 shard of the same bytes)"
fi

# pipeline layouts: 4 layers, pp 2 · dp 2, ZeRO-3 gathering each unit around its
# use (max_reuse_distance 0, so that gather_across_microbatches has work), 4 microbatches
L4=(-D model.layers=4)
PP=("${L4[@]}" -D parallel.pp=2 -D parallel.dp=2 "${Z3[@]}" -D zero.max_reuse_distance=0 -D train.micro_batch=2)
run ref4 1 "${L4[@]}" -D parallel.dp=1 -D zero.stage=0 -D train.micro_batch=4 || exit 1
if run pp 4 "${PP[@]}"; then
    train_check ref4 pp 1e-5 1e-5 "4 layers pp 2 · dp 2 ZeRO-3"
    run ppro 4 "${PP[@]}" -D parallel.rank_order=tp_pp_dp &&
        train_same pp ppro 1e-5 "parallel.rank_order = tp_pp_dp"
    run ppg 4 "${PP[@]}" -D zero.gather_across_microbatches=on &&
        train_same pp ppg 1e-5 "zero.gather_across_microbatches = on"
    run ppsl 4 "${PP[@]}" -D 'parallel.stage_layers=[1,3]' &&
        train_same pp ppsl 1e-5 "parallel.stage_layers = [1, 3]"
fi

# the distributed optimizer's parameter all-gather at the start of the next
# step (zero.overlap_param_gather), per bucket of 20000 elements (several
# buckets, so each layer waits for its own): the same arithmetic as gathering
# after the optimizer, bit for bit; dp 2 ZeRO-1 against one rank at 1e-5 (its
# gradients reduce-scattered); pp 2 · dp 2 ZeRO-2 with and without it
Z1=(-D parallel.dp=2 -D zero.stage=1 -D zero.reduce_bucket=20000 -D train.micro_batch=4)
if run z1 2 "${Z1[@]}"; then
    train_check ref z1 1e-5 1e-5 "dp 2 ZeRO-1 (gradients reduce-scattered per bucket)"
    run z1pg 2 "${Z1[@]}" -D zero.overlap_param_gather=on &&
        train_same z1 z1pg 1e-5 "dp 2 ZeRO-1 zero.overlap_param_gather = on"
fi
PP2=("${L4[@]}" -D parallel.pp=2 -D parallel.dp=2 -D zero.stage=2 -D zero.reduce_bucket=20000 -D train.micro_batch=2)
if run ppz2 4 "${PP2[@]}"; then
    run ppz2pg 4 "${PP2[@]}" -D zero.overlap_param_gather=on &&
        train_same ppz2 ppz2pg 1e-5 "pp 2 · dp 2 ZeRO-2 zero.overlap_param_gather = on"
fi

# pipeline transfers without sequence parallelism split over the tp ranks
# (parallel.pp_scatter_gather, on by default: each tp rank sends 1/tp of the
# boundary, the receiver all-gathers it over tp): tp 2 · pp 2 against one rank
# at 1e-5, and bit for bit the same layout sending whole boundaries
TPP=(-D parallel.tp=2 -D parallel.pp=2 -D parallel.dp=1 -D zero.stage=0 -D train.micro_batch=4)
if run tpp 4 "${TPP[@]}"; then
    train_check ref tpp 1e-5 1e-5 "tp 2 · pp 2, boundaries sent in tp slices"
    run tppw 4 "${TPP[@]}" -D parallel.pp_scatter_gather=off &&
        train_same tpp tppw 1e-5 "parallel.pp_scatter_gather = off (whole boundaries)"
fi

# optimizers: sgd with momentum (dp 4 ZeRO-1), adam (dp 2 ZeRO-2)
SGD=(-D train.optimizer=sgd -D train.optimizer.lr=0.1 -D train.optimizer.momentum=0.9)
if run sgd1 1 "${SGD[@]}" -D parallel.dp=1 -D zero.stage=0 -D train.micro_batch=4; then
    run sgd 4 "${SGD[@]}" -D parallel.dp=4 -D zero.stage=1 -D train.micro_batch=4 &&
        train_check sgd1 sgd 1e-5 1e-5 "sgd momentum 0.9, dp 4 ZeRO-1"
fi
if run adam1 1 -D train.optimizer=adam -D parallel.dp=1 -D zero.stage=0 -D train.micro_batch=4; then
    run adam 2 -D train.optimizer=adam -D parallel.dp=2 -D zero.stage=2 -D train.micro_batch=4 &&
        train_check adam1 adam 1e-5 1e-5 "adam, dp 2 ZeRO-2"
fi

# bf16 with the gradients reduced in fp32
if run bref 1 -D precision.dtype=bf16 -D parallel.dp=1 -D zero.stage=0 -D train.micro_batch=4; then
    run bgr 2 -D precision.dtype=bf16 -D precision.grad_reduce=fp32 -D parallel.dp=2 -D zero.stage=1 \
        -D train.micro_batch=4 &&
        train_check bref bgr 1e-4 5e-3 "bf16, precision.grad_reduce = fp32, dp 2 ZeRO-1" 2e-3   # bf16 gradients: 2e-3, as train_bf16_3d
fi

# GPT variants: swiglu (dp 2 ZeRO-2), untied embeddings (dp 2 ZeRO-3)
for v in "sw model.activation=swiglu 2" "ut model.tie_embeddings=off 3"; do
    set -- $v
    run "${1}1" 1 -D "$2" -D parallel.dp=1 -D zero.stage=0 -D train.micro_batch=4 || continue
    run "$1" 2 -D "$2" -D parallel.dp=2 -D zero.stage="$3" -D train.micro_batch=4 &&
        train_check "${1}1" "$1" 1e-5 1e-5 "gpt $2, dp 2 ZeRO-$3"
done
# Llama's modules as ZeRO-3 fetch units (two norms, q, k, v, o, gate, up, down:
# nine per layer with nothing persistent), selective checkpointing, a small
# prefetch, on 2 ranks against the single rank
LL=specs/tiny-llama.tspec
if train_layout llref "$LL" 1 -D parallel.dp=1 -D zero.stage=0 -D train.micro_batch=4; then
    train_layout llz3 "$LL" 2 -D parallel.dp=2 "${Z3[@]}" -D train.micro_batch=4 \
        -D checkpointing.activations=selective -D zero.prefetch_bucket=3000 -D zero.max_reuse_distance=0 &&
        train_check llref llz3 1e-5 1e-5 "llama dp 2 ZeRO-3 per-module units, selective checkpointing, small prefetch"
fi
# ZeRO-3's per-module waits, a negative: the race checker must stop a trainer
# whose layer forward waits for c_attn's gathered unit after the c_attn GEMM
# instead of before it (a C compiler wrapper moves the UWAIT line below the GEMM
# in the generated source before compiling it)
cat > "$T/late_wait.py" << 'EOF'
import sys
p = sys.argv[1]
s = open(p).read()
i = s.index('static void tr_fwd(')
j = s.index('    UWAIT(QKV_W);', i)
e = s.index('\n', j) + 1
w, s = s[j:e], s[:j] + s[e:]
k = s.index('\n', s.index('srt_matmul_fwd(c, SRT_COMPUTE, qkv', i)) + 1
open(p, 'w').write(s[:k] + w + s[k:])
EOF
printf '#!/bin/sh\nfor a; do case "$a" in *.c) %s %s "$a" || exit 1;; esac; done\nexec mpicc "$@"\n' \
    "$PY" "$T/late_wait.py" > "$T/cc_late"
chmod +x "$T/cc_late"
if ! CC="$T/cc_late" "$SHARDC" build "$G" -o "$T/late" -D cluster.gpus_per_node=2 -D parallel.dp=2 "${Z3[@]}" \
     -D train.micro_batch=4 > "$T/late.build" 2>&1; then
    echo "FAIL: the trainer with a late module wait did not build:"
    cat "$T/late.build"
    fail=1
elif train_run 2 late --data "$DATA" --steps 1 --log "$T/late.jsonl" --ckpt-dir "$T/late.ck"; then
    echo "FAIL: a module's wait moved after its GEMM trained without a race"
    fail=1
elif ! grep -q "race: matmul_fwd on compute reads device buffer UNIT[0-9]* .* written by all_gather on dp_comm" \
     "$T/late.out" "$T/late.err"; then
    echo "FAIL: a module's wait moved after its GEMM: no race on its gathered unit"
    tail -5 "$T/late.err"
    fail=1
else
    echo "ok: a module's wait moved after its GEMM is a race (SRT_CHECK)"
fi
[ "$fail" = 0 ] && echo PASS
exit "$fail"
