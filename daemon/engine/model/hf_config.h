// A model's Hugging Face config.json, both ways: GPT2LMHeadModel ("gpt2"), LlamaForCausalLM
// ("llama") and, for a LLaMA with experts on every block, MixtralForCausalLM ("mixtral").
//
//   partrain [model]      GPT-2 config.json          LLaMA / Mixtral config.json
//   vocab_size            vocab_size                 vocab_size
//   seq_len               n_positions (= n_ctx)      max_position_embeddings
//   layers                n_layer                    num_hidden_layers
//   hidden                n_embd                     hidden_size
//   heads                 n_head                     num_attention_heads
//   kv_heads              (= heads)                  num_key_value_heads
//   ffn_hidden            n_inner (null: 4 n_embd)   intermediate_size
//   norm_eps              layer_norm_epsilon         rms_norm_eps
//   rope_theta            -                          rope_theta
//   tie_embeddings        tie_word_embeddings        tie_word_embeddings
//   moe_experts, top_k    -                          num_local_experts, num_experts_per_tok
//
// GPT-2 is "gelu_new" (tanh GELU) with biases, LLaMA "silu" without; a config that asks for
// anything partrain's model does not compute (rope_scaling, attention or MLP biases on
// LLaMA, another activation, sliding windows) is refused with the key named.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "engine/options.h"

namespace partrain::engine::model {

// The special token ids config.json names. Each is -1 (written as null) when unknown: a
// config without them gets transformers' class defaults (GPT-2: 50256), which are out of
// range for a small vocabulary, so both keys are always written.
struct HfTokenIds {
  int64_t bos = -1;  // bos_token_id. Default: -1, null
  int64_t eos = -1;  // eos_token_id. Default: -1, null
};

// config.json text for `o` (pretty-printed). GPT-2 with experts has no Hugging Face
// class: refused; so is a token id outside [0, vocab_size).
Result<std::string> hf_config_json(const ModelOptions& o, const HfTokenIds& ids = {});

// [model] options from a config.json's text; `path` names the file in errors.
Result<ModelOptions> model_options_from_hf_config(const std::string& text, const std::string& path);

}  // namespace partrain::engine::model
