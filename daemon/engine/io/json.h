// JSON documents (RFC 8259) as a plain tree: safetensors headers, traces, metrics lines.
// Parsed by nlohmann-json (json.cc), strictly: one document, valid UTF-8, at most 64
// levels of nesting. Numbers keep their text so integers are read exactly (no double
// round trip).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json_string.h"
#include "common/status.h"

namespace partrain::engine::io {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  // Defined in json.cc, where the type is complete: the vectors below hold JsonValue
  // itself, which clang's instantiation of their members needs to be complete.
  JsonValue();
  ~JsonValue();
  JsonValue(const JsonValue&);
  JsonValue(JsonValue&&) noexcept;
  JsonValue& operator=(const JsonValue&);
  JsonValue& operator=(JsonValue&&) noexcept;

  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;  // kString: the decoded UTF-8; kNumber: the number as written
  std::vector<JsonValue> items;                            // kArray
  std::vector<std::pair<std::string, JsonValue>> members;  // kObject, in file order

  // A non-negative integer written without fraction or exponent that fits uint64.
  bool as_u64(uint64_t* out) const;
};

// Parses one JSON document; trailing whitespace is allowed, anything else is an error
// (corruption). Messages say what the parser met and at which byte, e.g.
// "JSON: syntax error while parsing object key - unexpected '}'; expected string literal (at byte 54)".
Result<JsonValue> parse_json(std::string_view text);

// Appends `v` as compact JSON text to *out; parse_json reads it back to an equal value.
void append_json_value(const JsonValue& v, std::string* out);

// Appends `s` as a JSON string literal (quotes, escapes) to *out (common/json_string.h).
using partrain::append_json_string;

}  // namespace partrain::engine::io
