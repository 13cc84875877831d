// The fields of /proc/PID/stat (proc(5)) of a process on this node, for the agent's watchdog
// (a worker's state) and the store's lock owner check (a process's start time). Header only.
#pragma once

#include <sys/types.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace partrain {

// Fields 3 (state) onwards, split at spaces: field n of proc(5) is the result's [n - 3]. The
// command name before them (field 2) may hold spaces and parentheses, so the split starts
// after its last ')'. Empty when the process is gone (or unreadable).
inline std::vector<std::string> proc_stat_fields(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(file, stat);
  const size_t paren = stat.rfind(')');
  std::vector<std::string> fields;
  if (paren == std::string::npos) return fields;
  std::istringstream in(stat.substr(paren + 1));
  for (std::string f; in >> f;) fields.push_back(f);
  return fields;
}

}  // namespace partrain
