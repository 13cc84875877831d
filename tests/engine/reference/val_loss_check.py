#!/usr/bin/env python3
"""partrain's validation loss against the reference's cross-entropy at the same weights.

Trains the tiny example for a few steps with dropout on and [data] val_files set, saves the
weights, and recomputes the validation loss from them with torch_reference (float64, from
the equations): the mean cross-entropy over eval_batches x global_batch windows of the
held-out shard, sample g = window g mod its windows, in order, without dropout. partrain's
metrics.jsonl val_loss must agree within 1e-5 relative. Training runs with dropout 0.1, so
an evaluation that applied dropout would miss by far more than that.
"""
import argparse
import json
import os
import re
import shutil
import struct
import sys

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed for", sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_min  # noqa: E402
import torch_reference  # noqa: E402
from run_cli import run  # noqa: E402

STEPS = 8


def read_shard(path):
    """An llm.c shard's tokens (a 256 x int32 header, magic 20240520, uint16 tokens)."""
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    if header[0] != 20240520:
        raise SystemExit(f"FAIL: {path} is not a uint16 llm.c shard (magic {header[0]})")
    return torch.frombuffer(bytearray(data[1024:1024 + 2 * header[2]]), dtype=torch.int16).long() & 0xFFFF


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--partrain", required=True)
    ap.add_argument("--example", required=True, help="etc/examples/tiny.toml")
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    w = lambda *p: os.path.join(a.workdir, *p)  # noqa: E731
    examples = os.path.dirname(os.path.abspath(a.example))
    with open(a.example) as f:
        text = f.read()
    text = text.replace('"data/', f'"{examples}/data/').replace("dropout = 0.0", "dropout = 0.1")
    if "dropout = 0.1" not in text or "val_files" not in text:
        raise SystemExit(f"FAIL: {a.example} no longer has 'dropout = 0.0' and val_files to test with")
    with open(w("job.toml"), "w") as f:
        f.write(text)
    env = dict(os.environ, PARTRAIN_RUN_DIR=w("run"))
    run([a.partrain, "run", w("job.toml"), "--steps", str(STEPS), "--save", w("trained.safetensors")], env=env)
    run([a.partrain, "export", w("job.toml"), "--from", w("trained.safetensors"), "--hf", w("hf")])

    with open(w("run", "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if len(lines) != STEPS or "val_loss" not in lines[-1]:
        raise SystemExit(f"FAIL: expected {STEPS} metrics lines, the last with val_loss")
    ours = lines[-1]["val_loss"]

    with open(w("hf", "config.json")) as f:
        hf = json.load(f)
    cfg = {"arch": "gpt2", "hidden": hf["n_embd"], "heads": hf["n_head"], "layers": hf["n_layer"],
           "norm_eps": hf["layer_norm_epsilon"]}
    weights, _ = safetensors_min.load(w("trained.safetensors"))
    params = {k: v.double() for k, v in weights.items()}
    seq = int(re.search(r"^seq_len = (\d+)", text, re.M).group(1))
    batch = int(re.search(r"^global_batch = (\d+)", text, re.M).group(1))
    m = re.search(r"^eval_batches = (\d+)", text, re.M)
    windows = (int(m.group(1)) if m else 4) * batch
    val_file = re.search(r'^val_files = \["([^"]+)"\]', text, re.M).group(1)
    tokens = read_shard(val_file)
    count = tokens.numel() // (seq + 1)
    rows = torch.stack([tokens[(g % count) * (seq + 1):(g % count + 1) * (seq + 1)] for g in range(windows)])
    with torch.no_grad():
        ref = torch_reference.loss_fn(cfg, params, rows[:, :-1], rows[:, 1:]).item()
    rel = abs(ours - ref) / ref
    ok = rel <= 1e-5
    print(f"{'PASS' if ok else 'FAIL'} val_loss after {STEPS} steps: partrain {ours:.8f}, reference {ref:.8f} "
          f"(relative {rel:.2e}) over {windows} windows of {val_file}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
