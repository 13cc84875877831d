#!/usr/bin/python3
"""partrain against the independent PyTorch reference on a tiny model (a CTest test).

    run_reference.py --dump PATH/partrain_reference_dump --config gpt2|llama_gqa --workdir DIR

Two cases per config, each compared at --rtol (default 1e-5, norm-wise per tensor):
  init       partrain's own initial weights (it writes weights.safetensors and a batch);
  perturbed  the same tensors with every norm weight, bias and matrix perturbed by random
             noise (seeded), so that no norm is exactly 1 and no bias exactly 0, and the
             attention is far from uniform: the case where a wrong formula shows.
For each: partrain_reference_dump DIR -> partrain_out.safetensors; torch_reference.py ->
torch_out.safetensors; compare.py partrain_out torch_out --base weights (AdamW steps are
compared as updates). Exit 0 when both cases pass, 1 otherwise, 77 without torch.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

try:
    import torch
except ImportError:
    print("torch is not installed for", sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402
import safetensors_min  # noqa: E402
import torch_reference  # noqa: E402

# AdamW's eps is 1e-4 here, not the usual 1e-8: at t = 1 the update is lr g / (|g| + eps),
# which for |g| << 1e-8 turns fp32 round-off in a gradient that is zero in exact arithmetic
# (GPT-2's key bias: softmax ignores a constant shift) into a full-size random step. With
# eps = 1e-4 the step is well conditioned and eps still shapes most of the update.
_COMMON = dict(vocab_size=97, seq_len=16, layers=2, hidden=32, norm_eps=1e-5,
               rope_theta=10000.0, lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-4,
               weight_decay=0.1, B=3, T=16, seed=1234)
CONFIGS = {
    # GPT-2: tied head, 4 heads, default MLP width (4C); a small clip so that clipping acts.
    "gpt2": dict(_COMMON, arch="gpt2", heads=4, kv_heads=0, ffn_hidden=0,
                 tie_embeddings=True, grad_clip=0.05),
    # LLaMA with grouped-query attention (4 query heads on 2 key/value heads), untied head.
    "llama_gqa": dict(_COMMON, arch="llama", heads=4, kv_heads=2, ffn_hidden=48,
                      tie_embeddings=False, rope_theta=500.0, grad_clip=1.0),
}


def perturb(weights, seed):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, w in weights.items():
        noise = torch.randn(w.shape, generator=g, dtype=torch.float32)
        # Matrices get noise of their own init scale and more; vectors (norms, biases) +-0.2.
        scale = 0.2 if w.dim() < 2 else 0.1
        out[name] = (w + scale * noise).contiguous()
    return out


def run_case(dump, cfg, directory, rtol, label):
    for name in ("partrain_out.safetensors", "torch_out.safetensors"):
        if os.path.exists(os.path.join(directory, name)):
            os.remove(os.path.join(directory, name))
    done = subprocess.run([dump, directory], capture_output=True, text=True)
    if done.returncode != 0:
        print(f"{label}: partrain_reference_dump failed ({done.returncode}): {done.stderr.strip()}")
        return False
    if torch_reference.main([directory]) != 0:
        return False
    print(f"{label}: partrain vs torch (float64), rtol {rtol:g}")
    rc = compare.main([os.path.join(directory, "partrain_out.safetensors"),
                       os.path.join(directory, "torch_out.safetensors"),
                       "--rtol", str(rtol),
                       "--base", os.path.join(directory, "weights.safetensors")])
    return rc == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--config", required=True, choices=sorted(CONFIGS))
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--rtol", type=float, default=1e-5)
    args = ap.parse_args()
    cfg = CONFIGS[args.config]

    ok = True
    init_dir = os.path.join(args.workdir, "init")
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(init_dir)
    with open(os.path.join(init_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    ok &= run_case(args.dump, cfg, init_dir, args.rtol, f"{args.config}/init")

    pert_dir = os.path.join(args.workdir, "perturbed")
    os.makedirs(pert_dir)
    shutil.copy(os.path.join(init_dir, "config.json"), pert_dir)
    shutil.copy(os.path.join(init_dir, "batch.safetensors"), pert_dir)
    weights, meta = safetensors_min.load(os.path.join(init_dir, "weights.safetensors"))
    safetensors_min.save(os.path.join(pert_dir, "weights.safetensors"), perturb(weights, 99), meta)
    ok &= run_case(args.dump, cfg, pert_dir, args.rtol, f"{args.config}/perturbed")
    print("run_reference:", "ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    sys.exit(main())
