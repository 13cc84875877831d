#include "common/json_string.h"

#include <fmt/format.h>

namespace partrain {

void append_json_string(std::string_view s, std::string* out) {
  out->push_back('"');
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (c < 0x20) *out += fmt::format("\\u{:04x}", c);
        else out->push_back(ch);
    }
  }
  out->push_back('"');
}

}  // namespace partrain
