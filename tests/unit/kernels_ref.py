#!/usr/bin/python3
"""kernels_ref.py DIR — recompute the CPU kernels' results with PyTorch.

DIR holds what `kernels_cpu_test --dump DIR` wrote: manifest.txt (one line per
case: NAME key=value ...) and NAME.TENSOR.bin raw little-endian arrays.  Each
case's inputs go through torch (autograd for the backward, torch.optim for the
optimizers) and every output and gradient is compared with the C result:
max |c - torch| / max |torch| <= 1e-5 in fp32.  Casts must match bit for bit.
Exit 0 when every comparison passes, 1 otherwise.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

TOL = 1e-5
DIR = sys.argv[1] if len(sys.argv) > 1 else "."
failures = 0


def load(case, name, dtype=np.float32, shape=None):
    """One dumped array as a torch tensor (float32 unless told)."""
    a = np.fromfile(os.path.join(DIR, f"{case}.{name}.bin"), dtype=dtype)
    t = torch.from_numpy(a.copy())
    return t.reshape(shape) if shape is not None else t


def compare(case, name, c, ref, tol=TOL):
    """Norm-relative comparison of the C result c with torch's ref."""
    global failures
    c = c.detach().double().reshape(-1)
    ref = ref.detach().double().reshape(-1)
    scale = ref.abs().max().item() or 1.0
    err = (c - ref).abs().max().item() / scale
    ok = err <= tol
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {case + ': ' + name:<36} rel err {err:.2e} (limit {tol:.0e})")


def leaf(t):
    return t.clone().requires_grad_(True)


def case_matmul(a):
    N, C, OC = a["N"], a["C"], a["OC"]
    x, w, b = leaf(load("matmul", "inp", shape=(N, C))), leaf(load("matmul", "weight", shape=(OC, C))), leaf(load("matmul", "bias"))
    out = F.linear(x, w, b)
    out.backward(load("matmul", "dout", shape=(N, OC)))
    compare("matmul", "out", load("matmul", "out"), out)
    for n, t in (("dinp", x), ("dweight", w), ("dbias", b)):
        compare("matmul", n, load("matmul", n), t.grad)


def case_layernorm(a):
    N, C, eps = a["N"], a["C"], a["eps"]
    x, w, b = leaf(load("layernorm", "inp", shape=(N, C))), leaf(load("layernorm", "weight")), leaf(load("layernorm", "bias"))
    out = F.layer_norm(x, (C,), w, b, eps)
    out.backward(load("layernorm", "dout", shape=(N, C)))
    var, mean = torch.var_mean(x.detach(), dim=1, unbiased=False)
    compare("layernorm", "out", load("layernorm", "out"), out)
    compare("layernorm", "mean", load("layernorm", "mean"), mean)
    compare("layernorm", "rstd", load("layernorm", "rstd"), torch.rsqrt(var + eps))
    for n, t in (("dinp", x), ("dweight", w), ("dbias", b)):
        compare("layernorm", n, load("layernorm", n), t.grad)


def case_rmsnorm(a):
    """Hugging Face LlamaRMSNorm."""
    N, C, eps = a["N"], a["C"], a["eps"]
    x, w = leaf(load("rmsnorm", "inp", shape=(N, C))), leaf(load("rmsnorm", "weight"))
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    out = w * (x * rstd)
    out.backward(load("rmsnorm", "dout", shape=(N, C)))
    compare("rmsnorm", "out", load("rmsnorm", "out"), out)
    compare("rmsnorm", "rstd", load("rmsnorm", "rstd"), rstd)
    compare("rmsnorm", "dinp", load("rmsnorm", "dinp"), x.grad)
    compare("rmsnorm", "dweight", load("rmsnorm", "dweight"), w.grad)


def case_pointwise(name, fn):
    x = leaf(load(name, "inp"))
    out = fn(x)
    out.backward(load(name, "dout"))
    compare(name, "out", load(name, "out"), out)
    compare(name, "dinp", load(name, "dinp"), x.grad)


def case_swiglu(a):
    N, H = a["N"], a["H"]
    x = leaf(load("swiglu", "inp", shape=(N, 2 * H)))
    out = F.silu(x[:, :H]) * x[:, H:]
    out.backward(load("swiglu", "dout", shape=(N, H)))
    compare("swiglu", "out", load("swiglu", "out"), out)
    compare("swiglu", "dinp", load("swiglu", "dinp"), x.grad)


def case_attention(case, a):
    """Causal attention on a fused qkv row [q heads | k heads | v heads];
    grouped-query by repeat_interleave of the kv heads (enable_gqa)."""
    B, T, NH, NKV, HS = a["B"], a["T"], a["NH"], a["NKV"], a["HS"]
    qkv = leaf(load(case, "qkv", shape=(B, T, (NH + 2 * NKV) * HS)))
    q, k, v = qkv.split([NH * HS, NKV * HS, NKV * HS], dim=-1)
    q = q.view(B, T, NH, HS).transpose(1, 2)
    k = k.view(B, T, NKV, HS).transpose(1, 2).repeat_interleave(NH // NKV, dim=1)
    v = v.view(B, T, NKV, HS).transpose(1, 2).repeat_interleave(NH // NKV, dim=1)
    scores = (q @ k.transpose(-2, -1)) / HS ** 0.5
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)                        # (B,NH,T)
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2)    # (B,T,NH,HS)
    out.backward(load(case, "dout", shape=(B, T, NH, HS)))
    compare(case, "out", load(case, "out"), out)
    compare(case, "lse", load(case, "lse"), lse)
    compare(case, "dqkv", load(case, "dqkv"), qkv.grad)


def case_rope(a):
    """Hugging Face LlamaRotaryEmbedding + apply_rotary_pos_emb (rotate_half)."""
    B, T, NH, HS, pos0, theta = a["B"], a["T"], a["NH"], a["HS"], a["pos0"], a["theta"]
    x = leaf(load("rope", "inp", shape=(B, T, NH, HS)))
    inv_freq = 1.0 / (theta ** (torch.arange(0, HS, 2).float() / HS))
    t = torch.arange(pos0, pos0 + T).float()
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)                      # (T,HS)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]

    def rotate_half(y):
        y1, y2 = y[..., : HS // 2], y[..., HS // 2:]
        return torch.cat((-y2, y1), dim=-1)

    out = x * cos + rotate_half(x) * sin
    out.backward(load("rope", "dout", shape=(B, T, NH, HS)))
    compare("rope", "out", load("rope", "out"), out)
    compare("rope", "dinp", load("rope", "dinp"), x.grad)


def case_embedding(a):
    """Vocab shard [v0,v1) of wte: zeros for other tokens; plus wpe."""
    B, T, C, v0, v1 = a["B"], a["T"], a["C"], a["v0"], a["v1"]
    tok = load("embedding", "tokens", np.int32, (B, T)).long()
    wte, wpe = leaf(load("embedding", "wte", shape=(v1 - v0, C))), leaf(load("embedding", "wpe", shape=(T, C)))
    local = (tok >= v0) & (tok < v1)
    rows = F.embedding((tok - v0).clamp(0, v1 - v0 - 1), wte) * local[..., None]
    out = rows + wpe[None]
    out.backward(load("embedding", "dout", shape=(B, T, C)))
    compare("embedding", "out", load("embedding", "out"), out)
    compare("embedding", "dwte", load("embedding", "dwte"), wte.grad)
    compare("embedding", "dwpe", load("embedding", "dwpe"), wpe.grad)


def case_xent(a):
    """Mean cross-entropy over the V real columns, target -1 ignored."""
    N, V, Vp = a["N"], a["V"], a["Vp"]
    tgt = load("xent", "targets", np.int32).long()
    logits = leaf(load("xent", "logits", shape=(N, Vp)))
    losses = F.cross_entropy(logits[:, :V], tgt, ignore_index=-1, reduction="none")
    losses.sum().div((tgt >= 0).sum()).backward()
    compare("xent", "loss", load("xent", "loss"), losses)
    compare("xent", "dlogits", load("xent", "dlogits"), logits.grad)


def case_head(a):
    """The fused head: logits = inp w^T over the V real rows of w, the mean
    cross-entropy (target -1 ignored); the gradients of inp and of w, whose
    padding rows get none."""
    N, C, V, Vp = a["N"], a["C"], a["V"], a["Vp"]
    tgt = load("head", "targets", np.int32).long()
    inp, w = leaf(load("head", "inp", shape=(N, C))), leaf(load("head", "w", shape=(Vp, C)))
    losses = F.cross_entropy(inp @ w[:V].t(), tgt, ignore_index=-1, reduction="none")
    losses.sum().div((tgt >= 0).sum()).backward()
    compare("head", "loss", load("head", "loss"), losses)
    compare("head", "dinp", load("head", "dinp"), inp.grad)
    compare("head", "dw", load("head", "dw"), w.grad)


def case_adamw(a):
    """torch.optim.AdamW, two param groups: decay on [0,split), none after."""
    n, split, steps = a["n"], a["split"], a["steps"]
    p0 = load("adamw", "params0")
    grads = load("adamw", "grads", shape=(steps, n))
    pa, pb = p0[:split].clone().requires_grad_(True), p0[split:].clone().requires_grad_(True)
    opt = torch.optim.AdamW([{"params": [pa], "weight_decay": a["wd"]}, {"params": [pb], "weight_decay": 0.0}],
                            lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"], foreach=False)
    for t in range(steps):
        pa.grad, pb.grad = grads[t, :split].clone(), grads[t, split:].clone()
        opt.step()
    compare("adamw", "params", load("adamw", "params"), torch.cat([pa, pb]))
    st = [opt.state[pa], opt.state[pb]]
    compare("adamw", "m", load("adamw", "m"), torch.cat([s["exp_avg"] for s in st]))
    compare("adamw", "v", load("adamw", "v"), torch.cat([s["exp_avg_sq"] for s in st]))


def case_sgd(case, a):
    n, steps = a["n"], a["steps"]
    p = load(case, "params0").clone().requires_grad_(True)
    grads = load(case, "grads", shape=(steps, n))
    opt = torch.optim.SGD([p], lr=a["lr"], momentum=a["momentum"], dampening=a["dampening"],
                          weight_decay=a["wd"], nesterov=bool(a["nesterov"]))
    for t in range(steps):
        p.grad = grads[t].clone()
        opt.step()
    compare(case, "params", load(case, "params"), p)


def case_norm(a):
    x = load("norm", "x").double()
    ref = torch.linalg.vector_norm(x)
    compare("norm", "norm", load("norm", "norm", np.float64), ref.reshape(1), tol=1e-12)


def case_casts(a):
    """Bit-exact against torch's conversions; a NaN only needs to stay NaN
    (torch writes the canonical 0x7FC0 / 0x7E00)."""
    global failures
    x = load("casts", "x")
    for name, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        c = np.fromfile(os.path.join(DIR, f"casts.{name}.bin"), dtype=np.uint16)
        ref = x.to(dt).view(torch.int16).numpy().view(np.uint16)
        nan = torch.isnan(x).numpy()
        bad = int(((c != ref) & ~nan).sum())
        cnan = torch.from_numpy(c.view(np.int16).copy()).view(dt).float()
        bad += int((~torch.isnan(cnan).numpy() & nan).sum())
        failures += bad != 0
        print(f"{'ok  ' if bad == 0 else 'FAIL'} {'casts: f32 -> ' + name:<36} {bad} of {len(c)} differ")


def parse(tok):
    """key=value, the value as int or float."""
    k, v = tok.split("=")
    try:
        return k, int(v)
    except ValueError:
        return k, float(v)


HANDLERS = {
    "matmul": case_matmul,
    "layernorm": case_layernorm,
    "rmsnorm": case_rmsnorm,
    "gelu": lambda a: case_pointwise("gelu", lambda x: F.gelu(x, approximate="tanh")),
    "relu": lambda a: case_pointwise("relu", F.relu),
    "swiglu": case_swiglu,
    "attention_gqa": lambda a: case_attention("attention_gqa", a),
    "attention_mha": lambda a: case_attention("attention_mha", a),
    "rope": case_rope,
    "embedding": case_embedding,
    "xent": case_xent,
    "head": case_head,
    "adamw": case_adamw,
    "sgd": lambda a: case_sgd("sgd", a),
    "sgd_nesterov": lambda a: case_sgd("sgd_nesterov", a),
    "norm": case_norm,
    "casts": case_casts,
}


def main():
    global failures
    torch.set_num_threads(1)
    seen = set()
    with open(os.path.join(DIR, "manifest.txt")) as f:
        for line in f:
            if not line.strip():
                continue
            name, *kv = line.split()
            if name not in HANDLERS:
                print(f"FAIL unknown case {name} in the manifest")
                failures += 1
                continue
            HANDLERS[name](dict(parse(t) for t in kv))
            seen.add(name)
    for name in sorted(set(HANDLERS) - seen):
        print(f"FAIL case {name} missing from the manifest")
        failures += 1
    print(f"{failures} comparison(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
