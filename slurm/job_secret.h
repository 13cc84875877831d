// The job's state directory and its shared secret, made by whichever task gets there
// first. The secret authenticates the job's agents to each other at rendezvous, so every
// node must read the same bytes: it lives in the state directory on the shared state
// root, readable only by the job's user (mode 0600).
//
// Race-free without locks, also on NFS: each task writes a complete secret to a file of
// its own (O_CREAT|O_EXCL, 0600), then link(2)s it to the final name. link() refuses to
// replace an existing file, so exactly one task's secret becomes job.secret and every
// reader sees a whole file, never a half-written one. No Slurm header is needed.
#pragma once

#include <cstdint>
#include <string>
#include <sys/types.h>

#include "common/status.h"

namespace partrain::spank {

inline constexpr const char* kSecretFileName = "job.secret";
inline constexpr int kSecretBytes = 32;  // written as 64 hex digits and a newline

// <state_root>/slurm-<job id>: the job's state directory, the same on every node and for
// every run of a requeued job.
std::string job_state_dir(const std::string& state_root, uint32_t job_id);

// Makes `state_dir` (mode 0700) inside the existing `state_root` unless it exists, and
// checks it is a real directory owned by `uid` that no one else can write.
Status ensure_state_dir(const std::string& state_root, const std::string& state_dir, uid_t uid);

// Creates <state_dir>/job.secret once per job and returns its path; later calls (other
// tasks, other nodes, a requeued run) find it and check it: a regular file owned by `uid`
// with no group/other access and the expected size.
Result<std::string> ensure_job_secret(const std::string& state_dir, uid_t uid);

// Removes <state_dir>/job.secret when the job ends: the plugin's job epilog runs it as root
// on every node of the job (the first removes it, the others find it gone; a requeued run
// makes a new one). The directory is the user's, so no symlink is followed and only a
// regular file owned by `uid` is removed. OK when there is nothing to remove (a job that
// did not use partrain).
Status remove_job_secret(const std::string& state_dir, uid_t uid);

}  // namespace partrain::spank
