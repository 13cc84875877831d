// A GPT-2 training step written directly on the CUDA kernels (engine/cuda/kernels.h), as
// llm.c's train_gpt2.cu is: embedding, L blocks (LayerNorm, qkv, attention, projection,
// residual, LayerNorm, MLP with GELU, residual), final LayerNorm, tied LM head with the
// fused softmax cross-entropy, the whole backward pass, the global gradient norm and one
// AdamW update on fp32 master weights. Used by the GPU benchmark to measure what the
// kernels reach without the engine's model code around them, path by path:
//
//   - the kernel paths of KernelOptions (cached cuBLASLt plans, GEMM epilogues, fused norms,
//     128-bit pointwise kernels, multi-tensor AdamW), each falling back to the previous path;
//   - the attention kernels (cuDNN's fused SDPA, the GEMM path, the flash-style kernels);
//   - overwrite: gradients of buffers a GEMM or cuDNN fully writes are written, not zeroed
//     and accumulated (off: the previous zero-then-accumulate sequence);
//   - device optimizer: the clip factor and AdamW's step scalars computed on the device, so a
//     step has no host synchronisation at all (off: the norm is read on the host mid-step);
//   - a CUDA graph of the whole step (needs the device optimizer), replayed each step.
//
// One fixed batch is trained repeatedly, so the loss must fall (a cheap learning check).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/phase_timer.h"

namespace partrain::bench {

struct Gpt2Shape {
  int layers = 12, channels = 768, heads = 12, seq = 1024;
  int vocab = 50257, padded_vocab = 50304;  // the LM head's rows: a multiple of 128
};

struct LayerStepOptions {
  engine::cuda::KernelOptions paths;  // which kernel fast paths (each falls back)
  std::string attention = "auto";     // auto (cudnn where it runs, else gemm) | cudnn | gemm | flash
  bool overwrite = true;
  bool device_optimizer = true;
};

class KernelGpt2 {
 public:
  static Result<std::unique_ptr<KernelGpt2>> create(const Gpt2Shape& shape, int batch, uint64_t seed,
                                                    const LayerStepOptions& options);
  ~KernelGpt2();
  // The batch every following step trains on (host [B, T]; kept in pinned memory).
  Status set_batch(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets);
  // Enqueues one step: batch upload, forward, backward, norm, AdamW (lr fixed at create). No
  // host synchronisation with the device optimizer; a replay of the graph once captured.
  Status step();
  // Captures one step into a CUDA graph (it runs once while captured); later steps replay it.
  Status capture_graph();
  bool graph_captured() const;
  // Waits for the device; the mean loss of the last step.
  Result<float> last_loss();
  Status synchronize();
  // Per-phase device time (enable before a step, finish after it).
  engine::cuda::PhaseTimer& phases();
  // Parameters excluding position embeddings (nanoGPT's MFU convention), unpadded vocab.
  int64_t num_params_no_pos() const;
  // The attention kernels in use ("cudnn", "gemm", "flash"; auto says why not cuDNN).
  const std::string& attention_used() const { return attention_note_; }

 private:
  KernelGpt2() = default;
  Status forward();
  Status backward();
  Status optimizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string attention_note_;
};

}  // namespace partrain::bench
