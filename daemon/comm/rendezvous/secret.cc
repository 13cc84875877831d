#include "comm/rendezvous/secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <openssl/rand.h>

namespace partrain::comm {
namespace {

Status check_length(const std::string& secret, const std::string& where) {
  if (secret.size() < kMinSecretBytes) {
    return Status::invalid(fmt::format(
        "{}: the job secret has {} bytes, fewer than the {} required; generate one with "
        "`head -c 32 /dev/urandom | xxd -p -c 64`",
        where, secret.size(), kMinSecretBytes));
  }
  if (secret.size() > kMaxSecretBytes) {
    return Status::invalid(fmt::format("{}: the job secret has {} bytes, more than the {} allowed",
                                       where, secret.size(), kMaxSecretBytes));
  }
  return Status::ok();
}

}  // namespace

Result<std::string> read_secret_file(const std::string& path) {
  // O_NOFOLLOW|fstat on the open descriptor: the mode we check is the file we read.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return Status::not_found(fmt::format("job secret file {} does not exist", path));
    return Status::io_error(fmt::format("cannot open job secret file {}: {}", path, std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::io_error(fmt::format("cannot stat job secret file {}: {}", path, std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::invalid(fmt::format("job secret file {} is not a regular file", path));
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    return Status::invalid(fmt::format(
        "job secret file {} is accessible by group or others (mode {:04o}); other users could "
        "join or disrupt the job. Fix: chmod 600 {}",
        path, st.st_mode & 07777, path));
  }
  if (st.st_uid != ::geteuid()) {
    ::close(fd);
    return Status::invalid(fmt::format(
        "job secret file {} belongs to uid {}, not to this user (uid {}); create your own with "
        "mode 0600",
        path, st.st_uid, ::geteuid()));
  }
  std::string secret;
  char buf[512];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return Status::io_error(fmt::format("cannot read job secret file {}: {}", path, std::strerror(err)));
    }
    if (n == 0) break;
    secret.append(buf, static_cast<size_t>(n));
    if (secret.size() > kMaxSecretBytes + 1) break;
  }
  ::close(fd);
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();
  PARTRAIN_RETURN_IF_ERROR(check_length(secret, "job secret file " + path));
  return secret;
}

Result<std::string> secret_from_env() {
  const char* value = std::getenv(kJobSecretEnv);
  if (value == nullptr) {
    return Status::not_found(fmt::format("{} is not set", kJobSecretEnv));
  }
  std::string secret(value);
  PARTRAIN_RETURN_IF_ERROR(check_length(secret, kJobSecretEnv));
  return secret;
}

Result<std::string> load_job_secret(const std::string& path) {
  if (!path.empty()) return read_secret_file(path);
  auto secret = secret_from_env();
  if (!secret && secret.status().code() == StatusCode::kNotFound) {
    return Status::not_found(fmt::format(
        "no job secret: set {} in the job's environment or name a mode-0600 secret file", kJobSecretEnv));
  }
  return secret;
}

Result<std::string> generate_secret() {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof(raw)) != 1) {
    return Status::internal("the OpenSSL random generator failed to produce a job secret");
  }
  std::string hex;
  hex.reserve(2 * sizeof(raw));
  for (unsigned char b : raw) hex += fmt::format("{:02x}", b);
  return hex;
}

Status write_secret_file(const std::string& path, const std::string& secret) {
  PARTRAIN_RETURN_IF_ERROR(check_length(secret, "job secret for " + path));
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return Status::io_error(fmt::format("cannot create job secret file {}: {}{}", path,
                                        std::strerror(errno),
                                        errno == EEXIST ? " (remove the stale file first)" : ""));
  }
  // The umask may only remove bits, but be explicit: 0600 whatever the umask.
  ::fchmod(fd, 0600);
  std::string data = secret + "\n";
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return Status::io_error(fmt::format("cannot write job secret file {}: {}", path, std::strerror(err)));
    }
    off += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    return Status::io_error(fmt::format("cannot close job secret file {}: {}", path, std::strerror(errno)));
  }
  return Status::ok();
}

}  // namespace partrain::comm
