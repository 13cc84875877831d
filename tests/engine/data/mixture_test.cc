// Data mixtures ([[data.sources]], engine/data/mixture.h): the slot counts by hand, exact
// proportions per cycle, each source walking its own permutation epoch by epoch, and any
// slicing of a global batch reading the same samples.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/data/dataset.h"
#include "engine/data/mixture.h"

namespace partrain::engine::data {
namespace {

TEST(MixtureCounts, LargestRemainderByHand) {
  // 3:1 over 4096: one slot each, then the 4094 spare split 3070.5 / 1023.5 -> 3070 + 1023,
  // the last spare slot to the first of the equal remainders: 3072 and 1024.
  EXPECT_EQ(mixture_counts({3, 1}, 4096), (std::vector<int>{3072, 1024}));
  // 1:1:1 over 10: 1 each, 7 spare -> 2.33 each -> 2, 2, 2 and the last one to source 0.
  EXPECT_EQ(mixture_counts({1, 1, 1}, 10), (std::vector<int>{4, 3, 3}));
  // A tiny weight still gets its one slot.
  EXPECT_EQ(mixture_counts({1000, 0.001}, 16), (std::vector<int>{15, 1}));
}

TEST(MixtureSchedule, ExactProportionsAndEachSourceCountsUp) {
  MixtureSchedule m({3, 1}, 1337);
  std::map<int, std::vector<uint64_t>> seen;
  for (uint64_t g = 0; g < 3 * 4096; ++g) {
    const auto p = m.pick(g);
    seen[p.source].push_back(p.index);
  }
  ASSERT_EQ(seen[0].size(), 3u * 3072);
  ASSERT_EQ(seen[1].size(), 3u * 1024);
  // Source s's k-th sample is index k: every index once, in order.
  for (auto& [s, idx] : seen)
    for (uint64_t k = 0; k < idx.size(); ++k) ASSERT_EQ(idx[k], k) << "source " << s;
  // Spread, not blocks: source 1 appears in every eighth of the first cycle.
  for (int part = 0; part < 8; ++part) {
    int ones = 0;
    for (uint64_t g = part * 512; g < (part + 1) * 512u; ++g) ones += m.pick(g).source == 1;
    EXPECT_GT(ones, 64) << "part " << part;
    EXPECT_LT(ones, 192) << "part " << part;
  }
  // Another seed, another order; the same seed, the same.
  MixtureSchedule other({3, 1}, 1338), same({3, 1}, 1337);
  int differ = 0;
  for (uint64_t g = 0; g < 4096; ++g) {
    differ += other.pick(g).source != m.pick(g).source;
    ASSERT_EQ(same.pick(g).source, m.pick(g).source);
  }
  EXPECT_GT(differ, 100);
}

// Two sources of raw uint32 tokens where token = position + a source offset, so a sample's
// first token says which source and window it came from.
class MixtureData : public ::testing::Test {
 protected:
  static constexpr int kT = 7;
  void SetUp() override {
    const std::string base = "/tmp/partrain-mixture-test-" + std::to_string(getpid());
    for (int s = 0; s < 2; ++s) {
      const int windows = s == 0 ? 50 : 3;  // a big source and a small one
      std::vector<uint32_t> tokens;
      for (int i = 0; i < windows * (kT + 1); ++i) tokens.push_back(static_cast<uint32_t>(s * 1000 + i));
      paths_.push_back(base + "-" + std::to_string(s) + ".u32");
      ASSERT_TRUE(write_shard(paths_.back(), tokens, 4, /*raw=*/true).is_ok());
    }
    DataOptions o;
    o.format = "raw-u32";
    o.sources = {DataSource{"big", {paths_[0]}, 1.0}, DataSource{"small", {paths_[1]}, 1.0}};
    auto d = TokenDataset::open(o, 2000, kT);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    data_ = *d;
  }
  void TearDown() override {
    for (const auto& p : paths_) std::remove(p.c_str());
  }
  std::vector<std::string> paths_;
  std::shared_ptr<TokenDataset> data_;
};

TEST_F(MixtureData, SourcesWalkTheirOwnEpochs) {
  const Sampler sampler(data_->num_windows(), 1337);
  EXPECT_EQ(data_->num_windows(), 53u);
  std::vector<int32_t> in(kT), tgt(kT);
  std::vector<std::vector<int>> windows(2);
  for (uint64_t g = 0; g < 4096; ++g) {
    ASSERT_TRUE(data_->read_sample(sampler, g, in.data(), tgt.data()).is_ok());
    const int source = in[0] / 1000, window = (in[0] % 1000) / (kT + 1);
    ASSERT_EQ(tgt[0], in[0] + 1);
    windows[static_cast<size_t>(source)].push_back(window);
  }
  ASSERT_EQ(windows[0].size(), 2048u);  // equal weights: half each
  ASSERT_EQ(windows[1].size(), 2048u);
  // Every epoch of each source is a permutation of its windows (the small one repeats).
  for (int s = 0; s < 2; ++s) {
    const size_t n = s == 0 ? 50 : 3;
    for (size_t e = 0; (e + 1) * n <= windows[s].size(); ++e) {
      std::set<int> epoch(windows[s].begin() + e * n, windows[s].begin() + (e + 1) * n);
      ASSERT_EQ(epoch.size(), n) << "source " << s << " epoch " << e;
    }
  }
}

TEST_F(MixtureData, AnySlicingReadsTheSameSamples) {
  const Sampler sampler(data_->num_windows(), 99);
  const int count = 48;
  std::vector<int32_t> whole_in(count * kT), whole_tgt(count * kT);
  ASSERT_TRUE(read_samples(*data_, sampler, 1000, count, kT, whole_in.data(), whole_tgt.data()).is_ok());
  for (int slice : {1, 4, 16}) {
    std::vector<int32_t> in(count * kT), tgt(count * kT);
    for (int k = 0; k < count; k += slice)
      ASSERT_TRUE(read_samples(*data_, sampler, 1000 + k, slice, kT, in.data() + k * kT, tgt.data() + k * kT).is_ok());
    EXPECT_EQ(in, whole_in) << "slices of " << slice;
    EXPECT_EQ(tgt, whole_tgt) << "slices of " << slice;
  }
}

TEST_F(MixtureData, ABadSourceIsNamed) {
  DataOptions o;
  o.format = "raw-u32";
  o.sources = {DataSource{"big", {paths_[0]}, 1.0}, DataSource{"web", {"/nonexistent/web.bin"}, 2.0}};
  auto d = TokenDataset::open(o, 2000, kT);
  ASSERT_FALSE(d.is_ok());
  EXPECT_EQ(d.status().message().rfind("[[data.sources]] 'web': /nonexistent/web.bin", 0), 0u)
      << d.status().message();
}

}  // namespace
}  // namespace partrain::engine::data
