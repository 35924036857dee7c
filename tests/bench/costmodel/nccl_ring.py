#!/usr/bin/env python3
"""nccl_ring.py — the ZeRO-3 rows' per-module all-gathers priced by NCCL's own
tuning model next to shardc's alpha-beta (docs/cost-model.md, "Why the ZeRO-3
rows miss").  NCCL: src/graph/tuning.cc (NCCL >= 2.12), ring all-gather over n
ranks on n/8 nodes: baseLat + (n - nodes)·hwLat[NVLINK] + (nodes - 1)·hwLat[NET]
+ bytes / algBw, algBw = busBw · n / (n - 1), busBw = min(channels · 24 GB/s,
235 GB/s on Ampere) (LL128: · 0.92, at most 20 GB/s a channel; LL: / 4, at
most 39 GB/s), the fastest protocol chosen.  shardc: (n - nodes)·2 µs +
(nodes - 1)·5 µs (ib200) + bytes·(n - 1)/n / (8 NICs · 25 GB/s).  Only the
formulas: no GPU, no network, no shardc build."""

# (base latency µs, NVLink step µs, network step µs, bus bandwidth GB/s) per protocol
def nccl_protocols(channels=8, per_channel=24.0):
    bus = min(channels * per_channel, 235.0)
    return {"Simple": (8.4, 3.4, 14.0, bus),
            "LL128": (14.0, 1.9, 4.0, min(bus * 0.92, 20.0 * channels)),
            "LL": (6.6, 0.6 * 1.8, 2.7, min(bus / 4, 39.0))}


def nccl_allgather_us(nbytes, n, nodes):
    best = None
    for proto, (base, nvl, net, bus) in nccl_protocols().items():
        t = base + (n - nodes) * nvl + (nodes - 1) * net + nbytes / (1e3 * bus * n / (n - 1))
        if best is None or t < best[1]:
            best = (proto, t)
    return best


def shardc_allgather_us(nbytes, n, nodes):
    return (n - nodes) * 2.0 + (nodes - 1) * 5.0 + nbytes * (n - 1) / n / (1e3 * 200.0)


ROWS = (("175B", 96, 12288, ((384, 81.6), (768, 66.7), (1536, 66.7))),
        ("530B", 105, 20480, ((640, 255.5), (1120, 179.9), (2240, 183.7))))

print("row          qkv shard/rank   NCCL per layer-pass      shardc   NCCL x 4 passes x layers   published step")
for name, layers, h, rows in ROWS:
    modules = (3 * h * h, h * h, 4 * h * h, 4 * h * h)      # fp16 bytes: 2 per element
    for n, step in rows:
        nodes = n // 8
        picks = [nccl_allgather_us(2 * m, n, nodes) for m in modules]
        tn = sum(t for _, t in picks)
        ts = sum(shardc_allgather_us(2 * m, n, nodes) for m in modules)
        protos = ", ".join(sorted({p for p, _ in picks}))
        print(f"{name} {n:5d}   {2 * modules[0] / n / 1e3:8.0f} KB   {tn / 1e3:7.1f} ms ({protos:13s}) {ts / 1e3:7.1f} ms"
              f"   {tn * 4 * layers / 1e6:10.1f} s   {step:14.1f} s")
