// tiktoken rank files: one line per token, "BASE64(bytes) RANK", rank = id (OpenAI's
// r50k_base / p50k_base / cl100k_base / o200k_base .tiktoken files, and Llama 3's
// tokenizer.model). The file holds neither the pre-tokenizer pattern nor the special
// tokens, so they are chosen by the number of ranks, as tiktoken_ext and Meta's
// tokenizer.py define them:
//
//   ranks    vocabulary   pattern   special tokens
//   50256    r50k (GPT-2) GPT-2     <|endoftext|> 50256
//   50280    p50k         GPT-2     <|endoftext|> 50256
//   100256   cl100k       cl100k    <|endoftext|> 100257, <|fim_prefix|> 100258, ... <|endofprompt|> 100276
//   128000   Llama 3      Llama 3   <|begin_of_text|> 128000, <|end_of_text|> 128001, ... 256 in all
//   199998   o200k        o200k     <|endoftext|> 199999, <|endofprompt|> 200018
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "tokenize/tokenizer.h"

namespace partrain::tokenize {

// True when `head` (the first bytes of a file) looks like a rank file's first line.
bool looks_like_tiktoken(const std::string& head);

Result<std::unique_ptr<Tokenizer>> load_tiktoken(const std::string& path, const std::string& text);

}  // namespace partrain::tokenize
