#!/usr/bin/python3
"""torch_gpt.py — the tiny GPT of specs/tiny-gpt.tspec trained by PyTorch from our
initial weights on our batches, against the trainer's log and step-1 gradients.

  torch_gpt.py INIT.safetensors DATA.txt RUN.jsonl STEP1_RANK_FILE HEADS SEQ GLOBAL_BATCH
      WEIGHT_DECAY BETA1 BETA2 EPS GRAD_CLIP

INIT: `shardc export` of the weights before any update (1 step at lr 1e-30).
DATA: the raw text (bytes are tokens); the batches follow runtime/core/data.h:
step k's global batch is windows k*G .. k*G+G-1 (mod the window count), window j
= bytes [j*T, j*T+T].  RUN.jsonl: the trainer's log (its losses, and its lr per
step, which torch uses).  STEP1_RANK_FILE: the one rank file of a 1-rank
checkpoint after step 1: its adam_m pieces are (1 - beta1) * the clipped step-1
gradients.  Checks: every step's loss within 1e-4 relative; every step-1
gradient within 1e-4 relative (of the tensor's largest gradient), one for every
tensor.  Exit 1 on a mismatch.  The training loop: torch_common.py."""
import math, sys
import torch
import torch.nn.functional as F
from torch_common import Args, init_torch, read_st, train_compare


def hf_grad(name, g):
    """Our tensor name's gradient under Hugging Face GPT-2's name and layout."""
    if name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
        g = g.t()   # ours [out, in]; Hugging Face's Conv1D [in, out]
    return "transformer." + name, g


def logits(P, H, tok, eps=1e-5, pre="transformer."):
    """GPT-2's logits (B, T, V) for tokens tok (B, T): P holds Hugging Face
    GPT-2's tensors (Conv1D weights [in, out]) under the prefix pre; the layer
    count follows from the names, the width from the embedding."""
    L = max(int(k[len(pre):].split(".")[1]) for k in P if k.startswith(pre + "h.")) + 1
    B, T = tok.shape
    x = P[pre + "wte.weight"][tok] + P[pre + "wpe.weight"][:T]
    C = x.shape[-1]
    for l in range(L):
        p = lambda n: P["%sh.%d.%s" % (pre, l, n)]
        h = F.layer_norm(x, (C,), p("ln_1.weight"), p("ln_1.bias"), eps)
        qkv = h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")   # Conv1D: [in, out]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (z.view(B, T, H, C // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), p("ln_2.weight"), p("ln_2.bias"), eps)
        h = F.gelu(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
        x = x + h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), P[pre + "ln_f.weight"], P[pre + "ln_f.bias"], eps)
    return x @ P.get("lm_head.weight", P[pre + "wte.weight"]).t()


def main():
    init_torch()
    a = Args(sys.argv)
    W = read_st(a.init)
    P = {k: v.clone().requires_grad_(True) for k, v in W.items()}

    def forward(tok, tgt):
        z = logits(P, a.heads, tok)
        return F.cross_entropy(z.reshape(-1, z.shape[-1]), tgt.reshape(-1))

    train_compare(a, P, forward, hf_grad, 1e-4)


if __name__ == "__main__":
    main()
