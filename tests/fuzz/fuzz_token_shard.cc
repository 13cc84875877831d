// A token shard's header and size (engine/data/shard.h parse_shard_header) in every format
// a job may name; the first bytes of the input are the file's head, its length the file's
// size, and a second size taken from the input checks the header against a larger file.
#include <cstdint>
#include <cstring>
#include <string>

#include "engine/data/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using partrain::engine::data::kLlmcHeaderBytes;
  const size_t head = size < kLlmcHeaderBytes ? size : kLlmcHeaderBytes;
  uint64_t other = 0;
  if (size >= 8) std::memcpy(&other, data + size - 8, 8);
  for (const char* format : {"auto", "llmc", "raw-u16", "raw-u32"}) {
    (void)partrain::engine::data::parse_shard_header("shard.bin", data, head, size, format);
    if (size >= kLlmcHeaderBytes) {
      (void)partrain::engine::data::parse_shard_header("shard.bin", data, head, other, format);
    }
  }
  return 0;
}
