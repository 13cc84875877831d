// The zero plugins through the ABI v2 host side (worker/data_plugin, worker/comm_adapter) on
// three ranks of a real Gloo group, one thread each, against hand arithmetic: the balanced
// partition of 10 elements is [0, 4), [4, 7), [7, 10); gradient ranges handed over in two
// pieces are averaged into each rank's shard (added, as with a second micro-batch); an
// in-place gather of the whole buffer and a gather of a range crossing shard boundaries give
// every rank the concatenated shards; the v2 communicator's broadcast copies the root's data.
#include <array>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/gloo/gloo_communicator.h"
#include "comm/rendezvous/client.h"
#include "comm/rendezvous/server.h"
#include "plugin/data_loader.h"
#include "plugin/thread_ranks.h"
#include "worker/comm_adapter.h"
#include "worker/data_plugin_comm.h"

namespace partrain::worker {
namespace {

constexpr const char* kSecret = "zero-plugin-test-secret-0123456789";
constexpr int kRanks = 3;
constexpr size_t kN = 10;

struct RankResult {
  Status status;
  partrain_data_plan_v2_t plan{};
  std::vector<float> shard_grads, gathered, range, broadcast;
};

// Rank r's gradient: element i is 3 (i + 1) (r + 1), so the average over ranks 0..2 is
// 3 (i + 1) * 2 = 6 (i + 1); handed over twice (two micro-batches), the shard holds 12 (i + 1).
void run_rank(int rank, int port, const partrain_strategy_v2_t* api, RankResult* out) {
  auto fail = [&](const Status& s) { out->status = s; };
  Result<partrain::testing::ThreadRank> c = partrain::testing::connect_thread_rank(rank, port, kSecret, "dp0");
  if (!c) return fail(c.status());
  DataPluginComm plugin(nullptr, api);
  constexpr uint64_t kAll = PARTRAIN_HOST_SHARD_OPTIMIZER | PARTRAIN_HOST_SHARD_GRADS | PARTRAIN_HOST_SHARD_PARAMS;
  Status s = plugin.init("bucket_mb = 0.000008\n", c->comm.get(), rank, kN, kAll);  // 2-element buckets
  if (!s) return fail(s);
  out->plan = plugin.plan();
  const size_t lo = out->plan.shard_begin, hi = out->plan.shard_end;
  out->shard_grads.assign(hi - lo, 0.0f);
  std::vector<float> grads(kN);
  if (!(s = plugin.step_begin(0))) return fail(s);
  for (int micro = 0; micro < 2; ++micro) {
    for (size_t i = 0; i < kN; ++i) grads[i] = 3.0f * static_cast<float>((i + 1) * (rank + 1));
    // Back to front, as backward finishes them: [6, 10) then [0, 6).
    if (!(s = plugin.grads_ready(grads.data() + 6, 6, 4, out->shard_grads.data()))) return fail(s);
    if (!(s = plugin.grads_ready(grads.data(), 0, 6, out->shard_grads.data()))) return fail(s);
    if (!(s = plugin.grads_release(0, kN))) return fail(s);  // the host reuses `grads`
  }
  if (!(s = plugin.grads_done(nullptr))) return fail(s);
  // The shard's parameters: element i is 100 + i; gathered in place into the full buffer.
  out->gathered.assign(kN, -1.0f);
  for (size_t i = lo; i < hi; ++i) out->gathered[i] = 100.0f + static_cast<float>(i);
  if (!(s = plugin.params_gather(out->gathered.data() + lo, out->gathered.data(), 0, kN))) return fail(s);
  if (!(s = plugin.params_wait(out->gathered.data()))) return fail(s);
  // A range across the shard boundaries, [3, 8), from a separate shard buffer.
  std::vector<float> shard(hi - lo);
  for (size_t i = lo; i < hi; ++i) shard[i - lo] = 100.0f + static_cast<float>(i);
  out->range.assign(5, -1.0f);
  if (!(s = plugin.params_gather(shard.data(), out->range.data(), 3, 5))) return fail(s);
  if (!(s = plugin.params_wait(out->range.data()))) return fail(s);
  partrain_sync_stats_v2_t stats{};
  if (!(s = plugin.step_end(&stats))) return fail(s);
  if (stats.collectives == 0) return fail(Status::internal("no collectives counted"));
  // The v2 communicator's broadcast from rank 1.
  partrain_comm_v2_t cv2 = make_plugin_comm_v2(c->comm.get());
  out->broadcast = {static_cast<float>(rank), 7.0f * static_cast<float>(rank)};
  void* work = nullptr;
  char err[256] = {0};
  if (cv2.broadcast(cv2.ctx, out->broadcast.data(), 2, 1, &work, err, sizeof err) != PARTRAIN_OK ||
      cv2.wait(cv2.ctx, work, err, sizeof err) != PARTRAIN_OK) {
    return fail(Status::internal(err));
  }
}

TEST(ZeroPlugin, ShardsReduceAndGatherExactlyOverThreeRanks) {
  Result<std::unique_ptr<plugin::DataPlugin>> p = plugin::DataPlugin::find(PARTRAIN_BUILD_PLUGINDIR, "zero2");
  ASSERT_TRUE(p) << p.status().message();
  ASSERT_NE((*p)->v2(), nullptr);
  std::array<RankResult, kRanks> results;
  ASSERT_NO_FATAL_FAILURE(partrain::testing::run_thread_ranks(kRanks, kSecret, [&](int r, int port) {
    run_rank(r, port, (*p)->v2(), &results[static_cast<size_t>(r)]);
  }));
  const size_t bounds[kRanks + 1] = {0, 4, 7, 10};
  for (int r = 0; r < kRanks; ++r) {
    const RankResult& got = results[static_cast<size_t>(r)];
    ASSERT_TRUE(got.status.is_ok()) << "rank " << r << ": " << got.status.message();
    EXPECT_EQ(got.plan.stage, 2);
    EXPECT_EQ(got.plan.shard_begin, bounds[r]);
    EXPECT_EQ(got.plan.shard_end, bounds[r + 1]);
    for (size_t i = got.plan.shard_begin; i < got.plan.shard_end; ++i) {
      EXPECT_FLOAT_EQ(got.shard_grads[i - got.plan.shard_begin], 12.0f * static_cast<float>(i + 1))
          << "rank " << r << " element " << i;
    }
    for (size_t i = 0; i < kN; ++i) EXPECT_EQ(got.gathered[i], 100.0f + static_cast<float>(i)) << i;
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(got.range[i], 103.0f + static_cast<float>(i)) << i;
    EXPECT_EQ(got.broadcast, (std::vector<float>{1.0f, 7.0f})) << "rank " << r;
  }
}

// A stage the host cannot hold is refused at init with the fix.
TEST(ZeroPlugin, RefusesAHostWithoutTheFeature) {
  Result<std::unique_ptr<plugin::DataPlugin>> p = plugin::DataPlugin::find(PARTRAIN_BUILD_PLUGINDIR, "zero3");
  ASSERT_TRUE(p) << p.status().message();
  partrain_comm_v2_t comm{};
  comm.size = 2;
  partrain_init_args_v2_t args{sizeof args, "", &comm, 0, 2, 100, PARTRAIN_HOST_SHARD_OPTIMIZER};
  partrain_data_plan_v2_t plan{sizeof plan, 0, 0, 100, 1};
  void* state = nullptr;
  char err[256] = {0};
  EXPECT_EQ((*p)->v2()->init(&args, &plan, &state, err, sizeof err), PARTRAIN_EINVAL);
  EXPECT_STREQ(err, "zero3: this partrain cannot keep the state ZeRO stage 3 shards; use dp or a "
                    "lower stage");
}

}  // namespace
}  // namespace partrain::worker
