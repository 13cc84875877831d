// Model weights to and from safetensors under Hugging Face names (GPT2LMHeadModel's
// state_dict without the "transformer." prefix; LlamaForCausalLM/MixtralForCausalLM
// names). GPT-2's Conv1D weights are stored [in, out] by Hugging Face and [out, in] here:
// they are transposed on the way out and back. A tied LM head is not written (it is wte).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "engine/io/safetensors.h"
#include "engine/model/model.h"

namespace partrain::engine::model {

// All parameters as F32 tensors with Hugging Face names and layouts.
std::vector<io::SafeTensor> export_hf(Model& model);
// Writes export_hf() to `path`, with the architecture in the metadata.
Status save_hf(Model& model, const std::string& path);
// Loads every parameter from a file written by save_hf or by Hugging Face: each name must
// be present with the right shape (F32, BF16 or F16). "transformer." prefixes are accepted;
// extra tensors (e.g. GPT-2's attn.bias masks, a tied lm_head) are ignored.
Status load_hf(Model& model, const std::string& path);
// The same from tensors already in memory (the reference-dump tool uses it).
Status load_hf(Model& model, const io::SafetensorsFile& file, const std::string& path);

}  // namespace partrain::engine::model
