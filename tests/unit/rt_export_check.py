#!/usr/bin/python3
"""Checks the files rt_test_export.c exported, without the safetensors package.

usage: rt_export_check.py DIR   (DIR holds gpt.safetensors, gpt-bf16.safetensors,
                                 llama.safetensors, llama-bf16.safetensors)

The safetensors format is parsed by hand (u64 header length, JSON header,
contiguous data); values are recomputed from the formula the C test used, in
Hugging Face's conventions written out here independently: GPT-2's prefix
`transformer.` and its Conv1D weights stored [in, out]; Llama's names as is,
nn.Linear [out, in].  bf16 must equal PyTorch's rounding of the fp32 values,
and PyTorch matmuls in each convention must agree.  Exit 77 without numpy/torch.
"""
import json
import os
import struct
import sys

try:
    import numpy as np
    import torch
except ImportError:
    sys.exit(77)

failures = 0


def check(cond, msg):
    global failures
    if not cond:
        print("rt_export_check: FAILED:", msg, file=sys.stderr)
        failures += 1


def load(path):
    """The metadata and {name: (dtype, float32 array)} of a safetensors file."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    check(n % 8 == 0, f"{path}: header length {n} is not a multiple of 8")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    base, spans, out = 8 + n, [], {}
    for name, e in header.items():
        s, t = e["data_offsets"]
        spans.append((s, t))
        raw = data[base + s: base + t]
        if e["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4").copy()
        else:
            check(e["dtype"] == "BF16", f"{name}: dtype {e['dtype']}")
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        check(a.size == int(np.prod(e["shape"])), f"{name}: {a.size} elements for shape {e['shape']}")
        out[name] = (e["dtype"], a.reshape(e["shape"]))
    spans.sort()
    end = 0
    for s, t in spans:              # the data section: every byte indexed, no holes
        check(s == end, f"{path}: a hole or overlap at byte {s}")
        end = t
    check(base + end == len(data), f"{path}: {len(data) - base - end} stray bytes at the end")
    return meta, out


def val(name, rows, cols):
    """Our tensor `name` [rows, cols] (cols 0: a vector) from the C test's formula."""
    h = sum(name.encode()) % 97
    r = np.arange(rows, dtype=np.float64)[:, None]
    c = np.arange(max(cols, 1), dtype=np.float64)[None, :]
    a = (h * 0.5 + r * 0.0625 + c / 256.0 - 10.0).astype(np.float32)
    return a if cols else a[:, 0]


def gpt_expected():
    """Hugging Face GPT-2 name -> expected array (tied embeddings: no lm_head)."""
    ours = [("wte.weight", 50, 8), ("wpe.weight", 4, 8)]
    for L in range(2):
        p = f"h.{L}."
        ours += [(p + "ln_1.weight", 8, 0), (p + "ln_1.bias", 8, 0),
                 (p + "attn.c_attn.weight", 24, 8), (p + "attn.c_attn.bias", 24, 0),
                 (p + "attn.c_proj.weight", 8, 8), (p + "attn.c_proj.bias", 8, 0),
                 (p + "ln_2.weight", 8, 0), (p + "ln_2.bias", 8, 0),
                 (p + "mlp.c_fc.weight", 32, 8), (p + "mlp.c_fc.bias", 32, 0),
                 (p + "mlp.c_proj.weight", 8, 32), (p + "mlp.c_proj.bias", 8, 0)]
    ours += [("ln_f.weight", 8, 0), ("ln_f.bias", 8, 0)]
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    exp = {}
    for name, rows, cols in ours:
        a = val(name, rows, cols)
        exp["transformer." + name] = a.T.copy() if name.endswith(conv1d) else a   # Conv1D: [in, out]
    return exp


def llama_expected():
    ours = [("model.embed_tokens.weight", 50, 8), ("model.layers.0.input_layernorm.weight", 8, 0),
            ("model.layers.0.self_attn.q_proj.weight", 8, 8), ("model.layers.0.self_attn.k_proj.weight", 4, 8),
            ("model.layers.0.self_attn.v_proj.weight", 4, 8), ("model.layers.0.self_attn.o_proj.weight", 8, 8),
            ("model.layers.0.post_attention_layernorm.weight", 8, 0),
            ("model.layers.0.mlp.gate_proj.weight", 16, 8), ("model.layers.0.mlp.up_proj.weight", 16, 8),
            ("model.layers.0.mlp.down_proj.weight", 8, 16), ("model.norm.weight", 8, 0),
            ("lm_head.weight", 50, 8)]
    return {name: val(name, rows, cols) for name, rows, cols in ours}


def compare(path, exp, bf16):
    meta, got = load(path)
    check(meta.get("format") == "pt", f"{path}: __metadata__.format is {meta.get('format')!r}, not 'pt'")
    check(set(got) == set(exp), f"{path}: names differ: extra {sorted(set(got) - set(exp))}, "
                                f"missing {sorted(set(exp) - set(got))}")
    for name, want in exp.items():
        if name not in got:
            continue
        dtype, a = got[name]
        check(dtype == ("BF16" if bf16 else "F32"), f"{path}: {name} is {dtype}")
        check(list(a.shape) == list(want.shape), f"{path}: {name} shape {a.shape}, want {want.shape}")
        if a.shape != want.shape:
            continue
        if bf16:    # PyTorch's own fp32 -> bf16 rounding, independent of ours
            want = torch.from_numpy(want).to(torch.bfloat16).to(torch.float32).numpy()
        check(np.array_equal(a, want), f"{path}: {name} values differ (max |diff| "
                                       f"{np.abs(a - want).max():.3g})")
    return got


def main():
    d = sys.argv[1]
    g = compare(os.path.join(d, "gpt.safetensors"), gpt_expected(), False)
    compare(os.path.join(d, "gpt-bf16.safetensors"), gpt_expected(), True)
    # Conv1D as transformers computes it (addmm(bias, x, weight)) equals our x · Wᵀ + b
    x = torch.randn(5, 8, dtype=torch.float32)
    w = torch.from_numpy(g["transformer.h.1.attn.c_attn.weight"][1])
    b = torch.from_numpy(g["transformer.h.1.attn.c_attn.bias"][1])
    ours = torch.from_numpy(val("h.1.attn.c_attn.weight", 24, 8))
    check(torch.allclose(torch.addmm(b, x, w), x @ ours.T + b, atol=1e-5), "Conv1D c_attn disagrees")
    w = torch.from_numpy(g["transformer.h.0.mlp.c_proj.weight"][1])
    check(tuple(w.shape) == (32, 8), "mlp.c_proj is not [in, out] = [32, 8]")
    l = compare(os.path.join(d, "llama.safetensors"), llama_expected(), False)
    compare(os.path.join(d, "llama-bf16.safetensors"), llama_expected(), True)
    # nn.Linear: F.linear(x, W) = x · Wᵀ with W [out, in]
    w = torch.from_numpy(l["model.layers.0.self_attn.k_proj.weight"][1])
    check(tuple(torch.nn.functional.linear(x, w).shape) == (5, 4), "k_proj is not [out, in] = [4, 8]")
    if failures:
        sys.exit(1)
    print("rt_export_check: ok")


main()
