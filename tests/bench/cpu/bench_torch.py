#!/usr/bin/python3
"""bench_torch.py — PyTorch's side of tests/bench/cpu/run.sh.

  bench_torch.py train LAYERS HIDDEN HEADS SEQ BATCH STEPS   GPT-2-shaped training, tokens/s
  bench_torch.py adamw N SECONDS                             torch.optim.AdamW(foreach=True), params/s

Threads: torch.set_num_threads(OMP_NUM_THREADS).  The model is the trainer's:
byte vocabulary (256), learned positions, pre-norm blocks, tanh GELU, tied
head, AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), clipping at 1."""
import math, os, sys, time
import torch
import torch.nn.functional as F

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))


def train(L, C, H, T, B, steps):
    torch.manual_seed(0)
    P = {"wte": torch.randn(256, C) * 0.02, "wpe": torch.randn(T, C) * 0.02,
         "lnf_w": torch.ones(C), "lnf_b": torch.zeros(C)}
    for l in range(L):
        P.update({"%d.ln1_w" % l: torch.ones(C), "%d.ln1_b" % l: torch.zeros(C),
                  "%d.qkv_w" % l: torch.randn(3 * C, C) * 0.02, "%d.qkv_b" % l: torch.zeros(3 * C),
                  "%d.proj_w" % l: torch.randn(C, C) * 0.02, "%d.proj_b" % l: torch.zeros(C),
                  "%d.ln2_w" % l: torch.ones(C), "%d.ln2_b" % l: torch.zeros(C),
                  "%d.fc_w" % l: torch.randn(4 * C, C) * 0.02, "%d.fc_b" % l: torch.zeros(4 * C),
                  "%d.fc2_w" % l: torch.randn(C, 4 * C) * 0.02, "%d.fc2_b" % l: torch.zeros(C)})
    for v in P.values():
        v.requires_grad_(True)
    opt = torch.optim.AdamW([{"params": [v for v in P.values() if v.dim() >= 2], "weight_decay": 0.1},
                             {"params": [v for v in P.values() if v.dim() < 2], "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), foreach=True)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    tok = torch.randint(0, 256, (B, T + 1))
    times = []
    for s in range(steps):
        t0 = time.perf_counter()
        x = P["wte"][tok[:, :T]] + P["wpe"]
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
        loss = F.cross_entropy(logits.reshape(-1, 256), tok[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    times = sorted(times[2:])
    print("torch train tokens_per_s %.6g threads %d" % (B * T / times[len(times) // 2], torch.get_num_threads()))


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
    train(*(int(x) for x in sys.argv[2:8]))
else:
    adamw(int(sys.argv[2]), float(sys.argv[3]))
