#!/usr/bin/env python3
"""train_compare.py — compares two training runs for the e2e tests (no numpy needed).

  train_compare.py losses REF.jsonl RUN.jsonl TOL [exact | NORM_TOL]
      every step of REF is in RUN with |loss - ref| <= TOL * |ref|, and its grad_norm
      within NORM_TOL (default TOL) the same way (exact: both bit for bit)
  train_compare.py scales REF.jsonl RUN.jsonl TOL
      fp16's loss scaling: the same steps, the same steps skipped and the same loss
      scales in RUN as in REF, some steps skipped and some taken, and the losses of
      the steps taken within TOL relative
  train_compare.py weights REF.safetensors RUN.safetensors TOL
      the same tensors, shapes and dtypes; |w - ref| <= TOL * max(1, |ref|) everywhere
Prints the worst difference; exits 1 on a mismatch.  Every comparison is written
`not (d <= tol)`: a NaN (or a loss the log wrote as null) fails it.  A grad_norm may
be null (not finite) only in a step both runs skipped (fp16's overflow)."""
import array, json, math, struct, sys


def steps(path):
    """step -> (loss, grad_norm, skipped), from a JSONL log."""
    out = {}
    with open(path) as f:
        for line in f:
            o = json.loads(line)
            if "loss" in o:
                out[o["step"]] = (o["loss"], o.get("grad_norm"), bool(o.get("skipped")))
    return out


def worse(d, w):
    """The worse of a difference d and the worst so far w: a NaN stays."""
    return w if math.isnan(w) or d <= w else d


def rel(x, ref):
    """|x - ref| / |ref|, NaN when either is missing or not finite."""
    if not isinstance(x, (int, float)) or not isinstance(ref, (int, float)):
        return math.nan
    return abs(x - ref) / max(abs(ref), 1e-30)


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
    norm_tol = float(sys.argv[5]) if len(sys.argv) > 5 and not exact else tol
    bad = 0
    if mode == "losses":
        r, q = steps(ref), steps(run)
        if not r:
            sys.exit("%s: no steps" % ref)
        worst = worst_norm = 0.0
        for s, (l, g, skipped) in sorted(r.items()):
            if s not in q:
                print("step %d missing from %s" % (s, run))
                bad += 1
                continue
            ql, qg, qskipped = q[s]
            d = rel(ql, l)
            worst = worse(d, worst)
            if (exact and ql != l) or not (d <= tol):
                print("step %d: loss %r vs reference %r (rel %.3g)" % (s, ql, l, d))
                bad += 1
            if g is None and qg is None and skipped and qskipped:
                continue                    # an fp16 step both runs skipped: no finite norm
            dn = rel(qg, g)
            worst_norm = worse(dn, worst_norm)
            if (exact and qg != g) or not (dn <= norm_tol):
                print("step %d: grad_norm %r vs reference %r (rel %.3g)" % (s, qg, g, dn))
                bad += 1
        print("losses: %d steps, worst relative difference %.3g (grad_norm %.3g)" % (len(r), worst, worst_norm))
    elif mode == "scales":
        a, b = ([json.loads(l) for l in open(p) if '"loss"' in l] for p in (ref, run))
        key = lambda rows: [(o["step"], bool(o.get("skipped")), o.get("loss_scale")) for o in rows]
        if not a or key(a) != key(b):
            sys.exit("steps, skips or scales differ:\n  %s\n  %s" % (key(a), key(b)))
        skipped = sum(bool(o.get("skipped")) for o in a)
        if not 0 < skipped < len(a):
            sys.exit("%d of %d steps skipped: the test needs some of each" % (skipped, len(a)))
        worst = 0.0
        for x, y in zip(a, b):
            if not x.get("skipped"):
                worst = worse(rel(y["loss"], x["loss"]), worst)
        print("scales: %d steps, the same %d skipped and the same scales (down to %g), losses within %.3g"
              % (len(a), skipped, a[-1]["loss_scale"], worst))
        if not (worst <= tol):
            bad = 1
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
                d = abs(x - y) / max(1.0, abs(x))   # NaN when either is NaN
                if worse(d, worst) is not worst:
                    worst, where = d, name
            if math.isnan(worst):                   # the first NaN is the verdict
                break
        print("weights: %d tensors, worst difference %.3g (%s)" % (len(r), worst, where))
        if not (worst <= tol):
            bad = max(bad, 1)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":   # torch_common.py imports tensors()
    main()
