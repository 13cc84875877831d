// Model weights to and from safetensors under Hugging Face names (GPT2LMHeadModel's
// state_dict without the "transformer." prefix; LlamaForCausalLM/MixtralForCausalLM
// names). GPT-2's Conv1D weights are stored [in, out] by Hugging Face and [out, in] here:
// they are transposed on the way out and back. A tied LM head is not written (it is wte).
//
// A Hugging Face model folder is config.json (hf_config.h) plus either model.safetensors or
// model-00001-of-0000N.safetensors ... with model.safetensors.index.json
// ({"metadata": {"total_size": BYTES}, "weight_map": {NAME: FILE}}). Reading maps the files
// (MappedSafetensors): loading costs the model's size once, in the page cache.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/io/safetensors.h"
#include "engine/model/hf_config.h"
#include "engine/model/model.h"

namespace partrain::engine::model {

// All parameters as F32 tensors with Hugging Face names and layouts.
std::vector<io::SafeTensor> export_hf(Model& model);
// Writes export_hf() to `path`, with the architecture in the metadata.
Status save_hf(Model& model, const std::string& path);

struct HfDirOptions {
  uint64_t max_shard_bytes = 5'000'000'000;  // Default: 5 GB, as save_pretrained
  std::vector<std::string> extra_files;      // copied in (tokenizer.json, tokenizer.model, ...). Default: none
  HfTokenIds token_ids;                      // config.json's bos/eos_token_id. Default: null, null
};
// Writes a Hugging Face model folder: config.json, the weights (one model.safetensors, or
// shards of at most max_shard_bytes with the index), and the extra files.
Status save_hf_dir(Model& model, const std::string& dir, const HfDirOptions& o);

// The weights of a folder (model.safetensors or the index's shards) or of one .safetensors
// file, mapped; each tensor found by name.
class HfWeights {
 public:
  static Result<HfWeights> open(const std::string& path);
  const io::TensorView* find(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::unique_ptr<io::MappedSafetensors>> files_;
};

// Loads every parameter: each name must be present with the right shape (F32, BF16 or
// F16). "transformer." prefixes are accepted; extra tensors (e.g. GPT-2's attn.bias masks,
// a tied lm_head) are ignored.
Status load_hf(Model& model, const HfWeights& weights);
// The same from a file or folder path (HfWeights::open).
Status load_hf(Model& model, const std::string& path);
// The same from tensors already in memory (the reference-dump tool uses it).
Status load_hf(Model& model, const io::SafetensorsFile& file, const std::string& path);

// Elements [begin, end) of logical tensor `name` in partrain's layout: row-major over its
// whole shape `shape` (a tensor-parallel rank's piece, a ZeRO shard's range, a dp slice),
// as fp32. `hf_transposed`: the file holds it [shape[1], shape[0]] (GPT-2's Conv1D). Only
// the rows the range touches are converted, so each rank of a large job reads its own
// slices of the mapped files, not the model.
Status read_hf_range(const HfWeights& weights, const std::string& name, const std::vector<int64_t>& shape,
                     bool hf_transposed, int64_t begin, int64_t end, float* out);

}  // namespace partrain::engine::model
