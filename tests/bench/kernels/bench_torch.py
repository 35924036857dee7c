#!/usr/bin/python3
"""bench_torch.py [SECONDS] — the cases of bench_kernels.c in PyTorch (CPU, fp32).

Matmul: F.linear forward, and its backward (dinp, dweight, dbias) by autograd.
Attention: the causal softmax(q k^T / sqrt(HS)) v written with torch ops (the
Debian torch 1.13 has no scaled_dot_product_attention), kv heads repeated for
GQA; forward, and backward by autograd.  FLOPs are counted as in the C file.
Norms: F.layer_norm, and rmsnorm as Hugging Face's LlamaRMSNorm writes it
(torch 1.13 has no fused one); forward, and backward by autograd (the input,
weight and bias gradients); GB/s counted as in the C file.
Threads: torch.set_num_threads(OMP_NUM_THREADS, default 2).
"""
import os
import sys
import time

import torch
import torch.nn.functional as F

MIN_S = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))


def timeit(fn):
    """Seconds of the fastest call of fn among those made in MIN_S seconds."""
    fn()
    best, start = 1e30, time.perf_counter()
    while time.perf_counter() - start < MIN_S:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_matmul(N, C, OC):
    x = torch.rand(N, C, requires_grad=True)
    w = torch.rand(OC, C, requires_grad=True)
    b = torch.rand(OC, requires_grad=True)
    dy = torch.rand(N, OC)
    with torch.no_grad():
        tf = timeit(lambda: F.linear(x, w, b))
    y = F.linear(x, w, b)
    tb = timeit(lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True))
    fl = 2.0 * N * C * OC
    print(f"matmul    N={N} C={C} OC={OC}          fwd {tf*1e3:7.2f} ms {fl/tf*1e-9:6.1f} GFLOP/s"
          f"   bwd {tb*1e3:7.2f} ms {2*fl/tb*1e-9:6.1f} GFLOP/s")


def attention(q, k, v, mask, rep, HS):
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = (q @ k.transpose(-2, -1)) * HS ** -0.5
    return torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v


def bench_attention(B, T, NH, NKV, HS):
    q = torch.rand(B, NH, T, HS, requires_grad=True)
    k = torch.rand(B, NKV, T, HS, requires_grad=True)
    v = torch.rand(B, NKV, T, HS, requires_grad=True)
    mask = ~torch.ones(T, T, dtype=torch.bool).tril()
    do = torch.rand(B, NH, T, HS)
    with torch.no_grad():
        tf = timeit(lambda: attention(q, k, v, mask, NH // NKV, HS))
    o = attention(q, k, v, mask, NH // NKV, HS)
    tb = timeit(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
    fl = 4.0 * B * NH * HS * T * (T + 1) / 2
    print(f"attention B={B} T={T} NH={NH} NKV={NKV} HS={HS} fwd {tf*1e3:7.2f} ms {fl/tf*1e-9:6.1f} GFLOP/s"
          f"   bwd {tb*1e3:7.2f} ms {2*fl/tb*1e-9:6.1f} GFLOP/s")


def rmsnorm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))


def bench_norm(rms, N, C):
    x = torch.rand(N, C, requires_grad=True)
    w = torch.rand(C, requires_grad=True)
    b = torch.rand(C, requires_grad=True)
    dy = torch.rand(N, C)
    fn = (lambda: rmsnorm(x, w)) if rms else (lambda: F.layer_norm(x, (C,), w, b))
    with torch.no_grad():
        tf = timeit(fn)
    y = fn()
    wrt = (x, w) if rms else (x, w, b)
    tb = timeit(lambda: torch.autograd.grad(y, wrt, dy, retain_graph=True))
    name = "rmsnorm  " if rms else "layernorm"
    print(f"{name}  N={N} C={C}                 fwd {tf*1e3:7.3f} ms {8*N*C/tf*1e-9:6.1f} GB/s"
          f"      bwd {tb*1e3:7.3f} ms {16*N*C/tb*1e-9:6.1f} GB/s")


print(f"threads {torch.get_num_threads()} (torch {torch.__version__})")
for shape in ((256, 768, 2304), (1024, 768, 2304), (1024, 768, 768), (1024, 768, 3072), (1024, 3072, 768)):
    bench_matmul(*shape)
for shape in ((4, 256, 6, 6, 64), (1, 1024, 12, 12, 64), (1, 1024, 8, 2, 128)):
    bench_attention(*shape)
for rms in (0, 1):
    for shape in ((128, 128), (8192, 768), (1024, 4096)):
        bench_norm(rms, *shape)
