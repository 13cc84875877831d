// CRC-32C (Castagnoli, the iSCSI/ext4/RocksDB polynomial 0x1EDC6F41, reflected): the
// checksum of every checkpoint shard piece. SSE4.2's crc32 instruction where the CPU has
// it, a table otherwise; both give the same value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace partrain {

// Continues `crc` (0 for a fresh checksum) over `size` bytes: crc32c(b, crc32c(a)) is the
// checksum of a followed by b.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

}  // namespace partrain
