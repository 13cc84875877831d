// The onebit plugin (plugins/data/onebit) through the ABI v2 host side (worker/data_plugin)
// on three ranks of a real Gloo group, one thread each, against the equations computed here:
// with warmup_steps = 1, step 0 averages exactly as dp does; steps 1 and 2 give every rank
//   avg_i = (q_0,i + q_1,i + q_2,i) / 3,  q_r = s_r sign(c_r),  c_r = g_r + e_r,
//   s_r = mean |c_r| per tensor,  e_r <- c_r - q_r
// (each rank's residual carried from step 1 into step 2), identical on every rank. Two
// tensors, [40, 100) then [0, 40), in 52-element buckets: two collectives a step, and the
// bytes a rank puts in: 400 at warm-up, then 4 x (1 + ceil(60/32) + 1 + ceil(40/32)) = 24.
// With chunk = 16, each 16 elements of a tensor have a scale of their own: 60 = 16 + 16 + 16
// + 12 and 40 = 16 + 16 + 8, one scale and one sign word each, 4 x 14 = 56 bytes.
// Bad [plugins.onebit] values are refused at init naming the key and the fix.
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/gloo/gloo_communicator.h"
#include "comm/rendezvous/client.h"
#include "plugin/data_loader.h"
#include "plugin/bad_tables.h"
#include "plugin/thread_ranks.h"
#include "worker/data_plugin_comm.h"

namespace partrain::worker {
namespace {

constexpr const char* kSecret = "onebit-plugin-test-secret-0123456789";
constexpr int kRanks = 3;
constexpr int kSteps = 3;
constexpr size_t kN = 100;
struct Tensor {
  size_t offset, count;
};
constexpr Tensor kTensors[] = {{40, 60}, {0, 40}};  // handed back to front

// Rank r's gradient at step t, element i: mixed signs and magnitudes, different per tensor.
float gradient(int r, int t, size_t i) {
  return std::sin(0.7f * static_cast<float>(i) + 1.3f * static_cast<float>(r) + 0.4f * static_cast<float>(t)) *
         (i < 40 ? 0.01f : 2.0f);
}

struct RankResult {
  Status status;
  std::array<std::vector<float>, kSteps> grads;
  std::array<partrain_sync_stats_v2_t, kSteps> stats{};
};

void run_rank(int rank, int port, const partrain_strategy_v2_t* api, size_t chunk, RankResult* out) {
  auto fail = [&](const Status& s) { out->status = s; };
  Result<partrain::testing::ThreadRank> c = partrain::testing::connect_thread_rank(rank, port, kSecret, "dp0");
  if (!c) return fail(c.status());
  DataPluginComm plugin(nullptr, api);
  const std::string table = "warmup_steps = 1\nbucket_mb = 0.0002  # 52 floats\nchunk = " + std::to_string(chunk) + "\n";
  Status s = plugin.init(table, c->comm.get(), rank, kN, 0);
  if (!s) return fail(s);
  for (int t = 0; t < kSteps; ++t) {
    std::vector<float>& g = out->grads[static_cast<size_t>(t)];
    g.resize(kN);
    for (size_t i = 0; i < kN; ++i) g[i] = gradient(rank, t, i);
    if (!(s = plugin.step_begin(100 + t))) return fail(s);  // any first step starts the warm-up
    for (const Tensor& x : kTensors) {
      if (!(s = plugin.grads_ready(g.data() + x.offset, x.offset, x.count, nullptr))) return fail(s);
    }
    if (!(s = plugin.grads_done(nullptr))) return fail(s);
    if (!(s = plugin.step_end(&out->stats[static_cast<size_t>(t)]))) return fail(s);
  }
}

// The equations, per step: the average every rank should hold.
std::array<std::vector<float>, kSteps> reference(size_t chunk) {
  std::array<std::vector<float>, kSteps> out;
  std::array<std::vector<float>, kRanks> e;
  for (auto& v : e) v.assign(kN, 0.0f);
  for (int t = 0; t < kSteps; ++t) {
    std::vector<float>& avg = out[static_cast<size_t>(t)];
    avg.assign(kN, 0.0f);
    if (t == 0) {  // warm-up: the plain average
      for (size_t i = 0; i < kN; ++i) {
        for (int r = 0; r < kRanks; ++r) avg[i] += gradient(r, t, i);
        avg[i] /= kRanks;
      }
      continue;
    }
    for (int r = 0; r < kRanks; ++r) {
      std::vector<float>& er = e[static_cast<size_t>(r)];
      for (const Tensor& tensor : kTensors) {
        const size_t step = chunk > 0 ? chunk : tensor.count;
        for (size_t lo = 0; lo < tensor.count; lo += step) {
          const Tensor x{tensor.offset + lo, std::min(step, tensor.count - lo)};
          std::vector<float> cr(x.count);
          double sum = 0;
          for (size_t k = 0; k < x.count; ++k) {
            cr[k] = gradient(r, t, x.offset + k) + er[x.offset + k];
            sum += std::fabs(static_cast<double>(cr[k]));
          }
          const float s = static_cast<float>(sum / static_cast<double>(x.count));
          for (size_t k = 0; k < x.count; ++k) {
            const float q = cr[k] >= 0.0f ? s : -s;
            avg[x.offset + k] += q;
            er[x.offset + k] = cr[k] - q;
          }
        }
      }
    }
    for (float& a : avg) a /= kRanks;
  }
  return out;
}

class OneBitPlugin : public ::testing::TestWithParam<std::pair<size_t, uint64_t>> {};  // chunk, bytes

TEST_P(OneBitPlugin, WarmUpThenCompressedAverageWithErrorFeedback) {
  const auto [chunk, bytes] = GetParam();
  Result<std::unique_ptr<plugin::DataPlugin>> p = plugin::DataPlugin::find(PARTRAIN_BUILD_PLUGINDIR, "onebit");
  ASSERT_TRUE(p) << p.status().message();
  ASSERT_NE((*p)->v2(), nullptr);
  std::array<RankResult, kRanks> results;
  ASSERT_NO_FATAL_FAILURE(partrain::testing::run_thread_ranks(kRanks, kSecret, [&](int r, int port) {
    run_rank(r, port, (*p)->v2(), chunk, &results[static_cast<size_t>(r)]);
  }));
  const auto ref = reference(chunk);
  for (int r = 0; r < kRanks; ++r) {
    const RankResult& got = results[static_cast<size_t>(r)];
    ASSERT_TRUE(got.status.is_ok()) << "rank " << r << ": " << got.status.message();
    for (size_t i = 0; i < kN; ++i) {
      EXPECT_NEAR(got.grads[0][i], ref[0][i], 1e-6) << "warm-up, rank " << r << " element " << i;
      EXPECT_EQ(got.grads[1][i], ref[1][i]) << "step 1, rank " << r << " element " << i;
      EXPECT_EQ(got.grads[2][i], ref[2][i]) << "step 2, rank " << r << " element " << i;
    }
    EXPECT_EQ(got.stats[0].bytes, 400u);
    EXPECT_EQ(got.stats[1].bytes, bytes);
    EXPECT_EQ(got.stats[2].bytes, bytes);
    for (const auto& st : got.stats) EXPECT_EQ(st.collectives, 2u);
  }
  // The compressed step is not the plain average (it is lossy), but close to it.
  double diff = 0, norm = 0;
  for (size_t i = 0; i < kN; ++i) {
    float plain = 0;
    for (int r = 0; r < kRanks; ++r) plain += gradient(r, 1, i) / kRanks;
    diff += std::fabs(results[0].grads[1][i] - plain);
    norm += std::fabs(plain);
  }
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(diff, norm);
}

INSTANTIATE_TEST_SUITE_P(WholeTensorsAndChunks, OneBitPlugin,
                         ::testing::Values(std::pair<size_t, uint64_t>{0, 24}, std::pair<size_t, uint64_t>{16, 56}));

TEST(OneBitPluginTable, BadTableIsRefusedWithTheFix) {
  partrain::testing::expect_tables_refused("onebit", {
      {"warmup_steps = -1\n",
       "[plugins.onebit] warmup_steps: need a whole number of steps, 0 or more, e.g. 10"},
      {"warmup_steps = 2.5\n",
       "[plugins.onebit] warmup_steps: need a whole number of steps, 0 or more, e.g. 10"},
      {"bucket_mb = 0\n", "[plugins.onebit] bucket_mb: need a positive number of MiB, e.g. 25"},
      {"chunk = -2\n", "[plugins.onebit] chunk: need a whole number of elements per scale, 0 (the whole "
                        "tensor) or more, e.g. 32"},
      {"warmup = 3\n", "[plugins.onebit]: unknown key 'warmup'; the keys are warmup_steps, chunk, bucket_mb"},
  });
}

}  // namespace
}  // namespace partrain::worker
