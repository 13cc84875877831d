// Writing a file so that a reader (or a restart after a crash) sees either the old file
// or the whole new one, never a part: temp file in the same folder, fsync, rename over
// the target, fsync the folder so the rename itself is durable.
#pragma once

#include <cstddef>
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

}  // namespace partrain::engine::io
