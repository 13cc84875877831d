// Byte-level BPE as a Tokenizer: pre-tokenizer pattern + BpeModel + special tokens. What
// tiktoken files and Hugging Face tokenizer.json files both load into.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tokenize/bpe.h"
#include "tokenize/split.h"
#include "tokenize/tokenizer.h"

namespace partrain::tokenize {

struct BpeTokenizerParts {
  std::string name;                                // "tiktoken cl100k", "tokenizer.json"
  Splitter splitter;
  BpeModel model;
  std::map<std::string, uint32_t> specials;        // text -> id, outside the BPE vocabulary
  uint32_t separator = 0;
  bool add_prefix_space = false;                   // ByteLevel's add_prefix_space
  // See Tokenizer::cuts_at_line_starts: set by the loader for the patterns it knows.
  bool line_start_cuts = false;
};

// Takes the parts; the separator must be a special token or a BPE token.
std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeTokenizerParts parts);

// The special token named first in `names` that `specials` has, or -1.
// True for the shipped patterns (GPT-2, cl100k, o200k, Llama 3), where no piece can span
// a '\n' followed by a letter.
bool known_pattern(const std::string& pattern);

int64_t first_special(const std::map<std::string, uint32_t>& specials,
                      std::initializer_list<const char*> names);

}  // namespace partrain::tokenize
