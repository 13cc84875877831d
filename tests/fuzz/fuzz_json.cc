// The JSON reader every safetensors header, trace and metrics line goes through
// (engine/io/json.h, nlohmann-json underneath): any bytes give a tree or a refusal, and a
// tree written back parses to the same text.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/io/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  partrain::Result<partrain::engine::io::JsonValue> v = partrain::engine::io::parse_json(text);
  if (!v) return 0;
  std::string once;
  partrain::engine::io::append_json_value(*v, &once);
  partrain::Result<partrain::engine::io::JsonValue> again = partrain::engine::io::parse_json(once);
  if (!again) std::abort();
  std::string twice;
  partrain::engine::io::append_json_value(*again, &twice);
  if (twice != once) std::abort();
  return 0;
}
