// Plain option structs the engine is driven by. Every field has a default and says it.
// The config library fills them from the job file's [model] [data] [training] tables;
// the engine itself knows nothing of TOML, Slurm, plugins or storage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace partrain::engine {

enum class Arch { kGpt2, kLlama };
enum class Recompute { kNone, kSelective, kFull };

struct ModelOptions {
  Arch arch = Arch::kGpt2;        // "gpt2" (LayerNorm, GELU, learned positions, tied head)
                                  // or "llama" (RMSNorm, SwiGLU, RoPE, untied head, GQA).
                                  // Default: gpt2
  int vocab_size = 256;           // tokens. Default: 256 (byte-level)
  int seq_len = 64;               // context length T. Default: 64
  int layers = 2;                 // transformer blocks L. Default: 2
  int hidden = 128;               // model width C. Default: 128
  int heads = 4;                  // attention heads H (C % H == 0). Default: 4
  int kv_heads = 0;               // key/value heads for GQA (H % kv == 0); 0 = heads. Default: 0
  int ffn_hidden = 0;             // MLP inner width; 0 = 4*C (gpt2) or 8C/3 rounded to 64 (llama). Default: 0
  float norm_eps = 1e-5f;         // LayerNorm/RMSNorm epsilon. Default: 1e-5
  float rope_theta = 10000.0f;    // RoPE base (llama). Default: 10000
  bool tie_embeddings = true;     // LM head shares the token embedding. Default: true for gpt2, false for llama
  float dropout = 0.0f;           // dropout probability after attention and MLP. Default: 0
  float init_std = 0.02f;         // normal init std (residual projections scaled by 1/sqrt(2L)). Default: 0.02
  // Mixture of experts: every `moe_every`-th block's MLP becomes E experts; 0 = dense model.
  int moe_experts = 0;            // E. Default: 0 (dense)
  int moe_top_k = 2;              // experts per token. Default: 2
  int moe_every = 1;              // MoE on blocks where (layer + 1) % moe_every == 0. Default: 1
  float moe_capacity_factor = 1.25f;  // capacity = ceil(cf * tokens * k / E); tokens beyond it drop. Default: 1.25
  float moe_aux_loss_coef = 0.01f;    // load-balancing loss weight. Default: 0.01
  Recompute recompute = Recompute::kNone;  // activation recompute. Default: none
};

// Whether block `layer` (0-based) is a mixture-of-experts block: every moe_every-th block
// counting from 1 (moe_every = 2 on 6 layers: blocks 1, 3 and 5). The one rule the model,
// the pipeline partition and the planner share.
inline bool is_moe_layer(int moe_experts, int moe_every, int layer) {
  return moe_experts > 0 && moe_every > 0 && (layer + 1) % moe_every == 0;
}
inline bool is_moe_layer(const ModelOptions& o, int layer) { return is_moe_layer(o.moe_experts, o.moe_every, layer); }

// One source of a data mixture ([[data.sources]]): its shards and its share of the samples.
struct DataSource {
  std::string name;                      // for messages and metrics. Default: "source<i>"
  std::vector<std::string> files;        // token shards, concatenated. Default: none (required)
  double weight = 1.0;                   // share = weight / sum of weights. Default: 1
};

struct DataOptions {
  std::vector<std::string> train_files;  // token shards (llm.c format or raw). Default: none
  std::vector<DataSource> sources;       // a mixture instead of train_files. Default: none
  std::string format = "auto";           // "auto" (by header), "llmc", "raw-u16", "raw-u32". Default: auto
  // Validation: held-out shards (same format), evaluated every eval_every steps and after
  // the last (not on a SIGTERM stop), on eval_batches global batches read in order from the first window (the same
  // sequences every time, on every layout). Each evaluation costs eval_batches forward-only
  // global batches; at scale keep it a few percent of the steps between evaluations.
  std::vector<std::string> val_files;    // Default: none (no validation loss)
  int eval_every = 0;                    // steps between evaluations; 0: only after the last. Default: 0
  int eval_batches = 4;                  // global batches per evaluation. Default: 4
};

struct TrainOptions {
  int64_t steps = 100;            // optimizer steps. Default: 100
  int global_batch = 8;           // sequences per optimizer step. Default: 8
  int micro_batch = 8;            // sequences per forward/backward on one rank. Default: 8
  uint64_t seed = 1337;           // keys every random stream (init, dropout, data order). Default: 1337
  float lr = 3e-4f;               // peak learning rate. Default: 3e-4
  float min_lr = 3e-5f;           // final learning rate of the cosine decay. Default: 3e-5
  int64_t warmup_steps = 10;      // linear warm-up steps. Default: 10
  float beta1 = 0.9f;             // AdamW beta1. Default: 0.9
  float beta2 = 0.95f;            // AdamW beta2. Default: 0.95
  float eps = 1e-8f;              // AdamW epsilon. Default: 1e-8
  float weight_decay = 0.1f;      // decoupled; not applied to norms and biases. Default: 0.1
  float grad_clip = 1.0f;         // global-norm clip; 0 disables. Default: 1.0
  int log_every = 1;              // step lines every N steps. Default: 1
};

}  // namespace partrain::engine
