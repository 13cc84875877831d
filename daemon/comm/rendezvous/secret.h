// The per-job secret that authenticates every rendezvous connection. It comes from a file
// only the job's user can read (mode 0600) or from PARTRAIN_JOB_SECRET in the environment
// of the job's own processes; it is never sent over the wire (see auth.h).
#pragma once

#include <string>

#include "common/status.h"
#include "common/worker_env.h"

namespace partrain::comm {

// The agent hands it to its workers under this name (common/worker_env.h).
inline constexpr const char* kJobSecretEnv = worker_env_key::kJobSecret;
// Shorter secrets are refused: 16 bytes is the least that resists guessing.
inline constexpr size_t kMinSecretBytes = 16;
inline constexpr size_t kMaxSecretBytes = 4096;

// Reads the secret from `path`. Refused, with the file named and the fix given, when the
// file is not a regular file, is readable or writable by group or others (run chmod 600),
// belongs to another user, or holds fewer than kMinSecretBytes. One trailing newline is
// dropped so `echo SECRET > file` works.
Result<std::string> read_secret_file(const std::string& path);

// The secret from PARTRAIN_JOB_SECRET; not_found when unset, invalid when too short.
Result<std::string> secret_from_env();

// The file when `path` is non-empty, else the environment. The error says both ways.
Result<std::string> load_job_secret(const std::string& path);

// 32 random bytes from the OS CSPRNG, hex-encoded (64 characters).
Result<std::string> generate_secret();

// Creates `path` with mode 0600 (refusing to overwrite an existing file) holding `secret`.
Status write_secret_file(const std::string& path, const std::string& secret);

}  // namespace partrain::comm
