// Inference with a KV cache: the model's forward pass for generation, one new token at a
// time after the prompt, on the host (fp32, the CPU reference kernels).
//
// Position p of layer l keeps K[l][p] and V[l][p] (after RoPE for LLaMA); a step with n new
// tokens at positions [len, len + n) computes their queries, appends their keys and values,
// and attends each query at p to keys [0, p]. So step(prompt) then step(t1), step(t2), ...
// gives the logits that one step(prompt + t1 + t2 ...) over the whole prefix gives (tested).
//
// The weights are the model's parameter table on the host (GPT-2 and LLaMA, dense; the
// experts of an MoE model are not run here). At most seq_len positions (GPT-2's learned
// positions end there; LLaMA's RoPE is used to the same length).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/model/params.h"
#include "engine/options.h"

namespace partrain::engine::model {

class Decoder {
 public:
  // `params` is the flat buffer laid out by build_param_table(o) (one rank, tp1).
  static Result<std::unique_ptr<Decoder>> create(const ModelOptions& o, std::vector<float> params);

  // Runs `tokens` at the next positions; *logits gets [n, V] (all_positions) or the last
  // position's [V]. Error when the cache would pass seq_len or a token is >= vocab_size.
  Status step(std::span<const int32_t> tokens, std::vector<float>* logits, bool all_positions = false);
  // Forgets the cache: the next step starts at position 0.
  void reset() { len_ = 0; }
  int64_t length() const { return len_; }
  int max_length() const { return o_.seq_len; }
  const ModelOptions& options() const { return o_; }

 private:
  Decoder() = default;
  const float* w(const std::string& name) const;
  void attention(int layer, const float* q, int n, float* out) const;
  void rope(float* x, int n, int heads, int stride) const;

  ModelOptions o_;
  ParamTable table_;
  std::vector<float> params_;
  std::vector<float> k_cache_, v_cache_;  // [layers, seq_len, kv_heads * hd]
  int64_t len_ = 0;
};

}  // namespace partrain::engine::model
