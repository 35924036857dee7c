#!/usr/bin/python3
"""hf_model.py — Hugging Face model directories for the e2e tests, with torch
alone (transformers is not installable here): written as transformers writes
them, read as from_pretrained reads them, and run with the project's own
GPT-2 and Llama (torch_gpt.py, torch_llama.py).

  hf_model.py write FAMILY OUT_DIR KEY=VALUE...
      random weights (seeded) of a GPT-2 or Llama (FAMILY gpt2 or llama) in
      OUT_DIR: config.json and the weights.  Keys: layers hidden heads kv vocab
      seq ffn tied (0/1), dtype (F32, BF16, F16), shard (bytes: above it
      model-0000K-of-0000N.safetensors and model.safetensors.index.json, else
      model.safetensors), prefix (0: GPT-2 names without "transformer.", as a
      GPT2Model saves them), buffers (1: GPT-2's attn.bias / attn.masked_bias
      causal masks and Llama's rotary_emb.inv_freq, which loaders skip).
  hf_model.py loss DIR DATA.txt STEP BATCH
      the mean cross-entropy of global batch STEP (the trainer's order: window
      (STEP*BATCH + i) mod N of seq_len + 1 bytes) of the model in DIR.
  hf_model.py check DIR VAL.txt RUN.jsonl TOL BATCH
      loads DIR as from_pretrained does (config.json; model.safetensors or the
      index and its shards), checks every field of config.json against the
      weights' shapes, then the loss of validation batch 0 (BATCH sequences)
      against the last val_loss of the trainer's log (relative difference
      <= TOL).
Exit 1 on a mismatch."""
import json, math, os, struct, sys
import torch
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt, torch_llama

DT = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


DTYPES = set()      # the dtypes of the files read, for config.json's torch_dtype


def read_safetensors(path):
    """{name: fp32 tensor} of one file, parsed by hand."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    head.pop("__metadata__", None)
    DTYPES.update(e["dtype"] for e in head.values())
    out = {}
    for k, e in head.items():
        a, b = e["data_offsets"]
        raw = bytearray(data[8 + n + a: 8 + n + b])
        out[k] = torch.frombuffer(raw, dtype=DT[e["dtype"]]).reshape(e["shape"]).float() if raw else \
            torch.zeros(e["shape"])
    return out


def write_safetensors(path, tensors, dtype):
    """tensors {name: tensor} as one safetensors file of dtype, in order."""
    head, blobs, off = {}, [], 0
    for k, v in tensors.items():
        b = v.to(DT[dtype]).contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        head[k] = {"dtype": dtype, "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    head["__metadata__"] = {"format": "pt"}
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load_dir(d):
    """config.json and the weights of a directory, as from_pretrained finds them."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    single = os.path.join(d, "model.safetensors")
    if os.path.exists(single):
        return cfg, read_safetensors(single)
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    W = {}
    for f in sorted(set(index["weight_map"].values())):
        W.update(read_safetensors(os.path.join(d, f)))
    assert set(W) == set(index["weight_map"]), "the index and the shards disagree"
    return cfg, W


def random_model(fam, k):
    """Seeded weights: matrices N(0, 0.02), norm weights near 1, biases small."""
    g = torch.Generator().manual_seed(1234)
    L, C, H, V, S, FF = k["layers"], k["hidden"], k["heads"], k["vocab"], k["seq"], k["ffn"]
    KV = k.get("kv", H)
    hs = C // H
    W = {}

    def t(name, *shape, scale=0.02, base=0.0):
        W[name] = base + scale * torch.randn(*shape, generator=g)

    if fam == "gpt2":
        p = "transformer." if k.get("prefix", 1) else ""
        t(p + "wte.weight", V, C)
        t(p + "wpe.weight", S, C, scale=0.01)
        for l in range(L):
            q = "%sh.%d." % (p, l)
            t(q + "ln_1.weight", C, scale=0.1, base=1.0), t(q + "ln_1.bias", C, scale=0.01)
            if k.get("buffers"):
                W[q + "attn.bias"] = torch.tril(torch.ones(S, S)).view(1, 1, S, S)
                W[q + "attn.masked_bias"] = torch.tensor(-1e4)
            t(q + "attn.c_attn.weight", C, 3 * C), t(q + "attn.c_attn.bias", 3 * C, scale=0.01)
            t(q + "attn.c_proj.weight", C, C), t(q + "attn.c_proj.bias", C, scale=0.01)
            t(q + "ln_2.weight", C, scale=0.1, base=1.0), t(q + "ln_2.bias", C, scale=0.01)
            t(q + "mlp.c_fc.weight", C, FF), t(q + "mlp.c_fc.bias", FF, scale=0.01)
            t(q + "mlp.c_proj.weight", FF, C), t(q + "mlp.c_proj.bias", C, scale=0.01)
        t(p + "ln_f.weight", C, scale=0.1, base=1.0), t(p + "ln_f.bias", C, scale=0.01)
        if not k.get("tied", 1):
            t("lm_head.weight", V, C)
        cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": L, "n_embd": C, "n_head": H,
               "vocab_size": V, "n_positions": S, "n_ctx": S, "n_inner": FF, "activation_function": "gelu_new",
               "layer_norm_epsilon": 1e-5, "tie_word_embeddings": bool(k.get("tied", 1))}
    else:
        t("model.embed_tokens.weight", V, C)
        for l in range(L):
            q = "model.layers.%d." % l
            t(q + "input_layernorm.weight", C, scale=0.1, base=1.0)
            t(q + "self_attn.q_proj.weight", C, C), t(q + "self_attn.k_proj.weight", KV * hs, C)
            t(q + "self_attn.v_proj.weight", KV * hs, C), t(q + "self_attn.o_proj.weight", C, C)
            if k.get("buffers"):
                W[q + "self_attn.rotary_emb.inv_freq"] = 1.0 / 10000 ** (torch.arange(0, hs, 2).float() / hs)
            t(q + "post_attention_layernorm.weight", C, scale=0.1, base=1.0)
            t(q + "mlp.gate_proj.weight", FF, C), t(q + "mlp.up_proj.weight", FF, C)
            t(q + "mlp.down_proj.weight", C, FF)
        t("model.norm.weight", C, scale=0.1, base=1.0)
        if not k.get("tied", 0):
            t("lm_head.weight", V, C)
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": L,
               "hidden_size": C, "num_attention_heads": H, "num_key_value_heads": KV, "intermediate_size": FF,
               "vocab_size": V, "max_position_embeddings": S, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
               "hidden_act": "silu", "tie_word_embeddings": bool(k.get("tied", 0))}
    return cfg, W


def write(fam, out, k):
    cfg, W = random_model(fam, k)
    dtype = k.get("dtype", "F32")
    os.makedirs(out, exist_ok=True)
    cfg["torch_dtype"] = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtype]
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    size = lambda v: v.numel() * (4 if dtype == "F32" else 2)
    limit = k.get("shard", 0)
    if not limit or sum(size(v) for v in W.values()) <= limit:
        write_safetensors(os.path.join(out, "model.safetensors"), W, dtype)
        return
    shards, cur, used = [], {}, 0           # transformers' split: in order, a new shard past the limit
    for name, v in W.items():
        if cur and used + size(v) > limit:
            shards.append(cur)
            cur, used = {}, 0
        cur[name] = v
        used += size(v)
    shards.append(cur)
    wmap = {}
    for i, s in enumerate(shards):
        f = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        write_safetensors(os.path.join(out, f), s, dtype)
        wmap.update({name: f for name in s})
    json.dump({"metadata": {"total_size": sum(size(v) for v in W.values())}, "weight_map": wmap},
              open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2, sort_keys=True)


def logits(cfg, W, tok):
    """The model's logits from config.json's fields (not from the shapes)."""
    if cfg["model_type"] == "gpt2":
        assert cfg.get("activation_function") in ("gelu_new", "gelu_pytorch_tanh"), cfg.get("activation_function")
        pre = "transformer." if "transformer.wte.weight" in W else ""
        return torch_gpt.logits(W, cfg["n_head"], tok, cfg["layer_norm_epsilon"], pre)
    assert cfg["hidden_act"] == "silu"
    return torch_llama.logits(W, cfg["num_attention_heads"], tok, cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0))


def batch_loss(cfg, W, data, step, G):
    """The mean cross-entropy of global batch `step` of the bytes of data."""
    T = cfg.get("n_positions", cfg.get("max_position_embeddings"))
    text = open(data, "rb").read()
    nwin = (len(text) - 1) // T
    rows = [(step * G + i) % nwin for i in range(G)]
    buf = torch.tensor([list(text[j * T: j * T + T + 1]) for j in rows], dtype=torch.long)
    with torch.no_grad():
        z = logits(cfg, W, buf[:, :T])
        return F.cross_entropy(z.reshape(-1, z.shape[-1]), buf[:, 1:].reshape(-1)).item()


def check_config(cfg, W):
    """Every field of config.json against the weights' shapes: the list of mismatches."""
    bad = []

    def want(field, value):
        if cfg.get(field) != value:
            bad.append("%s is %r, the weights say %r" % (field, cfg.get(field), value))

    want("torch_dtype", {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[DTYPES.pop()]
         if len(DTYPES) == 1 else sorted(DTYPES))

    if cfg["model_type"] == "gpt2":
        want("architectures", ["GPT2LMHeadModel"])
        pre = "transformer." if "transformer.wte.weight" in W else ""
        V, C = W[pre + "wte.weight"].shape
        want("n_embd", C), want("vocab_size", V)
        want("n_positions", W[pre + "wpe.weight"].shape[0]), want("n_ctx", W[pre + "wpe.weight"].shape[0])
        want("n_layer", len({k.split(".")[len(pre.split("."))] for k in W if k.startswith(pre + "h.")}))
        want("n_inner", W[pre + "h.0.mlp.c_fc.weight"].shape[1])
        want("tie_word_embeddings", "lm_head.weight" not in W)
        assert W[pre + "h.0.attn.c_attn.weight"].shape == (C, 3 * C), "c_attn is not Conv1D [in, 3 in]"
        assert C % cfg["n_head"] == 0
    else:
        want("architectures", ["LlamaForCausalLM"])
        V, C = W["model.embed_tokens.weight"].shape
        want("hidden_size", C), want("vocab_size", V)
        want("num_hidden_layers", len({k.split(".")[2] for k in W if k.startswith("model.layers.")}))
        want("intermediate_size", W["model.layers.0.mlp.gate_proj.weight"].shape[0])
        hs = C // cfg["num_attention_heads"]
        want("head_dim", hs)
        want("num_key_value_heads", W["model.layers.0.self_attn.k_proj.weight"].shape[0] // hs)
        want("tie_word_embeddings", "lm_head.weight" not in W)
        want("attention_bias", "model.layers.0.self_attn.q_proj.bias" in W)
        want("mlp_bias", "model.layers.0.mlp.up_proj.bias" in W)
        want("rope_scaling", None)
    return bad


def main():
    cmd = sys.argv[1]
    torch.set_num_threads(1)
    if cmd == "write":
        k = {a.split("=")[0]: (a.split("=")[1] if a.startswith("dtype=") else int(a.split("=")[1]))
             for a in sys.argv[4:]}
        write(sys.argv[2], sys.argv[3], k)
    elif cmd == "loss":
        cfg, W = load_dir(sys.argv[2])
        print("%.17g" % batch_loss(cfg, W, sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
    elif cmd == "check":
        d, val, run, tol = sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
        cfg, W = load_dir(d)
        bad = check_config(cfg, W)
        evals = [o for o in map(json.loads, open(run)) if "val_loss" in o]
        batch = int(sys.argv[6])
        ours = evals[-1]["val_loss"]
        torch_loss = batch_loss(cfg, W, val, 0, batch)
        rel = abs(torch_loss - ours) / abs(torch_loss)
        print("%s: %s, %d tensors, %d config fields checked; validation loss: torch %.9f, shardc %.9f (rel %.2g)"
              % (d, cfg["architectures"][0], len(W), len(cfg), torch_loss, ours, rel))
        if not (rel <= tol):
            bad.append("the validation loss differs by %.3g relative (tolerance %g)" % (rel, tol))
        for b in bad:
            print("FAIL: " + b)
        sys.exit(1 if bad else 0)
    else:
        sys.exit(__doc__)


main()
