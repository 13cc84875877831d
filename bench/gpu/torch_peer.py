#!/usr/bin/env python3
"""The PyTorch peer of bench/gpu (partrain_gpu_bench): the same two models trained the way a
PyTorch user trains them fast on one GPU, timed the same way.

  gpt2:  GPT-2 124M as nanoGPT writes it: learned positions, pre-norm LayerNorm with biases,
         causal F.scaled_dot_product_attention (flash), GELU-tanh MLP, tied LM head, vocab
         50304 (50257 padded to a multiple of 128, as partrain's model mode trains it)
  llama: 12 layers, 768 wide, 12 heads / 4 kv heads (GQA), RoPE (Hugging Face rotate_half,
         theta 10000), RMSNorm, SwiGLU 2048, untied head, vocab 32000
Both: bf16 autocast over fp32 weights, torch.compile, fused AdamW (lr 3e-4, betas 0.9/0.95,
decay 0.1 on matrices), clip_grad_norm_ 1.0, B=16, T=1024 by default, one fixed random batch.

MFU as partrain_gpu_bench counts it: 6 N + 12 L C T FLOPs per token (N without position
embeddings, and without the input embedding where the head is untied) over 989.4e12.

    torch_peer.py [--models gpt2,llama] [--batch 16] [--seq 1024] [--steps 10] [--warmup 3]
                  [--device cuda|cpu] [--compile 1|0] [--tiny] [--out FILE]
                  [--ready-file F --go-file G --wait S]

--tiny: 2 layers, 64 wide (a CPU check of the script). With --go-file, every model is built,
compiled and warmed up first, then --ready-file is written and the timing waits (at most
--wait seconds) for the go file: the compile runs while something else (a build, tests)
uses the machine, and the timing does not. Prints (and appends to --out) one JSON line per
model, with "error" where a model failed.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PEAK_BF16 = 989.4e12


# Older PyTorch (Debian's 1.13, for the CPU check here) lacks SDPA, GQA in SDPA, nn.RMSNorm
# and fused AdamW; the GPU machine's 2.x has them all and takes the fast ones.
TORCH = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2] if x.isdigit())


def attention(q, k, v):
    if k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        if TORCH >= (2, 5):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[2]
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return s.softmax(dim=-1) @ v


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class Gpt2Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = attention(q, k, v)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, V, T, L, C, H):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Gpt2Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") or name.endswith("mlp_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))

    def flops_params(self):  # nanoGPT: no position embeddings; the tied head counts once
        return sum(p.numel() for p in self.parameters()) - self.wpe.weight.numel()


def rope_cos_sin(T, hd, theta, device):
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))
    ang = torch.outer(torch.arange(T, device=device, dtype=torch.float32), inv)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, C, H, KV, F_):
        super().__init__()
        self.H, self.KV, self.hd = H, KV, C // H
        self.input_layernorm = RMSNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, (H + 2 * KV) * self.hd, bias=False)
        self.o_proj = nn.Linear(C, C, bias=False)
        self.post_attention_layernorm = RMSNorm(C, eps=1e-5)
        self.gate_up = nn.Linear(C, 2 * F_, bias=False)
        self.down_proj = nn.Linear(F_, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = self.qkv(self.input_layernorm(x)).split([self.H * self.hd, self.KV * self.hd, self.KV * self.hd], dim=2)
        q = q.view(B, T, self.H, self.hd).transpose(1, 2)
        k = k.view(B, T, self.KV, self.hd).transpose(1, 2)
        v = v.view(B, T, self.KV, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = attention(q, k, v)
        x = x + self.o_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        gate, up = self.gate_up(self.post_attention_layernorm(x)).chunk(2, dim=-1)
        return x + self.down_proj(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, V, T, L, C, H, KV, F_):
        super().__init__()
        self.embed_tokens = nn.Embedding(V, C)
        self.layers = nn.ModuleList(LlamaBlock(C, H, KV, F_) for _ in range(L))
        self.norm = RMSNorm(C, eps=1e-5)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.T, self.hd = T, C // H
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("o_proj.weight") or name.endswith("down_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.shape[1]
        cos, sin = rope_cos_sin(T, self.hd, 10000.0, idx.device)
        x = self.embed_tokens(idx)
        for b in self.layers:
            x = b(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))

    def flops_params(self):  # the input embedding is a lookup, not a matmul
        return sum(p.numel() for p in self.parameters()) - self.embed_tokens.weight.numel()


def build(name, tiny, T, device):
    L, C, H = (2, 64, 4) if tiny else (12, 768, 12)
    if name == "gpt2":
        return Gpt2(50304, T, L, C, H).to(device), L, C
    if name == "llama":
        return Llama(32000, T, L, C, H, max(1, H // 3), 256 if tiny else 2048).to(device), L, C
    raise ValueError(f"unknown model {name}")


class Run:
    """One model's training loop: built, compiled and warmed up, then timed on request."""

    def __init__(self, name, a, device):
        self.name, self.a, self.device = name, a, device
        torch.manual_seed(1337)
        self.model, self.L, self.C = build(name, a.tiny, a.seq, device)
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        other = [p for p in self.model.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}]
        try:
            self.opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=device == "cuda")
        except TypeError:  # no fused AdamW in this PyTorch
            self.opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
        if a.compile and not hasattr(torch, "compile"):
            raise RuntimeError(f"torch {torch.__version__} has no torch.compile; use --compile 0")
        self.step_fn = torch.compile(self.model) if a.compile else self.model
        V = 50304 if name == "gpt2" else 32000
        g = torch.Generator().manual_seed(42)
        data = torch.randint(0, V, (a.batch, a.seq + 1), generator=g)
        self.x, self.y = data[:, :-1].contiguous().to(device), data[:, 1:].contiguous().to(device)
        self.loss_first = None
        t0 = time.time()
        for _ in range(a.warmup):
            loss = self.one()
            if self.loss_first is None:
                self.loss_first = loss.item()
        self.sync()
        self.compile_s = time.time() - t0

    def sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    def one(self):
        with torch.autocast(device_type=self.device, dtype=torch.bfloat16):
            loss = self.step_fn(self.x, self.y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss

    def time(self):
        self.sync()
        t0 = time.time()
        for _ in range(self.a.steps):
            loss = self.one()
        self.sync()
        s = time.time() - t0
        tokens = self.a.batch * self.a.seq * self.a.steps
        tps = tokens / s
        fpt = 6.0 * self.model.flops_params() + 12.0 * self.L * self.C * self.a.seq
        return {"label": f"torch-{self.name}", "impl": "torch.compile" if self.a.compile else "torch eager",
                "arch": self.name, "batch": self.a.batch, "seq": self.a.seq, "steps": self.a.steps,
                "params_flops": self.model.flops_params(), "ms_per_step": round(1e3 * s / self.a.steps, 3),
                "tokens_per_s": round(tps), "tflops": round(tps * fpt / 1e12, 1), "mfu": round(tps * fpt / PEAK_BF16, 4),
                "loss_first": round(self.loss_first, 4), "loss_last": round(loss.item(), 4),
                "warmup_s": round(self.compile_s, 1), "torch": torch.__version__}


def emit(a, line):
    text = json.dumps(line)
    print(text, flush=True)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="gpt2,llama")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--compile", type=int, default=1)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--out", default="")
    p.add_argument("--ready-file", default="")
    p.add_argument("--go-file", default="")
    p.add_argument("--wait", type=float, default=300.0)
    a = p.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        emit(a, {"label": "torch", "error": "torch sees no CUDA device"})
        return 1
    torch.set_float32_matmul_precision("high")
    runs, rc = [], 0
    for name in a.models.split(","):
        try:
            runs.append(Run(name, a, a.device))
        except Exception as e:  # a failed model is reported; the others still run
            emit(a, {"label": f"torch-{name}", "arch": name, "error": f"{type(e).__name__}: {e}"[:2000]})
            rc = 1
    if a.ready_file:
        open(a.ready_file, "w").close()
    if a.go_file:
        deadline = time.time() + a.wait
        while not os.path.exists(a.go_file) and time.time() < deadline:
            time.sleep(0.2)
    for r in runs:
        try:
            emit(a, r.time())
        except Exception as e:
            emit(a, {"label": f"torch-{r.name}", "arch": r.name, "error": f"{type(e).__name__}: {e}"[:2000]})
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
