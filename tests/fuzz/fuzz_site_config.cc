// The site config (/etc/partrain/partrain.toml) as every partrain process reads it
// (config/site_config.h).
#include <cstdint>
#include <string_view>

#include "config/site_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)partrain::config::parse_site(text, "partrain.toml");
  return 0;
}
