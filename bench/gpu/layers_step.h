// A GPT-2 training step written directly on the CUDA kernels (engine/cuda/kernels.h), as
// llm.c's train_gpt2.cu is: embedding, L blocks (LayerNorm, qkv, attention, projection,
// residual, LayerNorm, MLP with GELU, residual), final LayerNorm, tied LM head with the
// fused softmax cross-entropy, the whole backward pass, the global gradient norm and one
// AdamW update on fp32 master weights. Used by the GPU benchmark to measure what the
// kernels reach without the engine's model code around them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "engine/cuda/kernels.h"

namespace partrain::bench {

struct Gpt2Shape {
  int layers = 12, channels = 768, heads = 12, seq = 1024;
  int vocab = 50257, padded_vocab = 50304;
};

class KernelGpt2 {
 public:
  static Result<std::unique_ptr<KernelGpt2>> create(const Gpt2Shape& shape, int batch, uint64_t seed);
  ~KernelGpt2();
  // One step on tokens/targets (host, [B, T]); returns the mean loss (read after the step).
  Result<float> step(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                     float lr, int64_t t);
  // Parameters excluding position embeddings (nanoGPT's MFU convention).
  int64_t num_params_no_pos() const;
  Status synchronize();

 private:
  KernelGpt2() = default;
  Status forward();
  Status backward();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace partrain::bench
