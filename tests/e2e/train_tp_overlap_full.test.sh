#!/usr/bin/env bash
# parallel.tp_comm_overlap = full (issue 15): each forward part's row-parallel
# GEMM (attention output projection, MLP down projection) and the residual
# folded into it run in tp_overlap_chunks token-row chunks, each all-reduced
# (reduce-scattered under sequence parallelism: a chunk is a block of each
# rank's tokens) on the tp stream as soon as it is written; under sequence
# parallelism the all-gather of each part's norm output and the column GEMMs
# reading it (qkv; c_fc, or gate and up) run in chunks too, chunk j's GEMMs
# as soon as chunk j is gathered.  Token rows are independent in
# the GEMM and in the sum over tp, so the chunks compute exactly what the
# whole does: every step's loss bit for bit that of the default (wgrad), the
# final weights the same, for GPT (tiny-gpt) and Llama (tiny-llama: 2 kv
# heads, replicated under tp 4) at tp 2 and 4, with and without sequence
# parallelism, no, selective and full
# checkpointing (whose forward keeps its tensors in the scratch the chunks
# read), 4 chunks (Transformer Engine's default) and 2 and 8; against one
# rank within 1e-5; the trainer's measured arenas equal the plan's.  The race
# checker is on: a chunk's GEMM and its all-reduce without the event between
# them, or the next part before the last chunk's all-reduce, is a race.
#
# Bit for bit needs a BLAS that computes a row of the product the same
# whatever other rows the call has.  OpenBLAS's SSE3 kernels (Prescott) do;
# its Haswell and SkylakeX ones, which the trainer asks for on an AVX2 or
# AVX-512 CPU OpenBLAS does not recognise (docs/kernels.md), round the tiny
# models' chunks differently from the whole (losses 1e-9 relative apart).
# So the comparisons run on the SSE3 kernels (the trainer leaves a set
# OPENBLAS_CORETYPE alone), and one layout again on the machine's own,
# against wgrad within 1e-7.
set -u
. "$(dirname "$0")/train_lib.sh"
fail=0
export OPENBLAS_CORETYPE=Prescott
# layouts NAME SPEC "TP SP CKPT CHUNKS" ...: one rank, then each layout with full and with wgrad
layouts() {
    local ref=$1 spec=$2
    train_3d "$ref" "$spec" 1 1 1 -D zero.stage=0 -D train.micro_batch=4 || return
    shift 2
    for v in "$@"; do
        set -- $v
        local n="$ref-tp$1-sp$2-$3-k$4"
        train_3d "$n" "$spec" "$1" 1 1 -D zero.stage=0 -D train.micro_batch=4 -D parallel.sequence_parallel="$2" \
            -D checkpointing.activations="$3" -D parallel.tp_comm_overlap=full -D parallel.tp_overlap_chunks="$4" || continue
        train_arenas "$n"
        train_check "$ref" "$n" 1e-5 1e-5 "$n against one rank"
        train_3d "$n-wgrad" "$spec" "$1" 1 1 -D zero.stage=0 -D train.micro_batch=4 -D parallel.sequence_parallel="$2" \
            -D checkpointing.activations="$3" || continue
        train_same "$n-wgrad" "$n" 0 "$n against tp_comm_overlap = wgrad"
    done
}
layouts gpt specs/tiny-gpt.tspec "2 off none 4" "2 off selective 8" "4 off full 2" "2 on none 4" "4 on selective 2" \
    "2 on full 4"
layouts llama specs/tiny-llama.tspec "4 off full 4" "2 on selective 4"
# a user-defined activation (examples/custom-op): under sequence parallelism the column
# chunks run c_fc, the head the activation's own call
layouts sqrelu examples/custom-op/sqrelu.tspec "2 on none 4"
# ZeRO-3 over dp 2 under sequence parallelism: each column chunk waits for the
# gathered units it reads, as the head did
z3() {
    train_3d "z3-$1" specs/tiny-gpt.tspec 2 1 2 -D zero.stage=3 -D train.micro_batch=4 \
        -D parallel.sequence_parallel=on -D parallel.tp_comm_overlap="$1" && train_arenas "z3-$1"
}
z3 full && z3 wgrad && train_same z3-wgrad z3-full 0 "tp 2, dp 2, ZeRO-3, sequence parallel: full against wgrad"
# ... and through a pipeline (tp 2, pp 2: the stage boundary a sequence shard), and Llama at
# tp 4, its 2 kv heads replicated (the column chunks' k and v GEMMs on each rank's copy)
sp_pair() {
    local n=$1 spec=$2 tp=$3 pp=$4
    shift 4
    train_3d "$n-full" "$spec" "$tp" "$pp" 1 -D zero.stage=0 -D parallel.sequence_parallel=on \
        -D parallel.tp_comm_overlap=full "$@" && train_arenas "$n-full" &&
        train_3d "$n-wgrad" "$spec" "$tp" "$pp" 1 -D zero.stage=0 -D parallel.sequence_parallel=on "$@" &&
        train_same "$n-wgrad" "$n-full" 0 "$n, sequence parallel: full against wgrad"
}
sp_pair gpt-tp2-pp2 specs/tiny-gpt.tspec 2 2 -D train.micro_batch=4
sp_pair llama-tp4 specs/tiny-llama.tspec 4 1 -D train.micro_batch=4
# the machine's own kernels: within 1e-7 of wgrad, not bit for bit
unset OPENBLAS_CORETYPE
own() {
    local n=own-$1
    shift
    train_3d "$n" specs/tiny-gpt.tspec 2 1 1 -D zero.stage=0 -D train.micro_batch=4 -D parallel.sequence_parallel=on "$@" || return
    train_arenas "$n"
}
own full -D parallel.tp_comm_overlap=full && own wgrad && train_check own-wgrad own-full 1e-7 1e-5 "tp 2, sequence parallel, 4 chunks, the machine's own BLAS kernels: full against wgrad"
# The race checker proves each chunk's order: the trainer compiled from code
# without the tp stream's wait for chunk 1's GEMM (its all-reduce, or under
# sequence parallelism its reduce-scatter, would read rows the GEMM may still
# write), or without the compute stream's wait for the last chunk's
# all-reduce (the MLP part would read r1 while it is being reduced), must
# report the race and fail.  $CC edits the source it compiles.
drop_wait() {
    local name=$1 wait=$2
    shift 2
    printf '#!/usr/bin/env bash\nfor a in "$@"; do case "$a" in *.c) grep -vF %q "$a" > "$a.x" && mv "$a.x" "$a";; esac; done\nexec cc "$@"\n' \
        "$wait" > "$T/cc-$name"
    chmod +x "$T/cc-$name"
    if ! CC="$T/cc-$name" "$SHARDC" build specs/tiny-gpt.tspec -o "$T/$name" -D parallel.tp=2 -D parallel.dp=2 \
            -D zero.stage=0 -D parallel.tp_comm_overlap=full --no-loops "$@" > "$T/$name.build" 2>&1; then
        echo "FAIL: $name does not build:"; cat "$T/$name.build"; fail=1; return
    fi
    if train_run 4 "$name" --data "$DATA" --steps 1 || ! grep -q "race: " "$T/$name.err" "$T/$name.out"; then
        echo "FAIL: $name: the race checker did not catch the dropped wait ($wait)"
        tail -5 "$T/$name.err"
        fail=1
    else
        echo "ok: $name: the race checker caught the dropped wait: $(grep -h -m1 "race: " "$T/$name.err" "$T/$name.out" | cut -c1-160)"
    fi
}
drop_wait nowait-chunk "WAIT(TP_COMM, COMPUTE, 1);  /* wait(fwd L0 mb0 rows1 attn) */"
drop_wait nowait-last "WAIT(COMPUTE, TP_COMM, 1);  /* wait(tp_allreduce L0 mb0 rows3 attn) */"
# under sequence parallelism: chunk 1's reduce-scatter without the wait for its GEMM
drop_wait nowait-chunk-sp "WAIT(TP_COMM, COMPUTE, 1);  /* wait(fwd L0 mb0 rows1 mlp) */" -D parallel.sequence_parallel=on
# ... and chunk 2's column GEMMs without the wait for its all-gather (they would read rows
# the all-gather may still write)
drop_wait nowait-cols-sp "WAIT(COMPUTE, TP_COMM, 2);  /* wait(tp_allgather L0 mb0 rows2 attn) */" \
    -D parallel.sequence_parallel=on
[ "$fail" = 0 ] && echo PASS
exit "$fail"
