#!/usr/bin/python3
"""emit-torch.py DIR TRAINER_OUT [TOL] — the generated trainer against PyTorch.

DIR holds what tests/golden/emit-driver.c --dump wrote for a one-rank run:
the model's shapes and hyperparameters, the initial flat parameters with
their index, and every batch.  This builds the same GPT-2 or Llama in plain
PyTorch (written here from the published definitions, not from shardc's
code), trains it on the same batches with torch.optim.AdamW, weight decay
per tensor, gradient accumulation over the microbatches, the same learning
rates and clip_grad_norm_, and checks that every step's loss and gradient
norm equal the trainer's (TRAINER_OUT: `step S loss L norm G` lines) within
TOL relative (default 1e-4).
"""
import math
import sys

import torch
import torch.nn.functional as F


def read_model(d):
    cfg, lrs = {}, {}
    for line in open(f"{d}/model.txt"):
        k, *v = line.split()
        if k == "lr":
            lrs[int(v[0])] = float(v[1])
        else:
            cfg[k] = float(v[0]) if any(ch in v[0] for ch in ".en") else int(v[0])
    return cfg, lrs


def read_params(d):
    flat = torch.frombuffer(bytearray(open(f"{d}/params.bin", "rb").read()), dtype=torch.float32)
    params, decay = {}, {}
    for line in open(f"{d}/index.txt"):
        name, rows, cols, off, dec = line.split()
        rows, cols, off = int(rows), int(cols), int(off)
        n = rows * max(cols, 1)
        t = flat[off:off + n].clone()
        params[name] = torch.nn.Parameter(t.view(rows, cols) if cols else t)
        decay[name] = dec == "1"
    return params, decay


def rope(x, theta):
    """Hugging Face's rotate-half RoPE on x (B, T, H, D)."""
    B, T, H, D = x.shape
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos().float()[None, :, None, :], emb.sin().float()[None, :, None, :]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def attention(q, k, v, H, KV):
    """Causal attention; q (B,T,H,D), k and v (B,T,KV,D); kv head h // (H/KV)."""
    B, T, _, D = q.shape
    k = k.repeat_interleave(H // KV, dim=2)
    v = v.repeat_interleave(H // KV, dim=2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    return (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, H * D)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def forward(cfg, P, tok, tgt):
    L, C, H, KV = cfg["layers"], cfg["hidden"], cfg["heads"], cfg["kv_heads"]
    D, V, eps = C // H, cfg["vocab"], cfg["norm_eps"]
    B, T = tok.shape
    gpt = cfg["family"] == 0
    lin = lambda x, n: F.linear(x, P[n + ".weight"], P.get(n + ".bias"))
    if gpt:
        x = P["wte.weight"][tok] + P["wpe.weight"][:T]
        norm = lambda x, n: F.layer_norm(x, (C,), P[n + ".weight"], P[n + ".bias"], eps)
    else:
        x = P["model.embed_tokens.weight"][tok]
        norm = lambda x, n: rmsnorm(x, P[n + ".weight"], eps)
    for l in range(L):
        if gpt:
            p = f"h.{l}."
            qkv = lin(norm(x, p + "ln_1"), p + "attn.c_attn")
            q, k, v = qkv.split([C, KV * D, KV * D], dim=-1)
            a = attention(q.view(B, T, H, D), k.view(B, T, KV, D), v.view(B, T, KV, D), H, KV)
            x = x + lin(a, p + "attn.c_proj")
            h = norm(x, p + "ln_2")
            x = x + lin(F.gelu(lin(h, p + "mlp.c_fc"), approximate="tanh"), p + "mlp.c_proj")
        else:
            p = f"model.layers.{l}."
            h = norm(x, p + "input_layernorm")
            q = rope(lin(h, p + "self_attn.q_proj").view(B, T, H, D), cfg["rope_theta"])
            k = rope(lin(h, p + "self_attn.k_proj").view(B, T, KV, D), cfg["rope_theta"])
            v = lin(h, p + "self_attn.v_proj").view(B, T, KV, D)
            x = x + lin(attention(q, k, v, H, KV), p + "self_attn.o_proj")
            h = norm(x, p + "post_attention_layernorm")
            x = x + lin(F.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    if gpt:
        logits = F.linear(norm(x, "ln_f"), P["wte.weight"])
    else:
        logits = F.linear(norm(x, "model.norm"), P["lm_head.weight"])
    return F.cross_entropy(logits[..., :V].reshape(B * T, V), tgt.reshape(B * T))


def main():
    d, out = sys.argv[1], sys.argv[2]
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
    torch.manual_seed(0)
    cfg, lrs = read_model(d)
    P, decay = read_params(d)
    B, T, M, S = cfg["micro_batch"], cfg["seq_len"], cfg["microbatches"], cfg["steps"]
    data = torch.frombuffer(bytearray(open(f"{d}/batches.bin", "rb").read()), dtype=torch.int32).long()
    data = data.view(S, M, 2, B, T)
    groups = [{"params": [P[n] for n in P if decay[n]], "weight_decay": cfg["weight_decay"]},
              {"params": [P[n] for n in P if not decay[n]], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lrs[1], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    want = [line.split() for line in open(out) if line.startswith("step ")]
    bad = 0
    for s in range(1, S + 1):
        opt.zero_grad()
        loss = 0.0
        for mb in range(M):
            l = forward(cfg, P, data[s - 1, mb, 0], data[s - 1, mb, 1]) / M
            l.backward()
            loss += l.item()
        norm = torch.nn.utils.clip_grad_norm_(list(P.values()), cfg["grad_clip"]).item()
        for g in opt.param_groups:
            g["lr"] = lrs[s]
        opt.step()
        got_loss, got_norm = float(want[s - 1][3]), float(want[s - 1][5])
        ok = abs(got_loss - loss) <= tol * abs(loss) and abs(got_norm - norm) <= tol * abs(norm)
        print(f"step {s} torch loss {loss:.9g} norm {norm:.9g}   trainer loss {got_loss:.9g} norm {got_norm:.9g}"
              + ("" if ok else "   <-- differs"))
        bad += not ok
    sys.exit(1 if bad else 0)


main()
