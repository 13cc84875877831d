// The parameter table: every trainable tensor of a model, in one flat buffer, under its
// Hugging Face name. The table is what export, --init, the optimizer (no decay on norms
// and biases) and later the sharding plugins read; the model only holds offsets into it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/model/expert_parallel.h"
#include "engine/model/tensor_parallel.h"
#include "engine/options.h"

namespace partrain::engine::model {

enum class Init : uint8_t { kNormal, kZeros, kOnes };

struct ParamSpec {
  std::string name;            // Hugging Face name, e.g. "h.0.attn.c_attn.weight"
  Shape shape;                 // partrain's layout: linear weights are [out, in] (nn.Linear)
  bool no_decay = false;       // norms and biases: no weight decay
  bool hf_transposed = false;  // Hugging Face stores it [in, out] (GPT-2's Conv1D)
  bool expert = false;         // a MoE expert's tensor (sharded over ep, reduced over expert_dp)
  // Under tensor parallelism, a MoE router or expert: held whole on every tp rank, each of
  // which routes its own 1/tp of the tokens (expert_parallel.h), so its gradient is summed
  // over the tp group.
  bool tp_summed = false;
  Init init = Init::kNormal;
  float init_std = 0.0f;       // for kNormal
  int64_t offset = 0;          // element offset in the flat parameter/gradient buffers
  // Tensor parallel: this rank's tensor is a piece of the logical (Hugging Face) tensor of
  // shape `logical`: the concatenation, in order, of the logical flat element ranges
  // `pieces` (row-major in partrain's layout). Empty pieces: the whole tensor (replicated).
  struct Piece {
    int64_t begin = 0, count = 0;
  };
  Shape logical;
  std::vector<Piece> pieces;
  int64_t numel() const { return shape.numel(); }
  bool split() const { return !pieces.empty(); }
};

class ParamTable {
 public:
  // Appends a parameter after the previous one; returns its index.
  int add(std::string name, Shape shape, Init init, float init_std, bool no_decay,
          bool hf_transposed = false);
  // The same for a tensor-parallel piece: `shape` is the local shape, `logical` the whole.
  int add_piece(std::string name, Shape shape, Shape logical, std::vector<ParamSpec::Piece> pieces,
                Init init, float init_std, bool no_decay, bool hf_transposed = false);
  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t total() const { return total_; }
  // Marks parameter i as a MoE expert's (ParamSpec::expert), or as summed over tp
  // (ParamSpec::tp_summed).
  void mark_expert(int i) { specs_[static_cast<size_t>(i)].expert = true; }
  void mark_tp_summed(int i) { specs_[static_cast<size_t>(i)].tp_summed = true; }
  // Index of a name, or -1.
  int find(const std::string& name) const;

 private:
  std::vector<ParamSpec> specs_;
  int64_t total_ = 0;
};

// The table of a model described by `o` (ffn width, kv heads resolved). GPT-2:
//   wte, wpe, h.{i}.ln_1, h.{i}.attn.c_attn, h.{i}.attn.c_proj, h.{i}.ln_2,
//   h.{i}.mlp.c_fc, h.{i}.mlp.c_proj (or h.{i}.mlp.router + h.{i}.mlp.experts.{e}.*), ln_f
// LLaMA:
//   model.embed_tokens, model.layers.{i}.input_layernorm, .self_attn.{q,k,v,o}_proj,
//   .post_attention_layernorm, .mlp.{gate,up,down}_proj (or .block_sparse_moe.gate +
//   .block_sparse_moe.experts.{e}.{w1,w3,w2}), model.norm, lm_head (unless tied)
// Parameters that one fused GEMM uses are consecutive: q,k,v (one [(H+2KV)hd, C] weight)
// and gate,up (one [2F, C] weight, gate rows first).
//
// With tp.size > 1 the table is tensor-parallel rank tp.rank's (tensor_parallel.h): the
// same names in the same order, each the rank's piece of the logical tensor; the
// replicated ones (norms, row-parallel biases, wpe) whole.
//
// With ep.size > 1 each MoE block lists only ep rank ep.rank's experts
// (expert_parallel.h), under their global names; everything else is as on one rank.
// Under tp the routers and experts are whole on every tp rank and flagged tp_summed.
ParamTable build_param_table(const ModelOptions& o, const TensorOptions& tp = {},
                             const ExpertOptions& ep = {});
// Rows [first, first + count) of the vocabulary that tensor-parallel rank `rank` of `size`
// holds: ceil(V / size) each, the last rank fewer (the padding is never allocated).
std::pair<int64_t, int64_t> vocab_rows(int64_t vocab, int rank, int size);

// Fills `host` (table.total() floats) with the counter-based init: element j of parameter
// p is philox_normal(philox_key(seed, name_id(p.name)), j) * std, so a parameter's values
// depend only on (seed, its name, element index), never on how the model is split: a
// tensor-parallel piece draws its elements at their logical indices.
void init_params(const ParamTable& table, uint64_t seed, float* host);

// Options with every 0 default resolved (kv_heads, ffn_hidden).
ModelOptions resolved(const ModelOptions& o);

}  // namespace partrain::engine::model
