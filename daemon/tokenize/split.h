// The pre-tokenizer: a regular expression cuts text into pieces that BPE encodes one by one
// (tiktoken's pat_str, tokenizer.json's Split/ByteLevel pattern). PCRE2 with Unicode
// properties (\p{L}, \p{N}) and JIT compilation.
//
// Pieces are the matches and, between them, any text no match covers (Hugging Face's
// "Isolated" split behaviour; the shipped patterns cover every character, so there are none).
// GPT-2's pattern on "I'm  here" gives "I", "'m", " ", " here".
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace partrain::tokenize {

// The pre-tokenizer patterns of the vocabularies a tiktoken file cannot name itself.
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr const char* kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr const char* kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Llama 3's is cl100k's (the same text in Meta's tokenizer.py).
inline constexpr const char* kLlama3Pattern = kCl100kPattern;

class Splitter {
 public:
  Splitter(Splitter&&) noexcept;
  Splitter& operator=(Splitter&&) noexcept;
  ~Splitter();

  // Compiles `pattern` (UTF-8, Unicode properties); the error quotes PCRE2's message and
  // the offset in the pattern.
  static Result<Splitter> compile(const std::string& pattern);

  // Calls `piece` for each piece of `text` (valid UTF-8) in order; the pieces concatenate
  // to `text`. Safe from several threads at once.
  void split(std::string_view text, const std::function<void(std::string_view)>& piece) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Splitter() = default;
  struct Code;
  std::unique_ptr<Code> code_;
  std::string pattern_;
};

}  // namespace partrain::tokenize
