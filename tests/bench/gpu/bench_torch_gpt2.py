#!/usr/bin/env python3
"""bench_torch_gpt2.py B T STEPS VOCAB_PAD DATA.bin — PyTorch's GPT-2 124M training
throughput on one GPU, the reference of tests/bench/gpu/run.sh: the same model
(12 layers, hidden 768, 12 heads, the vocabulary padded to VOCAB_PAD, tied
embeddings, GELU tanh), the same batch (B sequences of T tokens per step, from
the same llm.c token shard), bf16 autocast over fp32 weights (the trainer's bf16
with fp32 master weights), torch.compile, F.scaled_dot_product_attention
(causal), AdamW(fused=True).  Prints one line:
  torch tokens_per_s X mfu Y
with MFU = (6 N + 12 L H T) tokens/s / 989e12 (N: the parameters; dense bf16
peak of an H100/H200 SXM)."""
import math
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

L, H, NH, V = 12, 768, 12, 50257


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(H)
        self.c_attn = nn.Linear(H, 3 * H)
        self.c_proj = nn.Linear(H, H)
        self.ln_2 = nn.LayerNorm(H)
        self.c_fc = nn.Linear(H, 4 * H)
        self.mlp_proj = nn.Linear(4 * H, H)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vpad, T):
        super().__init__()
        self.wte = nn.Embedding(vpad, H)
        self.wpe = nn.Embedding(T, H)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(H)
        self.vpad = vpad
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)[..., :V]   # tied, padding columns off
        return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))


def tokens(path, n):
    with open(path, "rb") as f:
        head = struct.unpack("<256i", f.read(1024))
        data = f.read()
    t = torch.frombuffer(bytearray(data), dtype=torch.int16).to(torch.int64) & 0xFFFF
    return t[: min(n, head[2])]


def main():
    B, T, steps, vpad, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = "cuda"
    model = GPT(vpad, T).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    cmodel = torch.compile(model)
    data = tokens(path, (steps + 1) * B * T + 1).to(dev)
    times = []
    for s in range(steps):
        off = (s * B * T) % (data.numel() - B * T - 1)
        x = data[off: off + B * T].view(B, T)
        y = data[off + 1: off + 1 + B * T].view(B, T)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = cmodel(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()   # the trainer's loss logging syncs the host every step as well
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    t = sorted(times[5:]) if len(times) > 7 else sorted(times)
    dt = t[len(t) // 2]
    tps = B * T / dt
    flops_per_token = 6 * nparams + 12 * L * H * T
    print("torch tokens_per_s %.1f mfu %.4f" % (tps, tps * flops_per_token / 989e12))


if __name__ == "__main__":
    main()
