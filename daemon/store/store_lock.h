// Who holds a run's state store, recorded beside RocksDB's lock, so that a lock whose owner
// is gone can be broken. RocksDB locks ROOT/state.db/LOCK with fcntl(2); on NFS or Lustre
// that lock can outlive a node that died holding it, and the run's every restart would then
// find it locked. The coordinator that opens the store writes ROOT/state.db.owner:
//
//   host=n1 pid=4242 start=123456 boot=8f0c...-... job=1234 restart=0
//
// (start: the process's start time in clock ticks after boot, /proc/PID/stat field 22, so a
// reused pid is not taken for the owner; job, restart: SLURM_JOB_ID and
// SLURM_RESTART_COUNT, "-" outside Slurm). A start that finds the store locked judges the
// recorded owner (owner_gone) and either breaks the lock, by moving state.db/LOCK aside (a
// new file takes a new lock) and logging whose it was, or refuses with a configuration
// error naming the live owner: two runs on one checkpoint folder never cure by a requeue.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <sys/types.h>

#include "common/status.h"

namespace partrain::store {

struct LockOwner {
  std::string host;
  pid_t pid = 0;
  unsigned long long start = 0;  // process start time (clock ticks after boot)
  std::string boot;              // /proc/sys/kernel/random/boot_id
  std::string job = "-";         // SLURM_JOB_ID
  long restart = 0;              // SLURM_RESTART_COUNT
};

// This process as an owner.
LockOwner this_process();
std::string encode_owner(const LockOwner& o);
Result<LockOwner> decode_owner(const std::string& text);

// What the judge may ask the system; real ones in owner_gone_here().
struct Liveness {
  std::function<bool(pid_t, unsigned long long)> process_alive;  // this host: that pid with that start time
  std::function<std::optional<bool>(const std::string&)> job_running;  // Slurm; nullopt: cannot tell
};
Liveness system_liveness();

// Whether the recorded owner is gone, seen from `me`:
//   - same host, and another boot or no process with that pid and start time: gone;
//   - same Slurm job, lower restart count: gone (Slurm requeues only after an attempt ended);
//   - a Slurm job that is no longer running: gone;
//   - otherwise alive (including "cannot tell"): the caller refuses.
bool owner_gone(const LockOwner& owner, const LockOwner& me, const Liveness& live);

// ROOT/state.db.owner for a store at `db_path` (ROOT/state.db).
std::string owner_file(const std::string& db_path);
// Records this process as the owner (temp file, rename).
Status write_owner(const std::string& db_path);

// After RocksDB found `db_path` locked: breaks the lock when its recorded owner is gone
// (moves LOCK aside, logs both) and returns true; false and the configuration error to
// return when the owner lives or none is recorded.
Result<bool> break_stale_lock(const std::string& db_path, const Liveness& live = system_liveness());

}  // namespace partrain::store
