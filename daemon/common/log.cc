#include "common/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace partrain::log {
namespace {

struct Context {
  std::mutex mu;
  std::string job, node;
  int rank = -1;
  int64_t step = -1;
  Level level = Level::kInfo;
  bool level_from_env_read = false;
};

Context& context() {
  static Context ctx;
  return ctx;
}

const char* level_name(Level l) {
  switch (l) {
    case Level::kDebug: return "DEBUG";
    case Level::kInfo: return "INFO ";
    case Level::kWarn: return "WARN ";
    case Level::kError: return "ERROR";
  }
  return "?    ";
}

std::string utc_now() {
  using namespace std::chrono;
  return utc_timestamp(duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
}

std::atomic<Forward> g_forward{nullptr};

}  // namespace

std::string utc_timestamp(int64_t unix_ms) {
  const std::time_t secs = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, unix_ms % 1000);
}

void forward_to(Forward forward) { g_forward.store(forward); }

bool parse_level(std::string_view text, Level* out) {
  if (text == "debug") *out = Level::kDebug;
  else if (text == "info") *out = Level::kInfo;
  else if (text == "warn") *out = Level::kWarn;
  else if (text == "error") *out = Level::kError;
  else return false;
  return true;
}

void set_context(std::string job, std::string node, int rank) {
  auto& c = context();
  std::lock_guard lock(c.mu);
  c.job = std::move(job);
  c.node = std::move(node);
  c.rank = rank;
}

void set_step(int64_t step) {
  auto& c = context();
  std::lock_guard lock(c.mu);
  c.step = step;
}

void set_level(Level l) {
  auto& c = context();
  std::lock_guard lock(c.mu);
  c.level = l;
  c.level_from_env_read = true;
}

Level level() {
  auto& c = context();
  std::lock_guard lock(c.mu);
  if (!c.level_from_env_read) {
    c.level_from_env_read = true;
    if (const char* env = std::getenv("PARTRAIN_LOG_LEVEL")) parse_level(env, &c.level);
  }
  return c.level;
}

void write(Level l, std::string_view subsystem, std::string_view message) {
  if (Forward f = g_forward.load(); f != nullptr) return f(l, subsystem, message);
  auto& c = context();
  std::string line;
  {
    std::lock_guard lock(c.mu);
    line = fmt::format("{} {} {:<7}", utc_now(), level_name(l), subsystem);
    if (!c.job.empty()) line += fmt::format(" job={}", c.job);
    if (!c.node.empty()) line += fmt::format(" node={}", c.node);
    if (c.rank >= 0) line += fmt::format(" rank={}", c.rank);
    if (c.step >= 0) line += fmt::format(" step={}", c.step);
  }
  line += " | ";
  line += message;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace partrain::log
