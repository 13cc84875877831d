// runnable(): the table of strategies per device, the compositions the worker refuses, and
// `--search` ranking only what the device can run.
#include <gtest/gtest.h>

#include <string>

#include "config/job_config.h"
#include "planner/plan.h"
#include "planner/runnable.h"
#include "hardware_dir.h"

namespace partrain::planner {
namespace {

config::JobConfig tiny(int layers = 8, int experts = 0) {
  const std::string text = "[model]\narch = \"gpt2\"\nvocab_size = 256\nseq_len = 64\nlayers = " +
                           std::to_string(layers) + "\nhidden = 128\nheads = 4\nmoe_experts = " +
                           std::to_string(experts) +
                           "\n[data]\ntrain_files = [\"x.bin\"]\n[training]\nglobal_batch = 32\nmicro_batch = 2\n";
  Result<config::JobConfig> j = config::parse_job(text, "/tmp/runnable.toml");
  EXPECT_TRUE(j.is_ok()) << j.status().message();
  return *j;
}

ParallelSpec spec(const std::string& text, int dp) {
  ParallelSpec s = *parse_spec(text);
  s.dp = dp;
  return s;
}

TEST(PlannerRunnable, CpuRanksRunEveryStrategy) {
  const config::JobConfig job = tiny();
  for (const char* s : {"dp4", "dp4,zero1", "dp4,zero2", "dp4,zero3", "tp2,dp2", "tp2,pp2", "pp2,dp2,sched=interleaved:2",
                        "pp2,dp2,zero1", "pp2,dp2,zero3", "cp2,dp2", "cp2,tp2"}) {
    const ParallelSpec p = *parse_spec(s);
    const Status st = runnable(spec(s, p.dp.value_or(1)), job, "cpu");
    EXPECT_TRUE(st.is_ok()) << s << ": " << st.message();
  }
  // cp on GPU ranks in bf16 (the default there) is refused, in the agent's words.
  const Status cp = runnable(spec("cp2,dp2", 2), job, "cuda");
  ASSERT_FALSE(cp.is_ok());
  EXPECT_NE(cp.message().find("set [job] precision = \"fp32\""), std::string::npos) << cp.message();
}

TEST(PlannerRunnable, GpuRanksRunEveryStrategyInFp32) {
  const config::JobConfig job = tiny();
  EXPECT_TRUE(runnable(spec("dp8", 8), job, "cuda").is_ok());
  // Every strategy runs on GPU ranks in fp32 storage; bf16 (the GPU default) runs plain dp only.
  config::JobConfig fp32 = tiny(8, 4);
  fp32.precision = "fp32";
  for (const char* s : {"dp2,ep2", "dp2,zero1", "dp2,zero2", "dp2,zero3", "dp2,ep2,zero1", "tp2", "tp2,nosp", "pp2",
                        "cp2"}) {
    EXPECT_TRUE(runnable(spec(s, 2), fp32, "cuda").is_ok()) << s;
    const Status bf16 = runnable(spec(s, 2), tiny(8, 4), "cuda");
    ASSERT_FALSE(bf16.is_ok()) << s;
    EXPECT_NE(bf16.message().find("set [job] precision = \"fp32\""), std::string::npos) << bf16.message();
  }
  // The table says so row by row: GPU ranks run every strategy.
  for (const StrategySupport& s : strategy_support()) EXPECT_TRUE(s.cuda) << s.name;
}

TEST(PlannerRunnable, ExpertCompositionsRunAndUnevenStagesToo) {
  // Experts with tp and with ZeRO run; a MoE model whose seq_len tp does not divide is
  // refused (each tp rank routes its own 1/tp of the tokens).
  for (const char* s : {"tp2,ep2", "tp2,ep2,nosp,pp2", "ep2,zero1", "ep2,pp2,zero3", "tp2,ep2,zero2"}) {
    const ParallelSpec p = *parse_spec(s);
    EXPECT_TRUE(runnable(spec(s, p.ep), tiny(8, 4), "cpu").is_ok()) << s;
  }
  config::JobConfig odd = tiny(8, 4);
  odd.model.seq_len = 63;
  const Status ep_tp = runnable(spec("tp2,ep2,nosp", 2), odd, "cpu");
  ASSERT_FALSE(ep_tp.is_ok());
  EXPECT_NE(ep_tp.message().find("seq_len 63 is not a multiple of tp2"), std::string::npos) << ep_tp.message();
  // 8 layers on pp3: stages of 3, 3 and 2 blocks (the cost-balanced split) run.
  const Status uneven = runnable(spec("pp3", 1), tiny(8), "cpu");
  EXPECT_TRUE(uneven.is_ok()) << uneven.message();
}

TEST(PlannerRunnable, SearchRanksOnlyWhatTheDeviceRuns) {
  const config::JobConfig job = tiny();
  const HardwareProfile gpu = *load_hardware("A100-80GB", kHardwareDir);
  const std::vector<Plan> on_gpu = search_plans(job, Cluster{1, 8}, gpu);
  ASSERT_FALSE(on_gpu.empty());
  for (const Plan& p : on_gpu) {
    EXPECT_TRUE(p.runnable.is_ok());
    EXPECT_EQ(p.layout.tp * p.layout.pp, 1) << describe(p);
    EXPECT_EQ(p.layout.zero, 0) << describe(p);
  }
  // make_plan still plans what the device cannot run, and says why.
  ParallelSpec tp = *parse_spec("tp2");
  config::JobConfig with_tp = job;
  with_tp.parallelism = tp;
  Result<Plan> plan = make_plan(with_tp, Cluster{1, 8}, gpu);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_FALSE(plan->runnable.is_ok());
  const HardwareProfile cpu = *load_hardware("cpu", kHardwareDir);
  bool model_parallel = false;
  for (const Plan& p : search_plans(job, Cluster{1, 2}, cpu)) model_parallel |= p.layout.tp * p.layout.pp > 1;
  EXPECT_TRUE(model_parallel);
}

}  // namespace
}  // namespace partrain::planner
