// Recursive-descent JSON parser. Depth is bounded so a hostile header cannot overflow the
// stack; every error names what was expected and the byte offset.
#include "engine/io/json.h"

#include <fmt/format.h>

namespace partrain::engine::io {
namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Status document(JsonValue* out) {
    PARTRAIN_RETURN_IF_ERROR(value(out, 0));
    skip_space();
    if (pos_ != s_.size()) return error("end of the JSON text");
    return Status::ok();
  }

 private:
  Status error(std::string_view expected) const {
    if (pos_ >= s_.size())
      return Status::corruption(fmt::format("JSON: expected {} at byte {}, found the end", expected, pos_));
    const unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c >= 0x20 && c < 0x7f)
      return Status::corruption(fmt::format("JSON: expected {} at byte {}, found '{}'", expected, pos_,
                                            static_cast<char>(c)));
    return Status::corruption(fmt::format("JSON: expected {} at byte {}, found byte 0x{:02x}",
                                          expected, pos_, c));
  }

  void skip_space() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Status value(JsonValue* out, int depth) {
    if (depth > kMaxDepth) return error("less nesting (at most 64 levels)");
    skip_space();
    if (pos_ >= s_.size()) return error("a value");
    const char c = s_[pos_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      out->kind = JsonValue::Kind::kString;
      return string(&out->text);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number(out);
    if (literal("true")) {
      out->kind = JsonValue::Kind::kBool;
      out->boolean = true;
      return Status::ok();
    }
    if (literal("false")) {
      out->kind = JsonValue::Kind::kBool;
      return Status::ok();
    }
    if (literal("null")) {
      out->kind = JsonValue::Kind::kNull;
      return Status::ok();
    }
    return error("a value");
  }

  Status object(JsonValue* out, int depth) {
    out->kind = JsonValue::Kind::kObject;
    ++pos_;  // '{'
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return Status::ok();
    }
    for (;;) {
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != '"') return error("a string key");
      std::string key;
      PARTRAIN_RETURN_IF_ERROR(string(&key));
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != ':') return error("':'");
      ++pos_;
      JsonValue member;
      PARTRAIN_RETURN_IF_ERROR(value(&member, depth + 1));
      out->members.emplace_back(std::move(key), std::move(member));
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return Status::ok();
      }
      return error("',' or '}'");
    }
  }

  Status array(JsonValue* out, int depth) {
    out->kind = JsonValue::Kind::kArray;
    ++pos_;  // '['
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return Status::ok();
    }
    for (;;) {
      JsonValue item;
      PARTRAIN_RETURN_IF_ERROR(value(&item, depth + 1));
      out->items.push_back(std::move(item));
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return Status::ok();
      }
      return error("',' or ']'");
    }
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  Status number(JsonValue* out) {
    const size_t start = pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ > from;
    };
    if (s_[pos_] == '-') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (!digits()) {
      return error("a digit");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digits()) return error("a digit after '.'");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) return error("a digit in the exponent");
    }
    out->kind = JsonValue::Kind::kNumber;
    out->text = std::string(s_.substr(start, pos_ - start));
    return Status::ok();
  }

  Status hex4(uint32_t* out) {
    *out = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      if (pos_ >= s_.size()) return error("four hex digits after \\u");
      const char c = s_[pos_];
      uint32_t d;
      if (c >= '0' && c <= '9') d = static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') d = static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') d = static_cast<uint32_t>(c - 'A' + 10);
      else return error("four hex digits after \\u");
      *out = *out * 16 + d;
    }
    return Status::ok();
  }

  static void append_utf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  Status string(std::string* out) {
    ++pos_;  // opening quote
    for (;;) {
      if (pos_ >= s_.size()) return error("a closing '\"'");
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return Status::ok();
      }
      if (c < 0x20) return error("no control character inside a string");
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= s_.size()) return error("an escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp;
          PARTRAIN_RETURN_IF_ERROR(hex4(&cp));
          if (cp >= 0xd800 && cp < 0xdc00) {  // high surrogate: a low one must follow
            if (!literal("\\u")) return error("a low surrogate \\uDC00-\\uDFFF");
            uint32_t lo;
            PARTRAIN_RETURN_IF_ERROR(hex4(&lo));
            if (lo < 0xdc00 || lo >= 0xe000) return error("a low surrogate \\uDC00-\\uDFFF");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          } else if (cp >= 0xdc00 && cp < 0xe000) {
            return error("no lone low surrogate");
          }
          append_utf8(cp, out);
          break;
        }
        default:
          --pos_;
          return error("a valid escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

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
  JsonValue root;
  Parser parser(text);
  PARTRAIN_RETURN_IF_ERROR(parser.document(&root));
  return root;
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
