// The tiny models the engine tests build, written once: GPT-2 (LayerNorm, GELU MLP of 4C,
// learned positions, tied head) and LLaMA (RMSNorm, SwiGLU MLP of 24, RoPE, untied head,
// grouped-query attention with 2 key/value heads for 4 heads), width C 16. Small enough for
// central finite differences; a test changes only what its point needs, e.g.
// tiny(Arch::kGpt2, {.seq_len = 8, .layers = 4}).
#pragma once

#include "engine/options.h"

namespace partrain::engine::testing {

struct TinyShape {
  int vocab = 19;  // not a multiple of 2 or 4: a vocabulary split over tp leaves the last rank fewer rows
  int seq_len = 6;
  int layers = 2;
  float init_std = 0.2f;  // ten times the default, so gradients stand well above fp32 noise
};

inline ModelOptions tiny(Arch arch, const TinyShape& s = {}) {
  ModelOptions o;
  o.arch = arch;
  o.vocab_size = s.vocab;
  o.seq_len = s.seq_len;
  o.layers = s.layers;
  o.hidden = 16;
  o.heads = 4;
  o.kv_heads = arch == Arch::kLlama ? 2 : 0;
  o.ffn_hidden = arch == Arch::kLlama ? 24 : 0;
  o.tie_embeddings = arch == Arch::kGpt2;
  o.init_std = s.init_std;
  return o;
}

}  // namespace partrain::engine::testing
