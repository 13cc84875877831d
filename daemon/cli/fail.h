// How a `partrain` command reports a failure: one line on standard error, prefixed
// "partrain: " (once: some library messages already carry it), and the exit code the
// Status maps to (exit_codes.h).
#pragma once

#include <cstdio>

#include "common/exit_codes.h"
#include "common/status.h"

namespace partrain::cli {

inline int fail(const Status& s) {
  const bool prefixed = s.message().rfind("partrain:", 0) == 0;
  std::fprintf(stderr, "%s%s\n", prefixed ? "" : "partrain: ", s.message().c_str());
  return exit_code_for(s);
}

// kExitOk, or fail(s).
inline int fail_or_ok(const Status& s) { return s ? kExitOk : fail(s); }

}  // namespace partrain::cli
