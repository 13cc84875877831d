// Writing a file so that a reader (or a restart after a crash) sees either the old file
// or the whole new one, never a part: temp file in the same folder, fsync, rename over
// the target, fsync the folder so the rename itself is durable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace partrain::engine::io {

// Writes the `parts` one after the other as the new content of `path`.
struct ByteSpan {
  const void* data;
  size_t size;
};
Status write_file_atomic(const std::string& path, const ByteSpan* parts, size_t num_parts);
// The same for one text.
inline Status write_file_atomic(const std::string& path, const std::string& text) {
  const ByteSpan part{text.data(), text.size()};
  return write_file_atomic(path, &part, 1);
}

// The same, streamed: bytes are appended as they come (a file larger than memory), and a
// header may be patched in place before commit(). Until commit() succeeds the target is
// untouched; a writer dropped uncommitted removes its temp file.
//
//   AtomicFileWriter w;
//   w.open("train.bin"); w.append(header, 1024); w.append(tokens, n); w.write_at(0, header, 12);
//   w.commit();
class AtomicFileWriter {
 public:
  AtomicFileWriter() = default;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  Status open(const std::string& path);
  Status append(const void* data, size_t size);
  // Overwrites bytes already appended, at `offset` from the start.
  Status write_at(uint64_t offset, const void* data, size_t size);
  // fsync, rename over the target, fsync its folder.
  Status commit();
  uint64_t size() const { return size_; }

 private:
  void discard();
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace partrain::engine::io
