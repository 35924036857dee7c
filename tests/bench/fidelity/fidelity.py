"""fidelity.py RUNS — the table of tests/bench/fidelity/run.sh.

RUNS has a line per layout: NAME RANKS PLAN.txt PLAN.json LOG.jsonl[,LOG.jsonl...]
(one log per repeat of the layout's run).  Per layout: the predicted step
(`shardc plan`'s "step ... s predicted"), the measured step: the median step_ms
over the steps after the first two (all of them when there are fewer than
three) of every repeat pooled, the error (predicted - measured) / measured, the
spread (the largest repeat's median less the smallest, over the measured step:
how far two runs of the same layout disagree, the noise of that row), the
smallest repeat's median and its error, and the arena bytes the plan gives
each rank class (device_bytes.arena, host_bytes.total) against what each rank
allocated in every repeat (the log's last record, "allocated").  Then the mean |error| and
Spearman's rank correlation of the predictions with the measurements (ranks of
ties averaged).  The fastest of those steps is printed too, and the same two
figures against it: `shardc calibrate` keeps each benchmark's fastest batch (the
machine's own speed, whatever else runs), so on a shared machine the fastest
step is the like-for-like measurement and the median also carries the others'
load; on a quiet machine the two agree within a few percent.  With several
repeats, the noise ceiling, per statistic (each round's median step, each
round's fastest step): the Spearman between every two rounds' per-layout
figures (the measurement ranking the layouts against itself), their mean and
least, with 4 or more rounds the split half (the statistic pooled over the odd
rounds against the even rounds': what a run of half the rounds repeats to),
then the model's Spearman and mean |error| against it; a rank target is judged
only on a statistic whose split half exceeds it.  Then, where run.sh recorded
it, what the OS saw during every run (os_seen).  Exits 1 when any arena
differs from its plan.
"""
import json
import os
import re
import sys


def ranks(xs):
    """Ranks from 1 of xs, ties given their mean rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(a, b):
    """Pearson's correlation of the ranks."""
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va > 0 and vb > 0 else float("nan")


def kept(log):
    """The step seconds of one run's log after its first two steps (all when
    there are fewer than three), and its last "allocated" record."""
    recs = [json.loads(l) for l in open(log)]
    steps = [r["step_ms"] / 1e3 for r in recs if "step_ms" in r]
    return (steps[2:] if len(steps) > 2 else steps), [r["allocated"] for r in recs if "allocated" in r][-1]


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def os_seen(runs, rows):
    """Per layout and round, what the OS saw during the run (osrun.py's LOG.os.json
    beside each log, where run.sh wrote one): the round's median step, the run's
    sleeps (voluntary context switches, all ranks and threads) and its own CPU
    seconds, the CPU seconds the rest of the machine used, the hypervisor's steal.
    A round slow with the others' CPU or steal was descheduled; one slow with
    nothing else running spent its own time differently."""
    logs = [line.split()[4].split(",") for line in open(runs)]
    seen = [[log[:-len(".jsonl")] + ".os.json" for log in ls] for ls in logs]
    if not all(os.path.exists(f) for fs in seen for f in fs):
        return
    print("what the OS saw, per round: median step ms / sleeps (voluntary switches) / own CPU s / others' CPU s / steal s"
          " / canary ms (the slowest CPU's, before and after the run, median)")
    tot = [[0.0] * 4 for _ in seen[0]]
    can = [[] for _ in seen[0]]
    for r, fs in zip(rows, seen):
        cells = []
        for k, f in enumerate(fs):
            o = json.load(open(f))
            v = (o["own_voluntary_switches"], o["own_cpu_s"], o["others_cpu_s"], o["steal_s"])
            tot[k] = [a + b for a, b in zip(tot[k], v)]
            c = 1e3 * median([max(o.get("canary_before_s", [0])), max(o.get("canary_after_s", [0]))])
            can[k].append(c)
            cells.append("%6.1f / %6d / %5.2f / %5.2f / %4.2f / %4.0f" % ((r[9][k] * 1e3,) + v + (c,)))
        print("  %-18s %s" % (r[0], "   ".join(cells)))
    print("  %-18s %s" % ("all layouts", "   ".join("         %6d / %5.1f / %5.2f / %4.2f / %4.0f" % (tuple(t) + (median(c),))
                                                  for t, c in zip(tot, can))))


def main():
    rows, bad = [], 0
    print("%-18s %5s %11s %11s %8s %7s %11s %8s %11s %8s  %s" % (
        "layout", "ranks", "predicted", "measured", "error", "spread", "min-rep", "error", "fastest", "error",
        "arena bytes: planned / allocated (per stage)"))
    for line in open(sys.argv[1]):
        name, np, plan_txt, plan_json, logs = line.split()
        m = re.search(r"^step\s+([0-9.eE+-]+) s predicted", open(plan_txt).read(), re.M)
        pred = float(m.group(1))
        reps = [kept(log) for log in logs.split(",")]
        times = [t for r in reps for t in r[0]]
        meas = median(times)                      # every kept step of every repeat
        rep_meds = [median(r[0]) for r in reps]   # each repeat's own median
        spread = (max(rep_meds) - min(rep_meds)) / meas
        minrep = min(rep_meds)
        plan = json.load(open(plan_json))
        arenas, same = [], True
        for c in plan["rank_classes"]:
            st = c["stage"]
            want = (c["device_bytes"]["arena"], c["host_bytes"]["total"])
            ok = True
            for _, alloc in reps:
                got = {(d, h) for s, d, h in zip(alloc["stage"], alloc["device_arena"], alloc["host_arena"]) if s == st}
                ok &= got == {want}
            same &= ok
            arenas.append("%d: %d+%d %s %s" % (st, want[0], want[1], "==" if ok else "!=",
                                                 ",".join("%d+%d" % g for g in sorted(got)) or "none"))
        bad += not same
        fast = min(times)
        rows.append((name, pred, meas, (pred - meas) / meas, fast, (pred - fast) / fast, minrep, (pred - minrep) / minrep,
                     spread, rep_meds, [r[0] for r in reps]))
        print("%-18s %5s %9.1f ms %8.1f ms %+7.1f%% %6.1f%% %8.1f ms %+7.1f%% %8.1f ms %+7.1f%%  %s" % (
            name, np, pred * 1e3, meas * 1e3, 100 * rows[-1][3], 100 * spread, minrep * 1e3, 100 * rows[-1][7],
            fast * 1e3, 100 * rows[-1][5], "; ".join(arenas)))
    n = len(rows)
    mean = sum(abs(r[3]) for r in rows) / n
    rho = spearman([r[1] for r in rows], [r[2] for r in rows])
    nrep = len(open(sys.argv[1]).readline().split()[4].split(","))
    print("%d layouts, %d repeat%s each: mean |predicted - measured| / measured = %.1f%% (target <= 10%%); Spearman %.3f "
          "(target >= 0.9); arenas %s" % (n, nrep, "s" if nrep > 1 else "", 100 * mean, rho,
                                          "equal to the plan for every layout" if not bad else "DIFFER for %d layouts" % bad))
    if nrep > 1:
        print("repeat-to-repeat spread of the median step (max - min over measured): mean %.1f%%, largest %.1f%% (%s)" % (
            100 * sum(r[8] for r in rows) / n, 100 * max(r[8] for r in rows), max(rows, key=lambda r: r[8])[0]))
        print("against the fastest repeat's median: mean |error| %.1f%%; Spearman %.3f" % (
            100 * sum(abs(r[7]) for r in rows) / n, spearman([r[1] for r in rows], [r[6] for r in rows])))
        # The noise ceiling: how well the measurement ranks the layouts against
        # itself.  Round k's figures of all layouts are one measurement of the
        # order; two rounds that disagree bound what any prediction can reach.
        # Per statistic (each round's median step, each round's fastest step):
        # the Spearman of every two rounds, and with 4 or more rounds the split
        # half (the statistic pooled over the odd rounds against the even ones:
        # what a run of half the rounds repeats to).  Which statistic can judge
        # a rank target is decided by these columns alone, not by the model's.
        pred = [r[1] for r in rows]
        print("noise ceiling (the measurement against itself; a rank target is judged only on a statistic whose "
              "self-agreement exceeds it):")
        print("  %-22s %-44s %6s %6s %11s %8s" % ("statistic", "rounds' Spearman pairwise", "least", "split",
                                                  "model: rho", "|error|"))
        judged = []
        for label, per_round, pooled in (
                ("median step", lambda st: median(st), median),
                ("fastest step", lambda st: min(st), min)):
            rounds = [[per_round(r[10][k]) for r in rows] for k in range(nrep)]
            pairs = [spearman(rounds[a], rounds[b]) for a in range(nrep) for b in range(a + 1, nrep)]
            split = (spearman([pooled([t for k in range(0, nrep, 2) for t in r[10][k]]) for r in rows],
                              [pooled([t for k in range(1, nrep, 2) for t in r[10][k]]) for r in rows])
                     if nrep >= 4 else None)
            allr = [pooled([t for k in range(nrep) for t in r[10][k]]) for r in rows]
            rho = spearman(pred, allr)
            print("  %-22s %-44s %6.3f %s %11.3f %7.1f%%" % (
                label, "mean %.3f (%s)" % (sum(pairs) / len(pairs), " ".join("%.2f" % x for x in pairs[:6]) +
                                           (" ..." if len(pairs) > 6 else "")),
                min(pairs), "     -" if split is None else "%6.3f" % split, rho,
                100 * sum(abs(p - a) / a for p, a in zip(pred, allr)) / n))
            if split is not None and split > 0.9:
                judged.append((label, split, rho))
        if nrep < 4:
            print("  rank verdict: none (the split half needs 4 or more rounds)")
        elif not judged:
            print("  rank verdict: none: no statistic's split half exceeds the target (0.9); the run cannot judge it")
        for label, split, rho in judged:
            print("  rank verdict on the %s (split half %.3f > 0.9): the model's Spearman %.3f, target %s" % (
                label, split, rho, "met" if rho >= 0.9 else "NOT met"))
        print("  the model against each round's median alone: Spearman %s" % ", ".join(
            "r%d %.3f" % (k + 1, spearman(pred, [median(r[10][k]) for r in rows])) for k in range(nrep)))
    print("against the fastest step: mean |predicted - fastest| / fastest = %.1f%%; Spearman %.3f" %
          (100 * sum(abs(r[5]) for r in rows) / n, spearman([r[1] for r in rows], [r[4] for r in rows])))
    os_seen(sys.argv[1], rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
