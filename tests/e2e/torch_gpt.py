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
gradient within 1e-4 relative (of the tensor's largest gradient).  Exit 1 on a
mismatch."""
import json, math, struct, sys
import torch
import torch.nn.functional as F

torch.manual_seed(0)
torch.set_num_threads(1)


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, t in head.items():
        if k == "__metadata__":
            continue
        assert t["dtype"] == "F32", t["dtype"]
        a, b = t["data_offsets"]
        out[k] = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).reshape(t["shape"]).clone()
    return out


def main():
    (init, data, runlog, rankfile, H, T, G, wd, b1, b2, eps, clip) = sys.argv[1:13]
    H, T, G = int(H), int(T), int(G)
    wd, b1, b2, eps, clip = float(wd), float(b1), float(b2), float(eps), float(clip)
    W = read_st(init)
    run = [json.loads(l) for l in open(runlog)]
    run = [o for o in run if "loss" in o]
    text = open(data, "rb").read()
    nwin = (len(text) - 1) // T
    L = max(int(k.split(".")[2]) for k in W if k.startswith("transformer.h.")) + 1
    P = {k: v.clone().requires_grad_(True) for k, v in W.items()}

    def forward(tok, tgt):
        B = tok.shape[0]
        x = P["transformer.wte.weight"][tok] + P["transformer.wpe.weight"][:T]
        C = x.shape[-1]
        for l in range(L):
            p = lambda n: P["transformer.h.%d.%s" % (l, n)]
            h = F.layer_norm(x, (C,), p("ln_1.weight"), p("ln_1.bias"), 1e-5)
            qkv = h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")   # Conv1D: [in, out]
            q, k, v = qkv.split(C, dim=-1)
            q, k, v = (z.view(B, T, H, C // H).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
            att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
            y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
            x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
            h = F.layer_norm(x, (C,), p("ln_2.weight"), p("ln_2.bias"), 1e-5)
            h = F.gelu(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
            x = x + h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
        x = F.layer_norm(x, (C,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], 1e-5)
        logits = x @ P["transformer.wte.weight"].t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))

    decay = [v for k, v in P.items() if v.dim() >= 2]
    nodecay = [v for k, v in P.items() if v.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=1.0, betas=(b1, b2), eps=eps, foreach=True)
    bad = 0
    worst = 0.0
    for s, o in enumerate(run):
        rows = [(s * G + i) % nwin for i in range(G)]
        buf = torch.tensor([list(text[j * T: j * T + T + 1]) for j in rows], dtype=torch.long)
        loss = forward(buf[:, :T], buf[:, 1:])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), clip)
        if s == 0:
            M = read_st(rankfile)
            gworst = 0.0
            for k, v in M.items():
                kind, name = k.split("/")[:2]
                if kind != "adam_m":
                    continue
                hf = "transformer." + name
                g = v / (1.0 - b1)
                tg = P[hf].grad
                if name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
                    g = g.t()   # ours [out, in]; Hugging Face's Conv1D [in, out]
                d = ((g - tg).abs().max() / tg.abs().max().clamp_min(1e-30)).item()
                gworst = max(gworst, d)
                if d > 1e-4:
                    print("step-1 gradient of %s: relative difference %.3g" % (hf, d))
                    bad += 1
            print("step-1 gradients: %d tensors, worst relative difference %.3g" % (len(M) // 3, gworst))
        for gr in opt.param_groups:
            gr["lr"] = o["lr"]
        opt.step()
        d = abs(loss.item() - o["loss"]) / abs(loss.item())
        worst = max(worst, d)
        print("step %d: torch %.7f shardc %.7f (rel %.2g)" % (o["step"], loss.item(), o["loss"], d))
        if d > 1e-4:
            bad += 1
    print("losses: %d steps, worst relative difference %.3g" % (len(run), worst))
    sys.exit(1 if bad else 0)


main()
