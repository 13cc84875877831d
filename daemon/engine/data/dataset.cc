// TokenDataset over token shards (read with pread), the Feistel sampler, and read_samples.
#include "engine/data/dataset.h"
#include "engine/data/mixture.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/data/shard.h"

namespace partrain::engine::data {
namespace {

// The shards laid end to end; window w is tokens [w*(T+1), (w+1)*(T+1)) of that sequence,
// and may span two (or more) shards.
class ShardDataset final : public TokenDataset {
 public:
  ShardDataset(std::vector<TokenShard> shards, int seq_len) : shards_(std::move(shards)), seq_len_(seq_len) {
    uint64_t at = 0;
    for (const auto& s : shards_) {
      starts_.push_back(at);
      at += s.num_tokens();
    }
    num_tokens_ = at;
  }

  uint64_t num_tokens() const override { return num_tokens_; }
  uint64_t num_windows() const override { return num_tokens_ / (static_cast<uint64_t>(seq_len_) + 1); }

  Status read_window(uint64_t window, int32_t* inputs, int32_t* targets) const override {
    // One read of the window's T + 1 tokens: inputs are the first T, targets the last T.
    const uint64_t len = static_cast<uint64_t>(seq_len_) + 1;
    std::vector<int32_t> tokens(static_cast<size_t>(len));
    PARTRAIN_RETURN_IF_ERROR(copy_range(window * len, len, tokens.data()));
    std::copy(tokens.begin(), tokens.end() - 1, inputs);
    std::copy(tokens.begin() + 1, tokens.end(), targets);
    return Status::ok();
  }

 private:
  // Copies global tokens [begin, begin + n), crossing shard boundaries as needed.
  Status copy_range(uint64_t begin, uint64_t n, int32_t* out) const {
    // The last shard whose start is <= begin (empty shards share a start and are skipped).
    size_t s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) -
                                   starts_.begin()) - 1;
    while (n > 0) {
      const uint64_t local = begin - starts_[s];
      const uint64_t take = std::min(n, shards_[s].num_tokens() - local);
      PARTRAIN_RETURN_IF_ERROR(shards_[s].copy_tokens(local, take, out));
      out += take;
      begin += take;
      n -= take;
      ++s;
    }
    return Status::ok();
  }

  std::vector<TokenShard> shards_;
  std::vector<uint64_t> starts_;  // global index of each shard's first token
  uint64_t num_tokens_ = 0;
  int seq_len_;
};

// splitmix64's finaliser: a fast 64-bit mixer with full avalanche.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr int kFeistelRounds = 8;
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

uint64_t low_mask(int bits) { return bits >= 64 ? ~0ULL : (1ULL << bits) - 1; }

// One pass of an (unbalanced) Feistel network on a `bits`-wide value: a bijection of
// [0, 2^bits). Each round maps (L, R) -> (R, L ^ F(R)); the halves' widths swap each round.
uint64_t feistel(uint64_t x, int bits, uint64_t key) {
  int wl = bits / 2, wr = bits - wl;
  uint64_t left = x >> wr, right = x & low_mask(wr);
  for (int r = 0; r < kFeistelRounds; ++r) {
    const uint64_t f = mix64(right ^ mix64(key + kGolden * static_cast<uint64_t>(r + 1)));
    const uint64_t new_right = (left ^ f) & low_mask(wl);
    left = right;
    right = new_right;
    std::swap(wl, wr);
  }
  return (left << wr) | right;
}

}  // namespace

Result<std::shared_ptr<TokenDataset>> TokenDataset::open(const DataOptions& options,
                                                          int vocab_size, int seq_len, const std::string& key) {
  if (!options.sources.empty()) return open_mixture(options, vocab_size, seq_len);
  if (options.train_files.empty())
    return Status::invalid(
        "[data] train_files is empty: list at least one token shard (llm.c .bin or raw tokens); "
        "`partrain data encode` makes one from text");
  if (vocab_size <= 0)
    return Status::invalid(fmt::format("[model] vocab_size {} must be positive", vocab_size));
  if (seq_len <= 0)
    return Status::invalid(fmt::format("[model] seq_len {} must be positive", seq_len));
  std::vector<TokenShard> shards;
  uint64_t total = 0;
  for (const auto& path : options.train_files) {
    auto shard = TokenShard::open(path, options.format);
    if (!shard && shard.status().code() == StatusCode::kNotFound)
      return Status::not_found(shard.status().message() + "; check " + key);
    if (!shard) return shard.status();
    PARTRAIN_RETURN_IF_ERROR(shard->check_tokens(vocab_size));
    total += shard->num_tokens();
    shards.push_back(std::move(shard).value());
  }
  const uint64_t window = static_cast<uint64_t>(seq_len) + 1;
  if (total < window) {
    const std::string what =
        options.train_files.size() == 1
            ? options.train_files[0]
            : fmt::format("{} (and {} more shards)", options.train_files[0],
                          options.train_files.size() - 1);
    return Status::invalid(fmt::format(
        "{}: {} tokens hold no whole window of seq_len + 1 = {} tokens; add data or lower "
        "[model] seq_len",
        what, total, window));
  }
  return std::shared_ptr<TokenDataset>(std::make_shared<ShardDataset>(std::move(shards), seq_len));
}

Sampler::Sampler(uint64_t num_windows, uint64_t seed) : num_windows_(num_windows), seed_(seed) {
  bits_ = 2;  // a 4-element domain at least, so even tiny datasets get shuffled
  while (bits_ < 64 && (1ULL << bits_) < num_windows_) ++bits_;
}

uint64_t Sampler::epoch_of(uint64_t global_sample) const {
  return num_windows_ == 0 ? 0 : global_sample / num_windows_;
}

uint64_t Sampler::window_of(uint64_t global_sample) const {
  if (num_windows_ == 0) return 0;
  return permute(global_sample / num_windows_, global_sample % num_windows_);
}

uint64_t Sampler::permute(uint64_t epoch, uint64_t position) const {
  if (num_windows_ <= 1) return 0;
  // The key depends on (seed, epoch) only: every rank and every restart computes it alike.
  const uint64_t key = mix64(mix64(seed_ ^ 0x5bd1e995ULL) + kGolden * (epoch + 1));
  // Cycle walking: the domain is < 2 * num_windows, so this loops twice on average, and it
  // ends because the cycle through `position` returns to it, which is < num_windows.
  uint64_t x = position;
  do {
    x = feistel(x, bits_, key);
  } while (x >= num_windows_);
  return x;
}

Status TokenDataset::read_sample(const Sampler& sampler, uint64_t g, int32_t* inputs,
                                 int32_t* targets) const {
  return read_window(sampler.window_of(g), inputs, targets);
}

Status read_samples(const TokenDataset& dataset, const Sampler& sampler, uint64_t first, int count,
                    int T, int32_t* inputs, int32_t* targets) {
  for (int k = 0; k < count; ++k) {
    PARTRAIN_RETURN_IF_ERROR(dataset.read_sample(sampler, first + static_cast<uint64_t>(k),
                                                 inputs + static_cast<size_t>(k) * T,
                                                 targets + static_cast<size_t>(k) * T));
  }
  return Status::ok();
}

}  // namespace partrain::engine::data
