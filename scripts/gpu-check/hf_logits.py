#!/usr/bin/env python3
"""Part A's Hugging Face stage: a `partrain export --hf` folder loaded by transformers, its
logits against partrain's on the same token ids (fp32 on both sides).

    hf_logits.py --record FILE --case ARCH --hf DIR --logits PARTRAIN.safetensors --ids 1,2,...
                 --tol 1e-3 [--device cuda|cpu] [--allow-reference TESTS_REFERENCE_DIR]

PARTRAIN.safetensors is what the carried partrain_hf_logits wrote for DIR and the same ids:
"logits" (one pass) and "logits_kv" (through the KV cache), [T, V] each, F32. transformers
builds the model from DIR alone (AutoModelForCausalLM, eager attention, float32, TF32 off)
and the check is max |partrain - transformers| <= tol over every position and token, for
both. Where transformers is missing (a machine without a GPU, and only with
--allow-reference), the tests' independent torch reference (tests/engine/reference) stands
in for it and the record says so. One record (results.py) per call; exit 0 unless it fails.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results  # noqa: E402


def load_weights(folder, safetensors_min):
    """{name: tensor} of the folder's model.safetensors or its sharded index."""
    index = os.path.join(folder, "model.safetensors.index.json")
    files = ["model.safetensors"]
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    weights = {}
    for name in files:
        weights.update(safetensors_min.load(os.path.join(folder, name))[0])
    return weights


def transformers_logits(folder, ids, device):
    import transformers
    from transformers import AutoModelForCausalLM
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    except TypeError:  # transformers 4: torch_dtype
        model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32, attn_implementation="eager")
    model = model.to(device).eval()
    with torch.no_grad():
        out = model(torch.tensor([ids], device=device)).logits[0].float().cpu()
    return out, f"transformers {transformers.__version__} {type(model).__name__} on {device}"


def reference_logits(folder, ids, refdir, safetensors_min):
    sys.path.insert(0, refdir)
    import hf_check
    import torch_reference
    with open(os.path.join(folder, "config.json")) as f:
        cfg = hf_check.reference_config(json.load(f))
    params = {k: v.double() for k, v in load_weights(folder, safetensors_min).items()}
    forward = torch_reference.gpt2_logits if cfg["arch"] == "gpt2" else torch_reference.llama_logits
    with torch.no_grad():
        out = forward(cfg, params, torch.tensor([ids]))[0].float()
    return out, "the tests' torch reference (transformers is not importable here)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", required=True)
    ap.add_argument("--case", required=True)
    ap.add_argument("--hf", required=True)
    ap.add_argument("--logits", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--allow-reference")
    a = ap.parse_args()
    refdir = a.allow_reference or os.path.join(os.path.dirname(__file__), "../../tests/engine/reference")
    sys.path.insert(0, os.path.abspath(refdir))
    import safetensors_min

    ids = [int(t) for t in a.ids.split(",")]
    ours, _ = safetensors_min.load(a.logits)
    rec = {"stage": "hf", "case": a.case, "tol": a.tol}
    try:
        import transformers  # noqa: F401
        have = True
    except ImportError:
        have = False
    if have:
        device = a.device if a.device == "cpu" or torch.cuda.is_available() else "cpu"
        theirs, what = transformers_logits(a.hf, ids, device)
    elif a.allow_reference:
        theirs, what = reference_logits(a.hf, ids, os.path.abspath(a.allow_reference), safetensors_min)
    else:
        rec.update(status="fail", detail=f"transformers is not importable by {sys.executable}")
        results.append(a.record, rec)
        print(rec["detail"])
        return 1
    worst = {}
    for key in ("logits", "logits_kv"):
        if ours[key].shape != theirs.shape:
            rec.update(status="fail", detail=f"{key}: partrain {list(ours[key].shape)}, {what} {list(theirs.shape)}")
            results.append(a.record, rec)
            print(rec["detail"])
            return 1
        worst[key] = (ours[key].double() - theirs.double()).abs().max().item()
    agree = int((ours["logits"].argmax(-1) == theirs.argmax(-1)).sum().item())
    ok = max(worst.values()) <= a.tol
    rec.update(status="pass" if ok else "fail", max_abs=worst, argmax_agree=agree, model=what,
               detail=f"max |partrain - HF| {worst['logits']:.1e} (one pass), {worst['logits_kv']:.1e} "
                      f"(KV cache), tol {a.tol:g}, over {len(ids)} x {theirs.shape[-1]}; "
                      f"argmax equal at {agree}/{len(ids)}; {what}")
    results.append(a.record, rec)
    print(f"{rec['status']}: hf {a.case}: {rec['detail']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
