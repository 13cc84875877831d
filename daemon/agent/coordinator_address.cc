// See coordinator_address.h.
#include "agent/coordinator_address.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace partrain::agent {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Reads the folder's entries: NFS then asks the server again instead of trusting a cached
// "no such file".
void relist(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str()); d != nullptr) {
    while (::readdir(d) != nullptr) {
    }
    ::closedir(d);
  }
}

// The file's text after listing its folder; "" when absent.
std::string read_if_there(const std::string& path) {
  relist(fs::path(path).parent_path().string());
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string rendezvous_file(const std::string& state_dir, const std::string& step, const std::string& restart) {
  return fmt::format("{}/rendezvous.{}.{}", state_dir, step, restart);
}

std::string agent_marker(const std::string& state_dir, const std::string& step, const std::string& restart, int node) {
  return fmt::format("{}/agent.{}.{}.{}", state_dir, step, restart, node);
}

Status publish_coordinator(const std::string& path, const std::string& host, int port) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << host << ' ' << port << '\n';
    if (!out.flush()) return Status::io_error(fmt::format("{}: cannot write the coordinator's address", tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Status::io_error(fmt::format("{}: cannot publish the coordinator's address: {}", path, why));
  }
  return Status::ok();
}

Result<CoordinatorAddress> read_coordinator(const std::string& path, std::chrono::milliseconds timeout,
                                            std::chrono::milliseconds slow_after,
                                            const std::function<void()>& still_waiting) {
  const auto start = Clock::now(), deadline = start + timeout;
  bool said = false;
  for (;;) {
    const std::string text = read_if_there(path);
    if (!text.empty() && text.back() == '\n') {
      std::istringstream in(text);
      CoordinatorAddress a;
      if (!(in >> a.host >> a.port) || a.port < 1 || a.port > 65535) {
        return Status::invalid(fmt::format("{}: '{}' is not a coordinator address (host port); remove it",
                                           path, text.substr(0, 80)));
      }
      return a;
    }
    if (!said && still_waiting && Clock::now() - start >= slow_after) {
      said = true;
      still_waiting();
    }
    if (Clock::now() >= deadline) {
      return Status::unavailable(fmt::format("{} did not appear within {} s", path,
                                             std::chrono::duration_cast<std::chrono::seconds>(timeout).count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Status leave_marker(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::io_error(fmt::format("{}: cannot create: {}", path, std::strerror(errno)));
  ::close(fd);
  return Status::ok();
}

int markers_seen(const std::vector<std::string>& paths) {
  int n = 0;
  std::string listed;
  for (const std::string& p : paths) {
    const std::string dir = fs::path(p).parent_path().string();
    if (dir != listed) relist(dir);
    listed = dir;
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) ++n;
  }
  return n;
}

std::string filesystem_kind(const std::string& path) {
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) != 0) return "";
  // The magic numbers of linux/magic.h and the parallel file systems' own.
  switch (static_cast<uint64_t>(fs.f_type)) {
    case 0x6969: return "nfs";
    case 0xFF534D42: return "cifs";
    case 0x0BD00BD0: return "lustre";
    case 0x47504653: return "gpfs";
    case 0x19830326: return "beegfs";
    case 0x00C36400: return "cephfs";
    case 0x65735546: return "fuse";
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794C7630: return "overlayfs";
    default: return fmt::format("file system type {:#x}", static_cast<uint64_t>(fs.f_type));
  }
}

Status check_state_dir(const std::string& state_dir) {
  const std::string root = fs::path(state_dir).parent_path().string();
  struct stat st {};
  if (::stat(state_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::invalid(fmt::format(
        "the job's state directory {} does not exist: the site's state_root {} must exist on storage every node "
        "shares, writable by users (mode 1777); set [paths] state_root in partrain.toml and ask the admin to "
        "create it", state_dir, root));
  }
  if (::access(state_dir.c_str(), W_OK | X_OK) != 0) {
    return Status::invalid(fmt::format("the job's state directory {} is not writable by this user ({}); the site's "
                                       "state_root {} must be writable by users (mode 1777)", state_dir,
                                       std::strerror(errno), root));
  }
  return Status::ok();
}

}  // namespace partrain::agent
