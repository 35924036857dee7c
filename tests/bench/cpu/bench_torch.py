#!/usr/bin/python3
"""bench_torch.py — PyTorch's side of tests/bench/cpu/run.sh.

  bench_torch.py train FAMILY LAYERS HIDDEN HEADS KV_HEADS FFN VOCAB SEQ BATCH STEPS
      training in eager mode; prints every step's seconds after the first two
  bench_torch.py sgemm N SECONDS
      an N x N x N sgemm (torch.mm), its GFLOP/s: best, median, and the repeats
  bench_torch.py adamw N SECONDS
      torch.optim.AdamW(foreach=True), params/s

Threads: torch.set_num_threads(OMP_NUM_THREADS).  The models are the trainer's:
FAMILY gpt: learned positions, pre-norm LayerNorm blocks with biases, tanh GELU,
tied head; llama: RoPE, RMSNorm, SwiGLU, grouped-query attention, no biases,
untied head.  AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), clipping at 1."""
import math, os, sys, time
import torch
import torch.nn.functional as F

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))


def gpt_params(L, C, FFN, V, T):
    P = {"wte": torch.randn(V, C) * 0.02, "wpe": torch.randn(T, C) * 0.02,
         "lnf_w": torch.ones(C), "lnf_b": torch.zeros(C)}
    for l in range(L):
        P.update({"%d.ln1_w" % l: torch.ones(C), "%d.ln1_b" % l: torch.zeros(C),
                  "%d.qkv_w" % l: torch.randn(3 * C, C) * 0.02, "%d.qkv_b" % l: torch.zeros(3 * C),
                  "%d.proj_w" % l: torch.randn(C, C) * 0.02, "%d.proj_b" % l: torch.zeros(C),
                  "%d.ln2_w" % l: torch.ones(C), "%d.ln2_b" % l: torch.zeros(C),
                  "%d.fc_w" % l: torch.randn(FFN, C) * 0.02, "%d.fc_b" % l: torch.zeros(FFN),
                  "%d.fc2_w" % l: torch.randn(C, FFN) * 0.02, "%d.fc2_b" % l: torch.zeros(C)})
    return P


def gpt_loss(P, tok, tgt, L, C, H, T):
    B = tok.shape[0]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    x = P["wte"][tok] + P["wpe"]
    for l in range(L):
        p = lambda n: P["%d.%s" % (l, n)]
        h = F.layer_norm(x, (C,), p("ln1_w"), p("ln1_b"))
        q, k, v = F.linear(h, p("qkv_w"), p("qkv_b")).split(C, -1)
        q, k, v = (z.view(B, T, H, C // H).transpose(1, 2) for z in (q, k, v))
        a = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        y = (a.masked_fill(mask, float("-inf")).softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, p("proj_w"), p("proj_b"))
        h = F.gelu(F.linear(F.layer_norm(x, (C,), p("ln2_w"), p("ln2_b")), p("fc_w"), p("fc_b")), approximate="tanh")
        x = x + F.linear(h, p("fc2_w"), p("fc2_b"))
    logits = F.layer_norm(x, (C,), P["lnf_w"], P["lnf_b"]) @ P["wte"].t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def llama_params(L, C, H, KV, FFN, V):
    HS = C // H
    P = {"emb": torch.randn(V, C) * 0.02, "head": torch.randn(V, C) * 0.02, "norm": torch.ones(C)}
    for l in range(L):
        P.update({"%d.n1" % l: torch.ones(C), "%d.n2" % l: torch.ones(C),
                  "%d.q" % l: torch.randn(C, C) * 0.02, "%d.k" % l: torch.randn(KV * HS, C) * 0.02,
                  "%d.v" % l: torch.randn(KV * HS, C) * 0.02, "%d.o" % l: torch.randn(C, C) * 0.02,
                  "%d.gate" % l: torch.randn(FFN, C) * 0.02, "%d.up" % l: torch.randn(FFN, C) * 0.02,
                  "%d.down" % l: torch.randn(C, FFN) * 0.02})
    return P


def rope(x, cs, sn):
    """x (B, H, T, HS): Hugging Face's rotate-half."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cs - x2 * sn, x2 * cs + x1 * sn), dim=-1)


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w


def llama_loss(P, tok, tgt, L, C, H, KV, T):
    B, HS = tok.shape[0], C // H
    inv = 1.0 / torch.pow(torch.tensor(10000.0), torch.arange(0, HS, 2, dtype=torch.float32) / HS)
    f = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    cs, sn = torch.cat((f.cos(), f.cos()), -1), torch.cat((f.sin(), f.sin()), -1)
    cs, sn = cs[:, :HS // 2], sn[:, :HS // 2]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    x = P["emb"][tok]
    for l in range(L):
        p = lambda n: P["%d.%s" % (l, n)]
        h = rmsnorm(x, p("n1"))
        q = F.linear(h, p("q")).view(B, T, H, HS).transpose(1, 2)
        k = F.linear(h, p("k")).view(B, T, KV, HS).transpose(1, 2)
        v = F.linear(h, p("v")).view(B, T, KV, HS).transpose(1, 2)
        q, k = rope(q, cs, sn), rope(k, cs, sn)
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        a = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        y = (a.masked_fill(mask, float("-inf")).softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, p("o"))
        h = rmsnorm(x, p("n2"))
        x = x + F.linear(F.silu(F.linear(h, p("gate"))) * F.linear(h, p("up")), p("down"))
    logits = F.linear(rmsnorm(x, P["norm"]), P["head"])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def train(family, L, C, H, KV, FFN, V, T, B, steps):
    torch.manual_seed(0)
    P = gpt_params(L, C, FFN, V, T) if family == "gpt" else llama_params(L, C, H, KV, FFN, V)
    for v in P.values():
        v.requires_grad_(True)
    opt = torch.optim.AdamW([{"params": [v for v in P.values() if v.dim() >= 2], "weight_decay": 0.1},
                             {"params": [v for v in P.values() if v.dim() < 2], "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), foreach=True)
    tok = torch.randint(0, min(V, 256), (B, T + 1))
    times = []
    for s in range(steps):
        t0 = time.perf_counter()
        if family == "gpt":
            loss = gpt_loss(P, tok[:, :T], tok[:, 1:], L, C, H, T)
        else:
            loss = llama_loss(P, tok[:, :T], tok[:, 1:], L, C, H, KV, T)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    print("torch step_s", " ".join("%.6f" % t for t in times[2:]), "threads", torch.get_num_threads())


def sgemm(n, secs):
    a, b = torch.rand(n, n), torch.rand(n, n)
    c = torch.mm(a, b)
    rates, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < secs or len(rates) < 3:
        s = time.perf_counter()
        torch.mm(a, b, out=c)
        rates.append(2.0 * n ** 3 / (time.perf_counter() - s) / 1e9)
    print("torch sgemm gflops", " ".join("%.1f" % r for r in rates))


def adamw(n, secs):
    p = torch.zeros(n, requires_grad=True)
    p.grad = torch.full((n,), 1e-3)
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
    opt.step()
    best, t0 = 1e30, time.perf_counter()
    while time.perf_counter() - t0 < secs:
        a = time.perf_counter()
        opt.step()
        best = min(best, time.perf_counter() - a)
    print("torch adamw params_per_s %.4g threads %d" % (n / best, torch.get_num_threads()))


if sys.argv[1] == "train":
    train(sys.argv[2], *(int(x) for x in sys.argv[3:12]))
elif sys.argv[1] == "sgemm":
    sgemm(int(sys.argv[2]), float(sys.argv[3]))
else:
    adamw(int(sys.argv[2]), float(sys.argv[3]))
