#include "engine/data/mixture.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>

#include <fmt/format.h>

namespace partrain::engine::data {
namespace {

uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class MixedDataset final : public TokenDataset {
 public:
  MixedDataset(std::vector<std::shared_ptr<TokenDataset>> sources, std::vector<double> weights)
      : sources_(std::move(sources)), weights_(std::move(weights)) {}

  uint64_t num_tokens() const override {
    uint64_t n = 0;
    for (const auto& s : sources_) n += s->num_tokens();
    return n;
  }
  // All sources' windows: the trainer's epoch counter reads it as one pass over the data.
  uint64_t num_windows() const override {
    uint64_t n = 0;
    for (const auto& s : sources_) n += s->num_windows();
    return n;
  }
  // Window w of the sources laid end to end (what a plain sampler would read).
  Status read_window(uint64_t w, int32_t* inputs, int32_t* targets) const override {
    for (const auto& s : sources_) {
      if (w < s->num_windows()) return s->read_window(w, inputs, targets);
      w -= s->num_windows();
    }
    return Status::internal(fmt::format("a window past the mixture's {} windows", num_windows()));
  }
  Status read_sample(const Sampler& sampler, uint64_t g, int32_t* inputs, int32_t* targets) const override {
    const Schedule& sch = schedule(sampler.seed());
    const MixtureSchedule::Pick p = sch.mix.pick(g);
    return sources_[static_cast<size_t>(p.source)]->read_window(
        sch.samplers[static_cast<size_t>(p.source)].window_of(p.index), inputs, targets);
  }

 private:
  struct Schedule {
    uint64_t seed;
    MixtureSchedule mix;
    std::vector<Sampler> samplers;
  };
  // Built on first use for a seed (a run has one) and kept.
  const Schedule& schedule(uint64_t seed) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = schedules_[seed];
    if (!slot) {
      std::vector<Sampler> samplers;
      for (size_t s = 0; s < sources_.size(); ++s)
        samplers.emplace_back(sources_[s]->num_windows(), mix64(seed ^ mix64(s + 1)));
      slot = std::make_unique<Schedule>(Schedule{seed, MixtureSchedule(weights_, seed), std::move(samplers)});
    }
    return *slot;
  }

  std::vector<std::shared_ptr<TokenDataset>> sources_;
  std::vector<double> weights_;
  mutable std::mutex mu_;
  mutable std::map<uint64_t, std::unique_ptr<Schedule>> schedules_;
};

}  // namespace

std::vector<int> mixture_counts(const std::vector<double>& weights, int cycle) {
  const size_t n = weights.size();
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int> counts(n, 1);  // every source at least one slot
  const int spare = cycle - static_cast<int>(n);
  std::vector<double> rem(n);
  int given = 0;
  for (size_t s = 0; s < n; ++s) {
    const double exact = weights[s] / total * spare;
    counts[s] += static_cast<int>(exact);
    given += static_cast<int>(exact);
    rem[s] = exact - static_cast<int>(exact);
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rem[a] > rem[b]; });
  for (size_t i = 0; given < spare; ++i, ++given) ++counts[order[i % n]];
  return counts;
}

MixtureSchedule::MixtureSchedule(const std::vector<double>& weights, uint64_t seed, int cycle)
    : cycle_(cycle), counts_(mixture_counts(weights, cycle)) {
  std::vector<int> multiset;
  for (size_t s = 0; s < counts_.size(); ++s) multiset.insert(multiset.end(), counts_[s], static_cast<int>(s));
  const Sampler perm(static_cast<uint64_t>(cycle), seed ^ 0x6d6978 /* "mix" */);
  slot_.resize(static_cast<size_t>(cycle));
  before_.resize(static_cast<size_t>(cycle));
  std::vector<int> seen(counts_.size(), 0);
  for (int p = 0; p < cycle; ++p) {
    const int s = multiset[static_cast<size_t>(perm.permute(0, static_cast<uint64_t>(p)))];
    slot_[static_cast<size_t>(p)] = s;
    before_[static_cast<size_t>(p)] = seen[static_cast<size_t>(s)]++;
  }
}

MixtureSchedule::Pick MixtureSchedule::pick(uint64_t g) const {
  const uint64_t q = g / static_cast<uint64_t>(cycle_);
  const size_t p = static_cast<size_t>(g % static_cast<uint64_t>(cycle_));
  const int s = slot_[p];
  return {s, q * static_cast<uint64_t>(counts_[static_cast<size_t>(s)]) + static_cast<uint64_t>(before_[p])};
}

Result<std::shared_ptr<TokenDataset>> open_mixture(const DataOptions& options, int vocab_size, int seq_len) {
  if (options.sources.size() > static_cast<size_t>(kMixtureCycle))
    return Status::invalid(fmt::format("[[data.sources]]: {} sources, at most {}", options.sources.size(),
                                       kMixtureCycle));
  std::vector<std::shared_ptr<TokenDataset>> sources;
  std::vector<double> weights;
  for (const auto& src : options.sources) {
    if (!(src.weight > 0))
      return Status::invalid(fmt::format("[[data.sources]] '{}': weight {} must be above 0", src.name, src.weight));
    DataOptions one;
    one.train_files = src.files;
    one.format = options.format;
    auto d = TokenDataset::open(one, vocab_size, seq_len, "its files");
    if (!d) return d.status().prefixed(fmt::format("[[data.sources]] '{}': ", src.name));
    sources.push_back(std::move(*d));
    weights.push_back(src.weight);
  }
  return std::shared_ptr<TokenDataset>(std::make_shared<MixedDataset>(std::move(sources), std::move(weights)));
}

}  // namespace partrain::engine::data
