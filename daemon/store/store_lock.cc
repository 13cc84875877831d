// See store_lock.h.
#include "store/store_lock.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "common/proc_stat.h"

namespace partrain::store {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Field 22 of /proc/PID/stat, the start time in clock ticks after boot; 0 if unknown.
unsigned long long start_time(pid_t pid) {
  const std::vector<std::string> f = proc_stat_fields(pid);
  return f.size() > 22 - 3 ? std::strtoull(f[22 - 3].c_str(), nullptr, 10) : 0;
}

std::string hostname() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

LockOwner this_process() {
  LockOwner o;
  o.host = hostname();
  o.pid = ::getpid();
  o.start = start_time(o.pid);
  o.boot = trimmed(read_text("/proc/sys/kernel/random/boot_id"));
  if (const char* j = std::getenv("SLURM_JOB_ID"); j != nullptr && *j != '\0') o.job = j;
  if (const char* r = std::getenv("SLURM_RESTART_COUNT"); r != nullptr) o.restart = std::atol(r);
  return o;
}

std::string encode_owner(const LockOwner& o) {
  return fmt::format("host={} pid={} start={} boot={} job={} restart={}\n", o.host, o.pid, o.start,
                     o.boot.empty() ? "-" : o.boot, o.job, o.restart);
}

Result<LockOwner> decode_owner(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  for (std::string word; in >> word;) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos) return Status::corruption("lock owner record '" + text.substr(0, 120) + "'");
    kv[word.substr(0, eq)] = word.substr(eq + 1);
  }
  for (const char* k : {"host", "pid", "start", "boot", "job", "restart"}) {
    if (kv.count(k) == 0) return Status::corruption(fmt::format("lock owner record lacks {}: '{}'", k, text.substr(0, 120)));
  }
  LockOwner o;
  o.host = kv["host"];
  o.pid = static_cast<pid_t>(std::atol(kv["pid"].c_str()));
  o.start = std::strtoull(kv["start"].c_str(), nullptr, 10);
  o.boot = kv["boot"] == "-" ? "" : kv["boot"];
  o.job = kv["job"];
  o.restart = std::atol(kv["restart"].c_str());
  return o;
}

Liveness system_liveness() {
  Liveness l;
  l.process_alive = [](pid_t pid, unsigned long long start) {
    if (pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH)) return false;
    return start == 0 || start_time(pid) == start;
  };
  l.job_running = [](const std::string& job) -> std::optional<bool> {
    // squeue lists pending, running and completing jobs; an ended one is not listed.
    const std::string cmd = fmt::format("squeue -h -j '{}' -o %T 2>/dev/null", job);
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return std::nullopt;
    char buf[256];
    std::string out;
    while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    const int rc = ::pclose(p);
    if (rc != 0 && out.empty()) {
      // squeue exits 1 for an unknown job id, 127 when it is not installed.
      return WIFEXITED(rc) && WEXITSTATUS(rc) == 1 ? std::optional<bool>(false) : std::nullopt;
    }
    return !trimmed(out).empty();
  };
  return l;
}

bool owner_gone(const LockOwner& owner, const LockOwner& me, const Liveness& live) {
  if (owner.host == me.host) {
    if (!owner.boot.empty() && !me.boot.empty() && owner.boot != me.boot) return true;  // rebooted since
    return !live.process_alive(owner.pid, owner.start);
  }
  if (owner.job != "-" && owner.job == me.job && owner.restart < me.restart) return true;
  if (owner.job != "-" && live.job_running) {
    const std::optional<bool> running = live.job_running(owner.job);
    if (running && !*running) return true;
  }
  return false;
}

std::string owner_file(const std::string& db_path) { return db_path + ".owner"; }

Status write_owner(const std::string& db_path) {
  const std::string path = owner_file(db_path), tmp = path + fmt::format(".tmp.{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << encode_owner(this_process());
    if (!out.flush()) return Status::io_error(tmp + ": cannot record the state store's owner");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::io_error(fmt::format("{}: cannot record the state store's owner: {}", path, std::strerror(errno)));
  }
  return Status::ok();
}

Result<bool> break_stale_lock(const std::string& db_path, const Liveness& live) {
  const std::string text = read_text(owner_file(db_path));
  if (text.empty()) {
    return Status::invalid(fmt::format(
        "{}: in use by another partrain run (only one coordinator may open a state store) and no owner is "
        "recorded beside it; stop that run, or give this job another [checkpoint] dir or run_dir (if no run uses "
        "it, remove {}/LOCK)", db_path, db_path));
  }
  Result<LockOwner> owner = decode_owner(text);
  if (!owner) return owner.status().prefixed(owner_file(db_path) + ": ");
  const std::string who = fmt::format("pid {} on {}{}", owner->pid, owner->host,
                                      owner->job == "-" ? "" : fmt::format(", Slurm job {} restart {}", owner->job,
                                                                           owner->restart));
  if (!owner_gone(*owner, this_process(), live)) {
    // Worded as from_rocks (state_store.cc) words a lock with no owner record beside it.
    return Status::invalid(fmt::format(
        "{}: in use by another partrain run (pid {}) on {}{}; only one coordinator may open a state store: stop "
        "that run, or give this job another [checkpoint] dir or run_dir", db_path, owner->pid, owner->host,
        owner->job == "-" ? "" : fmt::format(", Slurm job {} restart {}", owner->job, owner->restart)));
  }
  const std::string lock = db_path + "/LOCK";
  const std::string aside = fmt::format("{}.stale-{}", lock, static_cast<long long>(::time(nullptr)));
  if (::rename(lock.c_str(), aside.c_str()) != 0 && errno != ENOENT) {
    return Status::io_error(fmt::format("{}: cannot break the stale lock of {}: {}", lock, who, std::strerror(errno)));
  }
  log::warn("store", "{}: broke the stale lock of {}, which is gone (moved to {})", db_path, who, aside);
  return true;
}

}  // namespace partrain::store
