// See progress_watch.h.
#include "agent/progress_watch.h"

#include <unistd.h>

#include <cerrno>

namespace partrain::agent {

ProgressWatch::ProgressWatch(const std::vector<std::pair<int, int>>& pipes, Clock::time_point now) {
  for (const auto& [rank, fd] : pipes) {
    Entry e;
    e.rank = rank;
    e.fd = fd;
    e.at = now;
    entries_.push_back(std::move(e));
  }
}

void ProgressWatch::drain(Clock::time_point now) {
  for (Entry& e : entries_) {
    if (e.fd < 0) continue;
    char buf[4096];
    while (true) {
      const ssize_t n = ::read(e.fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // nothing more now (EAGAIN), or the worker closed it
      e.partial.append(buf, static_cast<size_t>(n));
    }
    // Every complete line is progress; the last says where the rank is.
    for (size_t nl; (nl = e.partial.find('\n')) != std::string::npos; e.partial.erase(0, nl + 1)) {
      const std::string line = e.partial.substr(0, nl);
      const size_t sp = line.find(' ');
      e.step = line.substr(0, sp);
      e.phase = sp == std::string::npos ? "" : line.substr(sp + 1);
      const size_t tab = e.phase.find('\t');
      e.waiting = tab != std::string::npos && e.phase.compare(tab + 1, std::string::npos, "waiting") == 0;
      if (tab != std::string::npos) e.phase.erase(tab);
      e.at = now;
      e.reported = true;
    }
    if (e.partial.size() > 4096) e.partial.clear();  // no line is this long: not a worker's
  }
}

}  // namespace partrain::agent
