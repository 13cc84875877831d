// load_tokenizer: which kind of file it is, by content; to_valid_utf8.
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "tokenize/sentencepiece_model.h"
#include "tokenize/tiktoken_file.h"
#include "tokenize/tokenizer.h"
#include "tokenize/tokenizer_json.h"

namespace partrain::tokenize {

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::not_found(fmt::format("{}: cannot open the tokenizer file; pass a "
                                         "tokenizer.json, a .tiktoken rank file or a "
                                         "SentencePiece .model", path));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && bytes[first] == '{') return load_tokenizer_json(path, bytes);
  if (looks_like_tiktoken(bytes.substr(0, 256))) return load_tiktoken(path, bytes);
  return load_sentencepiece(path, bytes);
}

namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  void encode(std::string_view text, std::vector<uint32_t>* out) const override {
    for (unsigned char c : text) out->push_back(c);
  }
  std::string decode(std::span<const uint32_t> ids) const override {
    std::string out;
    for (uint32_t id : ids)
      if (id < 256) out.push_back(static_cast<char>(id));
    return out;
  }
  uint32_t vocab_size() const override { return 256; }
  uint32_t separator() const override { return 0; }
  bool has_separator() const override { return false; }
  int64_t special_id(std::string_view) const override { return -1; }
  bool cuts_at_line_starts() const override { return true; }
  std::string describe() const override { return "byte-level (256 tokens)"; }
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

namespace {

// The length of the valid UTF-8 sequence at s[i]; 0 when it is not one, with *bad the bytes
// of its maximal invalid prefix (at least 1).
size_t utf8_sequence_at(std::string_view s, size_t i, size_t* bad) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t len = 0;
  uint32_t cp = 0, min = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
  size_t n = 1;  // bytes consumed by this (maybe bad) sequence
  bool ok = len > 0;
  for (; ok && n < len; ++n) {
    if (i + n >= s.size() || (static_cast<unsigned char>(s[i + n]) & 0xC0) != 0x80) { ok = false; break; }
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + n]) & 0x3F);
  }
  if (ok && (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
  if (ok) return len;
  *bad = std::max<size_t>(n, 1);
  return 0;
}

}  // namespace

size_t first_invalid_utf8(std::string_view s) {
  size_t bad = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence_at(s, i, &bad);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

size_t to_valid_utf8(std::string* text) {
  const std::string& s = *text;
  // Fast path: most text is valid; only rebuild when a bad sequence is found.
  std::string out;
  size_t replaced = 0, copied = 0, i = 0, bad = 0;
  while (i < s.size()) {
    const size_t len = utf8_sequence_at(s, i, &bad);
    if (len > 0) { i += len; continue; }
    // The maximal invalid prefix (at least one byte) becomes one U+FFFD, as WHATWG decoders do.
    out.append(s, copied, i - copied);
    out += "\xEF\xBF\xBD";
    i += bad;
    copied = i;
    ++replaced;
  }
  if (replaced == 0) return 0;
  out.append(s, copied, std::string::npos);
  *text = std::move(out);
  return replaced;
}

}  // namespace partrain::tokenize
