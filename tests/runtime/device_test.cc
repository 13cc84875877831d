// `--device cuda` with several workers, as far as a machine without a GPU can check it: the
// refusal when the node has fewer GPUs than local workers (exit 2, one line with the fix),
// the GPU each worker is given (CUDA_VISIBLE_DEVICES, read back by a stand-in worker that the
// real agent spawns), the device taken from the job file under partraind, and
// ZeRO and tensor parallelism in bf16 refused on GPU ranks before any worker starts. The
// training runs themselves are gpu_runtime_test (label gpu).
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "runtime_helpers.h"

namespace partrain::testing {
namespace {

class Device : public Runtime {
 protected:
  // A stand-in worker: writes "<CUDA_VISIBLE_DEVICES> <PARTRAIN_DEVICE>" to DIR/rank<R>, and
  // exits 0 once both ranks' files are there (at most 30 s): the first exit is an early one,
  // for which the agent stops the other rank, which on a loaded machine may not have written
  // its file yet. Written aside and renamed, so a file that is there is whole.
  std::string fake_worker() {
    const std::string path = dir_ + "/fake-worker.sh";
    const std::string f = dir_ + "/rank";
    std::ofstream(path) << "#!/bin/sh\necho \"$CUDA_VISIBLE_DEVICES $PARTRAIN_DEVICE\" > \"" << f
                        << "$PARTRAIN_RANK.tmp\" && mv \"" << f << "$PARTRAIN_RANK.tmp\" \"" << f
                        << "$PARTRAIN_RANK\"\ni=0\nwhile [ $i -lt 300 ] && { [ ! -e \"" << f << "0\" ] || [ ! -e \""
                        << f << "1\" ]; }; do sleep 0.1; i=$((i + 1)); done\n";
    ::chmod(path.c_str(), 0755);
    return path;
  }
  std::string rank_file(int r) {
    std::string s = slurp(dir_ + "/rank" + std::to_string(r));
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }
};

// The stderr lines of a run.
int lines(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

TEST_F(Device, TooFewGpusIsRefusedInOneLine) {
  // CUDA_VISIBLE_DEVICES set but empty: the CUDA runtime sees no device, on any machine.
  std::map<std::string, std::string> e = env("none");
  e["CUDA_VISIBLE_DEVICES"] = "";
  Proc none = start({PARTRAIN_CLI, "run", kTiny, "--partrain=dp2", "--nproc", "2", "--device", "cuda",
                     "--steps", "2"}, e, dir_, "none");
  EXPECT_EQ(wait_exit(none.pid), 2);
  const std::string err = slurp(none.err);
  EXPECT_EQ(lines(err), 1) << err;
  EXPECT_EQ(err.rfind("partrain: [job] device = cuda: 2 local workers need one GPU each, but this node has 0 "
                      "(CUDA_VISIBLE_DEVICES='')", 0), 0u) << err;
  EXPECT_NE(err.find("--gpus-per-node=2"), std::string::npos) << err;
  EXPECT_NE(err.find("--device cpu"), std::string::npos) << err;

  e = env("one");
  e["CUDA_VISIBLE_DEVICES"] = "0";
  Proc one = start({PARTRAIN_CLI, "run", kTiny, "--partrain=dp2", "--nproc", "2", "--device", "cuda",
                    "--steps", "2"}, e, dir_, "one");
  EXPECT_EQ(wait_exit(one.pid), 2);
  EXPECT_EQ(lines(slurp(one.err)), 1) << slurp(one.err);
  EXPECT_NE(slurp(one.err).find("this node has 1 (CUDA_VISIBLE_DEVICES='0')"), std::string::npos) << slurp(one.err);

  // One GPU named for many workers is a usage error, not a binding.
  Proc named = start({PARTRAIN_CLI, "run", kTiny, "--partrain=dp2", "--nproc", "2", "--device", "cuda:1"},
                     env("named"), dir_, "named");
  EXPECT_EQ(wait_exit(named.pid), 2);
  EXPECT_EQ(slurp(named.err), "partrain: --device cuda:1: with --nproc every worker gets its own GPU; use "
                              "--device cuda (or cpu)\n");
}

TEST_F(Device, PartraindRefusesTooFewGpusBeforeAnyWorkerStarts) {
  std::map<std::string, std::string> e = env("agent");
  e["CUDA_VISIBLE_DEVICES"] = "";
  e["PARTRAIN_DEVICE"] = "cuda";
  e["PARTRAIN_WORKER"] = fake_worker();
  Proc p = start({PARTRAIND, "--standalone", "--nproc", "2", "--partrain", "dp2", kTiny}, e, dir_, "agent");
  EXPECT_EQ(wait_exit(p.pid), 2);
  EXPECT_NE(slurp(p.err).find("2 local workers need one GPU each, but this node has 0"), std::string::npos)
      << slurp(p.err);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/rank0"));  // no worker ran
}

TEST_F(Device, EachWorkerGetsItsOwnGpu) {
  std::map<std::string, std::string> e = env("bind");
  e["CUDA_VISIBLE_DEVICES"] = "5,3,7";  // Slurm's order is kept: worker i gets the i-th
  e["PARTRAIN_WORKER"] = fake_worker();
  Proc p = start({PARTRAIN_CLI, "run", kTiny, "--partrain=dp2", "--nproc", "2", "--device", "cuda"}, e, dir_,
                 "bind");
  // The fake worker exits 0 without reporting its run's end through the rendezvous, which the
  // agent counts as an early exit (retryable, 75): what is checked here is each rank's GPU.
  ASSERT_EQ(wait_exit(p.pid), 75) << slurp(p.err);
  EXPECT_NE(slurp(p.err).find("exited 0 before its run reached the last step"), std::string::npos) << slurp(p.err);
  EXPECT_EQ(rank_file(0), "5 cuda");
  EXPECT_EQ(rank_file(1), "3 cuda");
}

TEST_F(Device, PartraindTakesTheDeviceFromTheJob) {
  std::string text = slurp(kTiny);
  const size_t at = text.find("[job]\n");
  ASSERT_NE(at, std::string::npos);
  text.insert(at + 6, "device = \"cuda\"\n");
  const std::string job = dir_ + "/gpu-job.toml";
  std::ofstream(job) << text;
  std::map<std::string, std::string> e = env("job");
  e["CUDA_VISIBLE_DEVICES"] = "GPU-aaaa,GPU-bbbb";
  e["PARTRAIN_WORKER"] = fake_worker();
  Proc p = start({PARTRAIND, "--standalone", "--nproc", "2", "--partrain", "dp2", job}, e, dir_, "job");
  // The fake worker exits 0 without reporting its run's end through the rendezvous, which the
  // agent counts as an early exit (retryable, 75): what is checked here is each rank's GPU.
  ASSERT_EQ(wait_exit(p.pid), 75) << slurp(p.err);
  EXPECT_NE(slurp(p.err).find("exited 0 before its run reached the last step"), std::string::npos) << slurp(p.err);
  EXPECT_EQ(rank_file(0), "GPU-aaaa");  // the worker reads [job] device itself
  EXPECT_EQ(rank_file(1), "GPU-bbbb");
  EXPECT_NE(slurp(p.err).find("2 local workers on GPUs GPU-aaaa,GPU-bbbb"), std::string::npos) << slurp(p.err);
}

TEST_F(Device, TensorParallelInBf16IsRefusedOnGpuRanks) {
  std::map<std::string, std::string> e = env("tp");
  e["CUDA_VISIBLE_DEVICES"] = "0,1";  // named, need not exist: refused before CUDA is touched
  Proc p = start({PARTRAIN_CLI, "run", kTiny, "--partrain=tp2", "--nproc", "2", "--device", "cuda",
                  "--steps", "2"}, e, dir_, "tp");
  EXPECT_EQ(wait_exit(p.pid), 2);
  EXPECT_EQ(lines(slurp(p.err)), 1) << slurp(p.err);
  EXPECT_NE(slurp(p.err).find("--partrain=tp2,pp1,zero0,sched=1f1b: [job] precision = \"bf16\" (the default "
                              "on GPUs) runs plain data parallelism only"), std::string::npos) << slurp(p.err);
}

TEST_F(Device, ZeroInBf16IsRefusedOnGpuRanksBeforeAnyWorker) {
  // Two GPUs named (none needs to exist): ZeRO in the GPU's default bf16 storage is refused
  // before any worker starts, in one line (fp32 storage runs: emu_layout_test).
  std::map<std::string, std::string> e = env("zero");
  e["CUDA_VISIBLE_DEVICES"] = "0,1";
  Proc p = start({PARTRAIN_CLI, "run", kTiny, "--partrain=dp2,zero1", "--nproc", "2", "--device", "cuda",
                  "--steps", "2"}, e, dir_, "zero");
  EXPECT_EQ(wait_exit(p.pid), 2);
  EXPECT_EQ(lines(slurp(p.err)), 1) << slurp(p.err);
  EXPECT_NE(slurp(p.err).find("precision = \"bf16\" (the default on GPUs) runs plain data parallelism only"),
            std::string::npos) << slurp(p.err);
}

}  // namespace
}  // namespace partrain::testing
