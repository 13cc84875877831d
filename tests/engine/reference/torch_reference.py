#!/usr/bin/python3
"""The independent reference: loss, gradients and one AdamW step of a GPT-2 or LLaMA model.

Written from the models' equations (below), not from partrain's code, so that partrain's
numbers can be checked against something that shares none of its bugs. Computes in
float64 (the default; --dtype float32 is there to study rounding), with gradients by
torch.autograd on top of elementary torch ops (no torch.nn layers, no fused kernels).

    torch_reference.py DIR [--out FILE] [--dtype float64|float32]

Reads   DIR/config.json          arch ("gpt2" | "llama"), vocab_size, seq_len, layers, hidden,
                                  heads, kv_heads, ffn_hidden, norm_eps, rope_theta,
                                  tie_embeddings, lr, beta1, beta2, eps, weight_decay,
                                  grad_clip, B, T
        DIR/weights.safetensors  F32 (or BF16/F16/F64) weights under Hugging Face names
        DIR/batch.safetensors    "inputs", "targets": I32 [B, T]
Writes  DIR/torch_out.safetensors (F64):
        "loss" [1]               mean cross-entropy over the B*T positions
        "grad.<name>"            d loss / d <name> (before clipping)
        "step.<name>"            <name> after one AdamW step (t = 1), clipping included

The equations (x: [B, T, C], H heads of hd = C/H, KV key/value heads):

GPT-2   x = wte[ids] + wpe[0..T)
        per block i:  a = LN(x; ln_1);  [q k v] = a W_attn + b_attn  (HF Conv1D: W is [in, out])
                      x += Attn(q, k, v) W_proj + b_proj
                      x += gelu_tanh(LN(x; ln_2) W_fc + b_fc) W_fc_proj + b_fc_proj
        logits = LN(x; ln_f) wte^T   (lm_head.weight instead when not tied)
        LN(x) = (x - mean) / sqrt(var + eps) * w + b   (biased variance over C)
        gelu_tanh(u) = u/2 (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3)))
LLaMA   x = embed[ids]
        per block:    a = RMS(x; input_layernorm); q = a Wq^T, k = a Wk^T, v = a Wv^T  ([out, in])
                      q, k = RoPE(q), RoPE(k);  x += Attn(q, k, v) Wo^T
                      m = RMS(x; post_attention_layernorm);  x += (silu(m Wg^T) * (m Wu^T)) Wd^T
        logits = RMS(x; model.norm) lm_head^T
        RMS(x) = x / sqrt(mean(x^2) + eps) * w
        RoPE (HF rotate_half): inv_freq_j = theta^(-2j/hd), j < hd/2; angle(t, j) = t inv_freq_j
              for both halves; x' = x cos + rotate_half(x) sin, rotate_half([x1, x2]) = [-x2, x1]
        GQA:  query head h attends with key/value head h // (H / KV)
Attn    per head: softmax(q k^T / sqrt(hd) + causal mask) v, heads concatenated
Loss    mean over positions of logsumexp(logits) - logits[target]
AdamW   g <- g * min(1, clip / (||g||_2 + 1e-6)) over all parameters when clip > 0
        (torch.nn.utils.clip_grad_norm_); m = (1-b1) g, v = (1-b2) g^2 (t = 1);
        p <- p - lr wd p [p has >= 2 dims] - lr (m / (1-b1)) / (sqrt(v / (1-b2)) + eps)
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_min  # noqa: E402


# ---- layers, from their equations ---------------------------------------------------

def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def gelu_tanh(u):
    return 0.5 * u * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u ** 3)))


def silu(u):
    return u / (1.0 + torch.exp(-u))


def softmax(s):
    # The shift by the (constant) row max changes nothing mathematically; it keeps exp finite.
    e = torch.exp(s - s.max(-1, keepdim=True).values.detach())
    return e / e.sum(-1, keepdim=True)


def causal_attention(q, k, v):
    """q: [B, H, T, hd]; k, v: [B, H, T, hd] (already expanded for GQA)."""
    T, hd = q.shape[-2], q.shape[-1]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    return softmax(scores) @ v


def rope_tables(T, hd, theta, dtype):
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    angles = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [T, hd/2]
    angles = torch.cat([angles, angles], dim=-1)  # [T, hd]: the same angle for both halves
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x, cos, sin):
    """x: [B, H, T, hd]."""
    return x * cos + rotate_half(x) * sin


def split_heads(x, n):
    B, T, C = x.shape
    return x.reshape(B, T, n, C // n).transpose(1, 2)  # [B, n, T, hd]


def merge_heads(x):
    B, n, T, hd = x.shape
    return x.transpose(1, 2).reshape(B, T, n * hd)


def cross_entropy(logits, targets):
    """Mean over positions of logsumexp - logit of the target."""
    m = logits.max(-1, keepdim=True).values.detach()
    lse = m.squeeze(-1) + torch.log(torch.exp(logits - m).sum(-1))
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (lse - picked).mean()


# ---- the two models -----------------------------------------------------------------

def _kv_heads(cfg):
    return cfg.get("kv_heads") or cfg["heads"]


def gpt2_logits(cfg, p, ids):
    T = ids.shape[1]
    C, H, eps = cfg["hidden"], cfg["heads"], cfg["norm_eps"]
    x = p["wte.weight"][ids] + p["wpe.weight"][:T]
    for i in range(cfg["layers"]):
        h = f"h.{i}."
        a = layer_norm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps)
        qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]
        q, k, v = qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]
        y = merge_heads(causal_attention(split_heads(q, H), split_heads(k, H), split_heads(v, H)))
        x = x + y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        m = layer_norm(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps)
        u = gelu_tanh(m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"])
        x = x + u @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"], eps)
    head = p["lm_head.weight"] if "lm_head.weight" in p else p["wte.weight"]
    return x @ head.t()


def llama_logits(cfg, p, ids):
    T = ids.shape[1]
    C, H, KV, eps = cfg["hidden"], cfg["heads"], _kv_heads(cfg), cfg["norm_eps"]
    hd = C // H
    cos, sin = rope_tables(T, hd, cfg["rope_theta"], p["model.embed_tokens.weight"].dtype)
    x = p["model.embed_tokens.weight"][ids]
    for i in range(cfg["layers"]):
        L = f"model.layers.{i}."
        a = rms_norm(x, p[L + "input_layernorm.weight"], eps)
        q = split_heads(a @ p[L + "self_attn.q_proj.weight"].t(), H)
        k = split_heads(a @ p[L + "self_attn.k_proj.weight"].t(), KV)
        v = split_heads(a @ p[L + "self_attn.v_proj.weight"].t(), KV)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        group = H // KV
        kv_of_head = torch.arange(H) // group  # query head h uses kv head h // (H / KV)
        y = merge_heads(causal_attention(q, k[:, kv_of_head], v[:, kv_of_head]))
        x = x + y @ p[L + "self_attn.o_proj.weight"].t()
        m = rms_norm(x, p[L + "post_attention_layernorm.weight"], eps)
        gate = m @ p[L + "mlp.gate_proj.weight"].t()
        up = m @ p[L + "mlp.up_proj.weight"].t()
        x = x + (silu(gate) * up) @ p[L + "mlp.down_proj.weight"].t()
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["lm_head.weight"] if "lm_head.weight" in p else p["model.embed_tokens.weight"]
    return x @ head.t()


def loss_fn(cfg, params, inputs, targets):
    logits = (gpt2_logits if cfg["arch"] == "gpt2" else llama_logits)(cfg, params, inputs)
    return cross_entropy(logits, targets)


# ---- AdamW, one step ----------------------------------------------------------------

def clip_scale(grads, clip):
    """torch.nn.utils.clip_grad_norm_'s factor: min(1, clip / (||g|| + 1e-6))."""
    if clip <= 0:
        return 1.0
    norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values()))
    return min(1.0, clip / (norm + 1e-6))


def adamw_first_step(cfg, params, grads):
    """Parameters after one AdamW step at t = 1 (zero moments before)."""
    lr, b1, b2, eps, wd = cfg["lr"], cfg["beta1"], cfg["beta2"], cfg["eps"], cfg["weight_decay"]
    scale = clip_scale(grads, cfg.get("grad_clip", 0.0))
    out = {}
    with torch.no_grad():
        for name, p in params.items():
            g = grads[name] * scale
            m = (1 - b1) * g
            v = (1 - b2) * g * g
            m_hat, v_hat = m / (1 - b1), v / (1 - b2)
            decay = wd if p.dim() >= 2 else 0.0  # no decay on norms and biases
            out[name] = p - lr * decay * p - lr * m_hat / (torch.sqrt(v_hat) + eps)
    return out


# ---- files --------------------------------------------------------------------------

def load_case(directory, dtype):
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    weights, _ = safetensors_min.load(os.path.join(directory, "weights.safetensors"))
    batch, _ = safetensors_min.load(os.path.join(directory, "batch.safetensors"))
    params = {}
    for name, t in weights.items():
        params[name] = t.to(dtype).clone().requires_grad_(True)
    for key in ("moe_experts", "dropout"):
        if cfg.get(key, 0):
            raise SystemExit(f"torch_reference: {key} = {cfg[key]} is not modelled here; use 0")
    if cfg["arch"] not in ("gpt2", "llama"):
        raise SystemExit(f"torch_reference: unknown arch {cfg['arch']!r} (gpt2 or llama)")
    inputs = batch["inputs"].long()
    targets = batch["targets"].long()
    if list(inputs.shape) != [cfg["B"], cfg["T"]] or inputs.shape != targets.shape:
        raise SystemExit(f"batch shape {list(inputs.shape)} does not match B={cfg['B']} T={cfg['T']}")
    return cfg, params, inputs, targets


def gradients(cfg, params, inputs, targets):
    loss = loss_fn(cfg, params, inputs, targets)
    names = list(params)
    # Tensors the model does not use (e.g. GPT-2's attn.bias masks) get a zero gradient.
    grads = torch.autograd.grad(loss, [params[n] for n in names], allow_unused=True)
    grads = [torch.zeros_like(params[n]) if g is None else g for n, g in zip(names, grads)]
    return loss.detach(), dict(zip(names, grads))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--out", help="default: DIR/torch_out.safetensors")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    args = ap.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    cfg, params, inputs, targets = load_case(args.dir, dtype)
    loss, grads = gradients(cfg, params, inputs, targets)
    stepped = adamw_first_step(cfg, params, grads)
    out = {"loss": loss.reshape(1).double()}
    for name in params:
        out["grad." + name] = grads[name].double()
    for name in params:
        out["step." + name] = stepped[name].double()
    path = args.out or os.path.join(args.dir, "torch_out.safetensors")
    safetensors_min.save(path, out, {"producer": "torch_reference.py", "dtype": args.dtype})
    print(f"torch_reference: {cfg['arch']} loss {float(loss):.8f} -> {path}")
    return 0


if __name__ == "__main__":
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    sys.exit(main())
