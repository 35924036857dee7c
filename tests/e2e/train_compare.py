#!/usr/bin/env python3
"""train_compare.py — compares two training runs for the e2e tests (no numpy needed).

  train_compare.py losses REF.jsonl RUN.jsonl TOL [exact]
      every step of REF is in RUN with |loss - ref| <= TOL * |ref| (exact: bit for bit)
  train_compare.py weights REF.safetensors RUN.safetensors TOL
      the same tensors, shapes and dtypes; |w - ref| <= TOL * max(1, |ref|) everywhere
Prints the worst difference; exits 1 on a mismatch."""
import array, json, struct, sys


def steps(path):
    out = {}
    with open(path) as f:
        for line in f:
            o = json.loads(line)
            if "loss" in o:
                out[o["step"]] = o["loss"]
    return out


def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        if t["dtype"] == "F32":
            v = array.array("f")
            v.frombytes(data[a:b])
        elif t["dtype"] == "BF16":
            h = array.array("H")
            h.frombytes(data[a:b])
            v = array.array("f")
            v.frombytes(b"".join(struct.pack("<I", x << 16) for x in h))
        else:
            sys.exit("unknown dtype " + t["dtype"])
        out[name] = (t["shape"], v)
    return out


def main():
    mode, ref, run, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    exact = len(sys.argv) > 5 and sys.argv[5] == "exact"
    bad = 0
    if mode == "losses":
        r, q = steps(ref), steps(run)
        if not r:
            sys.exit("%s: no steps" % ref)
        worst = 0.0
        for s, l in sorted(r.items()):
            if s not in q:
                print("step %d missing from %s" % (s, run))
                bad += 1
                continue
            d = abs(q[s] - l) / max(abs(l), 1e-30)
            worst = max(worst, d)
            if (exact and q[s] != l) or d > tol:
                print("step %d: loss %.17g vs reference %.17g (rel %.3g)" % (s, q[s], l, d))
                bad += 1
        print("losses: %d steps, worst relative difference %.3g" % (len(r), worst))
    else:
        r, q = tensors(ref), tensors(run)
        if sorted(r) != sorted(q):
            sys.exit("tensor names differ: %s vs %s" % (sorted(r)[:5], sorted(q)[:5]))
        worst, where = 0.0, ""
        for name in sorted(r):
            (sr, vr), (sq, vq) = r[name], q[name]
            if sr != sq:
                print("%s: shape %s vs %s" % (name, sq, sr))
                bad += 1
                continue
            for x, y in zip(vr, vq):
                d = abs(x - y) / max(1.0, abs(x))
                if d > worst:
                    worst, where = d, name
            if worst > tol and not bad:
                bad += 1
        print("weights: %d tensors, worst difference %.3g (%s)" % (len(r), worst, where))
        if worst > tol:
            bad = max(bad, 1)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":   # torch_common.py imports tensors()
    main()
