// Whole jobs on GPUs through partraind (label gpu): the dp1 worker on cuda against one-rank
// `partrain run --device cuda`; dp2 on two GPUs (NCCL, bucketed all-reduce overlapped with
// backward) against one GPU with the same global batch; a killed GPU worker stopping the job
// with the retryable code. bf16 weights and activations: losses agree within 1e-2 relative
// at every step (the loss tolerance of tests/gpu/model_test.cc), and the reference really
// trains. Skips (exit 77, or per test with the reason) without a CUDA device; the dp2 tests
// skip on one GPU, where NCCL refuses two ranks of a communicator on one device.
#include <cuda_runtime.h>
#include <signal.h>

#include "runtime_helpers.h"

namespace partrain::testing {
namespace {

constexpr int kSteps = 20;
constexpr double kBf16Loss = 1e-2;  // relative, per step

// The build's paths, or where scripts/gpu-dp-check.sh unpacked a carried build on a GPU
// machine (PARTRAIN_TEST_PARTRAIND, _CLI, _SITE_CONFIG and _SOURCE_DIR).
std::string path_of(const char* variable, const char* built) {
  const char* v = std::getenv(variable);
  return v != nullptr && *v != '\0' ? v : built;
}
const std::string kPartraind = path_of("PARTRAIN_TEST_PARTRAIND", PARTRAIND);
const std::string kCli = path_of("PARTRAIN_TEST_CLI", PARTRAIN_CLI);
const std::string kSite = path_of("PARTRAIN_TEST_SITE_CONFIG", PARTRAIN_SITE_CONFIG_FILE);
const std::string kJob = path_of("PARTRAIN_TEST_SOURCE_DIR", PARTRAIN_SOURCE_DIR) + "/etc/examples/tiny.toml";

int gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

class Gpu : public Runtime {
 protected:
  std::map<std::string, std::string> cpu_env(const std::string& run) const {
    auto e = env(run);
    e["PARTRAIN_SITE_CONFIG"] = kSite;
    return e;
  }
  std::map<std::string, std::string> gpu_env(const std::string& run) const {
    auto e = cpu_env(run);
    e["PARTRAIN_DEVICE"] = "cuda";  // partraind's workers; `partrain run` takes --device
    return e;
  }
  // Every step's loss within kBf16Loss of the reference's; prints the largest difference.
  void expect_close(const std::string& ref_run, const std::string& got_run) {
    const std::vector<double> ref = losses(dir_ + "/" + ref_run + "/metrics.jsonl");
    const std::vector<double> got = losses(dir_ + "/" + got_run + "/metrics.jsonl");
    ASSERT_EQ(ref.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(got.size(), ref.size());
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_LE(std::fabs(got[i] - ref[i]), kBf16Loss * std::fabs(ref[i]))
          << got_run << " step " << i + 1 << ": " << got[i] << " vs " << ref_run << " " << ref[i];
      worst = std::max(worst, std::fabs(got[i] - ref[i]) / std::fabs(ref[i]));
    }
    std::printf("%s vs %s: largest relative loss difference %.2e over %d steps\n", got_run.c_str(),
                ref_run.c_str(), worst, kSteps);
    EXPECT_LT(ref.back(), ref.front() - 0.5);  // a real trajectory
  }
  // `partrain run --device cuda` on one GPU: the reference.
  void one_gpu(const std::string& run) {
    Proc one = start({kCli, "run", kJob, "--device", "cuda", "--steps", std::to_string(kSteps)},
                     cpu_env(run), dir_, run);
    ASSERT_EQ(wait_exit(one.pid), 0) << slurp(one.err);
  }
};

TEST_F(Gpu, Dp1WorkerEqualsOneRankRun) {
  if (gpus() < 1) GTEST_SKIP() << "no CUDA device";
  one_gpu("one");
  Proc dp1 = start({kPartraind, "--standalone", "--nproc", "1", "--partrain", "dp1", "--steps",
                    std::to_string(kSteps), kJob}, gpu_env("dp1"), dir_, "dp1");
  ASSERT_EQ(wait_exit(dp1.pid), 0) << slurp(dp1.err);
  EXPECT_NE(slurp(dp1.err).find("cuda:0"), std::string::npos) << slurp(dp1.err);  // really on the GPU
  expect_close("one", "dp1");
}

TEST_F(Gpu, Dp2OnTwoGpusEqualsOneGpu) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 CUDA devices (NCCL refuses two ranks on one), found " << gpus();
  one_gpu("one");
  // As a user starts it, with the default 25 MiB bucket: one all-reduce per step.
  Proc dp2 = start({kCli, "run", kJob, "--partrain=dp2", "--nproc", "2", "--device", "cuda",
                    "--steps", std::to_string(kSteps)}, cpu_env("dp2"), dir_, "dp2");
  ASSERT_EQ(wait_exit(dp2.pid), 0) << slurp(dp2.err);
  expect_close("one", "dp2");
  EXPECT_EQ(first_collectives(dir_ + "/dp2/metrics.jsonl"), 1);
  // 0.25 MiB buckets: the 437760-float gradient in 2..7 all-reduces launched during backward.
  const std::string buckets = job_copy(kJob, dir_, "tiny-buckets.toml", "[plugins.dp]\nbucket_mb = 0.25\n");
  Proc b = start({kPartraind, "--standalone", "--nproc", "2", "--partrain", "dp2", "--steps",
                  std::to_string(kSteps), buckets}, gpu_env("buckets"), dir_, "buckets");
  ASSERT_EQ(wait_exit(b.pid), 0) << slurp(b.err);
  expect_close("one", "buckets");
  const int c = first_collectives(dir_ + "/buckets/metrics.jsonl");
  EXPECT_GE(c, 2);
  EXPECT_LE(c, 7);
  const std::string m = slurp(dir_ + "/buckets/metrics.jsonl");
  EXPECT_NE(m.find("\"exposed_share\":"), std::string::npos) << m;
}

TEST_F(Gpu, KilledGpuWorkerStopsTheJobWithTheRetryableCode) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << gpus();
  Proc p = start({kPartraind, "--standalone", "--nproc", "2", "--partrain", "dp2", "--steps", "100000",
                  "--heartbeat-timeout", "10", kJob}, gpu_env("kill"), dir_, "kill");
  std::map<int, pid_t> pids = started_workers(p, dir_ + "/kill/metrics.jsonl", 2, std::chrono::seconds(120));
  ASSERT_EQ(pids.size(), 2u) << slurp(p.err);
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  EXPECT_EQ(wait_exit(p.pid), 75);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
  EXPECT_NE(slurp(p.err).find("rank 1 (pid " + std::to_string(pids[1]) + ") died: killed by signal 9"),
            std::string::npos) << slurp(p.err);
  for (const auto& [rank, pid] : pids) EXPECT_NE(::kill(pid, 0), 0) << "rank " << rank << " is still there";
}

}  // namespace
}  // namespace partrain::testing

// Exit 77 (CTest's skip) without a device; listing the tests must work anywhere.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (::testing::GTEST_FLAG(list_tests)) return RUN_ALL_TESTS();
  if (partrain::testing::gpus() == 0) {
    std::fprintf(stderr, "no CUDA device: skipping the GPU runtime tests\n");
    return 77;
  }
  return RUN_ALL_TESTS();
}
