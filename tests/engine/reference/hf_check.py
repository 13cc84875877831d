#!/usr/bin/python3
"""Hugging Face folders both ways, against the independent reference.

    hf_check.py --partrain PARTRAIN --logits PARTRAIN_HF_LOGITS --arch gpt2|llama --workdir DIR

1. Trains a tiny model 3 steps (`partrain run --save`, so biases and norms are no longer 0
   and 1), then `partrain export --hf` with --max-shard-size small enough to give several
   shards and the index, and a tokenizer file copied in.
2. Builds the model from config.json ALONE in plain torch (float64): the Hugging Face keys
   (n_embd/n_head/n_layer/layer_norm_epsilon, or hidden_size/num_attention_heads/
   num_key_value_heads/num_hidden_layers/rms_norm_eps/rope_theta/tie_word_embeddings) are
   mapped here to torch_reference.py's equations; the weights come from the index's shards
   through safetensors_min (neither shares code with partrain). Checks the index
   (total_size = the tensors' bytes, every shard within the limit).
3. partrain_hf_logits loads the same folder and prints its logits for a full-length
   sequence, in one pass and through the KV cache: both within 1e-5 of torch's.
4. `partrain import hf` of the folder, then `partrain export` of the imported job and
   weights: every tensor bit-identical to the folder's.
Exit 0 on success, 1 on a mismatch, 77 without torch.
"""
import argparse
import json
import os
import shutil
import sys

try:
    import torch
except ImportError:
    print("SKIP: torch is not importable by", sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_min  # noqa: E402
import torch_reference  # noqa: E402
from run_cli import run  # noqa: E402

JOBS = {
    "gpt2": """[model]
arch = "gpt2"
vocab_size = 300
seq_len = 32
layers = 2
hidden = 64
heads = 4
""",
    "llama": """[model]
arch = "llama"
vocab_size = 300
seq_len = 32
layers = 2
hidden = 64
heads = 4
kv_heads = 2
ffn_hidden = 96
rope_theta = 500000.0
tie_embeddings = false
""",
}
TAIL = """
[job]
name = "hf"

[data]
train_files = ["data.bin"]

[training]
steps = 3
global_batch = 2
micro_batch = 2
lr = 1e-2
warmup_steps = 1
"""
MAX_SHARD = 40_000  # bytes: several shards for these models


def reference_config(hf):
    """torch_reference's config, from config.json's Hugging Face keys only."""
    if hf["model_type"] == "gpt2":
        assert hf["architectures"] == ["GPT2LMHeadModel"] and hf["activation_function"] == "gelu_new"
        return {"arch": "gpt2", "hidden": hf["n_embd"], "heads": hf["n_head"], "layers": hf["n_layer"],
                "norm_eps": hf["layer_norm_epsilon"]}
    assert hf["model_type"] == "llama" and hf["hidden_act"] == "silu" and hf.get("rope_scaling") is None
    return {"arch": "llama", "hidden": hf["hidden_size"], "heads": hf["num_attention_heads"],
            "kv_heads": hf["num_key_value_heads"], "layers": hf["num_hidden_layers"],
            "norm_eps": hf["rms_norm_eps"], "rope_theta": hf["rope_theta"]}


def load_folder(folder):
    index_path = os.path.join(folder, "model.safetensors.index.json")
    with open(index_path) as f:
        index = json.load(f)
    weights, nbytes = {}, 0
    for shard in sorted(set(index["weight_map"].values())):
        tensors, _ = safetensors_min.load(os.path.join(folder, shard))
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        if size > MAX_SHARD and len(tensors) > 1:
            raise SystemExit(f"FAIL: {shard} holds {size} bytes, more than --max-shard-size {MAX_SHARD}")
        for name, t in tensors.items():
            if index["weight_map"][name] != shard:
                raise SystemExit(f"FAIL: the index puts {name} in {index['weight_map'][name]}, not {shard}")
            weights[name] = t
        nbytes += size
    if index["metadata"]["total_size"] != nbytes or set(weights) != set(index["weight_map"]):
        raise SystemExit("FAIL: the index's total_size or weight_map does not match the shards")
    return weights, len(set(index["weight_map"].values()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--partrain", required=True)
    ap.add_argument("--logits", required=True)
    ap.add_argument("--arch", required=True, choices=sorted(JOBS))
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    w = lambda *p: os.path.join(a.workdir, *p)  # noqa: E731
    with open(w("corpus.txt"), "w") as f:
        f.write("the quick brown fox jumps over the lazy dog. " * 40)
    with open(w("tokenizer.json"), "w") as f:
        f.write('{"stand-in": "copied as given"}')
    run([a.partrain, "data", "encode", "--bytes", w("corpus.txt"), "-o", w("data.bin")])
    with open(w("job.toml"), "w") as f:
        f.write(JOBS[a.arch] + TAIL)
    env = dict(os.environ, PARTRAIN_RUN_DIR=w("run"))
    run([a.partrain, "run", w("job.toml"), "--save", w("trained.safetensors")], env=env)
    run([a.partrain, "export", w("job.toml"), "--from", w("trained.safetensors"), "--hf", w("hf"),
         "--max-shard-size", str(MAX_SHARD), "--tokenizer", w("tokenizer.json")])
    if not os.path.exists(w("hf", "tokenizer.json")):
        raise SystemExit("FAIL: --tokenizer was not copied into the folder")

    with open(w("hf", "config.json")) as f:
        hf = json.load(f)
    cfg = reference_config(hf)
    weights, shards = load_folder(w("hf"))
    if shards < 2:
        raise SystemExit(f"FAIL: expected several shards, got {shards}")
    params = {k: v.double() for k, v in weights.items()}
    T = hf.get("n_positions", hf.get("max_position_embeddings"))
    ids = [(i * 53 + 7) % hf["vocab_size"] for i in range(T)]
    forward = torch_reference.gpt2_logits if cfg["arch"] == "gpt2" else torch_reference.llama_logits
    with torch.no_grad():
        ref = forward(cfg, params, torch.tensor([ids]))[0]
    run([a.logits, w("hf"), ",".join(map(str, ids)), w("logits.safetensors")])
    ours, _ = safetensors_min.load(w("logits.safetensors"))
    ok = True
    for key in ("logits", "logits_kv"):
        diff = (ours[key].double() - ref).abs().max().item()
        good = diff <= 1e-5
        ok &= good
        print(f"{'PASS' if good else 'FAIL'} {a.arch} {key}: max |partrain - torch| = {diff:.2e} "
              f"over {T} x {hf['vocab_size']} (config.json + {shards} shards)")

    run([a.partrain, "import", "hf", w("hf"), "-o", w("imported")])
    run([a.partrain, "export", w("imported", "job.toml"), "--from", w("imported", "model.safetensors"),
         "-o", w("back.safetensors")])
    back, _ = safetensors_min.load(w("back.safetensors"))
    same = set(back) == set(weights) and all(torch.equal(back[k], weights[k]) for k in weights)
    ok &= same
    print(f"{'PASS' if same else 'FAIL'} {a.arch} import hf -> export: {len(back)} tensors bit-identical")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
