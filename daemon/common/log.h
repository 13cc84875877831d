// The one logger. Every line is one event, tagged with the job, node, rank and step it
// belongs to, so the lines of a thousand ranks can be merged and grepped:
//
//   2026-11-29T18:50:01.123Z INFO  engine  job=demo node=n1 rank=3 step=12 | loss 4.21
//
// The tags are process-wide (one worker is one rank); set them once at start-up and the
// step at each step boundary. Lines go to stderr, which Slurm collects per task.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace partrain::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Tags put on every line. An empty job/node or a negative rank/step is left out.
void set_context(std::string job, std::string node, int rank);
void set_step(int64_t step);
// Lines below `level` are dropped. Default: kInfo, or PARTRAIN_LOG_LEVEL=debug|info|warn|error.
void set_level(Level level);
Level level();
// Parses "debug", "info", "warn", "error"; false for anything else.
bool parse_level(std::string_view text, Level* out);

void write(Level level, std::string_view subsystem, std::string_view message);

// A status line (the progress bar with its ETA) kept as the terminal's last line: it is
// drawn on stdout, erased before every log line or print_line and drawn again after it, so
// neither overwrites the other. Only for a terminal: "" (the default) draws nothing.
void set_status_line(std::string line);
// `text` (one line, no newline) on stdout, above the status line.
void print_line(std::string_view text);

template <typename... Args>
void debug(std::string_view subsystem, fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kDebug) write(Level::kDebug, subsystem, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(std::string_view subsystem, fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kInfo) write(Level::kInfo, subsystem, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(std::string_view subsystem, fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kWarn) write(Level::kWarn, subsystem, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(std::string_view subsystem, fmt::format_string<Args...> f, Args&&... args) {
  write(Level::kError, subsystem, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace partrain::log
