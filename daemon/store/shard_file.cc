// See shard_file.h.
#include "store/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "common/read_file.h"
#include "engine/io/atomic_file.h"
#include "common/crc32c.h"
#include "store/fault.h"

namespace partrain::store {
namespace {

// fsync of a folder, so the entries made or removed in it survive a crash.
Status sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::io_error(fmt::format("{}: cannot open: {}", dir, std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return Status::io_error(fmt::format("{}: fsync failed: {}", dir, std::strerror(err)));
  return Status::ok();
}

// mkdir + fsync of the parent, so the new folder survives a crash with the files in it.
Status make_durable_dir(const std::string& root, const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::io_error(fmt::format("{}: cannot create: {}", dir, std::strerror(errno)));
  }
  return sync_dir(root);
}

// pread of the whole range; returns the bytes read (fewer at end of file).
Result<size_t> read_at(int fd, const std::string& path, uint64_t offset, void* dst, size_t size) {
  size_t done = 0;
  auto* p = static_cast<char*>(dst);
  while (done < size) {
    const ssize_t n = ::pread(fd, p + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::io_error(fmt::format("{}: read failed: {}", path, std::strerror(errno)));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace

std::string checkpoint_root(const std::string& dir, const std::string& run_dir) {
  return dir.empty() ? run_dir + "/checkpoints" : dir;
}

std::string step_folder(int64_t step) { return fmt::format("step-{:012d}", step); }

int64_t parse_step_folder(const std::string& name) {
  if (name.size() != 17 || name.compare(0, 5, "step-") != 0) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

Result<std::vector<int64_t>> list_step_folders(const std::string& root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!std::filesystem::exists(root, ec)) return steps;
  for (const std::filesystem::directory_entry& e : std::filesystem::directory_iterator(root, ec)) {
    const int64_t step = parse_step_folder(e.path().filename().string());
    if (step >= 0 && e.is_directory(ec)) steps.push_back(step);
  }
  if (ec) return Status::io_error(fmt::format("{}: cannot list: {}", root, ec.message()));
  std::sort(steps.begin(), steps.end());
  return steps;
}

Result<std::vector<std::string>> remove_temp_files(const std::string& root, int64_t step) {
  std::vector<std::string> removed;
  std::error_code ec;
  const std::string dir = root + "/" + step_folder(step);
  for (const std::filesystem::directory_entry& f : std::filesystem::directory_iterator(dir, ec)) {
    if (f.path().filename().string().find(".tmp.") == std::string::npos) continue;
    std::error_code rm;
    std::filesystem::remove(f.path(), rm);
    if (rm) return Status::io_error(fmt::format("{}: cannot remove: {}", f.path().string(), rm.message()));
    removed.push_back(f.path().string());
  }
  if (ec) return Status::io_error(fmt::format("{}: cannot list: {}", dir, ec.message()));
  return removed;
}

Status remove_step(const std::string& root, int64_t step) {
  const std::string dir = root + "/" + step_folder(step);
  if (::unlink((dir + "/manifest").c_str()) == 0) {
    PARTRAIN_RETURN_IF_ERROR(sync_dir(dir));
  } else if (errno != ENOENT) {
    return Status::io_error(fmt::format("{}/manifest: cannot remove: {}", dir, std::strerror(errno)));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) return Status::io_error(fmt::format("{}: cannot remove: {}", dir, ec.message()));
  return Status::ok();
}

Result<std::vector<PieceRecord>> write_shard(const std::string& root, int64_t step, int rank,
                                             const std::vector<PieceData>& pieces) {
  const std::string rel_dir = step_folder(step);
  PARTRAIN_RETURN_IF_ERROR(make_durable_dir(root, root + "/" + rel_dir));
  const std::string rel = fmt::format("{}/rank-{:05d}.bin", rel_dir, rank);
  std::vector<PieceRecord> out;
  std::vector<engine::io::ByteSpan> parts;
  uint64_t offset = 0;
  for (const PieceData& p : pieces) {
    PieceRecord r;
    r.spec = p.spec;
    r.file = rel;
    r.offset = offset;
    r.bytes = static_cast<uint64_t>(p.spec.end - p.spec.begin) * sizeof(float);
    r.crc32c = crc32c(p.data, r.bytes);
    parts.push_back({p.data, r.bytes});
    offset += r.bytes;
    out.push_back(std::move(r));
  }
  if (fault_armed("eio_shard", step, rank)) {  // the disk fails the write (tests)
    return Status::io_error(fmt::format("checkpoint of step {}: {}/{}: write failed: {} (PARTRAIN_FAULT)", step,
                                        root, rel, std::strerror(EIO)));
  }
  if (fault_armed("shard_write", step, rank) && !parts.empty()) {
    // Die with half the shard in its temp file, as a kill -9 during the write would.
    const std::string tmp = fmt::format("{}/{}.tmp.{}", root, rel, ::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) (void)!::write(fd, parts[0].data, parts[0].size / 2);
    crash_point("shard_write", step, rank);
  }
  Status s = engine::io::write_file_atomic(root + "/" + rel, parts.data(), parts.size());
  if (!s) {
    return Status::io_error(fmt::format("checkpoint of step {}: {}; free space under {} or point "
                                        "[checkpoint] dir elsewhere", step, s.message(), root));
  }
  return out;
}

Result<std::vector<float>> read_piece(const std::string& root, const PieceRecord& piece) {
  const std::string path = root + "/" + piece.file;
  if (piece.bytes % sizeof(float) != 0) return Status::corruption(path + ": piece size is not whole F32 elements");
  Result<RegularFile> file = open_regular_file(path, "checkpoint shard");
  if (!file) {
    return Status::corruption(fmt::format("{}; expected CRC-32C {:08x} of {} bytes at offset {}",
                                          file.status().message(), piece.crc32c, piece.bytes, piece.offset));
  }
  // Never more memory than the file can fill: a record (or a damaged one) may claim any size.
  const uint64_t size = static_cast<uint64_t>(file->size());
  const uint64_t there = piece.offset < size ? std::min(piece.bytes, size - piece.offset) : 0;
  std::vector<float> data((there + sizeof(float) - 1) / sizeof(float));
  Result<size_t> n = read_at(file->fd(), path, piece.offset, data.data(), there);
  if (!n) return n.status();
  const uint32_t actual = crc32c(data.data(), *n);
  if (*n != piece.bytes) {
    return Status::corruption(fmt::format("{}: truncated: {} {} [{}, {}) needs {} bytes at offset {}, "
                                          "the file has {}; expected CRC-32C {:08x}, actual {:08x} (of "
                                          "what is there)", path, piece.spec.tensor, role_name(piece.spec.role),
                                          piece.spec.begin, piece.spec.end, piece.bytes, piece.offset,
                                          std::min<uint64_t>(size, piece.offset + *n), piece.crc32c, actual));
  }
  if (actual != piece.crc32c) {
    return Status::corruption(fmt::format("{}: checksum mismatch in {} {} [{}, {}) at offset {}: "
                                          "expected CRC-32C {:08x}, actual {:08x}", path, piece.spec.tensor,
                                          role_name(piece.spec.role), piece.spec.begin, piece.spec.end,
                                          piece.offset, piece.crc32c, actual));
  }
  return data;
}

Status verify_piece(const std::string& root, const PieceRecord& piece) {
  Result<std::vector<float>> r = read_piece(root, piece);
  return r.status();
}

Status verify_checkpoint(const std::string& root, const Checkpoint& c) {
  for (const PieceRecord& p : c.pieces) PARTRAIN_RETURN_IF_ERROR(verify_piece(root, p));
  return Status::ok();
}

Status read_range(const std::string& root, const Checkpoint& c, const std::string& tensor, Role role,
                  int64_t begin, int64_t end, float* dst) {
  int64_t covered = 0;
  for (const PieceRecord& p : c.pieces) {
    if (p.spec.tensor != tensor || p.spec.role != role) continue;
    const int64_t lo = std::max(begin, p.spec.begin), hi = std::min(end, p.spec.end);
    if (lo >= hi) continue;
    Result<std::vector<float>> data = read_piece(root, p);
    if (!data) return data.status();
    std::memcpy(dst + (lo - begin), data->data() + (lo - p.spec.begin),
                static_cast<size_t>(hi - lo) * sizeof(float));
    covered += hi - lo;
  }
  if (covered != end - begin) {
    return Status::invalid(fmt::format("checkpoint of step {}: {} {} [{}, {}) is not fully in its pieces "
                                       "({} of {} elements); was it written by another model?",
                                       c.state.step, tensor, role_name(role), begin, end, covered, end - begin));
  }
  return Status::ok();
}

}  // namespace partrain::store
