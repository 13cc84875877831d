#include "engine/model/decoder.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/cpu/kernels.h"

namespace partrain::engine::model {

Result<std::unique_ptr<Decoder>> Decoder::create(const ModelOptions& opts, std::vector<float> params) {
  std::unique_ptr<Decoder> d(new Decoder());
  d->o_ = resolved(opts);
  if (d->o_.moe_experts > 0)
    return Status::invalid("generate: models with experts are not supported by the decoder yet; "
                           "generate from a dense model");
  d->table_ = build_param_table(d->o_, TensorOptions{}, ExpertOptions{});
  if (static_cast<int64_t>(params.size()) != d->table_.total())
    return Status::invalid(fmt::format("generate: {} weights given, the model has {}",
                                       params.size(), d->table_.total()));
  d->params_ = std::move(params);
  const size_t kv = static_cast<size_t>(d->o_.kv_heads) * (d->o_.hidden / d->o_.heads);
  d->k_cache_.assign(static_cast<size_t>(d->o_.layers) * d->o_.seq_len * kv, 0.0f);
  d->v_cache_.assign(d->k_cache_.size(), 0.0f);
  return d;
}

const float* Decoder::w(const std::string& name) const {
  return params_.data() + table_.specs()[static_cast<size_t>(table_.find(name))].offset;
}

// Hugging Face's rotate_half RoPE at absolute positions len_ .. len_ + n - 1 (the cache's).
void Decoder::rope(float* x, int n, int heads, int stride) const {
  const int hd = o_.hidden / o_.heads, half = hd / 2;
  for (int t = 0; t < n; ++t) {
    const double pos = static_cast<double>(len_ + t);
    for (int h = 0; h < heads; ++h) {
      float* v = x + static_cast<size_t>(t) * stride + h * hd;
      for (int i = 0; i < half; ++i) {
        const float inv = 1.0f / std::pow(o_.rope_theta, static_cast<float>(2 * i) / static_cast<float>(hd));
        const float angle = static_cast<float>(pos) * inv;
        const float c = std::cos(angle), s = std::sin(angle);
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

// Each of the n queries (at len_ + t) against cached keys [0, len_ + t]; out [n, H*hd].
void Decoder::attention(int layer, const float* q, int n, float* out) const {
  const int H = o_.heads, KV = o_.kv_heads, hd = o_.hidden / H, group = H / KV;
  const size_t kv_row = static_cast<size_t>(KV) * hd;
  const float* K = k_cache_.data() + static_cast<size_t>(layer) * o_.seq_len * kv_row;
  const float* V = v_cache_.data() + static_cast<size_t>(layer) * o_.seq_len * kv_row;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> p(static_cast<size_t>(len_ + n));
  for (int t = 0; t < n; ++t) {
    const int64_t last = len_ + t;
    for (int h = 0; h < H; ++h) {
      const float* qh = q + static_cast<size_t>(t) * H * hd + h * hd;
      const int kvh = h / group;
      float mx = -INFINITY;
      for (int64_t j = 0; j <= last; ++j) {
        const float* kj = K + static_cast<size_t>(j) * kv_row + kvh * hd;
        float dot = 0;
        for (int i = 0; i < hd; ++i) dot += qh[i] * kj[i];
        p[j] = dot * scale;
        mx = std::max(mx, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j <= last; ++j) sum += (p[j] = std::exp(p[j] - mx));
      float* oh = out + static_cast<size_t>(t) * H * hd + h * hd;
      std::fill(oh, oh + hd, 0.0f);
      for (int64_t j = 0; j <= last; ++j) {
        const float a = static_cast<float>(p[j] / sum);
        const float* vj = V + static_cast<size_t>(j) * kv_row + kvh * hd;
        for (int i = 0; i < hd; ++i) oh[i] += a * vj[i];
      }
    }
  }
}

Status Decoder::step(std::span<const int32_t> tokens, std::vector<float>* logits, bool all_positions) {
  const int n = static_cast<int>(tokens.size());
  if (n == 0) return Status::invalid("generate: no tokens to run");
  if (len_ + n > o_.seq_len)
    return Status::invalid(fmt::format("generate: {} positions pass the model's seq_len {}; ask "
                                       "for fewer --max-tokens or a shorter prompt", len_ + n, o_.seq_len));
  for (int32_t t : tokens)
    if (t < 0 || t >= o_.vocab_size)
      return Status::invalid(fmt::format("generate: token {} is outside the vocabulary of {}; "
                                         "is this the model's tokenizer?", t, o_.vocab_size));
  const int C = o_.hidden, H = o_.heads, KV = o_.kv_heads, hd = C / H, F = o_.ffn_hidden;
  const int q_dim = H * hd, kv_dim = KV * hd;
  const bool gpt2 = o_.arch == Arch::kGpt2;
  std::vector<float> x(static_cast<size_t>(n) * C), xn(x.size()), att(x.size()), proj(x.size());
  std::vector<float> stat(static_cast<size_t>(n) * 2);
  std::vector<float> qkv(static_cast<size_t>(n) * (q_dim + 2 * kv_dim));
  std::vector<float> hidden(static_cast<size_t>(n) * 2 * F), act(static_cast<size_t>(n) * F);

  // Embeddings (GPT-2 adds the learned positions of len_ ...).
  const float* wte = w(gpt2 ? "wte.weight" : "model.embed_tokens.weight");
  for (int t = 0; t < n; ++t) {
    float* row = x.data() + static_cast<size_t>(t) * C;
    std::copy_n(wte + static_cast<size_t>(tokens[t]) * C, C, row);
    if (gpt2) {
      const float* pos = w("wpe.weight") + static_cast<size_t>(len_ + t) * C;
      for (int i = 0; i < C; ++i) row[i] += pos[i];
    }
  }
  auto norm = [&](const std::string& p, float* out, const float* in) {
    if (gpt2) cpu::layernorm_forward(out, stat.data(), stat.data() + n, in, w(p + ".weight"), w(p + ".bias"), n, C, o_.norm_eps);
    else cpu::rmsnorm_forward(out, stat.data(), in, w(p + ".weight"), n, C, o_.norm_eps);
  };
  for (int l = 0; l < o_.layers; ++l) {
    const std::string p = gpt2 ? "h." + std::to_string(l) + "." : "model.layers." + std::to_string(l) + ".";
    const int row = q_dim + 2 * kv_dim;
    norm(p + (gpt2 ? "ln_1" : "input_layernorm"), xn.data(), x.data());
    if (gpt2) {
      cpu::matmul_forward(qkv.data(), xn.data(), w(p + "attn.c_attn.weight"), w(p + "attn.c_attn.bias"), n, C, row);
    } else {  // q, k, v are consecutive in the table: one [q + 2kv, C] weight
      cpu::matmul_forward(qkv.data(), xn.data(), w(p + "self_attn.q_proj.weight"), nullptr, n, C, row);
      rope(qkv.data(), n, H, row);
      rope(qkv.data() + q_dim, n, KV, row);
    }
    const size_t cache_at = (static_cast<size_t>(l) * o_.seq_len + len_) * kv_dim;
    for (int t = 0; t < n; ++t) {
      const float* r = qkv.data() + static_cast<size_t>(t) * row;
      std::copy_n(r + q_dim, kv_dim, k_cache_.data() + cache_at + static_cast<size_t>(t) * kv_dim);
      std::copy_n(r + q_dim + kv_dim, kv_dim, v_cache_.data() + cache_at + static_cast<size_t>(t) * kv_dim);
      std::copy_n(r, q_dim, proj.data() + static_cast<size_t>(t) * q_dim);  // the queries, packed
    }
    attention(l, proj.data(), n, att.data());
    if (gpt2) cpu::matmul_forward(proj.data(), att.data(), w(p + "attn.c_proj.weight"), w(p + "attn.c_proj.bias"), n, C, C);
    else cpu::matmul_forward(proj.data(), att.data(), w(p + "self_attn.o_proj.weight"), nullptr, n, q_dim, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    norm(p + (gpt2 ? "ln_2" : "post_attention_layernorm"), xn.data(), x.data());
    if (gpt2) {
      cpu::matmul_forward(hidden.data(), xn.data(), w(p + "mlp.c_fc.weight"), w(p + "mlp.c_fc.bias"), n, C, F);
      cpu::gelu_forward(act.data(), hidden.data(), static_cast<size_t>(n) * F);
      cpu::matmul_forward(proj.data(), act.data(), w(p + "mlp.c_proj.weight"), w(p + "mlp.c_proj.bias"), n, F, C);
    } else {  // gate and up are consecutive: one [2F, C] weight, then SwiGLU
      cpu::matmul_forward(hidden.data(), xn.data(), w(p + "mlp.gate_proj.weight"), nullptr, n, C, 2 * F);
      cpu::swiglu_forward(act.data(), hidden.data(), n, F);
      cpu::matmul_forward(proj.data(), act.data(), w(p + "mlp.down_proj.weight"), nullptr, n, F, C);
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  }
  norm(gpt2 ? "ln_f" : "model.norm", xn.data(), x.data());
  const float* head = o_.tie_embeddings ? wte : w("lm_head.weight");
  const int first = all_positions ? 0 : n - 1, rows = n - first;
  logits->resize(static_cast<size_t>(rows) * o_.vocab_size);
  cpu::matmul_forward(logits->data(), xn.data() + static_cast<size_t>(first) * C, head, nullptr, rows, C, o_.vocab_size);
  len_ += n;
  return Status::ok();
}

}  // namespace partrain::engine::model
