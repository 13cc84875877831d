// The sampler: a permutation of the windows in every epoch, for every size; a different
// one per epoch and per seed; the same one whoever asks; and read_samples giving the same
// global batch however it is sliced across data-parallel ranks.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/data/dataset.h"

namespace partrain::engine::data {
namespace {

std::vector<uint64_t> epoch_order(const Sampler& s, uint64_t epoch) {
  const uint64_t n = s.num_windows();
  std::vector<uint64_t> order(n);
  for (uint64_t i = 0; i < n; ++i) {
    EXPECT_EQ(s.epoch_of(epoch * n + i), epoch);
    order[i] = s.window_of(epoch * n + i);
  }
  return order;
}

bool is_permutation_of_range(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  for (uint64_t i = 0; i < v.size(); ++i)
    if (v[i] != i) return false;
  return true;
}

TEST(Sampler, IsAPermutationEveryEpochForManySizes) {
  for (uint64_t n : {1ull, 2ull, 3ull, 4ull, 5ull, 6ull, 7ull, 8ull, 9ull, 15ull, 16ull, 17ull,
                     31ull, 33ull, 100ull, 127ull, 128ull, 129ull, 1000ull, 1023ull, 1025ull,
                     4097ull, 65537ull}) {
    Sampler s(n, 1337);
    for (uint64_t epoch = 0; epoch < 3; ++epoch)
      EXPECT_TRUE(is_permutation_of_range(epoch_order(s, epoch))) << "n=" << n << " epoch=" << epoch;
  }
}

TEST(Sampler, DiffersPerEpochAndPerSeed) {
  for (uint64_t n : {10ull, 100ull, 1000ull, 4097ull}) {
    Sampler a(n, 1337), b(n, 1338);
    const auto e0 = epoch_order(a, 0), e1 = epoch_order(a, 1), other_seed = epoch_order(b, 0);
    EXPECT_NE(e0, e1) << n;
    EXPECT_NE(e0, other_seed) << n;
    std::vector<uint64_t> identity(n);
    std::iota(identity.begin(), identity.end(), 0);
    EXPECT_NE(e0, identity) << n;
  }
}

TEST(Sampler, ShufflesWell) {
  // A shuffled order leaves few windows in place (1 expected) and breaks up runs of
  // consecutive windows (a weak Feistel would keep neighbours together).
  const uint64_t n = 10000;
  Sampler s(n, 7);
  const auto order = epoch_order(s, 0);
  int fixed = 0, adjacent = 0;
  for (uint64_t i = 0; i < n; ++i) {
    fixed += order[i] == i;
    if (i + 1 < n) adjacent += order[i + 1] == order[i] + 1;
  }
  EXPECT_LT(fixed, 10);
  EXPECT_LT(adjacent, 10);
}

TEST(Sampler, SameOrderForEveryCallerAndRestart) {
  const uint64_t n = 777;
  Sampler first(n, 42);
  const auto before = epoch_order(first, 5);
  Sampler restarted(n, 42);  // a new process after a requeue builds it from the same inputs
  EXPECT_EQ(epoch_order(restarted, 5), before);
  // Evaluating out of order (a rank jumping to its slice) gives the same answers.
  for (uint64_t i = n; i-- > 0;) EXPECT_EQ(restarted.window_of(5 * n + i), before[i]);
}

TEST(Sampler, HugeIndicesAreCheap) {
  const uint64_t n = 1000000000007;  // a trillion windows: no table could hold this
  Sampler s(n, 3);
  for (uint64_t g : {uint64_t{0}, uint64_t{1}, n - 1, n, 5 * n + 12345}) {
    const uint64_t w = s.window_of(g);
    EXPECT_LT(w, n);
    EXPECT_EQ(w, s.permute(g / n, g % n));
  }
  EXPECT_NE(s.window_of(0), s.window_of(1));
}

// A dataset whose window w holds the tokens w*(T+1) .. (w+1)*(T+1)-1, written as a raw file.
class ReadSamples : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/tmp/partrain-sampler-test-" + std::to_string(getpid()) + ".u32";
    std::vector<uint32_t> tokens(kWindows * (kT + 1));
    std::iota(tokens.begin(), tokens.end(), 0u);
    ASSERT_TRUE(write_shard(path_, tokens, 4, /*raw=*/true).is_ok());
    DataOptions opt;
    opt.train_files = {path_};
    opt.format = "raw-u32";
    auto ds = TokenDataset::open(opt, static_cast<int>(tokens.size()), kT);
    ASSERT_TRUE(ds.is_ok()) << ds.status().message();
    dataset_ = *ds;
  }
  void TearDown() override { std::remove(path_.c_str()); }

  static constexpr int kT = 6;
  static constexpr uint64_t kWindows = 37;
  std::string path_;
  std::shared_ptr<TokenDataset> dataset_;
};

TEST_F(ReadSamples, AnySlicingGivesTheSameGlobalBatch) {
  Sampler sampler(dataset_->num_windows(), 99);
  const uint64_t first = 30;  // crosses the epoch boundary at 37
  const int count = 16;
  std::vector<int32_t> in(count * kT), tg(count * kT);
  ASSERT_TRUE(read_samples(*dataset_, sampler, first, count, kT, in.data(), tg.data()).is_ok());

  // What a sample must hold, from the sampler and the layout of the file.
  for (int k = 0; k < count; ++k) {
    const uint64_t w = sampler.window_of(first + k);
    for (int i = 0; i < kT; ++i) {
      ASSERT_EQ(in[k * kT + i], static_cast<int32_t>(w * (kT + 1) + i));
      ASSERT_EQ(tg[k * kT + i], static_cast<int32_t>(w * (kT + 1) + i + 1));
    }
  }
  // dp = 2 and dp = 4: rank r reads samples first + r*count/dp .. ; stitched, they agree.
  for (int dp : {2, 4, 8}) {
    std::vector<int32_t> in2(count * kT), tg2(count * kT);
    const int per = count / dp;
    for (int r = 0; r < dp; ++r)
      ASSERT_TRUE(read_samples(*dataset_, sampler, first + r * per, per, kT, in2.data() + r * per * kT,
                               tg2.data() + r * per * kT).is_ok());
    EXPECT_EQ(in2, in) << "dp=" << dp;
    EXPECT_EQ(tg2, tg) << "dp=" << dp;
  }
}

TEST_F(ReadSamples, EpochCoversEveryWindowOnce) {
  Sampler sampler(dataset_->num_windows(), 5);
  const int n = static_cast<int>(kWindows);
  std::vector<int32_t> in(n * kT), tg(n * kT);
  ASSERT_TRUE(read_samples(*dataset_, sampler, kWindows * 2, n, kT, in.data(), tg.data()).is_ok());
  std::vector<uint64_t> windows;
  for (int k = 0; k < n; ++k) windows.push_back(static_cast<uint64_t>(in[k * kT]) / (kT + 1));
  EXPECT_TRUE(is_permutation_of_range(windows));
}

}  // namespace
}  // namespace partrain::engine::data
