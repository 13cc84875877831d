// Hugging Face tokenizer.json files of byte-level BPE models (GPT-2, Llama 3, and the many
// models trained with ByteLevelBPETokenizer): "model" {"type": "BPE", "vocab", "merges",
// "ignore_merges"}, "pre_tokenizer" ByteLevel (GPT-2's pattern) or Sequence [Split
// {Regex, "Isolated"}, ByteLevel {use_regex: false}], "added_tokens". Anything else
// (a normalizer, WordPiece, Metaspace, byte_fallback) is refused with what it found.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "tokenize/tokenizer.h"

namespace partrain::tokenize {

Result<std::unique_ptr<Tokenizer>> load_tokenizer_json(const std::string& path,
                                                       const std::string& text);

}  // namespace partrain::tokenize
