#!/bin/sh
# run.sh [BUILD_DIR] — the NVMe optimizer-offload benchmark of issue 6 (run on
# request; not part of `make test`).  A GPT big enough that each rank's
# optimizer state is tens of MB (4 layers, hidden 512: 13.0 M parameters; dp 2
# ZeRO-3: 6.5 M elements a rank, master + m + v = 78 MB a rank) trains STEPS
# steps with the optimizer state on NVMe (offload.optimizer = nvme, the swap
# file in DIR: $NVME_DIR, default the current folder's .nvme-bench, which
# should be on the drive to measure — tmpfs has no O_DIRECT and measures
# memory).  The trainer's io module counts the bytes srt_nvme_read / _write
# move from the first step on and the time spent in them (SRT_NVME_STATS=1);
# against them, the folder's sequential bandwidth measured in the same run
# with dd (O_DIRECT, 1 MiB blocks, a file of the size of one rank's state).
# Prints bytes per step, MB/s read and written per rank, dd's, and the ratios.
set -eu
cd "$(dirname "$0")/../../.."
B=${1:-build}
STEPS=${STEPS:-3}
DIR=${NVME_DIR:-$PWD/.nvme-bench}
BLOCK=${AIO_BLOCK:-1048576}
QD=${AIO_QD:-8}
mkdir -p "$DIR"
export SRT_NVME_STATS=1
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$DIR/dd.bench"' EXIT INT TERM
"$B/shardc" build specs/tiny-gpt.tspec -o "$tmp/trainer" -D parallel.dp=2 -D cluster.gpus_per_node=2 \
    -D zero.stage=3 -D model.layers=4 -D model.hidden=512 -D model.heads=8 -D model.seq_len=64 \
    -D train.global_batch=2 -D train.micro_batch=1 -D zero.sub_group_size=1000000 \
    -D "offload.optimizer=nvme{path=\"$DIR\" buffer_count=4}" -D offload.aio.block_size="$BLOCK" \
    -D offload.aio.queue_depth="$QD" > "$tmp/build.txt" 2>&1 || { cat "$tmp/build.txt"; exit 1; }
mpirun -np 2 --oversubscribe --bind-to none "$tmp/trainer" --data examples/data/tinyshakespeare.txt --steps "$STEPS" \
    --log "$tmp/log.jsonl" > "$tmp/out.txt" 2> "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
grep "nvme: path" "$tmp/err.txt" | sed 's/^shardrt: //'
# the rank-0 line: read R bytes in S s, wrote W bytes in T s
line=$(grep "rank 0: nvme: path" "$tmp/err.txt")
rb=$(echo "$line" | sed 's/.*read \([0-9]*\) bytes in \([0-9.]*\) s.*/\1/')
rs=$(echo "$line" | sed 's/.*read \([0-9]*\) bytes in \([0-9.]*\) s.*/\2/')
wb=$(echo "$line" | sed 's/.*wrote \([0-9]*\) bytes in \([0-9.]*\) s.*/\1/')
ws=$(echo "$line" | sed 's/.*wrote \([0-9]*\) bytes in \([0-9.]*\) s.*/\2/')
step_ms=$(/usr/bin/python3 -c 'import json,sys
r=sorted(json.loads(l)["step_ms"] for l in open(sys.argv[1]) if "loss" in l)
print(r[len(r)//2])' "$tmp/log.jsonl")
# the folder's sequential bandwidth: one rank's state, written then read, O_DIRECT
mb=$(( (rb / STEPS + 1048575) / 1048576 ))
[ "$mb" -ge 16 ] || mb=16
dd_w=$(dd if=/dev/zero of="$DIR/dd.bench" bs=1M count="$mb" oflag=direct conv=fsync 2>&1 | tail -1)
dd_r=$(dd if="$DIR/dd.bench" of=/dev/null bs=1M iflag=direct 2>&1 | tail -1)
/usr/bin/python3 - "$rb" "$rs" "$wb" "$ws" "$STEPS" "$step_ms" "$dd_w" "$dd_r" <<'EOF'
import re, sys
rb, rs, wb, ws, steps, step_ms = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
def dd(t):  # "N bytes (...) copied, S s, X MB/s"
    m = re.match(r"(\d+) bytes.*copied, ([0-9.]+) s", t)
    return int(m.group(1)) / float(m.group(2)) / 1e6 if m else float("nan")
ddw, ddr = dd(sys.argv[7]), dd(sys.argv[8])
r, w = rb / rs / 1e6 if rs > 0 else float("nan"), wb / ws / 1e6 if ws > 0 else float("nan")
print(f"per rank per step: read {rb / steps / 1e6:.1f} MB, written {wb / steps / 1e6:.1f} MB; step {step_ms:.0f} ms (median)")
print(f"read:  {r:9.1f} MB/s in srt_nvme_read   vs dd O_DIRECT {ddr:9.1f} MB/s   ratio {r / ddr:.2f}")
print(f"write: {w:9.1f} MB/s in srt_nvme_write  vs dd O_DIRECT {ddw:9.1f} MB/s   ratio {w / ddw:.2f}")
print(f"NVMe time share of the step (rank 0): {(rs + ws) / steps * 1e3 / step_ms:.2f}")
EOF
