#!/usr/bin/env bash
# No silent hang: one rank stopped (SIGSTOP, through the test seam
# SRT_TEST_SIGSTOP=RANK:STEP: at the start of that step, before its first
# collective) and the others' watchdog, with a short timeout (SRT_COMM_TIMEOUT):
#  - CPU backend, dp 4 ZeRO-3: while they wait the other ranks use almost no
#    CPU (at most 20% of a core each, read from /proc: no time is asserted);
#    then every rank ends (non-zero exit, well within the outer timeout) and
#    the message names the op, the group and the rank that did not arrive;
#  - CPU backend, pp 2: the stage that waits for the stopped one's send
#    names the send/recv, the pp group and its peer;
#  - the CUDA trainer on the emulated CUDA stack (its NCCL collectives are
#    asynchronous: tests/gpu/emu/nccl.c), dp 2 ZeRO-3: the NCCL watchdog
#    thread sees the collective pending, names it and ends every rank.
#    Skipped without BUILD/cuda-emu.
set -u
. "$(dirname "$0")/train_lib.sh"
fail=0
# watch NAME NP STOP WAIT TIMEOUT PATTERN [trainer args]: runs $T/NAME on NP
# ranks with rank STOP stopped at step 3 and SRT_COMM_TIMEOUT=TIMEOUT; WAIT s
# after the stop (the others are then waiting, their step's work done) reads
# the waiting ranks' CPU over 2 s; then the exit and the message
watch() {
    local name=$1 np=$2 stop=$3 delay=$4 limit=$5 pat=$6
    shift 6
    SRT_COMM_TIMEOUT=$limit SRT_TEST_SIGSTOP="$stop:3" timeout 120 mpirun --oversubscribe -np "$np" "$T/$name" \
        --data "$DATA" --steps 1000 "$@" > "$T/$name.out" 2> "$T/$name.err" &
    local job=$! pids=() victim= t
    # the ranks' pids (children of this mpirun), and the stopped one
    for t in $(seq 1 300); do
        mapfile -t pids < <(pgrep -f "^$T/$name --data")
        victim=
        for p in "${pids[@]}"; do [ "$(awk '{print $3}' "/proc/$p/stat" 2> /dev/null)" = T ] && victim=$p; done
        [ -n "$victim" ] && break
        sleep 0.1
    done
    if [ -z "$victim" ]; then
        echo "FAIL: $name: no rank stopped"; wait "$job"; cat "$T/$name.err"; fail=1; return
    fi
    # CPU ticks (1/100 s) of the waiting ranks over 2 s: sleeping, not spinning
    ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2> /dev/null || echo 0; }
    sleep "$delay"
    local before=() after=() i busy=0
    for i in "${!pids[@]}"; do before[$i]=$(ticks "${pids[$i]}"); done
    sleep 2
    for i in "${!pids[@]}"; do
        after[$i]=$(ticks "${pids[$i]}")
        [ "${pids[$i]}" = "$victim" ] && continue
        local used=$((after[i] - before[i]))
        [ "$used" -gt "$busy" ] && busy=$used
    done
    wait "$job"
    local rc=$?
    if [ "$busy" -gt 40 ]; then
        echo "FAIL: $name: a waiting rank used $busy of 200 ticks in 2 s (it spins)"; fail=1
    else
        echo "ok: $name: the busiest waiting rank used $busy of 200 CPU ticks in 2 s"
    fi
    if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then
        echo "FAIL: $name: exit $rc"; tail -5 "$T/$name.err"; fail=1; return
    fi
    if ! grep -Eq "^shardrt: rank [0-9]+: error: $pat" "$T/$name.err"; then
        echo "FAIL: $name: no message matching '$pat':"; head -5 "$T/$name.err"; fail=1; return
    fi
    echo "ok: $name: exit $rc: $(grep -Em1 "error: $pat" "$T/$name.err")"
}
train_build t4
watch t4 4 2 1 4 "(all_gather|reduce_scatter|all_reduce) \(MPI_I[a-z]+\) on the dp group did not complete in [0-9]+ s \(train.comm_timeout 4 s, set by SRT_COMM_TIMEOUT\); did not arrive: rank 2 \(it entered [0-9]+ collectives of this group, this rank [0-9]+\); arrived: rank 0, 1, 3; ending every rank"
train_build p2 -D parallel.pp=2 -D parallel.dp=1 -D cluster.gpus_per_node=2 -D zero.stage=1
watch p2 2 0 1 4 "send/recv on the pp group did not complete in [0-9]+ s .*; no match from rank 0 \(stopped, dead, or stuck elsewhere\); ending every rank"
if [ -f "$BUILD/cuda-emu/libcuemu.a" ]; then
    train_build_spec specs/tiny-gpt.tspec c2 -D parallel.dp=2 -D cluster.gpus_per_node=2 -D train.global_batch=4 \
        -D model.seq_len=32 -D train.micro_batch=2 --backend cuda --runtime "$BUILD/cuda-emu"
    watch c2 2 1 5 12 "(all_gather|reduce_scatter|all_reduce|broadcast) on the dp group \(stream [a-z_]+\) did not finish within 12 s \(train.comm_timeout\): a rank is stuck or gone"
else
    echo "skipped: the CUDA case (no $BUILD/cuda-emu)"
fi
[ "$fail" = 0 ] && echo PASS
exit "$fail"
