// See trace_file.h.
#include "engine/io/trace_file.h"

#include <charconv>

#include <fmt/format.h>

namespace partrain::engine::io {

Result<TraceEvents> parse_trace_events(std::string_view text, const std::string& path) {
  Result<JsonValue> doc = parse_json(text);
  if (!doc) return Status::invalid(fmt::format("{}: not a trace file: {}", path, doc.status().message()));
  JsonValue* events = nullptr;
  if (doc->kind == JsonValue::Kind::kObject) {
    for (auto& [key, value] : doc->members) {
      if (key == "traceEvents" && value.kind == JsonValue::Kind::kArray) events = &value;
    }
  }
  if (events == nullptr) {
    return Status::invalid(path + ": not a trace file: no \"traceEvents\" array (expected the "
                           "output of `partrain run --trace`)");
  }
  TraceEvents out;
  for (const JsonValue& e : events->items) {
    for (const auto& [key, value] : e.members) {
      if (key != "pid" || value.kind != JsonValue::Kind::kNumber) continue;
      long long pid = -1;
      auto [p, ec] = std::from_chars(value.text.data(), value.text.data() + value.text.size(), pid);
      if (ec != std::errc() || p != value.text.data() + value.text.size() || pid < 0) {
        return Status::invalid(fmt::format("{}: not a trace file: an event's pid {} is not a rank", path, value.text));
      }
      out.pid = pid;
    }
  }
  out.events = std::move(events->items);
  return out;
}

}  // namespace partrain::engine::io
