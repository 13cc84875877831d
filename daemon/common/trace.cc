#include "common/trace.h"

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include <fmt/format.h>

#include "common/json_string.h"
#include "common/progress.h"

namespace partrain::trace {
namespace {

struct Event {
  std::string name;
  int tid = 0;
  int64_t start_us = 0, end_us = 0;
  int64_t step = 0;
  int micro_batch = -1;
};

struct Tracer {
  std::mutex mu;
  StepSet steps;
  std::string path, label;
  int rank = 0;
  bool configured = false;
  int64_t step = 0;
  std::vector<Event> events;
  std::vector<std::string> comm_lanes;  // tid 2 + i
  std::atomic<bool> active{false};
};

Tracer& tracer() {
  static Tracer t;
  return t;
}

int lane_tid(Tracer& t, Lane lane, std::string_view group) {
  if (lane == Lane::kCompute) return 0;
  if (lane == Lane::kIo) return 1;
  for (size_t i = 0; i < t.comm_lanes.size(); ++i) {
    if (t.comm_lanes[i] == group) return 2 + static_cast<int>(i);
  }
  t.comm_lanes.emplace_back(group);
  return 1 + static_cast<int>(t.comm_lanes.size());
}

bool parse_int(std::string_view s, int64_t* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size() && *out >= 1;
}

std::string metadata(std::string_view what, int pid, int tid, std::string_view name) {
  std::string line = fmt::format("{{\"name\":\"{}\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":",
                                 what, pid, tid);
  append_json_string(name, &line);
  return line + "}}";
}

}  // namespace

Result<StepSet> StepSet::parse(std::string_view text) {
  StepSet set;
  auto bad = [&] {
    return Status::invalid(fmt::format("--trace '{}': need steps as N, A-B or a comma list of "
                                       "them (1-based), e.g. --trace 5-7", text));
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = text.substr(pos, comma - pos);
    const size_t dash = item.find('-');
    int64_t a = 0, b = 0;
    if (dash == std::string_view::npos) {
      if (!parse_int(item, &a)) return bad();
      b = a;
    } else if (!parse_int(item.substr(0, dash), &a) || !parse_int(item.substr(dash + 1), &b) || b < a) {
      return bad();
    }
    set.ranges_.emplace_back(a, b);
    pos = comma + 1;
  }
  return set;
}

bool StepSet::contains(int64_t step) const {
  for (const auto& [a, b] : ranges_) {
    if (step >= a && step <= b) return true;
  }
  return false;
}

int64_t StepSet::last() const {
  int64_t last = 0;
  for (const auto& r : ranges_) last = std::max(last, r.second);
  return last;
}

void configure(const StepSet& steps, std::string path, int rank, std::string label) {
  Tracer& t = tracer();
  std::lock_guard lock(t.mu);
  t.steps = steps;
  t.path = std::move(path);
  t.rank = rank;
  t.label = std::move(label);
  t.configured = !steps.empty();
  t.events.clear();
  t.comm_lanes.clear();
}

Status configure_from_env(const std::string& run_dir, int rank, std::string label) {
  const char* v = std::getenv("PARTRAIN_TRACE");
  if (v == nullptr || *v == '\0') return Status::ok();
  Result<StepSet> steps = StepSet::parse(v);
  if (!steps) return Status::invalid("PARTRAIN_TRACE: " + steps.status().message());
  configure(*steps, fmt::format("{}/trace/rank-{}.json", run_dir.empty() ? "." : run_dir, rank), rank,
            std::move(label));
  return Status::ok();
}

void begin_step(int64_t step) {
  progress::begin_step(step);
  Tracer& t = tracer();
  std::lock_guard lock(t.mu);
  t.step = step;
  t.active.store(t.configured && t.steps.contains(step), std::memory_order_relaxed);
}

void end_step(int64_t step) {
  Tracer& t = tracer();
  bool last = false;
  {
    std::lock_guard lock(t.mu);
    t.active.store(false, std::memory_order_relaxed);
    last = t.configured && step == t.steps.last();
  }
  if (last) (void)flush();  // a failure is reported by the final flush() of the run
}

bool active() { return tracer().active.load(std::memory_order_relaxed); }

int64_t now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

namespace {

// Appends one event of `step` (-1: the current one) under the tracer's lock; callers
// decided it belongs in the trace.
void append(std::string_view name, Lane lane, int64_t start_us, int64_t end_us, std::string_view group,
            int micro_batch, int64_t step = -1) {
  Tracer& t = tracer();
  std::lock_guard lock(t.mu);
  if (!t.configured) return;
  t.events.push_back(Event{std::string(name), lane_tid(t, lane, group), start_us, end_us,
                           step >= 0 ? step : t.step, micro_batch});
}

}  // namespace

void record(std::string_view name, Lane lane, int64_t start_us, int64_t end_us, std::string_view group,
            int micro_batch) {
  if (!active()) return;
  append(name, lane, start_us, end_us, group, micro_batch);
}

Span::Span(std::string_view name, Lane lane, int micro_batch)
    : name_(name), lane_(lane), micro_batch_(micro_batch) {
  progress::enter(name);  // the agent's watchdog hears of every phase, traced or not
  if (!active()) return;  // the untraced path: one relaxed load
  Tracer& t = tracer();
  std::lock_guard lock(t.mu);
  if (!t.active.load(std::memory_order_relaxed)) return;
  start_ = now_us();
  step_ = t.step;
}

// A span that began in a traced step is kept, under that step, even when it ends after the
// step (a background checkpoint write).
Span::~Span() {
  if (start_ >= 0) append(name_, lane_, start_, now_us(), {}, micro_batch_, step_);
}

Status flush() {
  Tracer& t = tracer();
  std::lock_guard lock(t.mu);
  if (!t.configured) return Status::ok();
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  out += metadata("process_name", t.rank, 0, t.label);
  out += ",\n" + metadata("thread_name", t.rank, 0, "compute");
  out += ",\n" + metadata("thread_name", t.rank, 1, "checkpoint io");
  for (size_t i = 0; i < t.comm_lanes.size(); ++i) {
    out += ",\n" + metadata("thread_name", t.rank, 2 + static_cast<int>(i), "comm " + t.comm_lanes[i]);
  }
  for (const Event& e : t.events) {
    out += ",\n{\"name\":";
    append_json_string(e.name, &out);
    const char* cat = e.tid == 0 ? "compute" : e.tid == 1 ? "io" : "comm";
    out += fmt::format(",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{},\"tid\":{},"
                       "\"args\":{{\"step\":{}", cat, e.start_us, std::max<int64_t>(0, e.end_us - e.start_us),
                       t.rank, e.tid, e.step);
    out += e.micro_batch >= 0 ? fmt::format(",\"micro_batch\":{}}}}}", e.micro_batch) : std::string("}}");
  }
  out += "\n]}\n";
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(t.path).parent_path(), ec);
  std::FILE* f = std::fopen(t.path.c_str(), "wb");
  if (f == nullptr) return Status::io_error(t.path + ": cannot write the trace; check the run folder");
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (std::fclose(f) != 0 || !ok) return Status::io_error(t.path + ": writing the trace failed (disk full?)");
  return Status::ok();
}

void reset() {
  Tracer& t = tracer();
  std::lock_guard lock(t.mu);
  t.steps = StepSet();
  t.path.clear();
  t.configured = false;
  t.events.clear();
  t.comm_lanes.clear();
  t.active.store(false);
}

}  // namespace partrain::trace
