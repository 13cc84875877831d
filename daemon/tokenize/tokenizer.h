// The tokenizer interface `partrain data encode` and `partrain generate` use, and the one
// function that opens a tokenizer file by what it contains.
//
//   auto tok = load_tokenizer("cl100k_base.tiktoken");   // or tokenizer.json, spm .model
//   std::vector<uint32_t> ids;
//   (*tok)->encode("hello world", &ids);                  // cl100k: 15339, 1917
//
// encode() is tiktoken's encode_ordinary: text that looks like a special token is encoded
// as text; special tokens (the document separator, BOS) are added by the caller by id.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace partrain::tokenize {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of `text` to *out. `text` must be valid UTF-8 (see to_valid_utf8).
  // Safe to call from several threads at once.
  virtual void encode(std::string_view text, std::vector<uint32_t>* out) const = 0;
  // The bytes of `ids` (special tokens as their text).
  virtual std::string decode(std::span<const uint32_t> ids) const = 0;
  // One more than the largest id encode() or separator() can return.
  virtual uint32_t vocab_size() const = 0;
  // The id written before every document (llm.c's convention): <|endoftext|> for GPT-2,
  // cl100k and o200k, <|end_of_text|> for Llama 3, </s> for SentencePiece models.
  virtual uint32_t separator() const = 0;
  // False for the byte-level tokenizer, which has no token outside the 256 bytes.
  virtual bool has_separator() const { return true; }
  // The id of a special token's text (e.g. "<|begin_of_text|>"), or -1 when there is none.
  virtual int64_t special_id(std::string_view text) const = 0;
  // True when encoding a text in two parts cut just after a '\n' that is followed by a
  // letter gives the ids of the whole (true for the byte-level BPE patterns shipped with
  // GPT-2, cl100k, o200k and Llama 3; false for SentencePiece, which adds a prefix space
  // to every call). `data encode` only cuts a long text where this holds.
  virtual bool cuts_at_line_starts() const = 0;
  // One line for logs: "tiktoken cl100k (100277 tokens)".
  virtual std::string describe() const = 0;
};

// Opens a tokenizer by content, not name: a Hugging Face tokenizer.json (JSON object with
// a "model"), a tiktoken rank file (lines "BASE64 RANK"; Llama 3's tokenizer.model is one),
// or a SentencePiece model (protobuf). Errors name the file and what was expected.
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path);

// The byte-level tokenizer of `data encode --bytes`: token = byte value, vocab_size 256,
// no separator.
std::unique_ptr<Tokenizer> make_byte_tokenizer();

// Replaces every invalid UTF-8 sequence in `text` with U+FFFD (as Python's
// errors="replace" and a JavaScript TextDecoder do), in place. Returns how many it replaced.
size_t to_valid_utf8(std::string* text);
// The offset of the first byte of `text` that does not start a valid UTF-8 sequence, or
// npos when all of it is valid UTF-8.
size_t first_invalid_utf8(std::string_view text);

}  // namespace partrain::tokenize
