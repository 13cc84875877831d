// Building the parameter table and the counter-based initialisation.
#include "engine/model/params.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/philox.h"

namespace partrain::engine::model {

int ParamTable::add(std::string name, Shape shape, Init init, float init_std, bool no_decay,
                    bool hf_transposed) {
  ParamSpec s;
  s.name = std::move(name);
  s.shape = shape;
  s.logical = shape;
  s.init = init;
  s.init_std = init_std;
  s.no_decay = no_decay;
  s.hf_transposed = hf_transposed;
  s.offset = total_;
  total_ += shape.numel();
  specs_.push_back(std::move(s));
  return static_cast<int>(specs_.size()) - 1;
}

int ParamTable::add_piece(std::string name, Shape shape, Shape logical,
                          std::vector<ParamSpec::Piece> pieces, Init init, float init_std,
                          bool no_decay, bool hf_transposed) {
  const int i = add(std::move(name), shape, init, init_std, no_decay, hf_transposed);
  specs_.back().logical = logical;
  specs_.back().pieces = std::move(pieces);
  return i;
}

std::pair<int64_t, int64_t> vocab_rows(int64_t vocab, int rank, int size) {
  const int64_t per = (vocab + size - 1) / size;
  const int64_t first = std::min(vocab, per * rank);
  return {first, std::min(vocab, first + per) - first};
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

namespace {

// Adds tensors whole, or as tensor-parallel rank tp.rank's piece (tensor_parallel.h).
class TableBuilder {
 public:
  TableBuilder(ParamTable* t, const TensorOptions& tp) : t_(t), tp_(tp) {}
  // Replicated on every rank.
  void whole(const std::string& name, Shape s, Init init, float std, bool nd, bool tr = false) {
    t_->add(name, s, init, std, nd, tr);
  }
  // Column-parallel: the leading dimension is `blocks` (consecutive row groups, e.g. q, k,
  // v of a fused weight), each split evenly; the rank keeps its rows of every block.
  void column(const std::string& name, Shape s, std::vector<int64_t> blocks, Init init,
              float std, bool nd, bool tr = false) {
    if (tp_.size == 1) return whole(name, s, init, std, nd, tr);
    const int64_t cols = s.ndim > 1 ? s[1] : 1;
    std::vector<ParamSpec::Piece> pieces;
    int64_t row0 = 0, local_rows = 0;
    for (int64_t rows : blocks) {
      const int64_t per = rows / tp_.size;
      pieces.push_back({(row0 + per * tp_.rank) * cols, per * cols});
      row0 += rows;
      local_rows += per;
    }
    Shape local = s;
    local.dims[0] = local_rows;
    t_->add_piece(name, local, s, std::move(pieces), init, std, nd, tr);
  }
  // Row-parallel: [R, K] keeps columns [rank * K/size, ...) of every row.
  void row(const std::string& name, Shape s, Init init, float std, bool nd, bool tr = false) {
    if (tp_.size == 1) return whole(name, s, init, std, nd, tr);
    const int64_t per = s[1] / tp_.size;
    std::vector<ParamSpec::Piece> pieces;
    for (int64_t r = 0; r < s[0]; ++r) pieces.push_back({r * s[1] + per * tp_.rank, per});
    t_->add_piece(name, Shape{s[0], per}, s, std::move(pieces), init, std, nd, tr);
  }
  // Vocabulary-parallel: [V, C] keeps its vocab_rows (uneven: the last rank fewer).
  void vocab(const std::string& name, Shape s, Init init, float std, bool nd) {
    if (tp_.size == 1) return whole(name, s, init, std, nd);
    const auto [first, count] = vocab_rows(s[0], tp_.rank, tp_.size);
    t_->add_piece(name, Shape{count, s[1]}, s, {{first * s[1], count * s[1]}}, init, std, nd);
  }

 private:
  ParamTable* t_;
  TensorOptions tp_;
};

}  // namespace

ParamTable build_param_table(const ModelOptions& opts, const TensorOptions& tp,
                             const ExpertOptions& ep) {
  const ModelOptions o = resolved(opts);
  const int64_t C = o.hidden, V = o.vocab_size, F = o.ffn_hidden, E = o.moe_experts;
  const int64_t hd = C / o.heads, q = o.heads * hd, kv = o.kv_heads * hd;
  const float std = o.init_std;
  // Projections into the residual stream: GPT-2's scaled init, 1/sqrt(2L).
  const float proj_std = std / std::sqrt(2.0f * static_cast<float>(o.layers));
  ParamTable table;
  TableBuilder t(&table, tp);
  // This rank's experts [e0, e1) of each MoE block (all of them on one rank).
  const int e0 = E > 0 ? first_local_expert(static_cast<int>(E), ep) : 0;
  const int e1 = E > 0 ? e0 + local_experts(static_cast<int>(E), ep) : 0;
  // The experts from index `from` on; under tp they and the router just before them are
  // summed over the group.
  auto mark_experts = [&](size_t from) {
    for (size_t i = from; i < table.specs().size(); ++i) table.mark_expert(static_cast<int>(i));
    for (size_t i = from - 1; tp.size > 1 && i < table.specs().size(); ++i) table.mark_tp_summed(static_cast<int>(i));
  };
  if (o.arch == Arch::kGpt2) {
    t.vocab("wte.weight", {V, C}, Init::kNormal, std, false);
    t.whole("wpe.weight", {o.seq_len, C}, Init::kNormal, std, false);
    for (int i = 0; i < o.layers; ++i) {
      const std::string p = "h." + std::to_string(i) + ".";
      t.whole(p + "ln_1.weight", {C}, Init::kOnes, 0, true);
      t.whole(p + "ln_1.bias", {C}, Init::kZeros, 0, true);
      t.column(p + "attn.c_attn.weight", {3 * C, C}, {C, C, C}, Init::kNormal, std, false, true);
      t.column(p + "attn.c_attn.bias", {3 * C}, {C, C, C}, Init::kZeros, 0, true);
      t.row(p + "attn.c_proj.weight", {C, C}, Init::kNormal, proj_std, false, true);
      t.whole(p + "attn.c_proj.bias", {C}, Init::kZeros, 0, true);
      t.whole(p + "ln_2.weight", {C}, Init::kOnes, 0, true);
      t.whole(p + "ln_2.bias", {C}, Init::kZeros, 0, true);
      if (is_moe_layer(o, i)) {
        t.whole(p + "mlp.router.weight", {E, C}, Init::kNormal, std, false);
        const size_t from = table.specs().size();
        for (int e = e0; e < e1; ++e) {
          const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
          t.whole(x + "c_fc.weight", {F, C}, Init::kNormal, std, false, true);
          t.whole(x + "c_fc.bias", {F}, Init::kZeros, 0, true);
          t.whole(x + "c_proj.weight", {C, F}, Init::kNormal, proj_std, false, true);
          t.whole(x + "c_proj.bias", {C}, Init::kZeros, 0, true);
        }
        mark_experts(from);
      } else {
        t.column(p + "mlp.c_fc.weight", {F, C}, {F}, Init::kNormal, std, false, true);
        t.column(p + "mlp.c_fc.bias", {F}, {F}, Init::kZeros, 0, true);
        t.row(p + "mlp.c_proj.weight", {C, F}, Init::kNormal, proj_std, false, true);
        t.whole(p + "mlp.c_proj.bias", {C}, Init::kZeros, 0, true);
      }
    }
    t.whole("ln_f.weight", {C}, Init::kOnes, 0, true);
    t.whole("ln_f.bias", {C}, Init::kZeros, 0, true);
    if (!o.tie_embeddings) t.vocab("lm_head.weight", {V, C}, Init::kNormal, std, false);
    return table;
  }
  t.vocab("model.embed_tokens.weight", {V, C}, Init::kNormal, std, false);
  for (int i = 0; i < o.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.whole(p + "input_layernorm.weight", {C}, Init::kOnes, 0, true);
    t.column(p + "self_attn.q_proj.weight", {q, C}, {q}, Init::kNormal, std, false);
    t.column(p + "self_attn.k_proj.weight", {kv, C}, {kv}, Init::kNormal, std, false);
    t.column(p + "self_attn.v_proj.weight", {kv, C}, {kv}, Init::kNormal, std, false);
    t.row(p + "self_attn.o_proj.weight", {C, q}, Init::kNormal, proj_std, false);
    t.whole(p + "post_attention_layernorm.weight", {C}, Init::kOnes, 0, true);
    if (is_moe_layer(o, i)) {
      t.whole(p + "block_sparse_moe.gate.weight", {E, C}, Init::kNormal, std, false);
      const size_t from = table.specs().size();
      for (int e = e0; e < e1; ++e) {
        const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
        t.whole(x + "w1.weight", {F, C}, Init::kNormal, std, false);
        t.whole(x + "w3.weight", {F, C}, Init::kNormal, std, false);
        t.whole(x + "w2.weight", {C, F}, Init::kNormal, proj_std, false);
      }
      mark_experts(from);
    } else {
      t.column(p + "mlp.gate_proj.weight", {F, C}, {F}, Init::kNormal, std, false);
      t.column(p + "mlp.up_proj.weight", {F, C}, {F}, Init::kNormal, std, false);
      t.row(p + "mlp.down_proj.weight", {C, F}, Init::kNormal, proj_std, false);
    }
  }
  t.whole("model.norm.weight", {C}, Init::kOnes, 0, true);
  if (!o.tie_embeddings) t.vocab("lm_head.weight", {V, C}, Init::kNormal, std, false);
  return table;
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
    if (p.split()) {  // a tensor-parallel piece: each element at its logical index
      for (const ParamSpec::Piece& piece : p.pieces) {
#pragma omp parallel for
        for (int64_t j = 0; j < piece.count; ++j) {
          dst[j] = p.init_std * philox_normal(key, static_cast<uint64_t>(piece.begin + j));
        }
        dst += piece.count;
      }
      continue;
    }
#pragma omp parallel for
    for (int64_t j = 0; j < n; ++j) dst[j] = p.init_std * philox_normal(key, static_cast<uint64_t>(j));
  }
}

}  // namespace partrain::engine::model
