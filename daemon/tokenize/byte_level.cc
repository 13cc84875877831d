#include "tokenize/byte_level.h"

#include <array>

namespace partrain::tokenize {
namespace {

bool printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174); }

// table[b] = code point of byte b, built once as GPT-2's bytes_to_unicode() builds it.
const std::array<uint32_t, 256>& table() {
  static const std::array<uint32_t, 256> t = [] {
    std::array<uint32_t, 256> out{};
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) out[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
    return out;
  }();
  return t;
}

// Inverse for code points < 512 (all of the table's values are below 256 + 68).
const std::array<int16_t, 512>& inverse() {
  static const std::array<int16_t, 512> inv = [] {
    std::array<int16_t, 512> out{};
    out.fill(-1);
    for (int b = 0; b < 256; ++b) out[table()[b]] = static_cast<int16_t>(b);
    return out;
  }();
  return inv;
}

}  // namespace

uint32_t byte_char(uint8_t b) { return table()[b]; }

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::optional<std::string> byte_level_decode(std::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return std::nullopt;  // the table's code points are all below U+0800
    }
    if (cp >= 512 || inverse()[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(inverse()[cp]));
  }
  return out;
}

}  // namespace partrain::tokenize
