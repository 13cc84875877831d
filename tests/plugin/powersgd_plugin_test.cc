// The powersgd plugin (plugins/data/powersgd) through the ABI v2 host side on three ranks of
// a real Gloo group, one thread each, against PowerSGD's Algorithm 1 (Vogels et al. 2019)
// computed here in double precision: with rank = 2 and warmup_steps = 1, step 0 is the plain
// average; on steps 1 and 2 each matrix M_r = g_r + e_r (10 x 10 and 6 x 5 views of the
// 100- and 30-element tensors) gives P = mean_r M_r Q, orthonormalized, Q = mean_r M_r^T P,
// every rank's gradient P Q^T, e_r = M_r - P Q^T, Q carried into step 2; the 7-element
// tensor (prime: 7 x 1, nothing to gain) is averaged whole. Bytes a rank puts in: 548 at
// warm-up, then 4 x ((10 + 6) x 2 + 7 + (10 + 5) x 2) = 276 in two all-reduces.
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../../plugins/data/powersgd/low_rank.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/rendezvous/client.h"
#include "plugin/data_loader.h"
#include "plugin/bad_tables.h"
#include "plugin/thread_ranks.h"
#include "worker/data_plugin_comm.h"

namespace partrain::worker {
namespace {

constexpr const char* kSecret = "powersgd-plugin-test-secret-0123456789";
constexpr int kRanks = 3;
constexpr int kSteps = 3;
constexpr size_t kN = 137, kR = 2;
struct Tensor {
  size_t offset, count, rows, cols;  // rows = 0: averaged whole
};
constexpr Tensor kTensors[] = {{130, 7, 0, 0}, {30, 100, 10, 10}, {0, 30, 6, 5}};  // handed back to front

float gradient(int r, int t, size_t i) {
  return std::cos(0.3f * static_cast<float>(i * (r + 1)) + 0.9f * static_cast<float>(t)) +
         0.1f * static_cast<float>(r);
}

struct RankResult {
  Status status;
  std::array<std::vector<float>, kSteps> grads;
  std::array<partrain_sync_stats_v2_t, kSteps> stats{};
};

void run_rank(int rank, int port, const partrain_strategy_v2_t* api, RankResult* out) {
  auto fail = [&](const Status& s) { out->status = s; };
  Result<partrain::testing::ThreadRank> c = partrain::testing::connect_thread_rank(rank, port, kSecret, "dp0");
  if (!c) return fail(c.status());
  DataPluginComm plugin(nullptr, api);
  Status s = plugin.init("rank = 2\nwarmup_steps = 1\n", c->comm.get(), rank, kN, 0);
  if (!s) return fail(s);
  for (int t = 0; t < kSteps; ++t) {
    std::vector<float>& g = out->grads[static_cast<size_t>(t)];
    g.resize(kN);
    for (size_t i = 0; i < kN; ++i) g[i] = gradient(rank, t, i);
    if (!(s = plugin.step_begin(t))) return fail(s);
    for (const Tensor& x : kTensors) {
      if (!(s = plugin.grads_ready(g.data() + x.offset, x.offset, x.count, nullptr))) return fail(s);
    }
    if (!(s = plugin.grads_done(nullptr))) return fail(s);
    if (!(s = plugin.step_end(&out->stats[static_cast<size_t>(t)]))) return fail(s);
  }
}

using Matrix = std::vector<double>;  // row-major

// Algorithm 1 in double, per step: the gradient every rank should hold.
std::array<std::vector<double>, kSteps> reference() {
  std::array<std::vector<double>, kSteps> out;
  std::array<std::vector<double>, kRanks> e;
  for (auto& v : e) v.assign(kN, 0.0);
  std::vector<Matrix> q;  // per compressed tensor, cols x r
  for (const Tensor& x : kTensors) {
    std::vector<float> q0(x.cols * kR);
    powersgd::initial_q(x.offset, x.cols, kR, q0.data());  // the plugin's seed convention
    q.emplace_back(q0.begin(), q0.end());
  }
  for (int t = 0; t < kSteps; ++t) {
    std::vector<double>& avg = out[static_cast<size_t>(t)];
    avg.assign(kN, 0.0);
    for (size_t xi = 0; xi < std::size(kTensors); ++xi) {
      const Tensor& x = kTensors[xi];
      if (t == 0 || x.rows == 0) {
        for (size_t i = x.offset; i < x.offset + x.count; ++i) {
          for (int r = 0; r < kRanks; ++r) avg[i] += gradient(r, t, i) / kRanks;
        }
        continue;
      }
      std::array<Matrix, kRanks> m;
      Matrix p(x.rows * kR, 0.0), qn(x.cols * kR, 0.0);
      for (int r = 0; r < kRanks; ++r) {
        m[r].resize(x.count);
        for (size_t i = 0; i < x.count; ++i) m[r][i] = gradient(r, t, x.offset + i) + e[r][x.offset + i];
        for (size_t a = 0; a < x.rows; ++a)
          for (size_t k = 0; k < kR; ++k)
            for (size_t b = 0; b < x.cols; ++b) p[a * kR + k] += m[r][a * x.cols + b] * q[xi][b * kR + k] / kRanks;
      }
      for (size_t k = 0; k < kR; ++k) {  // Gram-Schmidt on P's columns
        for (size_t l = 0; l < k; ++l) {
          double dot = 0;
          for (size_t a = 0; a < x.rows; ++a) dot += p[a * kR + k] * p[a * kR + l];
          for (size_t a = 0; a < x.rows; ++a) p[a * kR + k] -= dot * p[a * kR + l];
        }
        double norm = 0;
        for (size_t a = 0; a < x.rows; ++a) norm += p[a * kR + k] * p[a * kR + k];
        for (size_t a = 0; a < x.rows; ++a) p[a * kR + k] /= std::sqrt(norm);
      }
      for (int r = 0; r < kRanks; ++r)
        for (size_t b = 0; b < x.cols; ++b)
          for (size_t k = 0; k < kR; ++k)
            for (size_t a = 0; a < x.rows; ++a) qn[b * kR + k] += m[r][a * x.cols + b] * p[a * kR + k] / kRanks;
      q[xi] = qn;
      for (size_t a = 0; a < x.rows; ++a) {
        for (size_t b = 0; b < x.cols; ++b) {
          double v = 0;
          for (size_t k = 0; k < kR; ++k) v += p[a * kR + k] * qn[b * kR + k];
          avg[x.offset + a * x.cols + b] = v;
          for (int r = 0; r < kRanks; ++r) e[r][x.offset + a * x.cols + b] = m[r][a * x.cols + b] - v;
        }
      }
    }
  }
  return out;
}

TEST(PowerSgdPlugin, WarmUpThenRankRWithWarmStartAndErrorFeedback) {
  Result<std::unique_ptr<plugin::DataPlugin>> p = plugin::DataPlugin::find(PARTRAIN_BUILD_PLUGINDIR, "powersgd");
  ASSERT_TRUE(p) << p.status().message();
  ASSERT_NE((*p)->v2(), nullptr);
  std::array<RankResult, kRanks> results;
  ASSERT_NO_FATAL_FAILURE(partrain::testing::run_thread_ranks(kRanks, kSecret, [&](int r, int port) {
    run_rank(r, port, (*p)->v2(), &results[static_cast<size_t>(r)]);
  }));
  const auto ref = reference();
  for (int r = 0; r < kRanks; ++r) {
    const RankResult& got = results[static_cast<size_t>(r)];
    ASSERT_TRUE(got.status.is_ok()) << "rank " << r << ": " << got.status.message();
    for (int t = 0; t < kSteps; ++t) {
      for (size_t i = 0; i < kN; ++i) {
        EXPECT_NEAR(got.grads[t][i], ref[t][i], 1e-5 * (1 + std::fabs(ref[t][i])))
            << "step " << t << ", rank " << r << " element " << i;
      }
    }
    EXPECT_EQ(got.grads[1], results[0].grads[1]) << "rank " << r << " differs from rank 0";
    EXPECT_EQ(got.stats[0].bytes, 548u);
    EXPECT_EQ(got.stats[0].collectives, 1u);
    for (int t = 1; t < kSteps; ++t) {
      EXPECT_EQ(got.stats[t].bytes, 276u);
      EXPECT_EQ(got.stats[t].collectives, 2u);
    }
  }
}

TEST(PowerSgdPlugin, BadTableIsRefusedWithTheFix) {
  partrain::testing::expect_tables_refused("powersgd", {
      {"rank = 0\n", "[plugins.powersgd] rank: need a whole number from 1 to 1024, e.g. 4"},
      {"warmup_steps = 1.5\n",
       "[plugins.powersgd] warmup_steps: need a whole number of steps, 0 or more, e.g. 10"},
      {"bucket_mb = 1\n", "[plugins.powersgd]: unknown key 'bucket_mb'; the keys are rank, warmup_steps"},
  });
}

}  // namespace
}  // namespace partrain::worker
