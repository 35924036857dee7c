#!/usr/bin/python3
"""torch_llama.py — the tiny Llama of specs/tiny-llama.tspec (RoPE, RMSNorm,
SwiGLU, grouped-query attention, untied head) written in plain PyTorch, trained
from our initial weights on our batches, against the trainer's log and step-1
gradients (as torch_gpt.py does for the GPT).

  torch_llama.py INIT.safetensors DATA.txt RUN.jsonl STEP1_RANK_FILE HEADS SEQ GLOBAL_BATCH
      WEIGHT_DECAY BETA1 BETA2 EPS GRAD_CLIP NORM_EPS ROPE_THETA

INIT: `shardc export` of the weights before any update (Hugging Face Llama
names, nn.Linear [out, in]).  The kv heads follow from k_proj's shape.  The
batches, RUN.jsonl and STEP1_RANK_FILE are as in torch_gpt.py.  RoPE is Hugging
Face's rotate-half with the angles in fp32 as LlamaRotaryEmbedding computes
them.  Checks: every step's loss within 1e-5 relative; every step-1 gradient
within 1e-4 relative (of the tensor's largest gradient), one for every
tensor.  Exit 1 on a mismatch.  The training loop: torch_common.py."""
import math, sys
import torch
import torch.nn.functional as F
from torch_common import Args, init_torch, read_st, train_compare


def rope_tables(T, HS, theta):
    """cos, sin (T, HS/2) in fp32, LlamaRotaryEmbedding's order of operations."""
    i = torch.arange(0, HS, 2, dtype=torch.float32)
    inv = 1.0 / torch.pow(torch.tensor(theta, dtype=torch.float32), i / HS)
    f = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    return f.cos(), f.sin()


def rope(x, cs, sn):
    """x (B, H, T, HS): rotate-half."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cs - x2 * sn, x2 * cs + x1 * sn), dim=-1)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def logits(P, H, tok, neps, theta):
    """Llama's logits (B, T, V) for tokens tok (B, T): P holds Hugging Face
    Llama's tensors; the layers, the width and the kv heads follow from the
    shapes; a tied head (no lm_head.weight) is the embedding."""
    L = max(int(k.split(".")[2]) for k in P if k.startswith("model.layers.")) + 1
    C = P["model.embed_tokens.weight"].shape[1]
    HS = C // H
    KV = P["model.layers.0.self_attn.k_proj.weight"].shape[0] // HS
    B, T = tok.shape
    cs, sn = rope_tables(T, HS, theta)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    x = P["model.embed_tokens.weight"][tok]
    for l in range(L):
        p = lambda n: P["model.layers.%d.%s" % (l, n)]
        h = rmsnorm(x, p("input_layernorm.weight"), neps)
        q = (h @ p("self_attn.q_proj.weight").t()).view(B, T, H, HS).transpose(1, 2)
        k = (h @ p("self_attn.k_proj.weight").t()).view(B, T, KV, HS).transpose(1, 2)
        v = (h @ p("self_attn.v_proj.weight").t()).view(B, T, KV, HS).transpose(1, 2)
        q, k = rope(q, cs, sn), rope(k, cs, sn)
        k = k.repeat_interleave(H // KV, dim=1)     # query head j uses kv head j // (H / KV)
        v = v.repeat_interleave(H // KV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(mask, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("self_attn.o_proj.weight").t()
        h = rmsnorm(x, p("post_attention_layernorm.weight"), neps)
        g = h @ p("mlp.gate_proj.weight").t()
        u = h @ p("mlp.up_proj.weight").t()
        x = x + (F.silu(g) * u) @ p("mlp.down_proj.weight").t()
    x = rmsnorm(x, P["model.norm.weight"], neps)
    return x @ P.get("lm_head.weight", P["model.embed_tokens.weight"]).t()


def main():
    init_torch()
    a = Args(sys.argv, 2)
    neps, theta = a.extra
    W = read_st(a.init)
    P = {k: v.clone().requires_grad_(True) for k, v in W.items()}
    C = P["model.embed_tokens.weight"].shape[1]
    KV = P["model.layers.0.self_attn.k_proj.weight"].shape[0] // (C // a.heads)
    L = max(int(k.split(".")[2]) for k in P if k.startswith("model.layers.")) + 1
    print("llama: %d layers, hidden %d, %d heads, %d kv heads, %d tensors" % (L, C, a.heads, KV, len(P)))

    def forward(tok, tgt):
        z = logits(P, a.heads, tok, neps, theta)
        return F.cross_entropy(z.reshape(-1, z.shape[-1]), tgt.reshape(-1))

    # our names and layouts are Hugging Face's (nn.Linear [out, in])
    train_compare(a, P, forward, lambda name, g: (name, g), 1e-5)


if __name__ == "__main__":
    main()
