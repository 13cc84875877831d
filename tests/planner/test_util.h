// Helpers the planner's command-line tests share: run a shell command with its output in
// files, read a file, and walk the JSON that `partrain plan` / `report` print.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "engine/io/json.h"

namespace partrain::planner::testing {

using engine::io::JsonValue;

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `cmd` with stdout into `out` and stderr into `err` (the same file when `err` is
// empty); returns the exit code, -1 when it did not exit.
inline int sh(const std::string& cmd, const std::filesystem::path& out,
              const std::filesystem::path& err = {}) {
  const std::string full = cmd + " >'" + out.string() + "' " +
                           (err.empty() ? std::string("2>&1") : "2>'" + err.string() + "'");
  const int status = std::system(full.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Member `key` of an object; a test failure (and a null value) when it is missing.
inline const JsonValue& at(const JsonValue& v, const std::string& key) {
  for (const auto& [k, m] : v.members) {
    if (k == key) return m;
  }
  static const JsonValue kNone;
  ADD_FAILURE() << "no key " << key;
  return kNone;
}

// The number at a dotted path, e.g. "memory.engine_total".
inline double number(const JsonValue& v, const std::string& path) {
  const JsonValue* here = &v;
  std::istringstream parts(path);
  for (std::string key; std::getline(parts, key, '.');) here = &at(*here, key);
  return here->kind == JsonValue::Kind::kNumber ? std::stod(here->text) : 0;
}

}  // namespace partrain::planner::testing
