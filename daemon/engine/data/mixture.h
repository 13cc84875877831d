// A data mixture ([[data.sources]]): every global sample index g is drawn from one source,
// in proportion to the weights, as a function of g alone, so a mixture keeps what the
// sampler gives a single dataset: any layout reads the same samples, a resume continues
// exactly, sample 10^12 costs what sample 0 costs.
//
// Schedule: a cycle of L = 4096 slots. Source s owns c_s slots, c_s = its weight's share of
// L by largest remainder (at least 1 each); the slots are the multiset {0^c_0, 1^c_1, ...}
// in the order of a seeded permutation of [0, L) (the sampler's Feistel network, keyed by
// seed ^ "mix"). Sample g falls in slot p = g mod L of cycle q = g div L; its source is
// s = slot[p], and it is that source's sample k = q c_s + (slots of s before p). Sample k of
// source s is window Sampler(windows_s, seed_s).window_of(k) of the source's own shards,
// seed_s = mix(seed, s): each source walks its own epochs (a small source with a large
// weight repeats, epoch after epoch, each a new permutation).
//
// Worked example: weights 3 and 1 -> c = 3072, 1024; every cycle of 4096 samples holds 3072
// of source 0 and 1024 of source 1, spread by the permutation; g = 4096 q + p of source 1
// is its sample 1024 q + (source-1 slots before p).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "engine/data/dataset.h"
#include "engine/options.h"

namespace partrain::engine::data {

inline constexpr int kMixtureCycle = 4096;

// Slot counts c_s for `weights` over `cycle` slots (largest remainder, ties to the lower
// index, every source at least 1).
std::vector<int> mixture_counts(const std::vector<double>& weights, int cycle);

// The schedule above: which source sample g comes from, and its index within that source.
class MixtureSchedule {
 public:
  MixtureSchedule(const std::vector<double>& weights, uint64_t seed, int cycle = kMixtureCycle);
  struct Pick {
    int source;
    uint64_t index;
  };
  Pick pick(uint64_t g) const;
  const std::vector<int>& counts() const { return counts_; }

 private:
  int cycle_;
  std::vector<int> counts_;
  std::vector<int> slot_;      // [cycle]: the source of each slot
  std::vector<int> before_;    // [cycle]: slots of slot_[p]'s source before p
};

// The mixture as a TokenDataset (opened by TokenDataset::open when sources are given).
Result<std::shared_ptr<TokenDataset>> open_mixture(const DataOptions& options, int vocab_size,
                                                   int seq_len);

}  // namespace partrain::engine::data
