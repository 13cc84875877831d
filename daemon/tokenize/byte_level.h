// GPT-2's byte <-> unicode table: Hugging Face byte-level vocabularies spell byte b as the
// character byte_char(b), so every byte is a printable character in tokenizer.json.
//
//   Printable Latin-1 bytes map to themselves: '!'..'~' (33..126), '¡'..'¬' (161..172),
//   '®'..'ÿ' (174..255). The other 68 bytes, in increasing order, map to U+0100, U+0101,
//   ...: byte 0 -> U+0100 'Ā', byte 32 (space) -> U+0120 'Ġ', byte 10 ('\n') -> U+010A 'Ċ'.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace partrain::tokenize {

// The code point GPT-2 writes for byte b.
uint32_t byte_char(uint8_t b);

// Decodes a byte-level spelled token ("Ġhello") to its bytes (" hello"); nullopt when a
// character is not in the table (not a byte-level token).
std::optional<std::string> byte_level_decode(std::string_view spelled);

// Appends code point cp as UTF-8.
void append_utf8(uint32_t cp, std::string* out);

}  // namespace partrain::tokenize
