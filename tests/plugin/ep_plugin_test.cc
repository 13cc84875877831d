// The expert family: its loader (daemon/plugin/expert_loader.h) against the built ep plugin,
// and the ep plugin through the worker's host side (worker/expert_plugin, comm_adapter) on
// three ranks of a real Gloo group, one thread each, against hand arithmetic: an
// all-to-all with uneven counts where some ranks send nothing to others (or themselves), the
// sum over the group, the experts' gradients scaled when no other rank holds them.
#include <sys/stat.h>

#include <array>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/gloo/gloo_communicator.h"
#include "comm/rendezvous/client.h"
#include "comm/rendezvous/server.h"
#include "plugin/expert_loader.h"
#include "plugin/list.h"
#include "plugin/plugin_folder.h"
#include "plugin/schedule_loader.h"
#include "plugin/thread_ranks.h"
#include "worker/expert_plugin_comm.h"

namespace partrain::worker {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSecret = "ep-plugin-test-secret-0123456789ab";
constexpr int kRanks = 3;
constexpr size_t kC = 2;  // floats per row
// Rows rank r sends to rank p: some 0, rank 1 sends nothing to 0 or to itself.
constexpr size_t kRows[kRanks][kRanks] = {{1, 0, 2}, {0, 0, 3}, {2, 1, 0}};

float value(int src, int dst, size_t i) { return 100.0f * src + 10.0f * dst + static_cast<float>(i); }

struct RankResult {
  Status status;
  std::vector<float> received;
  double sum = 0;
  std::vector<float> grads;
  partrain_expert_stats_v1_t stats{};
};

void run_rank(int rank, int port, const partrain_expert_v1_t* api, RankResult* out) {
  auto fail = [&](const Status& s) { out->status = s; };
  Result<partrain::testing::ThreadRank> c = partrain::testing::connect_thread_rank(rank, port, kSecret, "ep0");
  if (!c) return fail(c.status());
  ExpertPluginComm ep(api, c->comm.get(), c->comm.get(), nullptr);
  Status s = ep.init("", 6, rank, kRanks);
  if (!s) return fail(s);
  // The send buffer: the rows for rank 0, then 1, then 2.
  std::vector<float> in;
  std::vector<size_t> send(kRanks), recv(kRanks);
  for (int p = 0; p < kRanks; ++p) {
    send[static_cast<size_t>(p)] = kRows[rank][p] * kC;
    recv[static_cast<size_t>(p)] = kRows[p][rank] * kC;
    for (size_t i = 0; i < kRows[rank][p] * kC; ++i) in.push_back(value(rank, p, i));
  }
  size_t total = 0;
  for (size_t n : recv) total += n;
  out->received.assign(total, -1.0f);
  ep.all_to_allv(in.data(), send, out->received.data(), recv);
  out->sum = ep.sum(0.25 + rank);
  out->grads = {2.0f, -4.0f, 6.0f};
  if (!(s = ep.reduce_expert_grads(out->grads.data(), 3, 0.5f))) return fail(s);
  if (!(s = ep.step_end(&out->stats))) return fail(s);
  out->status = ep.status();
}

TEST(EpPlugin, AllToAllWithZeroCountsOverThreeRanks) {
  Result<std::unique_ptr<plugin::ExpertPlugin>> p = plugin::ExpertPlugin::find(PARTRAIN_BUILD_PLUGINDIR, "ep");
  ASSERT_TRUE(p) << p.status().message();
  std::array<RankResult, kRanks> results;
  ASSERT_NO_FATAL_FAILURE(partrain::testing::run_thread_ranks(kRanks, kSecret, [&](int r, int port) {
    run_rank(r, port, (*p)->api(), &results[static_cast<size_t>(r)]);
  }));
  for (int r = 0; r < kRanks; ++r) {
    const RankResult& got = results[static_cast<size_t>(r)];
    ASSERT_TRUE(got.status.is_ok()) << "rank " << r << ": " << got.status.message();
    std::vector<float> want;  // source 0's rows for r, then source 1's, then source 2's
    for (int q = 0; q < kRanks; ++q) {
      for (size_t i = 0; i < kRows[q][r] * kC; ++i) want.push_back(value(q, r, i));
    }
    EXPECT_EQ(got.received, want) << "rank " << r;
    EXPECT_DOUBLE_EQ(got.sum, 0.25 * 3 + 0 + 1 + 2) << "rank " << r;
    EXPECT_EQ(got.grads, (std::vector<float>{1.0f, -2.0f, 3.0f})) << "rank " << r;  // no expert_dp peer
    // The all-to-all; the sum is a host value, on the group's host channel, not the plugin's.
    EXPECT_EQ(got.stats.collectives, 1u) << "rank " << r;
    size_t sent = 0;
    for (int p2 = 0; p2 < kRanks; ++p2) sent += kRows[r][p2] * kC * sizeof(float);
    EXPECT_EQ(got.stats.bytes, sent) << "rank " << r;
  }
}

class ExpertLoaderTest : public partrain::testing::PluginFolderTest {
 protected:
  // The shipped plugin NAME.so of the build tree.
  static std::string built(const std::string& name) {
    return std::string(PARTRAIN_BUILD_PLUGINDIR) + "/" + name + ".so";
  }
};

TEST_F(ExpertLoaderTest, EpLoadsAsAnExpertPluginAndRefusalsNameTheFix) {
  install(built("ep"), "ep.so");
  Result<std::unique_ptr<plugin::ExpertPlugin>> p = plugin::ExpertPlugin::find(dir_, "ep");
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_EQ((*p)->info().family, "expert");
  EXPECT_EQ((*p)->info().abi_version, 1);
  Result<std::vector<plugin::ListEntry>> list = plugin::list_plugins(dir_);
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_TRUE((*list)[0].status) << (*list)[0].status.message();
  EXPECT_EQ((*list)[0].info.family, "expert");
  const std::string dp = install(built("dp"), "dp.so");
  Result<std::unique_ptr<plugin::ExpertPlugin>> bad = plugin::ExpertPlugin::find(dir_, "dp");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.status().message(), dp + ": refused: missing symbol partrain_expert_v1; export it "
                                          "with PARTRAIN_EXPERT_PLUGIN from <partrain/expert_sdk.h>");
  // [plugins.ep] takes no keys; experts that do not split over the group are refused.
  partrain_comm_v2_t comm{};
  comm.size = 2;
  partrain_alltoall_v1_t a2a{};
  a2a.size = 2;
  for (auto [toml, experts, says] :
       {std::tuple{"bucket_mb = 1\n", 4, "[plugins.ep]: unknown key 'bucket_mb'"},
        std::tuple{"", 3, "ep: 3 experts do not split over ep2; pick an ep dividing them"}}) {
    partrain_expert_init_args_v1_t args{sizeof args, toml, &comm, &a2a, nullptr, experts, 0, 2};
    void* state = nullptr;
    char err[256] = {0};
    EXPECT_EQ((*p)->api()->init(&args, &state, err, sizeof err), PARTRAIN_EINVAL);
    EXPECT_NE(std::string(err).find(says), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace partrain::worker
