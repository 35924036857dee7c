#!/usr/bin/python3
"""hf_bad.py — a good model.safetensors made bad in one way, for the --init
error tests (no torch needed).

  hf_bad.py IN.safetensors OUT.safetensors MODE [ARGS]
    missing NAME        without tensor NAME
    extra NAME          with one more tensor NAME (a copy of the first vector)
    shape NAME R C      tensor NAME reshaped to [R, C] (zeros)
    dtype NAME          tensor NAME stored as F64
    truncate N          the file without its last N bytes
    overlap             the header puts the second tensor 4 bytes early, over the first"""
import json, struct, sys


def read(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    meta = head.pop("__metadata__", None)
    blobs = {k: (e["dtype"], e["shape"], data[8 + n + e["data_offsets"][0]: 8 + n + e["data_offsets"][1]])
             for k, e in sorted(head.items(), key=lambda kv: kv[1]["data_offsets"][0])}
    return meta, blobs


def write(path, meta, blobs, shift=0):
    head, off, body = {}, 0, b""
    for i, (k, (dt, shape, b)) in enumerate(blobs.items()):
        at = off - (shift if i == 1 else 0)
        head[k] = {"dtype": dt, "shape": shape, "data_offsets": [at, at + len(b)]}
        off += len(b)
        body += b
    if meta is not None:
        head["__metadata__"] = meta
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + body)


def main():
    src, out, mode, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    meta, blobs = read(src)
    shift = 0
    if mode == "missing":
        del blobs[args[0]]
    elif mode == "extra":
        blobs[args[0]] = next(v for v in blobs.values() if len(v[1]) == 1)
    elif mode == "shape":
        r, c = int(args[1]), int(args[2])
        blobs[args[0]] = ("F32", [r, c], bytes(4 * r * c))
    elif mode == "dtype":
        dt, shape, b = blobs[args[0]]
        n = len(b) // 4
        blobs[args[0]] = ("F64", shape, struct.pack("<%dd" % n, *struct.unpack("<%df" % n, b)))
    elif mode == "overlap":
        shift = 4
    elif mode != "truncate":
        sys.exit(__doc__)
    write(out, meta, blobs, shift)
    if mode == "truncate":
        data = open(out, "rb").read()
        open(out, "wb").write(data[:-int(args[0])])


main()
