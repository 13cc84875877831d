// Reading a file a user names, safely: every command line path, job file, site config,
// topology file, safetensors file and token shard goes through open_regular_file(), so a
// FIFO, a device (/dev/zero) or a folder given where a file belongs is refused at once in
// one line instead of blocking the reader or filling memory, and read_regular_file() reads
// at most `max_bytes`.
//
// How: open(2) with O_NONBLOCK (opening a FIFO for reading never waits for a writer), then
// fstat(2) on the descriptor (no race with a rename between the check and the open), then
// O_NONBLOCK is cleared for the reads. Header only, standard library and POSIX alone, like
// status.h, so the layout core may use it.
//
// Worked example: read_regular_file("/dev/zero", "topology file", 16 << 20) returns
//   invalid "/dev/zero: is a character device, not a topology file; give a regular file"
// and mkfifo p; read_regular_file("p", "job file", ...) returns at once with "is a FIFO".
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/status.h"

namespace partrain {

// What `mode` is, in a message: "a folder", "a FIFO (named pipe)", "a character device", ...
inline const char* file_kind_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// An open descriptor of a regular file; closed on destruction. Move-only.
class RegularFile {
 public:
  RegularFile() = default;
  RegularFile(int fd, off_t size) : fd_(fd), size_(size) {}
  RegularFile(RegularFile&& o) noexcept : fd_(o.fd_), size_(o.size_) { o.fd_ = -1; }
  RegularFile& operator=(RegularFile&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      size_ = o.size_;
      o.fd_ = -1;
    }
    return *this;
  }
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile() { reset(); }

  int fd() const { return fd_; }
  off_t size() const { return size_; }  // at open
  // Gives the descriptor up to the caller (who closes it).
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  off_t size_ = 0;
};

// Opens `path` for reading when it is a regular file (symbolic links followed). `what`
// names it in messages ("job file", "token shard"). not_found when it does not exist;
// invalid when it is a folder, FIFO, device or socket, or unreadable to this user;
// io_error for anything else the system refuses.
inline Result<RegularFile> open_regular_file(const std::string& path, std::string_view what) {
  const std::string w(what);
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return Status::not_found(path + ": no such " + w + "; check the path");
    if (err == EACCES || err == EPERM) {
      return Status::invalid(path + ": cannot read the " + w + " (" + std::strerror(err) +
                             "); check its permissions");
    }
    if (err == ENXIO) {  // a socket, or a FIFO opened for writing: never a regular file
      return Status::invalid(path + ": is not a regular file, not a " + w + "; give a regular file");
    }
    return Status::io_error(path + ": cannot open the " + w + ": " + std::strerror(err));
  }
  RegularFile file(fd, 0);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Status::io_error(path + ": cannot stat the " + w + ": " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return Status::invalid(path + ": is a folder, not a " + w);
  if (!S_ISREG(st.st_mode)) {
    return Status::invalid(path + ": is " + file_kind_name(st.st_mode) + ", not a " + w +
                           "; give a regular file");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return RegularFile(file.release(), st.st_size);
}

// The whole content of the regular file `path`, at most `max_bytes` of it: invalid (naming
// the limit) when it holds more. The limit is checked on the bytes read, not only on
// fstat's size, so a file that grows while it is read (or a /proc file of size 0) is
// bounded too.
inline Result<std::string> read_regular_file(const std::string& path, std::string_view what, size_t max_bytes) {
  Result<RegularFile> f = open_regular_file(path, what);
  if (!f) return f.status();
  const std::string too_big = path + ": the " + std::string(what) + " is larger than " + std::to_string(max_bytes) +
                              " bytes, more than any " + std::string(what) + " needs; check the path";
  if (static_cast<uint64_t>(f->size()) > max_bytes) return Status::invalid(too_big);
  std::string out;
  out.resize(static_cast<size_t>(f->size()));
  size_t got = 0;
  while (true) {
    if (got == out.size()) {
      if (out.size() > max_bytes) return Status::invalid(too_big);
      out.resize(std::min(max_bytes + 1, std::max<size_t>(out.size() * 2, 4096)));
    }
    const ssize_t n = ::read(f->fd(), out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      if (err == EISDIR) return Status::invalid(path + ": is a folder, not a " + std::string(what));
      return Status::io_error(path + ": cannot read the " + std::string(what) + ": " + std::strerror(err));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes) return Status::invalid(too_big);
  out.resize(got);
  return out;
}

}  // namespace partrain
