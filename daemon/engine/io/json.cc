// parse_json on nlohmann-json's SAX parser (Debian's nlohmann-json3-dev): the library does
// the lexing, UTF-8 validation and grammar of untrusted bytes (every safetensors header a
// user hands in, traces, metrics); this file only builds JsonValue from its events. Numbers
// keep their text: integers are written back from the exact int64/uint64 the library
// read, others keep the text it passes along. Nesting is bounded (kMaxDepth) so a hostile
// header cannot make the tree deep enough to overflow the stack of whoever walks it.
#include "engine/io/json.h"

#include <exception>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace partrain::engine::io {
namespace {

constexpr size_t kMaxDepth = 64;

using json = nlohmann::json;

// Builds the JsonValue tree from the SAX events of one document.
class Builder {
 public:
  bool null() { return put(JsonValue{}); }
  bool boolean(bool b) {
    JsonValue v;
    v.kind = JsonValue::Kind::kBool;
    v.boolean = b;
    return put(std::move(v));
  }
  bool number_integer(json::number_integer_t n) { return number(std::to_string(n)); }
  bool number_unsigned(json::number_unsigned_t n) { return number(std::to_string(n)); }
  bool number_float(json::number_float_t, const json::string_t& text) { return number(text); }
  bool string(json::string_t& s) {
    JsonValue v;
    v.kind = JsonValue::Kind::kString;
    v.text = std::move(s);
    return put(std::move(v));
  }
  bool binary(json::binary_t&) { return false; }  // never in JSON text
  bool start_object(size_t) { return open(JsonValue::Kind::kObject); }
  bool key(json::string_t& k) {
    keys_.back() = std::move(k);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(size_t) { return open(JsonValue::Kind::kArray); }
  bool end_array() { return close(); }
  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 7: syntax error while
    // parsing value - invalid literal; last read: 'tru'" -> the part after the location.
    std::string what = e.what();
    if (const size_t at = what.find(": "); at != std::string::npos) what = what.substr(at + 2);
    // "; last read: '<token>'" repeats the input (a hostile string token may be megabytes):
    // the byte offset says where; the message stays one short line.
    if (const size_t lr = what.find("; last read: '"); lr != std::string::npos) {
      const size_t end = what.rfind("'; expected");
      what.erase(lr, end != std::string::npos && end > lr ? end + 1 - lr : std::string::npos);
    }
    if (what.size() > 200) what = what.substr(0, 200) + "...";
    error_ = fmt::format("JSON: {} (at byte {})", what, position > 0 ? position - 1 : 0);
    return false;
  }

  const std::string& error() const { return error_; }
  JsonValue take() { return std::move(root_); }

 private:
  bool number(std::string text) {
    JsonValue v;
    v.kind = JsonValue::Kind::kNumber;
    v.text = std::move(text);
    return put(std::move(v));
  }
  bool put(JsonValue v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return true;
    }
    JsonValue& top = stack_.back();
    if (top.kind == JsonValue::Kind::kObject) {
      top.members.emplace_back(std::move(keys_.back()), std::move(v));
    } else {
      top.items.push_back(std::move(v));
    }
    return true;
  }
  bool open(JsonValue::Kind kind) {
    if (stack_.size() >= kMaxDepth) {
      error_ = fmt::format("JSON: more than {} levels of nesting", kMaxDepth);
      return false;
    }
    JsonValue v;
    v.kind = kind;
    stack_.push_back(std::move(v));
    keys_.emplace_back();
    return true;
  }
  bool close() {
    JsonValue v = std::move(stack_.back());
    stack_.pop_back();
    keys_.pop_back();
    return put(std::move(v));
  }

  std::vector<JsonValue> stack_;  // the containers being filled, innermost last
  std::vector<std::string> keys_;  // the pending key of each (unused for arrays)
  JsonValue root_;
  std::string error_;
};

}  // namespace

JsonValue::JsonValue() = default;
JsonValue::~JsonValue() = default;
JsonValue::JsonValue(const JsonValue&) = default;
JsonValue::JsonValue(JsonValue&&) noexcept = default;
JsonValue& JsonValue::operator=(const JsonValue&) = default;
JsonValue& JsonValue::operator=(JsonValue&&) noexcept = default;

bool JsonValue::as_u64(uint64_t* out) const {
  if (kind != Kind::kNumber || text.empty() || text[0] == '-') return false;
  uint64_t v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;  // fraction or exponent
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

Result<JsonValue> parse_json(std::string_view text) {
  Builder b;
  try {
    if (!json::sax_parse(text.begin(), text.end(), &b, json::input_format_t::json, /*strict=*/true)) {
      return Status::corruption(b.error().empty() ? std::string("JSON: malformed") : b.error());
    }
  } catch (const std::exception& e) {  // the library's allocation or an internal check
    return Status::corruption(fmt::format("JSON: {}", e.what()));
  }
  return b.take();
}

void append_json_value(const JsonValue& v, std::string* out) {
  switch (v.kind) {
    case JsonValue::Kind::kNull: *out += "null"; return;
    case JsonValue::Kind::kBool: *out += v.boolean ? "true" : "false"; return;
    case JsonValue::Kind::kNumber: *out += v.text; return;
    case JsonValue::Kind::kString: append_json_string(v.text, out); return;
    case JsonValue::Kind::kArray:
      out->push_back('[');
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i > 0) out->push_back(',');
        append_json_value(v.items[i], out);
      }
      out->push_back(']');
      return;
    case JsonValue::Kind::kObject:
      out->push_back('{');
      for (size_t i = 0; i < v.members.size(); ++i) {
        if (i > 0) out->push_back(',');
        append_json_string(v.members[i].first, out);
        out->push_back(':');
        append_json_value(v.members[i].second, out);
      }
      out->push_back('}');
      return;
  }
}

}  // namespace partrain::engine::io
