// temp + fsync + rename + fsync(dir). The temp name carries the pid so two writers of the
// same path (two ranks by mistake) cannot interleave bytes in one temp file.
#include "engine/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace partrain::engine::io {
namespace {

Status write_all(int fd, const std::string& name, const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return Status::io_error(fmt::format("{}: write failed: {}", name, std::strerror(errno)));
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::ok();
}

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

Status write_file_atomic(const std::string& path, const ByteSpan* parts, size_t num_parts) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::io_error(fmt::format("{}: cannot create: {}; check that the folder exists "
                                        "and is writable",
                                        tmp, std::strerror(errno)));
  Status st;
  for (size_t i = 0; i < num_parts && st.is_ok(); ++i) st = write_all(fd, tmp, parts[i].data, parts[i].size);
  if (st.is_ok() && ::fsync(fd) != 0)
    st = Status::io_error(fmt::format("{}: fsync failed: {}", tmp, std::strerror(errno)));
  if (::close(fd) != 0 && st.is_ok())
    st = Status::io_error(fmt::format("{}: close failed: {}", tmp, std::strerror(errno)));
  if (st.is_ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    st = Status::io_error(fmt::format("{}: cannot rename {} into place: {}", path, tmp,
                                      std::strerror(errno)));
  if (!st.is_ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  // The rename lives in the folder's metadata: flush it too, or a crash may forget it.
  const std::string dir = folder_of(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return Status::io_error(fmt::format("{}: cannot open folder to fsync: {}", dir, std::strerror(errno)));
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0)
    return Status::io_error(fmt::format("{}: folder fsync failed: {}", dir, std::strerror(err)));
  return Status::ok();
}

}  // namespace partrain::engine::io
