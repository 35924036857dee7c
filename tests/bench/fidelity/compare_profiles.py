"""compare_profiles.py A.json B.json — how far two `shardc calibrate` profiles of
one machine disagree, row by row: the profile is the cost model's input, so a
row that moves between two calibrations minutes apart moves every prediction
made from it.  Rows are matched on everything but their seconds; per table the
median and the largest |B/A - 1| are printed, then the rows the fidelity
benchmark's small models use (GEMMs with every dimension <= 512, the launch
row, the collectives at 2, 4 and 8 ranks of up to 1 MB, sharing and skew) one
a line with both seconds and the ratio."""
import json
import sys

SECS = ("seconds", "gemm_seconds", "elementwise_seconds", "alone_gemm_seconds", "alone_elementwise_seconds")


def rows(path):
    out = {}
    for r in json.load(open(path))["rows"]:
        key = tuple(sorted((k, v) for k, v in r.items() if k not in SECS))
        for s in SECS:
            if s in r:
                out[key + (("value", s),)] = r[s]
    return out


def shown(key):
    d = dict(key)
    t = d["table"]
    if t == "gemm":
        return max(d["m"], d["n"], d["k"]) <= 512
    if t == "collective":
        return d["bytes"] <= (1 << 20)
    return t in ("launch", "sharing", "skew")


def main():
    a, b = rows(sys.argv[1]), rows(sys.argv[2])
    common = [k for k in a if k in b]
    tables = {}
    for k in common:
        tables.setdefault(dict(k)["table"], []).append(abs(b[k] / a[k] - 1) if a[k] > 0 else float("inf"))
    print("%-12s %5s %9s %9s" % ("table", "rows", "median", "largest"))
    for t, d in sorted(tables.items()):
        d.sort()
        print("%-12s %5d %8.1f%% %8.1f%%" % (t, len(d), 100 * d[len(d) // 2], 100 * d[-1]))
    print()
    for k in sorted((k for k in common if shown(k)), key=str):
        d = dict(k)
        what = " ".join("%s=%s" % (n, v) for n, v in k if n not in ("table",))
        print("%-10s %-90s %11.3g %11.3g %+7.1f%%" % (d["table"], what[:90], a[k], b[k], 100 * (b[k] / a[k] - 1) if a[k] else 0))


if __name__ == "__main__":
    main()
