#!/usr/bin/python3
"""Self-test of the reference, independent of partrain.

- each layer against torch's own implementation or an explicit loop over the equation;
- the whole model's autograd gradients against finite differences (torch.autograd.gradcheck,
  float64) on micro GPT-2 and LLaMA (GQA) models;
- GQA's head mapping against the same model with the key/value heads duplicated;
- the AdamW step against torch.optim.AdamW with per-parameter weight-decay groups and
  torch.nn.utils.clip_grad_norm_;
- the file protocol end to end: torch_reference.py main() and compare.py.
Exit 77 when torch is missing (CTest skip).
"""
import json
import math
import os
import sys
import tempfile
import unittest

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch is not installed for", sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402
import safetensors_min  # noqa: E402
import torch_reference as ref  # noqa: E402

D = torch.float64


def micro_config(arch, **over):
    cfg = dict(arch=arch, vocab_size=11, seq_len=5, layers=2, hidden=8, heads=2, kv_heads=2,
               ffn_hidden=12, norm_eps=1e-5, rope_theta=10000.0,
               tie_embeddings=(arch == "gpt2"), lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8,
               weight_decay=0.1, grad_clip=1.0, B=2, T=5)
    cfg.update(over)
    return cfg


def micro_weights(cfg, gen, dtype=D):
    """Random weights under HF names, norms near 1 so every path carries signal."""
    V, C, F_, L = cfg["vocab_size"], cfg["hidden"], cfg["ffn_hidden"], cfg["layers"]
    H, KV = cfg["heads"], cfg["kv_heads"]
    hd = C // H

    def r(*shape, scale=0.3):
        return torch.randn(*shape, generator=gen, dtype=dtype) * scale

    def norm_w(n):
        return 1.0 + r(n, scale=0.1)

    w = {}
    if cfg["arch"] == "gpt2":
        w["wte.weight"] = r(V, C)
        w["wpe.weight"] = r(cfg["seq_len"], C)
        for i in range(L):
            h = f"h.{i}."
            w[h + "ln_1.weight"], w[h + "ln_1.bias"] = norm_w(C), r(C, scale=0.1)
            w[h + "attn.c_attn.weight"], w[h + "attn.c_attn.bias"] = r(C, 3 * C), r(3 * C, scale=0.1)
            w[h + "attn.c_proj.weight"], w[h + "attn.c_proj.bias"] = r(C, C), r(C, scale=0.1)
            w[h + "ln_2.weight"], w[h + "ln_2.bias"] = norm_w(C), r(C, scale=0.1)
            w[h + "mlp.c_fc.weight"], w[h + "mlp.c_fc.bias"] = r(C, F_), r(F_, scale=0.1)
            w[h + "mlp.c_proj.weight"], w[h + "mlp.c_proj.bias"] = r(F_, C), r(C, scale=0.1)
        w["ln_f.weight"], w["ln_f.bias"] = norm_w(C), r(C, scale=0.1)
        if not cfg["tie_embeddings"]:
            w["lm_head.weight"] = r(V, C)
    else:
        w["model.embed_tokens.weight"] = r(V, C)
        for i in range(L):
            p = f"model.layers.{i}."
            w[p + "input_layernorm.weight"] = norm_w(C)
            w[p + "self_attn.q_proj.weight"] = r(H * hd, C)
            w[p + "self_attn.k_proj.weight"] = r(KV * hd, C)
            w[p + "self_attn.v_proj.weight"] = r(KV * hd, C)
            w[p + "self_attn.o_proj.weight"] = r(C, H * hd)
            w[p + "post_attention_layernorm.weight"] = norm_w(C)
            w[p + "mlp.gate_proj.weight"] = r(F_, C)
            w[p + "mlp.up_proj.weight"] = r(F_, C)
            w[p + "mlp.down_proj.weight"] = r(C, F_)
        w["model.norm.weight"] = norm_w(C)
        if not cfg["tie_embeddings"]:
            w["lm_head.weight"] = r(V, C)
    return w


def micro_batch(cfg, gen):
    shape = (cfg["B"], cfg["T"])
    return (torch.randint(0, cfg["vocab_size"], shape, generator=gen),
            torch.randint(0, cfg["vocab_size"], shape, generator=gen))


class Layers(unittest.TestCase):
    def setUp(self):
        self.g = torch.Generator().manual_seed(0)

    def test_layer_norm_matches_torch(self):
        x, w, b = (torch.randn(3, 4, 16, generator=self.g, dtype=D) for _ in range(3))
        w, b = w[0, 0], b[0, 0]
        torch.testing.assert_close(ref.layer_norm(x, w, b, 1e-5), F.layer_norm(x, (16,), w, b, 1e-5))

    def test_rms_norm_by_hand(self):
        x = torch.tensor([[3.0, 4.0]], dtype=D)
        w = torch.tensor([1.0, 2.0], dtype=D)
        rms = math.sqrt((9 + 16) / 2 + 1e-5)
        torch.testing.assert_close(ref.rms_norm(x, w, 1e-5), torch.tensor([[3 / rms, 8 / rms]], dtype=D))

    def test_activations_match_torch(self):
        u = torch.linspace(-6, 6, 101, dtype=D)
        torch.testing.assert_close(ref.gelu_tanh(u), F.gelu(u, approximate="tanh"))
        torch.testing.assert_close(ref.silu(u), F.silu(u))
        s = torch.randn(4, 9, generator=self.g, dtype=D)
        torch.testing.assert_close(ref.softmax(s), torch.softmax(s, -1))

    def test_cross_entropy_matches_torch(self):
        logits = torch.randn(2, 3, 7, generator=self.g, dtype=D) * 5
        t = torch.randint(0, 7, (2, 3), generator=self.g)
        torch.testing.assert_close(ref.cross_entropy(logits, t), F.cross_entropy(logits.reshape(6, 7), t.reshape(6)))

    def test_causal_attention_by_explicit_loops(self):
        B, H, T, hd = 1, 2, 4, 3
        q, k, v = (torch.randn(B, H, T, hd, generator=self.g, dtype=D) for _ in range(3))
        got = ref.causal_attention(q, k, v)
        for h in range(H):
            for t in range(T):
                scores = [float(q[0, h, t] @ k[0, h, s]) / math.sqrt(hd) for s in range(t + 1)]
                mx = max(scores)
                e = [math.exp(x - mx) for x in scores]
                want = sum(e[s] / sum(e) * v[0, h, s] for s in range(t + 1))
                torch.testing.assert_close(got[0, h, t], want)

    def test_rope_is_a_rotation_of_half_pairs(self):
        # HF's rotate_half pairs dimension i with i + hd/2 and turns the pair by t * theta^(-2i/hd).
        T, hd, theta = 6, 8, 10000.0
        x = torch.randn(1, 1, T, hd, generator=self.g, dtype=D)
        cos, sin = ref.rope_tables(T, hd, theta, D)
        got = ref.apply_rope(x, cos, sin)
        for t in range(T):
            for i in range(hd // 2):
                z = complex(float(x[0, 0, t, i]), float(x[0, 0, t, i + hd // 2]))
                z *= complex(math.cos(t * theta ** (-2 * i / hd)), math.sin(t * theta ** (-2 * i / hd)))
                self.assertAlmostEqual(float(got[0, 0, t, i]), z.real, places=12)
                self.assertAlmostEqual(float(got[0, 0, t, i + hd // 2]), z.imag, places=12)

    def test_rope_scores_depend_on_relative_position_only(self):
        T, hd = 8, 4
        cos, sin = ref.rope_tables(T, hd, 10000.0, D)
        q = torch.randn(hd, generator=self.g, dtype=D).expand(1, 1, T, hd)
        k = torch.randn(hd, generator=self.g, dtype=D).expand(1, 1, T, hd)
        rq, rk = ref.apply_rope(q, cos, sin)[0, 0], ref.apply_rope(k, cos, sin)[0, 0]
        self.assertAlmostEqual(float(rq[5] @ rk[3]), float(rq[4] @ rk[2]), places=12)
        self.assertAlmostEqual(float(rq[7] @ rk[7]), float(q[0, 0, 0] @ k[0, 0, 0]), places=12)


class Model(unittest.TestCase):
    def check_gradients(self, cfg):
        g = torch.Generator().manual_seed(1)
        w = micro_weights(cfg, g)
        inputs, targets = micro_batch(cfg, g)
        names = list(w)

        def f(*tensors):
            return ref.loss_fn(cfg, dict(zip(names, tensors)), inputs, targets)

        leaves = tuple(w[n].clone().requires_grad_(True) for n in names)
        self.assertTrue(torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-7, rtol=1e-5))

    def test_gpt2_gradients_match_finite_differences(self):
        self.check_gradients(micro_config("gpt2", layers=1))

    def test_gpt2_untied_gradients(self):
        self.check_gradients(micro_config("gpt2", layers=1, tie_embeddings=False, T=3))

    def test_llama_gqa_gradients_match_finite_differences(self):
        self.check_gradients(micro_config("llama", layers=1, heads=4, kv_heads=2))

    def test_gpt2_zero_weights_give_log_vocab(self):
        cfg = micro_config("gpt2")
        w = {n: torch.zeros_like(t) for n, t in micro_weights(cfg, torch.Generator().manual_seed(2)).items()}
        for n in w:
            if n.endswith("ln_1.weight") or n.endswith("ln_2.weight") or n == "ln_f.weight":
                w[n] += 1
        inputs, targets = micro_batch(cfg, torch.Generator().manual_seed(3))
        self.assertAlmostEqual(float(ref.loss_fn(cfg, w, inputs, targets)), math.log(cfg["vocab_size"]), places=12)

    def test_gqa_uses_kv_head_h_div_group(self):
        # H=4, KV=2: heads 0,1 share kv head 0 and heads 2,3 kv head 1. The same model with
        # KV=4 and kv rows duplicated in that pattern must give the same loss; the pattern
        # h % KV would not.
        cfg = micro_config("llama", heads=4, kv_heads=2)
        g = torch.Generator().manual_seed(4)
        w = micro_weights(cfg, g)
        inputs, targets = micro_batch(cfg, g)
        hd = cfg["hidden"] // cfg["heads"]
        wide = dict(w)
        for i in range(cfg["layers"]):
            for proj in ("k_proj", "v_proj"):
                name = f"model.layers.{i}.self_attn.{proj}.weight"
                heads = w[name].reshape(2, hd, -1)
                wide[name] = heads.repeat_interleave(2, dim=0).reshape(4 * hd, -1)
        loss_gqa = float(ref.loss_fn(cfg, w, inputs, targets))
        loss_mha = float(ref.loss_fn(dict(cfg, kv_heads=4), wide, inputs, targets))
        self.assertAlmostEqual(loss_gqa, loss_mha, places=12)
        tiled = dict(w)
        for i in range(cfg["layers"]):
            for proj in ("k_proj", "v_proj"):
                name = f"model.layers.{i}.self_attn.{proj}.weight"
                tiled[name] = w[name].reshape(2, hd, -1).repeat(2, 1, 1).reshape(4 * hd, -1)
        self.assertNotAlmostEqual(loss_gqa, float(ref.loss_fn(dict(cfg, kv_heads=4), tiled, inputs, targets)), places=6)


class AdamW(unittest.TestCase):
    def check_against_torch(self, clip):
        cfg = micro_config("gpt2", grad_clip=clip, lr=3e-3, weight_decay=0.1)
        g = torch.Generator().manual_seed(5)
        w = micro_weights(cfg, g)
        inputs, targets = micro_batch(cfg, g)
        params = {n: t.clone().requires_grad_(True) for n, t in w.items()}
        _, grads = ref.gradients(cfg, params, inputs, targets)
        ours = ref.adamw_first_step(cfg, params, grads)

        theirs = {n: torch.nn.Parameter(t.clone()) for n, t in w.items()}
        for n, p in theirs.items():
            p.grad = grads[n].clone()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(list(theirs.values()), clip)
        decay = [p for p in theirs.values() if p.dim() >= 2]
        no_decay = [p for p in theirs.values() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
        opt.step()
        for n in w:
            # Compare the updates, which are ~lr, not the weights, which are ~1.
            torch.testing.assert_close(ours[n] - w[n], theirs[n].detach() - w[n], rtol=1e-10, atol=1e-14)
        return grads

    def test_matches_torch_optim_adamw_unclipped(self):
        grads = self.check_against_torch(clip=0.0)
        self.assertGreater(ref.clip_scale(grads, 0.0), 0.999)

    def test_matches_torch_optim_adamw_clipped(self):
        grads = self.check_against_torch(clip=0.05)
        self.assertLess(ref.clip_scale(grads, 0.05), 0.5)  # the clip really acted


class Protocol(unittest.TestCase):
    def test_main_writes_loss_grads_and_steps_and_compare_reads_them(self):
        cfg = micro_config("llama", heads=4, kv_heads=1, layers=1)
        g = torch.Generator().manual_seed(6)
        w = {n: t.float() for n, t in micro_weights(cfg, g).items()}
        inputs, targets = micro_batch(cfg, g)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfg, f)
            safetensors_min.save(os.path.join(d, "weights.safetensors"), w)
            safetensors_min.save(os.path.join(d, "batch.safetensors"),
                                 {"inputs": inputs.int(), "targets": targets.int()})
            self.assertEqual(ref.main([d]), 0)
            out, meta = safetensors_min.load(os.path.join(d, "torch_out.safetensors"))
            self.assertEqual(meta["dtype"], "float64")
            self.assertEqual(set(out), {"loss"} | {"grad." + n for n in w} | {"step." + n for n in w})
            params = {n: t.double() for n, t in w.items()}
            self.assertAlmostEqual(float(out["loss"][0]), float(ref.loss_fn(cfg, params, inputs, targets)), places=12)

            a = os.path.join(d, "torch_out.safetensors")
            weights = os.path.join(d, "weights.safetensors")
            self.assertEqual(compare.main([a, a, "--rtol", "0"]), 0)
            # One gradient off by 1e-4 relative fails; the step compared as an update catches
            # a change far below the weight's size.
            bad = dict(out)
            name = "grad.model.layers.0.mlp.up_proj.weight"
            bad[name] = out[name] * (1 + 1e-4)
            b = os.path.join(d, "bad.safetensors")
            safetensors_min.save(b, bad)
            self.assertEqual(compare.main([b, a, "--rtol", "1e-5"]), 1)
            bad = dict(out)
            name = "step.model.norm.weight"
            bad[name] = out[name] + 1e-6
            safetensors_min.save(b, bad)
            self.assertEqual(compare.main([b, a, "--rtol", "1e-5"]), 0)  # hidden under |w|
            self.assertEqual(compare.main([b, a, "--rtol", "1e-5", "--base", weights]), 1)
            # NaN fails, in a gradient and in a step.
            for name in ("grad.model.norm.weight", "step.model.norm.weight"):
                bad = dict(out)
                bad[name] = out[name].clone()
                bad[name][0] = float("nan")
                safetensors_min.save(b, bad)
                self.assertEqual(compare.main([b, a, "--base", weights]), 1)


if __name__ == "__main__":
    torch.set_num_threads(1)
    unittest.main(verbosity=1)
