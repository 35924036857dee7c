#!/usr/bin/python3
"""hf_tokenizer.py — small Hugging Face tokenizer.json files written for the
tests (real ones cannot be downloaded here), an encoder to make llm.c token
shards with them, and a reference decoder for the trainer's --sample.

  hf_tokenizer.py write KIND TEXT MERGES OUT.json     KIND gpt2 or llama
  hf_tokenizer.py encode OUT.json TEXT SHARD.bin      text -> llm.c uint16 shard
  hf_tokenizer.py decode OUT.json ID...               ids -> bytes on stdout

The files have the structure of the real ones.  gpt2: the byte-level BPE of
GPT-2's tokenizer.json (a ByteLevel pre-tokenizer, post-processor and
decoder; the 256 byte characters of bytes_to_unicode as the first ids, then
the merged tokens, then <|endoftext|> as a special added token).  llama: the
SentencePiece-style BPE of Llama-2's (<unk>, <s>, </s>, the byte-fallback
tokens <0x00>..<0xFF>, then pieces with ▁ for the space; the normalizer
prepends ▁ and replaces spaces; the decoder is Replace ▁ -> " ",
ByteFallback, Fuse, Strip one leading space; a TemplateProcessing
post-processor that starts with <s>).  MERGES merges are learnt from TEXT by
plain BPE (the most frequent pair first).

decode follows the tokenizers library's decoders as documented, written
independently of runtime/core/tok.c: the bytes of every token, joined
(bytes that are not valid UTF-8 are kept as they are, as the trainer
prints them)."""
import json, re, struct, sys

SPACE = "\u2581"


def bytes_to_unicode():
    """GPT-2's table: byte -> the character that stands for it."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xa1, 0xac + 1)) + list(range(0xae, 0xff + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()
U2B = {c: b for b, c in B2U.items()}
# GPT-2's pre-tokenizer pattern, with ASCII classes (the test text is ASCII)
GPT2_SPLIT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


def words(kind, text):
    """The pre-tokenized words as lists of symbols."""
    if kind == "gpt2":
        return [[B2U[b] for b in w.encode()] for w in GPT2_SPLIT.findall(text)]
    return [list(SPACE + text.replace(" ", SPACE))]


def learn(kind, text, n):
    """n merges, the most frequent pair of adjacent symbols first (ties: the first seen)."""
    ws = words(kind, text)
    merges = []
    for _ in range(n):
        count = {}
        for w in ws:
            for p in zip(w, w[1:]):
                count[p] = count.get(p, 0) + 1
        if not count:
            break
        best = max(count, key=count.get)
        merges.append(best)
        ws = [apply(w, best) for w in ws]
    return merges


def apply(w, pair):
    out, i = [], 0
    while i < len(w):
        if i + 1 < len(w) and (w[i], w[i + 1]) == pair:
            out.append(w[i] + w[i + 1])
            i += 2
        else:
            out.append(w[i])
            i += 1
    return out


def write(kind, text, nmerges, out):
    merges = learn(kind, text, nmerges)
    added = []
    if kind == "gpt2":
        vocab = {B2U[b]: i for i, b in enumerate(sorted(B2U, key=lambda b: ord(B2U[b])))}
        for a, b in merges:
            vocab.setdefault(a + b, len(vocab))
        added.append({"id": len(vocab), "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": True, "special": True})
        doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
               "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                 "use_regex": True},
               "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                                  "use_regex": True},
               "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}}
        model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                 "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                 "merges": [a + " " + b for a, b in merges]}
    else:
        vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
        for b in range(256):
            vocab["<0x%02X>" % b] = len(vocab)
        for ch in sorted(set(SPACE + text.replace(" ", SPACE))):
            if ch.isprintable() and ord(ch) < 128 or ch == SPACE:
                vocab.setdefault(ch, len(vocab))
        for a, b in merges:
            vocab.setdefault(a + b, len(vocab))
        for i, t in enumerate(["<unk>", "<s>", "</s>"]):
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True})
        doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
               "normalizer": {"type": "Sequence", "normalizers": [
                   {"type": "Prepend", "prepend": SPACE}, {"type": "Replace", "pattern": {"String": " "},
                                                           "content": SPACE}]},
               "pre_tokenizer": None,
               "post_processor": {"type": "TemplateProcessing",
                                  "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                             {"Sequence": {"id": "A", "type_id": 0}}],
                                  "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                           {"Sequence": {"id": "A", "type_id": 0}},
                                           {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                           {"Sequence": {"id": "B", "type_id": 1}}],
                                  "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
               "decoder": {"type": "Sequence", "decoders": [
                   {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
                   {"type": "ByteFallback"}, {"type": "Fuse"},
                   {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}}
        model = {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                 "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "vocab": vocab,
                 "merges": [a + " " + b for a, b in merges]}
    doc["model"] = model
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=2)


def load(path):
    doc = json.load(open(path, encoding="utf-8"))
    kind = "llama" if doc["model"].get("byte_fallback") else "gpt2"
    return kind, doc


def encode(path, text):
    kind, doc = load(path)
    vocab = doc["model"]["vocab"]
    ranks = {tuple(m.split(" ")): i for i, m in enumerate(doc["model"]["merges"])}
    ids = []
    for w in words(kind, text):
        while True:
            pairs = [(ranks[p], p) for p in zip(w, w[1:]) if p in ranks]
            if not pairs:
                break
            w = apply(w, min(pairs)[1])
        for s in w:
            if s in vocab:
                ids.append(vocab[s])
            else:   # byte fallback
                ids.extend(vocab["<0x%02X>" % b] for b in s.encode())
    return ids


def decode(path, ids):
    kind, doc = load(path)
    tokens = {i: t for t, i in doc["model"]["vocab"].items()}
    tokens.update({a["id"]: a["content"] for a in doc["added_tokens"]})
    out = b""
    for k, i in enumerate(ids):
        t = tokens.get(i)
        if t is None:
            continue
        if kind == "gpt2":
            out += bytes(U2B[c] for c in t) if all(c in U2B for c in t) else t.encode()
        else:
            m = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", t)
            out += bytes([int(m.group(1), 16)]) if m else t.replace(SPACE, " ").encode()
    if kind == "llama" and out.startswith(b" "):
        out = out[1:]
    return out


def main():
    cmd = sys.argv[1]
    if cmd == "write":
        write(sys.argv[2], open(sys.argv[3], encoding="utf-8").read(), int(sys.argv[4]), sys.argv[5])
    elif cmd == "encode":
        ids = encode(sys.argv[2], open(sys.argv[3], encoding="utf-8").read())
        with open(sys.argv[4], "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)))
            f.write(struct.pack("<%dH" % len(ids), *ids))
        print("%d tokens, largest id %d" % (len(ids), max(ids)))
    elif cmd == "decode":
        sys.stdout.buffer.write(decode(sys.argv[2], [int(v) for v in sys.argv[3:]]))
    else:
        sys.exit(__doc__)


main()
