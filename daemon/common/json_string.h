// JSON string literals, for the few places that write JSON by hand (safetensors headers,
// traces): no JSON library is a dependency of partrain.
#pragma once

#include <string>
#include <string_view>

namespace partrain {

// Appends `s` as a JSON string literal (quotes, escapes) to *out.
void append_json_string(std::string_view s, std::string* out);

}  // namespace partrain
