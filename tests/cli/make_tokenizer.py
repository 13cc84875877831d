#!/usr/bin/python3
"""Writes a byte-level BPE tokenizer.json (GPT-2's byte-to-character map, no merges) with
<|endoftext|> as id 256, for the CLI tests: make_tokenizer.py OUT.json"""
import json
import sys

bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
vocab = {chr(c): b for b, c in zip(bs, cs)}
with open(sys.argv[1], "w") as f:
    json.dump({"added_tokens": [{"id": 256, "content": "<|endoftext|>", "special": True}], "normalizer": None,
               "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
               "model": {"type": "BPE", "vocab": vocab, "merges": []}}, f)
