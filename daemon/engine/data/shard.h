// One token shard, memory-mapped and checked: the internals TokenDataset is built on.
// Kept apart from dataset.h so users of the dataset do not see mmap details.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "engine/data/dataset.h"

namespace partrain::engine::data {

// llm.c's shard header: 256 little-endian int32.
inline constexpr int32_t kLlmcMagic = 20240520;        // GPT-2 era: version 1 = uint16 tokens
inline constexpr int32_t kLlmcLlama3Magic = 20240801;  // llm.c's Llama 3 shards: version 7 = uint32
inline constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

// A read-only mapping of a whole file; unmapped on destruction. Move-only.
class MappedShard {
 public:
  MappedShard() = default;
  MappedShard(const MappedShard&) = delete;
  MappedShard& operator=(const MappedShard&) = delete;
  MappedShard(MappedShard&& other) noexcept;
  MappedShard& operator=(MappedShard&& other) noexcept;
  ~MappedShard();

  // Maps `path` and checks its header and size against `format` ("auto", "llmc",
  // "raw-u16", "raw-u32"). Token values are not checked here (see check_tokens).
  static Result<MappedShard> open(const std::string& path, const std::string& format);

  const ShardInfo& info() const { return info_; }
  uint64_t num_tokens() const { return info_.num_tokens; }
  uint32_t token(uint64_t i) const {
    if (info_.token_bytes == 2) return reinterpret_cast<const uint16_t*>(tokens_)[i];
    return reinterpret_cast<const uint32_t*>(tokens_)[i];
  }
  // Copies tokens [begin, begin + n) widened to int32.
  void copy_tokens(uint64_t begin, uint64_t n, int32_t* out) const;
  // Fills info().min_token / max_token by one pass over the tokens.
  void scan_range();
  // Error naming the file, the first token >= vocab_size and its offset.
  Status check_tokens(int vocab_size) const;

 private:
  void release();
  ShardInfo info_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint8_t* tokens_ = nullptr;
};

}  // namespace partrain::engine::data
