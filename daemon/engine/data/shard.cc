// Opening, checking, reading and writing token shards. Every error is one line that starts with
// the file's path and ends with what to do about it.
#include "engine/data/shard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

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

Result<ShardLayout> parse_shard_header(const std::string& path, const uint8_t* head, size_t head_len,
                                       uint64_t file_size, const std::string& format) {
  PARTRAIN_RETURN_IF_ERROR(check_format_name(path, format));
  const size_t size = static_cast<size_t>(file_size);
  std::string kind = format;
  if (kind == "auto") {
    if (file_size < 4 || head_len < 4 ||
        (header_word(head, 0) != kLlmcMagic && header_word(head, 0) != kLlmcLlama3Magic))
      return Status::invalid(fmt::format(
          "{}: no llm.c header (magic {}), so the format is unknown; set [data] format = "
          "\"raw-u16\" or \"raw-u32\" for headerless tokens",
          path, kLlmcMagic));
    kind = "llmc";
  }
  ShardLayout out;
  out.info.path = path;
  if (kind == "llmc") {
    if (file_size >= kLlmcHeaderBytes && head_len < kLlmcHeaderBytes)
      return Status::internal(fmt::format("{}: the header was not read whole", path));
    PARTRAIN_RETURN_IF_ERROR(parse_llmc_header(path, head, size, &out.info));
    out.tokens_offset = kLlmcHeaderBytes;
  } else {
    PARTRAIN_RETURN_IF_ERROR(parse_raw(path, size, kind == "raw-u16" ? 2 : 4, &out.info));
  }
  return out;
}

Result<TokenShard> TokenShard::open(const std::string& path, const std::string& format) {
  PARTRAIN_RETURN_IF_ERROR(check_format_name(path, format));
  Result<RegularFile> file = open_regular_file(path, "token shard");
  if (!file && file.status().code() == StatusCode::kNotFound) {
    return Status::not_found(fmt::format("{}: cannot open token shard: {}", path, std::strerror(ENOENT)));
  }
  if (!file) return file.status();
  uint8_t head[kLlmcHeaderBytes] = {};
  const uint64_t size = static_cast<uint64_t>(file->size());
  const size_t want = static_cast<size_t>(std::min<uint64_t>(size, kLlmcHeaderBytes));
  size_t got = 0;
  while (got < want) {
    const ssize_t n = ::pread(file->fd(), head + got, want - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::io_error(fmt::format("{}: cannot read token shard: {}", path, std::strerror(errno)));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  Result<ShardLayout> layout = parse_shard_header(path, head, got, got < want ? got : size, format);
  if (!layout) return layout.status();
  TokenShard shard;
  shard.info_ = layout->info;
  shard.tokens_offset_ = layout->tokens_offset;
  shard.file_ = std::move(file).value();
  (void)::posix_fadvise(shard.file_.fd(), 0, 0, POSIX_FADV_WILLNEED);
  return shard;
}

Status TokenShard::read_tokens(uint64_t begin, uint64_t n, void* dst) const {
  const uint64_t width = static_cast<uint64_t>(info_.token_bytes);
  const uint64_t bytes = n * width, offset = tokens_offset_ + begin * width;
  auto* p = static_cast<char*>(dst);
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t r = ::pread(file_.fd(), p + done, bytes - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return Status::io_error(fmt::format("{}: cannot read tokens {}..{}: {}", info_.path, begin, begin + n,
                                          std::strerror(errno)));
    }
    if (r == 0) {
      return Status::corruption(fmt::format(
          "{}: truncated while the run reads it: token {} (byte {}) of the {} checked at start is gone; restore "
          "the file (a shard must not change during a run) and start again: the run resumes from its last "
          "checkpoint", info_.path, begin + done / width, offset + done, info_.num_tokens));
    }
    done += static_cast<uint64_t>(r);
  }
  return Status::ok();
}

Status TokenShard::copy_tokens(uint64_t begin, uint64_t n, int32_t* out) const {
  if (begin > info_.num_tokens || n > info_.num_tokens - begin) {
    return Status::internal(fmt::format("{}: tokens [{}, {}) asked of {}", info_.path, begin, begin + n,
                                        info_.num_tokens));
  }
  // Read in place at the front of `out`, then widen from the back so nothing is overwritten
  // before it is read.
  PARTRAIN_RETURN_IF_ERROR(read_tokens(begin, n, out));
  if (info_.token_bytes == 2) {
    const auto* src = reinterpret_cast<const uint16_t*>(out);
    for (uint64_t i = n; i-- > 0;) out[i] = static_cast<int32_t>(src[i]);
  } else {
    const auto* src = reinterpret_cast<const uint32_t*>(out);
    for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(src[i]);
  }
  return Status::ok();
}

template <typename F>
Status TokenShard::for_each_chunk(F&& fn) const {
  constexpr uint64_t kChunk = uint64_t{1} << 18;  // tokens per read: 1 MiB of uint32
  std::vector<uint32_t> buf(static_cast<size_t>(std::min(kChunk, std::max<uint64_t>(info_.num_tokens, 1))));
  for (uint64_t at = 0; at < info_.num_tokens; at += kChunk) {
    const uint64_t n = std::min(kChunk, info_.num_tokens - at);
    PARTRAIN_RETURN_IF_ERROR(read_tokens(at, n, buf.data()));
    if (info_.token_bytes == 2) {  // widen in place, from the back
      const auto* src = reinterpret_cast<const uint16_t*>(buf.data());
      for (uint64_t i = n; i-- > 0;) buf[i] = src[i];
    }
    PARTRAIN_RETURN_IF_ERROR(fn(at, buf.data(), n));
  }
  return Status::ok();
}

Status TokenShard::scan_range() {
  uint32_t lo = UINT32_MAX, hi = 0;
  PARTRAIN_RETURN_IF_ERROR(for_each_chunk([&](uint64_t, const uint32_t* t, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) {
      lo = std::min(lo, t[i]);
      hi = std::max(hi, t[i]);
    }
    return Status::ok();
  }));
  info_.min_token = info_.num_tokens == 0 ? 0 : lo;
  info_.max_token = hi;
  return Status::ok();
}

Status TokenShard::check_tokens(int vocab_size) const {
  // One vectorisable max pass per chunk; the search for the culprit runs only on failure.
  const uint32_t limit = static_cast<uint32_t>(vocab_size);
  return for_each_chunk([&](uint64_t first, const uint32_t* t, uint64_t n) {
    uint32_t hi = 0;
    for (uint64_t i = 0; i < n; ++i) hi = std::max(hi, t[i]);
    if (hi < limit) return Status::ok();
    for (uint64_t i = 0; i < n; ++i) {
      if (t[i] >= limit)
        return Status::invalid(fmt::format(
            "{}: token {} at offset {} is >= vocab_size {}; check [model] vocab_size or the "
            "tokenizer",
            info_.path, t[i], first + i, vocab_size));
    }
    return Status::ok();
  });
}

Result<ShardInfo> inspect_shard(const std::string& path, const std::string& format) {
  auto shard = TokenShard::open(path, format);
  if (!shard) return shard.status();
  PARTRAIN_RETURN_IF_ERROR(shard->scan_range());
  return shard->info();
}

Status write_shard(const std::string& path, const std::vector<uint32_t>& tokens, int token_bytes,
                   bool raw) {
  ShardWriter w;
  PARTRAIN_RETURN_IF_ERROR(w.open(path, token_bytes, raw));
  PARTRAIN_RETURN_IF_ERROR(w.add(tokens));
  return w.finish();
}

Status ShardWriter::open(const std::string& path, int token_bytes, bool raw) {
  if (token_bytes != 2 && token_bytes != 4)
    return Status::invalid(fmt::format("{}: token width {} bytes; use 2 (uint16) or 4 (uint32)",
                                       path, token_bytes));
  path_ = path;
  token_bytes_ = token_bytes;
  raw_ = raw;
  count_ = 0;
  buf_.clear();
  // Temp file, fsync, rename: a reader never sees half a shard.
  PARTRAIN_RETURN_IF_ERROR(file_.open(path));
  if (raw) return Status::ok();
  const std::vector<uint8_t> header(kLlmcHeaderBytes, 0);  // the real one comes at finish()
  return file_.append(header.data(), header.size());
}

Status ShardWriter::add(std::span<const uint32_t> tokens) {
  if (!raw_ && count_ + tokens.size() > static_cast<uint64_t>(INT32_MAX))
    return Status::invalid(fmt::format(
        "{}: {} tokens do not fit one llm.c shard (at most {}); split the text into several "
        "shards",
        path_, count_ + tokens.size(), INT32_MAX));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const uint32_t t = tokens[i];
    if (token_bytes_ == 2 && t > UINT16_MAX)
      return Status::invalid(fmt::format(
          "{}: token {} at offset {} does not fit uint16; write a uint32 shard", path_, t, count_ + i));
    for (int b = 0; b < token_bytes_; ++b) buf_.push_back(static_cast<uint8_t>(t >> (8 * b)));
    if (buf_.size() >= kBufferTokens * static_cast<size_t>(token_bytes_)) PARTRAIN_RETURN_IF_ERROR(flush());
  }
  count_ += tokens.size();
  return Status::ok();
}

Status ShardWriter::flush() {
  Status st = file_.append(buf_.data(), buf_.size());
  buf_.clear();
  return st;
}

Status ShardWriter::finish() {
  PARTRAIN_RETURN_IF_ERROR(flush());
  if (!raw_) {
    int32_t header[3] = {kLlmcMagic, token_bytes_ == 2 ? 1 : 2, static_cast<int32_t>(count_)};
    PARTRAIN_RETURN_IF_ERROR(file_.write_at(0, header, sizeof header));
  }
  return file_.commit();
}

}  // namespace partrain::engine::data
