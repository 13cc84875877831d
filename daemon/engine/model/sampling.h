// Choosing the next token from logits: greedy, temperature, top-k, top-p (nucleus),
// deterministic for a seed.
//
//   temperature 0: the argmax (the lowest id on a tie).
//   otherwise: p = softmax(logits / temperature); keep the top_k most probable ids (0 = all;
//   ties to the lower id); of those keep the smallest most-probable prefix whose mass is >=
//   top_p; renormalise; draw u = philox_uniform(philox_key(seed, "gen"), index) and take
//   the first id (most probable first) whose cumulative probability passes u * mass.
//
// Worked example: logits [2, 1, 0] at temperature 1 -> p = [0.665, 0.245, 0.090]; top_k 2
// keeps ids 0, 1 (mass 0.910); top_p 0.7 keeps id 0 alone (0.665 < 0.7, so id 1 joins:
// 0.910 >= 0.7) -> ids 0, 1; u = 0.8 -> 0.8 * 0.910 = 0.728 > 0.665 -> id 1.
#pragma once

#include <cstdint>
#include <span>

namespace partrain::engine::model {

struct SamplingOptions {
  float temperature = 1.0f;  // Default: 1 (0 = greedy)
  int top_k = 0;             // Default: 0 (all ids)
  float top_p = 1.0f;        // Default: 1 (no nucleus cut)
  uint64_t seed = 0;         // Default: 0
};

// The token drawn for the index-th generated position.
int32_t sample_token(std::span<const float> logits, const SamplingOptions& o, uint64_t index);

}  // namespace partrain::engine::model
