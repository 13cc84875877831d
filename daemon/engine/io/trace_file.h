// Reading back a Chrome/Perfetto trace file that `partrain run --trace` wrote (one per
// rank, common/trace.h), for `partrain trace merge`: its "traceEvents" array and the rank
// (pid) its events carry. Parsed by json.h, so a hostile file gets a one-line refusal.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/io/json.h"

namespace partrain::engine::io {

struct TraceEvents {
  std::vector<JsonValue> events;
  long long pid = -1;  // the last "pid" an event carries; -1 when none does
};

// The events of the trace text `text` read from `path` (named in errors): invalid when it
// is no JSON object with a "traceEvents" array.
Result<TraceEvents> parse_trace_events(std::string_view text, const std::string& path);

}  // namespace partrain::engine::io
