// Building the parameter table and the counter-based initialisation.
#include "engine/model/params.h"

#include <cmath>
#include <string>

#include "engine/philox.h"

namespace partrain::engine::model {

int ParamTable::add(std::string name, Shape shape, Init init, float init_std, bool no_decay,
                    bool hf_transposed) {
  ParamSpec s;
  s.name = std::move(name);
  s.shape = shape;
  s.init = init;
  s.init_std = init_std;
  s.no_decay = no_decay;
  s.hf_transposed = hf_transposed;
  s.offset = total_;
  total_ += shape.numel();
  specs_.push_back(std::move(s));
  return static_cast<int>(specs_.size()) - 1;
}

int ParamTable::find(const std::string& name) const {
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

ModelOptions resolved(const ModelOptions& o) {
  ModelOptions r = o;
  if (r.kv_heads <= 0) r.kv_heads = r.heads;
  if (r.ffn_hidden <= 0) {
    if (r.arch == Arch::kGpt2) {
      r.ffn_hidden = 4 * r.hidden;
    } else {
      r.ffn_hidden = (8 * r.hidden / 3 + 63) / 64 * 64;  // LLaMA's 8C/3, rounded up to 64
    }
  }
  return r;
}

bool is_moe_layer(const ModelOptions& o, int layer) {
  return o.moe_experts > 0 && o.moe_every > 0 && (layer + 1) % o.moe_every == 0;
}

ParamTable build_param_table(const ModelOptions& opts) {
  const ModelOptions o = resolved(opts);
  const int64_t C = o.hidden, V = o.vocab_size, F = o.ffn_hidden, E = o.moe_experts;
  const int64_t hd = C / o.heads, q = o.heads * hd, kv = o.kv_heads * hd;
  const float std = o.init_std;
  // Projections into the residual stream: GPT-2's scaled init, 1/sqrt(2L).
  const float proj_std = std / std::sqrt(2.0f * static_cast<float>(o.layers));
  ParamTable t;
  if (o.arch == Arch::kGpt2) {
    t.add("wte.weight", {V, C}, Init::kNormal, std, false);
    t.add("wpe.weight", {o.seq_len, C}, Init::kNormal, std, false);
    for (int i = 0; i < o.layers; ++i) {
      const std::string p = "h." + std::to_string(i) + ".";
      t.add(p + "ln_1.weight", {C}, Init::kOnes, 0, true);
      t.add(p + "ln_1.bias", {C}, Init::kZeros, 0, true);
      t.add(p + "attn.c_attn.weight", {3 * C, C}, Init::kNormal, std, false, true);
      t.add(p + "attn.c_attn.bias", {3 * C}, Init::kZeros, 0, true);
      t.add(p + "attn.c_proj.weight", {C, C}, Init::kNormal, proj_std, false, true);
      t.add(p + "attn.c_proj.bias", {C}, Init::kZeros, 0, true);
      t.add(p + "ln_2.weight", {C}, Init::kOnes, 0, true);
      t.add(p + "ln_2.bias", {C}, Init::kZeros, 0, true);
      if (is_moe_layer(o, i)) {
        t.add(p + "mlp.router.weight", {E, C}, Init::kNormal, std, false);
        for (int e = 0; e < E; ++e) {
          const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
          t.add(x + "c_fc.weight", {F, C}, Init::kNormal, std, false, true);
          t.add(x + "c_fc.bias", {F}, Init::kZeros, 0, true);
          t.add(x + "c_proj.weight", {C, F}, Init::kNormal, proj_std, false, true);
          t.add(x + "c_proj.bias", {C}, Init::kZeros, 0, true);
        }
      } else {
        t.add(p + "mlp.c_fc.weight", {F, C}, Init::kNormal, std, false, true);
        t.add(p + "mlp.c_fc.bias", {F}, Init::kZeros, 0, true);
        t.add(p + "mlp.c_proj.weight", {C, F}, Init::kNormal, proj_std, false, true);
        t.add(p + "mlp.c_proj.bias", {C}, Init::kZeros, 0, true);
      }
    }
    t.add("ln_f.weight", {C}, Init::kOnes, 0, true);
    t.add("ln_f.bias", {C}, Init::kZeros, 0, true);
    if (!o.tie_embeddings) t.add("lm_head.weight", {V, C}, Init::kNormal, std, false);
    return t;
  }
  t.add("model.embed_tokens.weight", {V, C}, Init::kNormal, std, false);
  for (int i = 0; i < o.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.add(p + "input_layernorm.weight", {C}, Init::kOnes, 0, true);
    t.add(p + "self_attn.q_proj.weight", {q, C}, Init::kNormal, std, false);
    t.add(p + "self_attn.k_proj.weight", {kv, C}, Init::kNormal, std, false);
    t.add(p + "self_attn.v_proj.weight", {kv, C}, Init::kNormal, std, false);
    t.add(p + "self_attn.o_proj.weight", {C, q}, Init::kNormal, proj_std, false);
    t.add(p + "post_attention_layernorm.weight", {C}, Init::kOnes, 0, true);
    if (is_moe_layer(o, i)) {
      t.add(p + "block_sparse_moe.gate.weight", {E, C}, Init::kNormal, std, false);
      for (int e = 0; e < E; ++e) {
        const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
        t.add(x + "w1.weight", {F, C}, Init::kNormal, std, false);
        t.add(x + "w3.weight", {F, C}, Init::kNormal, std, false);
        t.add(x + "w2.weight", {C, F}, Init::kNormal, proj_std, false);
      }
    } else {
      t.add(p + "mlp.gate_proj.weight", {F, C}, Init::kNormal, std, false);
      t.add(p + "mlp.up_proj.weight", {F, C}, Init::kNormal, std, false);
      t.add(p + "mlp.down_proj.weight", {C, F}, Init::kNormal, proj_std, false);
    }
  }
  t.add("model.norm.weight", {C}, Init::kOnes, 0, true);
  if (!o.tie_embeddings) t.add("lm_head.weight", {V, C}, Init::kNormal, std, false);
  return t;
}

void init_params(const ParamTable& table, uint64_t seed, float* host) {
  for (const ParamSpec& p : table.specs()) {
    float* dst = host + p.offset;
    const int64_t n = p.numel();
    if (p.init == Init::kZeros || p.init == Init::kOnes) {
      const float v = p.init == Init::kOnes ? 1.0f : 0.0f;
      for (int64_t j = 0; j < n; ++j) dst[j] = v;
      continue;
    }
    const uint64_t key = philox_key(seed, philox_name_id(p.name.c_str()), 0x696e6974 /* "init" */);
#pragma omp parallel for
    for (int64_t j = 0; j < n; ++j) dst[j] = p.init_std * philox_normal(key, static_cast<uint64_t>(j));
  }
}

}  // namespace partrain::engine::model
