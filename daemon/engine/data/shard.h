// One token shard, opened and checked: the internals TokenDataset is built on. Kept apart
// from dataset.h so users of the dataset do not see file details.
//
// A shard is read with pread(2) from a descriptor held open for the run, never mapped: a
// file truncated while a run reads it then gives a short read, which comes back as an
// error naming the file (a memory map would kill the process with SIGBUS, no message and
// no save), and a file replaced by rename keeps serving the bytes that were checked at
// open (the descriptor holds the old inode).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/read_file.h"
#include "common/status.h"
#include "engine/data/dataset.h"

namespace partrain::engine::data {

// llm.c's shard header: 256 little-endian int32.
inline constexpr int32_t kLlmcMagic = 20240520;        // GPT-2 era: version 1 = uint16 tokens
inline constexpr int32_t kLlmcLlama3Magic = 20240801;  // llm.c's Llama 3 shards: version 7 = uint32
inline constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

// What a shard's first bytes and size say, checked against `format` ("auto", "llmc",
// "raw-u16", "raw-u32"): its ShardInfo (format, token width, count) and where the tokens
// start. `head` holds the file's first `head_len` bytes (at least min(size, 1024)); the
// same checks and messages as TokenShard::open, without any file (for the fuzz target).
struct ShardLayout {
  ShardInfo info;
  uint64_t tokens_offset = 0;  // byte offset of token 0
};
Result<ShardLayout> parse_shard_header(const std::string& path, const uint8_t* head, size_t head_len,
                                       uint64_t file_size, const std::string& format);

// An open, checked token shard. Move-only.
class TokenShard {
 public:
  // Opens `path` (a regular file: a FIFO, device or folder is refused at once) and checks
  // its header and size against `format`. Token values are not checked here (check_tokens).
  static Result<TokenShard> open(const std::string& path, const std::string& format);

  const ShardInfo& info() const { return info_; }
  uint64_t num_tokens() const { return info_.num_tokens; }
  // Copies tokens [begin, begin + n) widened to int32; corruption naming the file when it
  // no longer holds them (truncated during the run).
  Status copy_tokens(uint64_t begin, uint64_t n, int32_t* out) const;
  // Fills info().min_token / max_token by one pass over the tokens.
  Status scan_range();
  // Error naming the file, the first token >= vocab_size and its offset.
  Status check_tokens(int vocab_size) const;

 private:
  // Calls fn(first_index, tokens, count) over the whole shard in chunks of uint32 tokens.
  template <typename F>
  Status for_each_chunk(F&& fn) const;
  Status read_tokens(uint64_t begin, uint64_t n, void* dst) const;

  ShardInfo info_;
  RegularFile file_;
  uint64_t tokens_offset_ = 0;
};

}  // namespace partrain::engine::data
