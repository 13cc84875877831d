// Exit codes of partrain and partraind, documented in partrain(1). Slurm admins key
// RequeueExit= on kExitRetryable and must never requeue kExitUsage.
#pragma once

#include "common/status.h"

namespace partrain {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;    // anything else that went wrong
inline constexpr int kExitUsage = 2;      // bad command line, spec, TOML or data: fix and resubmit
inline constexpr int kExitRetryable = 75; // a node or peer failed: requeue and resume (EX_TEMPFAIL)

// What a process says when the system refused an allocation (std::bad_alloc escaped):
// the job asks more memory than a rank has, which a restart does not cure (exit 2).
inline constexpr const char* kOutOfMemoryMessage =
    "out of memory: the job does not fit this rank's memory; `partrain plan JOB --partrain=SPEC` shows the "
    "memory of each layout (use a smaller model, micro_batch or seq_len, activation recompute, ZeRO, or more "
    "tp/pp ranks)";

// The exit code a Status maps to.
inline int exit_code_for(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kCorruption: return kExitUsage;
    case StatusCode::kUnavailable: return kExitRetryable;
    default: return kExitFailure;
  }
}

}  // namespace partrain
