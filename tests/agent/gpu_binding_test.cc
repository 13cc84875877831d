// GPU binding of the workers (agent/gpu_binding.h): the node's GPUs from
// CUDA_VISIBLE_DEVICES, NVML or the NVIDIA driver's folder, one per local worker, and the
// refusal of a cuda job with fewer GPUs than workers. No GPU needed: the driver's folder and
// NVML (fixtures/fake_nvml.c) are stood in for.
#include "agent/gpu_binding.h"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

namespace partrain::agent {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<std::string>;

TEST(NodeGpus, CudaVisibleDevicesAsWritten) {
  EXPECT_EQ(node_gpus("0,1,2,3", "/nonexistent").ids, (Ids{"0", "1", "2", "3"}));
  EXPECT_EQ(node_gpus("5,3", "/nonexistent").ids, (Ids{"5", "3"}));  // Slurm's order kept
  EXPECT_EQ(node_gpus("GPU-8a1b,MIG-77c2", "/nonexistent").ids, (Ids{"GPU-8a1b", "MIG-77c2"}));
  EXPECT_EQ(node_gpus("2", "/nonexistent").source, "CUDA_VISIBLE_DEVICES='2'");
}

TEST(NodeGpus, SetButEmptyOrNoDevFilesIsNoGpu) {
  // The CUDA runtime sees no device under either; Slurm writes NoDevFiles for a job
  // without GPUs. The driver's folder is not consulted then.
  char tmpl[] = "/tmp/partrain-gpus-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  fs::create_directory(fs::path(tmpl) / "0000:3b:00.0");
  EXPECT_TRUE(node_gpus("", tmpl).ids.empty());
  EXPECT_TRUE(node_gpus("NoDevFiles", tmpl).ids.empty());
  fs::remove_all(tmpl);
}

TEST(NodeGpus, UnsetReadsTheDriversFolderWhereNvmlIsMissing) {
  char tmpl[] = "/tmp/partrain-gpus-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  for (const char* bus : {"0000:3b:00.0", "0000:5e:00.0", "0000:86:00.0"}) fs::create_directory(fs::path(tmpl) / bus);
  const NodeGpus g = node_gpus(nullptr, tmpl, "");  // NVML skipped: the folder alone
  EXPECT_EQ(g.ids, (Ids{"0", "1", "2"}));
  EXPECT_NE(g.source.find("lists 3"), std::string::npos) << g.source;
  fs::remove_all(tmpl);
  const NodeGpus none = node_gpus(nullptr, tmpl, "libnvidia-ml-not-there.so.1");  // gone: no driver
  EXPECT_TRUE(none.ids.empty());
  EXPECT_NE(none.source.find("no NVIDIA driver"), std::string::npos) << none.source;
}

TEST(NodeGpus, UnsetAsksNvmlFirst) {
  // The NVML stand-in counts 3; the driver's folder is not needed then.
  const NodeGpus g = node_gpus(nullptr, "/nonexistent", FAKE_NVML);
  EXPECT_EQ(g.ids, (Ids{"0", "1", "2"}));
  EXPECT_EQ(g.source, "NVML counts 3");
  // An NVML that cannot start (no kernel driver): the folder decides, here none.
  const NodeGpus none = node_gpus(nullptr, "/nonexistent", FAKE_NVML_FAIL);
  EXPECT_TRUE(none.ids.empty());
  EXPECT_NE(none.source.find("no NVIDIA driver"), std::string::npos) << none.source;
}

TEST(GpusPerWorker, WorkerIGetsTheIthGpu) {
  NodeGpus g{{"5", "3", "7"}, "CUDA_VISIBLE_DEVICES='5,3,7'"};
  Result<std::vector<std::string>> r = gpus_per_worker(g, 2, "cuda");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(*r, (Ids{"5", "3"}));
  // CPU ranks are bound the same way when there are enough.
  Result<std::vector<std::string>> cpu = gpus_per_worker(g, 3, "cpu");
  ASSERT_TRUE(cpu.is_ok());
  EXPECT_EQ(*cpu, (Ids{"5", "3", "7"}));
}

TEST(GpusPerWorker, TooFewForCpuRanksLeavesThemAlone) {
  Result<std::vector<std::string>> r = gpus_per_worker(NodeGpus{{"0"}, "x"}, 2, "cpu");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(*r, (Ids{"", ""}));
}

TEST(GpusPerWorker, TooFewForACudaJobIsRefusedWithTheFix) {
  Result<std::vector<std::string>> r = gpus_per_worker(NodeGpus{{"0"}, "CUDA_VISIBLE_DEVICES='0'"}, 2, "cuda");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "[job] device = cuda: 2 local workers need one GPU each, but this node has 1 "
            "(CUDA_VISIBLE_DEVICES='0'); run where each worker has its own GPU (Slurm: "
            "--gpus-per-node=2), run at most 1 worker on this node (--nproc), or train on CPU "
            "ranks (--device cpu)");
  Result<std::vector<std::string>> none = gpus_per_worker(NodeGpus{{}, "no NVIDIA driver"}, 1, "cuda");
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().message().find("run at most"), std::string::npos) << none.status().message();
  EXPECT_NE(none.status().message().find("--device cpu"), std::string::npos);
}

// PARTRAIN_SHARE_GPUS=1 (a test option): worker i gets GPU i mod n, so 4 workers run on one
// GPU; a node without any GPU is still refused, and CPU jobs are bound as before.
TEST(GpusPerWorker, SharingPutsWorkersRoundRobinOnTheGpus) {
  Result<std::vector<std::string>> one = gpus_per_worker(NodeGpus{{"0"}, "x"}, 4, "cuda", true);
  ASSERT_TRUE(one.is_ok()) << one.status().message();
  EXPECT_EQ(*one, (Ids{"0", "0", "0", "0"}));
  Result<std::vector<std::string>> two = gpus_per_worker(NodeGpus{{"GPU-a", "GPU-b"}, "x"}, 3, "cuda", true);
  ASSERT_TRUE(two.is_ok());
  EXPECT_EQ(*two, (Ids{"GPU-a", "GPU-b", "GPU-a"}));
  EXPECT_FALSE(gpus_per_worker(NodeGpus{{}, "no NVIDIA driver"}, 2, "cuda", true).is_ok());
  Result<std::vector<std::string>> cpu = gpus_per_worker(NodeGpus{{"0"}, "x"}, 2, "cpu", true);
  ASSERT_TRUE(cpu.is_ok());
  EXPECT_EQ(*cpu, (Ids{"", ""}));
  testing::ScopedEnv on("PARTRAIN_SHARE_GPUS", "1");
  EXPECT_TRUE(share_gpus_from_env());
  testing::ScopedEnv off("PARTRAIN_SHARE_GPUS", "yes");
  EXPECT_FALSE(share_gpus_from_env());
}

}  // namespace
}  // namespace partrain::agent
