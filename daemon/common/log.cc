#include "common/log.h"

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
  std::mutex out_mu;   // orders the writes of log lines, printed lines and the status line
  std::string status;  // drawn last on stdout; "" = none
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
  auto now = system_clock::now();
  std::time_t secs = system_clock::to_time_t(now);
  auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

// Under out_mu: erases the status line (the cursor is at its end), or redraws it.
void erase_status(const Context& c) {
  if (!c.status.empty()) std::fputs("\r\033[K", stdout), std::fflush(stdout);
}
void draw_status(const Context& c) {
  if (!c.status.empty()) std::fputs(c.status.c_str(), stdout), std::fflush(stdout);
}

}  // namespace

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
  std::lock_guard lock(c.out_mu);
  erase_status(c);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  draw_status(c);
}

void set_status_line(std::string line) {
  auto& c = context();
  std::lock_guard lock(c.out_mu);
  erase_status(c);
  c.status = std::move(line);
  draw_status(c);
}

void print_line(std::string_view text) {
  auto& c = context();
  std::lock_guard lock(c.out_mu);
  erase_status(c);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  draw_status(c);
}

}  // namespace partrain::log
