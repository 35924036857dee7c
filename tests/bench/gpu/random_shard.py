#!/usr/bin/env python3
"""random_shard.py OUT N [VOCAB] — N random token ids below VOCAB (default 50257,
GPT-2's) in llm.c's uint16 shard format (a 256-int header: magic 20240520,
version 1, N), seeded so every machine writes the same file: the GPU
benchmark's data (tests/bench/gpu/run.sh, tests/gpu/bundle.sh)."""
import array
import random
import struct
import sys

out, n = sys.argv[1], int(sys.argv[2])
vocab = int(sys.argv[3]) if len(sys.argv) > 3 else 50257
random.seed(1337)
with open(out, "wb") as f:
    f.write(struct.pack("<256i", *([20240520, 1, n] + [0] * 253)))
    f.write(array.array("H", (random.randrange(vocab) for _ in range(n))).tobytes())
