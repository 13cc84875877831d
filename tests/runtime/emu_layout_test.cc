// The layout matrix on the emulated GPU (daemon/gpu/emu): `--device cuda` with the emulated
// module (PARTRAIN_CUDA_MODULE), every worker on its one GPU (PARTRAIN_SHARE_GPUS=1, so the
// groups take the staged transport), so each layout takes the GPU branches of the worker, the
// plugins and the store, where a host load of device memory is a SIGSEGV and a host pointer
// handed to a device collective an error. Each layout, in fp32 storage, trains what one
// emulated-GPU rank trains: 20 steps, 1e-5 relative (as on CPU ranks: the same kernels, the
// same order of sums), the single strategies and their compositions (tp2 x pp2 x dp2 x zero1,
// ep2 x pp2, tp2 x ep2, cp2 x tp2). A tp2 x pp2 checkpoint moves between GPU and CPU ranks
// and reshards onto one GPU rank. What GPU ranks do not run yet is refused before any
// worker starts, in one line (config/supported.h).
#include <algorithm>
#include <string>
#include <vector>

#include "runtime_helpers.h"

namespace partrain::testing {
namespace {

constexpr int kSteps = 20;

struct Case {
  const char* name;
  const char* job;   // "gpt2" or "moe"
  const char* spec;  // --partrain
  int nproc;
  int layers = 2;        // [model] layers
  int micro_batch = 0;   // [training] micro_batch (0: the example's)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class EmulatedGpu : public Runtime {
 protected:
  // The environment of a run on the emulated GPU: one GPU for every worker.
  static std::map<std::string, std::string> gpu_env() {
    return {{"PARTRAIN_CUDA_MODULE", PARTRAIN_GPU_EMU_MODULE}, {"CUDA_VISIBLE_DEVICES", "0"},
            {"PARTRAIN_SHARE_GPUS", "1"}};
  }
  std::map<std::string, std::string> env_on_gpu(const std::string& run) const {
    std::map<std::string, std::string> e = env(run);
    for (const auto& [k, v] : gpu_env()) e[k] = v;
    return e;
  }
  // A copy of example `job` ("gpt2": tiny.toml, "moe": moe-tiny.toml with micro-batches of 2)
  // stored in `precision`.
  // `layers` blocks and micro-batches of `micro_batch` sequences (0: as above).
  std::string job(const std::string& kind, const std::string& precision, const std::string& name, int layers = 2,
                  int micro_batch = 0) const {
    const std::string path = job_copy(kind == "moe" ? kMoe : kTiny, dir_, name, "");
    std::vector<std::pair<std::string, std::string>> edits = {{"[job]\n", "[job]\nprecision = \"" + precision + "\"\n"},
                                                              {"layers = 2", "layers = " + std::to_string(layers)}};
    const int mb = micro_batch > 0 ? micro_batch : kind == "moe" ? 2 : 8;
    edits.emplace_back("micro_batch = 8", "micro_batch = " + std::to_string(mb));
    edit_file(path, edits);
    return path;
  }
};

class EmulatedGpuLayout : public EmulatedGpu, public ::testing::WithParamInterface<Case> {};

// The reference is one emulated-GPU rank, trained once per job for every case.
TEST_P(EmulatedGpuLayout, MatchesOneGpuRankOverTwentySteps) {
  const Case c = GetParam();
  const std::string j = job(c.job, "fp32", std::string(c.job) + ".toml", c.layers, c.micro_batch);
  const ReferenceRun one = reference_run(j, {"--device", "cuda", "--steps", std::to_string(kSteps)}, gpu_env());
  EXPECT_NE(slurp(one.err).find("cuda"), std::string::npos) << slurp(one.err);
  const std::string spec = std::string("--partrain=") + c.spec;
  Proc p = start({PARTRAIN_CLI, "run", j, spec, "--nproc", std::to_string(c.nproc), "--device", "cuda",
                  "--steps", std::to_string(kSteps)}, env_on_gpu("gpu"), dir_, "gpu");
  ASSERT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
  // The groups moved device tensors: the staged transport between ranks on the one GPU.
  EXPECT_NE(slurp(p.err).find("staged"), std::string::npos) << slurp(p.err);
  expect_same_losses(one.metrics, dir_ + "/gpu/metrics.jsonl", kSteps, std::string(c.name) + " " + spec);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, EmulatedGpuLayout,
    ::testing::Values(Case{"dp2_zero1", "gpt2", "dp2,zero1", 2}, Case{"dp2_zero2", "gpt2", "dp2,zero2", 2},
                      Case{"dp2_zero3", "gpt2", "dp2,zero3", 2}, Case{"dp2_ep2", "moe", "dp2,ep2", 2},
                      Case{"dp2_ep2_zero2", "moe", "dp2,ep2,zero2", 2}, Case{"tp2_sp", "gpt2", "tp2", 2},
                      Case{"tp2_nosp", "gpt2", "tp2,nosp", 2}, Case{"tp2_dp2_zero1", "gpt2", "tp2,dp2,zero1", 4},
                      Case{"pp2_gpipe", "gpt2", "pp2,sched=gpipe", 2, 4, 4},
                      Case{"pp2_1f1b", "gpt2", "pp2,sched=1f1b", 2, 4, 4},
                      Case{"pp2_interleaved2", "gpt2", "pp2,sched=interleaved:2", 2, 4, 4},
                      Case{"pp2_zbh1", "gpt2", "pp2,sched=zbh1", 2, 4, 4}, Case{"cp2_ring", "gpt2", "cp2", 2},
                      Case{"cp2_allgather", "gpt2", "cp2,cpimpl=allgather", 2},
                      // Compositions: every group kind at once on the one GPU.
                      Case{"tp2_pp2_dp2_zero1", "gpt2", "tp2,pp2,dp2,zero1", 8, 2, 2},
                      Case{"ep2_pp2", "moe", "ep2,pp2", 4, 2, 2}, Case{"tp2_ep2", "moe", "tp2,ep2", 4},
                      Case{"cp2_tp2", "gpt2", "cp2,tp2", 4}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// Checkpoints are kept by logical name, whatever the device: a tp2 x pp2 run on the emulated
// GPU trains 4 steps; CPU ranks resume its checkpoint on tp2 x pp2 to step 8; the emulated GPU
// resumes theirs on tp2 x pp2 to step 12; one emulated-GPU rank resumes that (reshard) to 16.
// The whole trajectory equals one emulated-GPU rank's 16 uninterrupted steps within 1e-5
// (the tolerance of the layout cases, since legs on other layouts may sum in other orders;
// every leg on the 16-step schedule).
TEST_F(EmulatedGpu, Tp2Pp2CheckpointsMoveBetweenGpuAndCpuRanks) {
  constexpr int kTotal = 16;
  const std::string j = job("gpt2", "fp32", "ck.toml", 2, 4);
  schedule_over(j, kTotal);
  const ReferenceRun one = reference_run(j, {"--device", "cuda", "--steps", std::to_string(kTotal)}, gpu_env());
  struct Leg {
    std::string spec, nproc, steps, says;
    bool gpu;
  };
  for (const Leg& leg : {Leg{"tp2,pp2", "4", "4", "", true}, Leg{"tp2,pp2", "4", "8", "resuming at step 4", false},
                         Leg{"tp2,pp2", "4", "12", "resuming at step 8", true},
                         Leg{"dp1", "1", std::to_string(kTotal), "resuming at step 12", true}}) {
    std::vector<std::string> argv = {PARTRAIN_CLI, "run", j, "--partrain=" + leg.spec, "--nproc", leg.nproc,
                                     "--steps", leg.steps};
    if (leg.gpu) argv.insert(argv.end(), {"--device", "cuda"});
    const std::string label = leg.spec + (leg.gpu ? " on the emulated GPU" : " on CPU ranks") + " to " + leg.steps;
    Proc p = start(argv, leg.gpu ? env_on_gpu("ck") : env("ck"), dir_, "ck" + leg.steps);
    ASSERT_EQ(wait_exit(p.pid), 0) << label << ": " << slurp(p.err);
    const std::string err = slurp(p.err);
    EXPECT_NE(err.find(leg.says), std::string::npos) << label << ": " << err;
    // The leg ran where it says: the GPU legs with device tensors, the CPU leg without.
    EXPECT_EQ(err.find("emulated") != std::string::npos, leg.gpu) << label << ": " << err;
  }
  expect_same_losses(one.metrics, dir_ + "/ck/metrics.jsonl", kTotal,
                     "tp2,pp2 GPU -> tp2,pp2 CPU -> tp2,pp2 GPU -> one GPU rank");
}

// bf16 storage (the GPU default) runs plain dp only in this version: every other strategy
// is refused before any worker starts, exit 2, one line naming the fix.
TEST_F(EmulatedGpu, Bf16WithOtherStrategiesIsRefusedBeforeAnyWorker) {
  for (const char* spec : {"dp2,ep2", "dp2,zero3", "tp2", "pp2", "cp2"}) {
    SCOPED_TRACE(spec);
    const std::string j = job("moe", "bf16", "bf16.toml");
    Proc p = start({PARTRAIN_CLI, "run", j, std::string("--partrain=") + spec, "--nproc", "2", "--device", "cuda",
                    "--steps", "2"}, env_on_gpu("bf16"), dir_, "bf16");
    EXPECT_EQ(wait_exit(p.pid), 2);
    const std::string err = slurp(p.err);
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_NE(err.find("precision = \"bf16\" (the default on GPUs) runs plain data parallelism only"),
              std::string::npos) << err;
    EXPECT_NE(err.find("set [job] precision = \"fp32\""), std::string::npos) << err;
    EXPECT_EQ(err.find("started: pid"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace partrain::testing
