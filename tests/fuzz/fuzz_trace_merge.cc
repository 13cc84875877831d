// One per-rank trace file as `partrain trace merge` reads it (engine/io/trace_file.h), and
// the merged output's events written back and parsed again.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/io/json.h"
#include "engine/io/trace_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  partrain::Result<partrain::engine::io::TraceEvents> t = partrain::engine::io::parse_trace_events(text, "rank-0.json");
  if (!t) return 0;
  std::string out = "{\"traceEvents\":[";
  for (size_t i = 0; i < t->events.size(); ++i) {
    if (i > 0) out += ",";
    partrain::engine::io::append_json_value(t->events[i], &out);
  }
  out += "]}";
  partrain::Result<partrain::engine::io::TraceEvents> back = partrain::engine::io::parse_trace_events(out, "merged.json");
  if (!back || back->events.size() != t->events.size()) std::abort();  // what merge writes reads back
  return 0;
}
