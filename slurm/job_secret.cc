// The job's state directory and secret (see job_secret.h).
#include "job_secret.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

namespace partrain::spank {
namespace {

constexpr size_t kSecretFileSize = 2 * kSecretBytes + 1;

std::string errno_text() { return std::strerror(errno); }

Status check_owner(const std::string& path, const struct stat& st, uid_t uid, mode_t forbidden) {
  if (st.st_uid != uid) {
    return Status::io_error("partrain: " + path + " belongs to uid " + std::to_string(st.st_uid) +
                            ", not to the job's user (uid " + std::to_string(uid) +
                            "); remove it or use another state_root");
  }
  if ((st.st_mode & forbidden) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(st.st_mode & 0777));
    return Status::io_error("partrain: " + path + " is open to other users (mode " + mode +
                            "); run chmod go-rwx on it, or remove it");
  }
  return Status::ok();
}

Status write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::io_error(errno_text());
    data += n;
    size -= static_cast<size_t>(n);
  }
  return Status::ok();
}

Status random_hex(std::string* out) {
  unsigned char bytes[kSecretBytes];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::io_error("partrain: getrandom: " + errno_text());
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out->clear();
  for (unsigned char b : bytes) {
    out->push_back(kHex[b >> 4]);
    out->push_back(kHex[b & 15]);
  }
  out->push_back('\n');
  return Status::ok();
}

// Checks an existing secret file (lstat: a symlink is refused, not followed).
Status check_secret(const std::string& path, uid_t uid) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    return Status::io_error("partrain: cannot stat " + path + ": " + errno_text());
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::io_error("partrain: " + path + " is not a regular file; remove it");
  }
  PARTRAIN_RETURN_IF_ERROR(check_owner(path, st, uid, 077));
  if (static_cast<size_t>(st.st_size) != kSecretFileSize) {
    return Status::corruption("partrain: " + path + " has " + std::to_string(st.st_size) +
                              " bytes, not " + std::to_string(kSecretFileSize) +
                              "; remove it so the next run makes a new one");
  }
  return Status::ok();
}

}  // namespace

Status ensure_state_dir(const std::string& state_root, const std::string& state_dir, uid_t uid) {
  struct stat st {};
  if (::stat(state_root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::not_found("partrain: state_root " + state_root +
                             " is not a directory; the admin creates it on storage all nodes "
                             "share (mode 1777) or sets state_root= in plugstack.conf");
  }
  if (::mkdir(state_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::io_error("partrain: cannot create " + state_dir + ": " + errno_text() +
                            "; state_root " + state_root + " must be writable by users "
                            "(mode 1777)");
  }
  if (::lstat(state_dir.c_str(), &st) != 0) {
    return Status::io_error("partrain: cannot stat " + state_dir + ": " + errno_text());
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::io_error("partrain: " + state_dir + " is not a directory; remove it");
  }
  return check_owner(state_dir, st, uid, 022);
}

Result<std::string> ensure_job_secret(const std::string& state_dir, uid_t uid) {
  const std::string path = state_dir + "/" + kSecretFileName;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    PARTRAIN_RETURN_IF_ERROR(check_secret(path, uid));
    return path;
  }
  std::string secret;
  PARTRAIN_RETURN_IF_ERROR(random_hex(&secret));
  // A name no other task, thread or node picks: host, pid and a random nonce.
  std::string nonce;
  PARTRAIN_RETURN_IF_ERROR(random_hex(&nonce));
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string tmp = path + ".tmp." + host + "." + std::to_string(::getpid()) + "." +
                          nonce.substr(0, 16);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return Status::io_error("partrain: cannot create " + tmp + ": " + errno_text());
  }
  Status written = write_all(fd, secret.data(), secret.size());
  if (written.is_ok() && ::fsync(fd) != 0) written = Status::io_error(errno_text());
  ::close(fd);
  if (!written.is_ok()) {
    ::unlink(tmp.c_str());
    return Status::io_error("partrain: cannot write " + tmp + ": " + written.message());
  }
  const bool linked = ::link(tmp.c_str(), path.c_str()) == 0;
  const int link_errno = errno;
  ::unlink(tmp.c_str());
  if (!linked && link_errno != EEXIST) {
    return Status::io_error("partrain: cannot link " + tmp + " to " + path + ": " +
                            std::strerror(link_errno));
  }
  // Whoever won, the file now exists and is complete.
  PARTRAIN_RETURN_IF_ERROR(check_secret(path, uid));
  return path;
}

std::string job_state_dir(const std::string& state_root, uint32_t job_id) {
  return state_root + "/slurm-" + std::to_string(job_id);
}

Status remove_job_secret(const std::string& state_dir, uid_t uid) {
  const int dir = ::open(state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) {
    if (errno == ENOENT) return Status::ok();
    return Status::io_error("partrain: cannot open " + state_dir + ": " + errno_text());
  }
  const std::string path = state_dir + "/" + kSecretFileName;
  struct stat st {};
  Status status = Status::ok();
  if (::fstatat(dir, kSecretFileName, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno != ENOENT) status = Status::io_error("partrain: cannot stat " + path + ": " + errno_text());
  } else if (!S_ISREG(st.st_mode) || st.st_uid != uid) {
    status = Status::invalid("partrain: " + path + " is not the job's secret (not a regular file of uid " +
                             std::to_string(uid) + "); left in place, remove it by hand");
  } else if (::unlinkat(dir, kSecretFileName, 0) != 0 && errno != ENOENT) {
    status = Status::io_error("partrain: cannot remove " + path + ": " + errno_text());
  }
  ::close(dir);
  return status;
}

}  // namespace partrain::spank
