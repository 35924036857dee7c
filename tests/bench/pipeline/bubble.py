"""bubble.py TRACE_PREFIX RANKS SKIP — the measured pipeline bubble of a run
from its per-rank Chrome traces (the trainer's --trace: one event per runtime
op on its stream's thread, one "step" event per step on the trainer thread).

For each rank and each step after the first SKIP: idle = step time - the time
the compute stream's ops took (on the CPU backend an op runs when issued, so a
stage waiting for a receive shows as time outside compute ops).  Prints one
line per rank: the mean idle over the step time, the mean idle over the busy
compute time (the definition of (p-1)/m), the mean step in ms."""
import json
import sys


def rank_stats(path, skip):
    ev = json.load(open(path))["traceEvents"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("ph") == "X" and e["name"] == "step")
    comp = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("ph") == "X" and e.get("tid") == 0)
    rows = []
    for t0, t1 in steps[skip:]:
        busy = sum(min(b, t1) - max(a, t0) for a, b in comp if b > t0 and a < t1)
        rows.append((t1 - t0, busy))
    step = sum(r[0] for r in rows) / len(rows)
    busy = sum(r[1] for r in rows) / len(rows)
    return (step - busy) / step, (step - busy) / busy, step / 1e3


def main():
    prefix, ranks, skip = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    for r in range(ranks):
        f_step, f_busy, ms = rank_stats(f"{prefix}.rank{r}.json", skip)
        print(f"{r} {f_step:.4f} {f_busy:.4f} {ms:.2f}")


main()
