// temp + fsync + rename + fsync(dir). The temp name carries the pid so two writers of the
// same path (two ranks by mistake) cannot interleave bytes in one temp file.
#include "engine/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

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

AtomicFileWriter::~AtomicFileWriter() { discard(); }

void AtomicFileWriter::discard() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
  fd_ = -1;
}

Status AtomicFileWriter::open(const std::string& path) {
  discard();
  path_ = path;
  tmp_ = fmt::format("{}.tmp.{}", path, ::getpid());
  size_ = 0;
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    return Status::io_error(fmt::format("{}: cannot create: {}; check that the folder exists "
                                        "and is writable",
                                        tmp_, std::strerror(errno)));
  return Status::ok();
}

Status AtomicFileWriter::append(const void* data, size_t size) {
  if (fd_ < 0) return Status::internal(fmt::format("{}: append to a file not open", path_));
  Status st = write_all(fd_, tmp_, data, size);
  if (!st.is_ok()) {
    discard();
    return st;
  }
  size_ += size;
  return Status::ok();
}

Status AtomicFileWriter::write_at(uint64_t offset, const void* data, size_t size) {
  if (fd_ < 0) return Status::internal(fmt::format("{}: write to a file not open", path_));
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd_, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status st = Status::io_error(fmt::format("{}: write failed: {}", tmp_, std::strerror(errno)));
      discard();
      return st;
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
  return Status::ok();
}

Status AtomicFileWriter::commit() {
  if (fd_ < 0) return Status::internal(fmt::format("{}: commit of a file not open", path_));
  Status st;
  if (::fsync(fd_) != 0)
    st = Status::io_error(fmt::format("{}: fsync failed: {}", tmp_, std::strerror(errno)));
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0 && st.is_ok())
    st = Status::io_error(fmt::format("{}: close failed: {}", tmp_, std::strerror(errno)));
  if (st.is_ok() && ::rename(tmp_.c_str(), path_.c_str()) != 0)
    st = Status::io_error(fmt::format("{}: cannot rename {} into place: {}", path_, tmp_,
                                      std::strerror(errno)));
  if (!st.is_ok()) {
    ::unlink(tmp_.c_str());
    return st;
  }
  // The rename lives in the folder's metadata: flush it too, or a crash may forget it.
  const std::string dir = folder_of(path_);
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

Status write_file_atomic(const std::string& path, const ByteSpan* parts, size_t num_parts) {
  AtomicFileWriter w;
  PARTRAIN_RETURN_IF_ERROR(w.open(path));
  for (size_t i = 0; i < num_parts; ++i) PARTRAIN_RETURN_IF_ERROR(w.append(parts[i].data, parts[i].size));
  return w.commit();
}

}  // namespace partrain::engine::io
