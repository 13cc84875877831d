// See fault.h.
#include "store/fault.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/progress.h"

namespace partrain::store {

bool fault_armed(const char* point, int64_t step, int rank) {
  const char* spec = std::getenv("PARTRAIN_FAULT");
  if (spec == nullptr || *spec == '\0') return false;
  // A comma-separated list: any entry may match.
  const std::string head = std::string(point) + ":" + std::to_string(step);
  const std::string with_rank = head + ":" + std::to_string(rank);
  bool named = false;
  for (std::string_view rest = spec; !rest.empty() && !named;) {
    const size_t comma = rest.find(',');
    const std::string_view entry = rest.substr(0, comma);
    named = entry == head || entry == with_rank;
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (!named) return false;
  // PARTRAIN_FAULT_ONCE=FILE: only the first process to get here dies (it creates FILE), so a
  // restarted worker group runs past the same point.
  if (const char* once = std::getenv("PARTRAIN_FAULT_ONCE"); once != nullptr && *once != '\0') {
    const int fd = ::open(once, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    ::close(fd);
  }
  return true;
}

void crash_point(const char* point, int64_t step, int rank) {
  if (fault_armed(point, step, rank)) kill_at(point, step, rank);
}

void kill_at(const char* point, int64_t step, int rank) {
  std::fprintf(stderr, "partrain: PARTRAIN_FAULT: killing pid %d at %s, step %lld, rank %d\n",
               static_cast<int>(::getpid()), point, static_cast<long long>(step), rank);
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();  // SIGKILL ends every thread of the process; nothing runs on from here
}

void exit_zero_point(int64_t step, int rank) {
  if (!fault_armed("exit_zero", step, rank)) return;
  std::fprintf(stderr, "partrain: PARTRAIN_FAULT: pid %d exits 0 at step %lld, rank %d\n",
               static_cast<int>(::getpid()), static_cast<long long>(step), rank);
  std::fflush(stderr);
  ::_exit(0);
}

void hang_point(int64_t step, int rank) {
  if (!fault_armed("plugin_hang", step, rank)) return;
  std::fprintf(stderr, "partrain: PARTRAIN_FAULT: pid %d hangs in the data plugin at step %lld, rank %d\n",
               static_cast<int>(::getpid()), static_cast<long long>(step), rank);
  std::fflush(stderr);
  // The peers reach the collective first and wait; then this rank says it is in the plugin
  // (so it is not the longest silent: a watchdog that blamed the longest silent would name
  // a waiting peer) and hangs there.
  ::sleep(1);
  progress::enter("in the data plugin");
  for (;;) ::sleep(1);  // a plugin stuck in its own code: the agent ends the process
}

}  // namespace partrain::store
