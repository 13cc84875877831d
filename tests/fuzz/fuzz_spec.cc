// The --partrain spec parser (layout/spec.h), and overlaying one spec on another, on any
// bytes: a refusal is a Status, never a crash, and an accepted spec prints back to a spec
// that parses to the same text.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "layout/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  partrain::Result<partrain::ParallelSpec> s = partrain::parse_spec(text);
  if (s) {
    const std::string printed = s->to_string();
    partrain::Result<partrain::ParallelSpec> again = partrain::parse_spec(printed);
    if (!again || again->to_string() != printed) std::abort();  // to_string must round-trip
  }
  const size_t cut = size / 2;
  partrain::Result<partrain::ParallelSpec> base = partrain::parse_spec(text.substr(0, cut));
  if (base) (void)partrain::overlay_spec(*base, text.substr(cut));
  return 0;
}
