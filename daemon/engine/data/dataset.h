// Training data: token shards and the sampler that orders them.
//
// A shard is llm.c's format (256 int32 header: magic 20240520, version 1 (uint16 tokens)
// or 2 (uint32 tokens), token count; then the tokens) or a headerless raw file of uint16
// or uint32 tokens ("raw-u16", "raw-u32"). A sample is a non-overlapping window of
// seq_len + 1 tokens over the concatenated shards (inputs = first seq_len, targets = the
// same shifted by one). The sampler maps a global sample index to a window through a
// seeded permutation per epoch, so any data-parallel size and any restart see the same
// global order: rank r of a dp-way run reads global samples step*global_batch + ...
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/io/atomic_file.h"
#include "engine/options.h"

namespace partrain::engine::data {

class Sampler;

class TokenDataset {
 public:
  // Opens and checks every shard: magic/version, size matching the header, every token
  // < vocab_size. Errors name the file, e.g. "data/a.bin: token 70000 at offset 12 is >=
  // vocab_size 50257; check [model] vocab_size or the tokenizer".
  // With [[data.sources]] the dataset is their mixture (mixture.h). `key` names the job
  // file's list of these shards in the hint of a missing one ("check [data] val_files").
  static Result<std::shared_ptr<TokenDataset>> open(const DataOptions& options, int vocab_size,
                                                    int seq_len, const std::string& key = "[data] train_files");
  virtual ~TokenDataset() = default;

  virtual uint64_t num_tokens() const = 0;
  // Number of whole windows of seq_len + 1 tokens.
  virtual uint64_t num_windows() const = 0;
  // Copies window w: inputs[0..T) and targets[0..T) (= tokens w*(T+1) + 1 ..). corruption
  // naming the file when a shard was cut while the run reads it.
  virtual Status read_window(uint64_t window, int32_t* inputs, int32_t* targets) const = 0;
  // Copies global sample g: window sampler.window_of(g) here; a mixture ([[data.sources]],
  // mixture.h) picks the source and its window from g itself.
  virtual Status read_sample(const Sampler& sampler, uint64_t g, int32_t* inputs,
                             int32_t* targets) const;
};

// Global sample index -> (epoch, window). Epoch e = index / num_windows; within it, a
// permutation keyed by (seed, e) that is cheap to evaluate at any index (no table).
//
// The permutation is a keyed Feistel network over the next power of two >= num_windows
// (at least 4), walked until it lands below num_windows ("cycle walking"): a bijection of
// [0, num_windows) that costs a handful of hash rounds per index and needs no table, so
// sample 10^9 costs what sample 0 costs. See daemon/engine/data/README.md.
class Sampler {
 public:
  Sampler(uint64_t num_windows, uint64_t seed);
  uint64_t epoch_of(uint64_t global_sample) const;
  uint64_t window_of(uint64_t global_sample) const;
  // The permutation of epoch `epoch` applied to `position` < num_windows.
  uint64_t permute(uint64_t epoch, uint64_t position) const;
  uint64_t num_windows() const { return num_windows_; }
  uint64_t seed() const { return seed_; }

 private:
  uint64_t num_windows_;
  uint64_t seed_;
  int bits_ = 0;  // width of the Feistel domain: 2^bits_ >= num_windows_
};

// What one shard holds, for `partrain data inspect` and the error messages.
enum class ShardFormat { kLlmcU16, kLlmcU32, kRawU16, kRawU32 };
const char* shard_format_name(ShardFormat format);  // "llmc (uint16 tokens)", "raw-u16", ...

struct ShardInfo {
  std::string path;
  ShardFormat format = ShardFormat::kLlmcU16;
  int token_bytes = 2;
  uint64_t num_tokens = 0;
  uint32_t min_token = 0;  // 0 when the shard is empty
  uint32_t max_token = 0;
};

// Checks one shard's header and size (not its token values) and scans min/max token.
// `format` is one of "auto", "llmc", "raw-u16", "raw-u32".
Result<ShardInfo> inspect_shard(const std::string& path, const std::string& format = "auto");

// Writes tokens as an llm.c shard: version 1 (uint16) when token_bytes == 2, version 2
// (uint32) when 4, or headerless when `raw` is set. Atomic (temp file + rename).
Status write_shard(const std::string& path, const std::vector<uint32_t>& tokens, int token_bytes,
                   bool raw = false);

// The same, streamed: tokens are added as they come, in memory only kBufferTokens of them,
// and the header's count is written by finish(). Nothing appears at `path` before finish().
class ShardWriter {
 public:
  static constexpr size_t kBufferTokens = size_t{1} << 18;
  Status open(const std::string& path, int token_bytes, bool raw = false);
  // Refuses a token wider than the shard's width and a count past an llm.c header's int32.
  Status add(std::span<const uint32_t> tokens);
  Status finish();
  uint64_t tokens() const { return count_; }

 private:
  Status flush();
  io::AtomicFileWriter file_;
  std::string path_;
  int token_bytes_ = 2;
  bool raw_ = false;
  uint64_t count_ = 0;
  std::vector<uint8_t> buf_;
};

// Fills `count` samples starting at global sample index `first`: inputs/targets [count, T].
// T is the seq_len the dataset was opened with. Sample first + k is window
// sampler.window_of(first + k), so any split of a batch into slices reads the same samples.
// The first error of a read_window, if any.
Status read_samples(const TokenDataset& dataset, const Sampler& sampler, uint64_t first, int count,
                    int T, int32_t* inputs, int32_t* targets);

}  // namespace partrain::engine::data
