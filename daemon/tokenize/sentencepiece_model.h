// SentencePiece models (Llama 2, T5, Gemma ... tokenizer.model protobufs) through Debian's
// libsentencepiece: the library's own Encode, so ids equal spm_encode's.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "tokenize/tokenizer.h"

namespace partrain::tokenize {

Result<std::unique_ptr<Tokenizer>> load_sentencepiece(const std::string& path,
                                                      const std::string& bytes);

}  // namespace partrain::tokenize
