// Opening, checking and writing token shards. Every error is one line that starts with
// the file's path and ends with what to do about it.
#include "engine/data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "engine/io/atomic_file.h"

namespace partrain::engine::data {
namespace {

static_assert(std::endian::native == std::endian::little,
              "token shards are little-endian; a big-endian host would need byte swaps");

int32_t header_word(const uint8_t* base, int i) {
  int32_t v;
  std::memcpy(&v, base + 4 * i, sizeof v);
  return v;
}

Status check_format_name(const std::string& path, const std::string& format) {
  if (format == "auto" || format == "llmc" || format == "raw-u16" || format == "raw-u32")
    return Status::ok();
  return Status::invalid(fmt::format(
      "{}: unknown data format '{}'; set [data] format to auto, llmc, raw-u16 or raw-u32", path,
      format));
}

// Reads the llm.c header at `base` (file size `size`): format and token count.
Status parse_llmc_header(const std::string& path, const uint8_t* base, size_t size,
                         ShardInfo* info) {
  if (size < kLlmcHeaderBytes)
    return Status::corruption(fmt::format(
        "{}: truncated: {} bytes is shorter than the {}-byte llm.c header; re-create the shard",
        path, size, kLlmcHeaderBytes));
  const int32_t magic = header_word(base, 0);
  const int32_t version = header_word(base, 1);
  const int32_t count = header_word(base, 2);
  if (magic != kLlmcMagic && magic != kLlmcLlama3Magic)
    return Status::corruption(fmt::format(
        "{}: wrong magic {} (an llm.c shard starts with {}); re-create the shard, or set "
        "[data] format = \"raw-u16\" or \"raw-u32\" if it has no header",
        path, magic, kLlmcMagic));
  if (magic == kLlmcMagic && version == 1) {
    info->format = ShardFormat::kLlmcU16;
    info->token_bytes = 2;
  } else if ((magic == kLlmcMagic && version == 2) || (magic == kLlmcLlama3Magic && version == 7)) {
    info->format = ShardFormat::kLlmcU32;
    info->token_bytes = 4;
  } else {
    return Status::corruption(fmt::format(
        "{}: unsupported llm.c shard version {} for magic {} (supported: {} with version 1 = "
        "uint16 or 2 = uint32 tokens, {} with version 7 = uint32); re-create the shard",
        path, version, magic, kLlmcMagic, kLlmcLlama3Magic));
  }
  if (count < 0)
    return Status::corruption(fmt::format(
        "{}: the header's token count {} is negative; re-create the shard", path, count));
  info->num_tokens = static_cast<uint64_t>(count);
  const uint64_t expected = kLlmcHeaderBytes + info->num_tokens * info->token_bytes;
  if (size < expected)
    return Status::corruption(fmt::format(
        "{}: truncated: the header says {} tokens ({} bytes with the header) but the file has "
        "{} bytes; re-create the shard",
        path, count, expected, size));
  if (size > expected)
    return Status::corruption(fmt::format(
        "{}: {} bytes follow the {} tokens the header declares ({} bytes expected, {} found); "
        "re-create the shard",
        path, size - expected, count, expected, size));
  return Status::ok();
}

Status parse_raw(const std::string& path, size_t size, int token_bytes, ShardInfo* info) {
  info->format = token_bytes == 2 ? ShardFormat::kRawU16 : ShardFormat::kRawU32;
  info->token_bytes = token_bytes;
  if (size % token_bytes != 0)
    return Status::corruption(fmt::format(
        "{}: truncated: {} bytes is not a whole number of {}-byte tokens ({}); check [data] "
        "format or re-create the shard",
        path, size, token_bytes, shard_format_name(info->format)));
  info->num_tokens = size / token_bytes;
  return Status::ok();
}

}  // namespace

const char* shard_format_name(ShardFormat format) {
  switch (format) {
    case ShardFormat::kLlmcU16: return "llmc (uint16 tokens)";
    case ShardFormat::kLlmcU32: return "llmc (uint32 tokens)";
    case ShardFormat::kRawU16: return "raw-u16";
    case ShardFormat::kRawU32: return "raw-u32";
  }
  return "unknown";
}

MappedShard::MappedShard(MappedShard&& other) noexcept { *this = std::move(other); }

MappedShard& MappedShard::operator=(MappedShard&& other) noexcept {
  if (this != &other) {
    release();
    info_ = std::move(other.info_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
  }
  return *this;
}

MappedShard::~MappedShard() { release(); }

void MappedShard::release() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  tokens_ = nullptr;
}

Result<MappedShard> MappedShard::open(const std::string& path, const std::string& format) {
  PARTRAIN_RETURN_IF_ERROR(check_format_name(path, format));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::not_found(fmt::format("{}: cannot open token shard: {}; check [data] "
                                         "train_files",
                                         path, std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::io_error(
        fmt::format("{}: not a regular file; [data] train_files must name token shards", path));
  }
  MappedShard shard;
  shard.info_.path = path;
  const size_t size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Status::io_error(fmt::format("{}: cannot map token shard: {}", path,
                                          std::strerror(err)));
    }
    shard.map_ = map;
    shard.map_bytes_ = size;
  }
  ::close(fd);  // the mapping keeps the file alive
  const auto* base = static_cast<const uint8_t*>(shard.map_);

  std::string kind = format;
  if (kind == "auto") {
    if (size < 4 || (header_word(base, 0) != kLlmcMagic && header_word(base, 0) != kLlmcLlama3Magic))
      return Status::invalid(fmt::format(
          "{}: no llm.c header (magic {}), so the format is unknown; set [data] format = "
          "\"raw-u16\" or \"raw-u32\" for headerless tokens",
          path, kLlmcMagic));
    kind = "llmc";
  }
  if (kind == "llmc") {
    PARTRAIN_RETURN_IF_ERROR(parse_llmc_header(path, base, size, &shard.info_));
    shard.tokens_ = base + kLlmcHeaderBytes;
  } else {
    PARTRAIN_RETURN_IF_ERROR(parse_raw(path, size, kind == "raw-u16" ? 2 : 4, &shard.info_));
    shard.tokens_ = base;
  }
  if (shard.map_ != nullptr) madvise(shard.map_, shard.map_bytes_, MADV_WILLNEED);
  return shard;
}

void MappedShard::copy_tokens(uint64_t begin, uint64_t n, int32_t* out) const {
  if (info_.token_bytes == 2) {
    const auto* src = reinterpret_cast<const uint16_t*>(tokens_) + begin;
    for (uint64_t i = 0; i < n; ++i) out[i] = src[i];
  } else {
    const auto* src = reinterpret_cast<const uint32_t*>(tokens_) + begin;
    for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(src[i]);
  }
}

void MappedShard::scan_range() {
  uint32_t lo = UINT32_MAX, hi = 0;
  for (uint64_t i = 0; i < info_.num_tokens; ++i) {
    const uint32_t t = token(i);
    lo = std::min(lo, t);
    hi = std::max(hi, t);
  }
  info_.min_token = info_.num_tokens == 0 ? 0 : lo;
  info_.max_token = hi;
}

Status MappedShard::check_tokens(int vocab_size) const {
  // One vectorisable max pass; the slow search for the culprit runs only on failure.
  const uint32_t limit = static_cast<uint32_t>(vocab_size);
  uint32_t hi = 0;
  if (info_.token_bytes == 2) {
    const auto* p = reinterpret_cast<const uint16_t*>(tokens_);
    uint16_t m = 0;
    for (uint64_t i = 0; i < info_.num_tokens; ++i) m = std::max(m, p[i]);
    hi = m;
  } else {
    const auto* p = reinterpret_cast<const uint32_t*>(tokens_);
    for (uint64_t i = 0; i < info_.num_tokens; ++i) hi = std::max(hi, p[i]);
  }
  if (info_.num_tokens == 0 || hi < limit) return Status::ok();
  for (uint64_t i = 0; i < info_.num_tokens; ++i) {
    if (token(i) >= limit)
      return Status::invalid(fmt::format(
          "{}: token {} at offset {} is >= vocab_size {}; check [model] vocab_size or the "
          "tokenizer",
          info_.path, token(i), i, vocab_size));
  }
  return Status::ok();
}

Result<ShardInfo> inspect_shard(const std::string& path, const std::string& format) {
  auto shard = MappedShard::open(path, format);
  if (!shard) return shard.status();
  shard->scan_range();
  return shard->info();
}

Status write_shard(const std::string& path, const std::vector<uint32_t>& tokens, int token_bytes,
                   bool raw) {
  if (token_bytes != 2 && token_bytes != 4)
    return Status::invalid(fmt::format("{}: token width {} bytes; use 2 (uint16) or 4 (uint32)",
                                       path, token_bytes));
  if (!raw && tokens.size() > static_cast<uint64_t>(INT32_MAX))
    return Status::invalid(fmt::format(
        "{}: {} tokens do not fit one llm.c shard (at most {}); split the text into several "
        "shards",
        path, tokens.size(), INT32_MAX));
  std::vector<uint8_t> bytes;
  bytes.reserve((raw ? 0 : kLlmcHeaderBytes) + tokens.size() * token_bytes);
  if (!raw) {
    int32_t header[256] = {};
    header[0] = kLlmcMagic;
    header[1] = token_bytes == 2 ? 1 : 2;
    header[2] = static_cast<int32_t>(tokens.size());
    const auto* h = reinterpret_cast<const uint8_t*>(header);
    bytes.insert(bytes.end(), h, h + kLlmcHeaderBytes);
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    const uint32_t t = tokens[i];
    if (token_bytes == 2 && t > UINT16_MAX)
      return Status::invalid(fmt::format(
          "{}: token {} at offset {} does not fit uint16; write a uint32 shard", path, t, i));
    for (int b = 0; b < token_bytes; ++b) bytes.push_back(static_cast<uint8_t>(t >> (8 * b)));
  }

  // Temp file, fsync, rename: a reader never sees half a shard.
  const io::ByteSpan part{bytes.data(), bytes.size()};
  return io::write_file_atomic(path, &part, 1);
}

}  // namespace partrain::engine::data
