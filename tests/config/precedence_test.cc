// Precedence (site defaults < job file < PARTRAIN_* environment < command line) and the
// gradient-accumulation arithmetic global_batch = micro_batch x grad_accum x dp.
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "config/job_config.h"
#include "config/site_config.h"
#include "test_util.h"

namespace partrain::config {
namespace {

using testing::ScopedEnv;
using testing::ScratchDir;

constexpr const char* kJob = R"([data]
train_files = ["t.bin"]
[training]
steps = 100
seed = 7
global_batch = 256
micro_batch = 4
[parallelism]
spec = "tp2,pp2"
zero = 2
)";

JobConfig parsed(const std::string& text = kJob) {
  auto job = parse_job(text, "job.toml");
  EXPECT_TRUE(job.is_ok()) << job.status().message();
  return job.is_ok() ? *job : JobConfig{};
}

TEST(Precedence, SiteDefaultsSitUnderTheJobFile) {
  JobConfig job = parsed();
  SiteConfig site;
  site.default_spec = "zero1,sched=gpipe,ep2";
  ASSERT_TRUE(apply_site_defaults(site, &job).is_ok());
  EXPECT_EQ(job.parallelism.tp, 2);          // file
  EXPECT_EQ(job.parallelism.pp, 2);          // file
  EXPECT_EQ(job.parallelism.zero, 2);        // file's zero = 2 beats the site's zero1
  EXPECT_EQ(job.parallelism.sched, "gpipe");  // site, the file is silent
  EXPECT_EQ(job.parallelism.ep, 2);          // site
}

TEST(Precedence, EnvironmentOverTheFileAndCommandLineOverTheEnvironment) {
  JobConfig job = parsed();
  std::map<std::string, std::string> env = {{"PARTRAIN_SPEC", "tp4,mb=8"},
                                            {"PARTRAIN_STEPS", "20"},
                                            {"PARTRAIN_SEED", "99"},
                                            {"PARTRAIN_RUN_DIR", "/scratch/run1"},
                                            {"PARTRAIN_CHECKPOINT_EVERY", "25"}};
  ASSERT_TRUE(apply_environment(env, &job).is_ok());
  EXPECT_EQ(job.checkpoint.every, 25);  // environment over the file's default 0
  EXPECT_EQ(job.parallelism.tp, 4);   // environment over the file's tp2
  EXPECT_EQ(job.parallelism.pp, 2);   // the file's, untouched
  EXPECT_EQ(job.parallelism.zero, 2);
  ASSERT_TRUE(job.parallelism.mb.has_value());
  EXPECT_EQ(*job.parallelism.mb, 8);
  EXPECT_EQ(job.training.steps, 20);
  EXPECT_EQ(job.training.seed, 99u);
  EXPECT_EQ(job.run_dir, "/scratch/run1");

  Overrides cli;
  cli.spec = "tp8";
  cli.steps = 5;
  ASSERT_TRUE(apply_command_line(cli, &job).is_ok());
  EXPECT_EQ(job.parallelism.tp, 8);   // command line over the environment
  EXPECT_EQ(*job.parallelism.mb, 8);  // the environment's, untouched by the command line
  EXPECT_EQ(job.training.steps, 5);
  EXPECT_EQ(job.training.seed, 99u);  // no --seed: the environment's stays
}

// A run is identified by its run folder, not by a Slurm job id: the job's state directory
// (a new one per job id) never holds its checkpoints, so the same job submitted again finds
// them in <run_dir>/checkpoints.
TEST(Precedence, TheSlurmStateDirectoryDoesNotHoldTheCheckpoints) {
  JobConfig job = parsed();
  ASSERT_TRUE(apply_environment({{"PARTRAIN_STATE_DIR", "/shared/partrain/slurm-42"}}, &job).is_ok());
  EXPECT_TRUE(job.checkpoint.dir.empty());
}

TEST(Precedence, ResumeFromTheEnvironmentThenTheCommandLine) {
  JobConfig job = parsed();
  EXPECT_EQ(job.checkpoint.resume.kind, ResumeMode::Kind::kAuto);
  ASSERT_TRUE(apply_environment({{"PARTRAIN_RESUME", "never"}}, &job).is_ok());
  EXPECT_EQ(job.checkpoint.resume.kind, ResumeMode::Kind::kNever);
  Overrides cli;
  cli.resume = "120";
  ASSERT_TRUE(apply_command_line(cli, &job).is_ok());
  EXPECT_EQ(job.checkpoint.resume.kind, ResumeMode::Kind::kStep);
  EXPECT_EQ(job.checkpoint.resume.step, 120);
  cli.resume = "latest";
  Status bad = apply_command_line(cli, &job);
  EXPECT_EQ(bad.message(), "--resume latest: resume is auto (the newest checkpoint that verifies), never (start "
                           "over) or the step of a committed checkpoint, e.g. 200");
  Status bad_env = apply_environment({{"PARTRAIN_RESUME", "0"}}, &job);
  EXPECT_EQ(bad_env.message(), "PARTRAIN_RESUME='0': resume is auto (the newest checkpoint that verifies), never "
                               "(start over) or the step of a committed checkpoint, e.g. 200");
  EXPECT_EQ(job.checkpoint.resume.step, 120);  // all or nothing: a bad value changes nothing
}

TEST(Precedence, EmptyEnvironmentValuesChangeNothing) {
  JobConfig job = parsed();
  ASSERT_TRUE(apply_environment({{"PARTRAIN_SPEC", ""}, {"PARTRAIN_STEPS", ""}}, &job).is_ok());
  EXPECT_EQ(job.parallelism.tp, 2);
  EXPECT_EQ(job.training.steps, 100);
}

TEST(Precedence, ResolveJobRunsTheWholeChainOnTheRealEnvironment) {
  ScratchDir dir;
  const std::string path = dir.write("job.toml", kJob);
  ScopedEnv spec("PARTRAIN_SPEC", "pp4");
  ScopedEnv steps("PARTRAIN_STEPS", "30");
  ScopedEnv seed("PARTRAIN_SEED", std::nullopt);
  ScopedEnv run_dir("PARTRAIN_RUN_DIR", std::nullopt);
  SiteConfig site;
  site.default_spec = "sched=gpipe,zero1";
  Overrides cli;
  cli.steps = 3;
  auto job = resolve_job(path, site, cli);
  ASSERT_TRUE(job.is_ok()) << job.status().message();
  EXPECT_EQ(job->parallelism.sched, "gpipe");  // site
  EXPECT_EQ(job->parallelism.zero, 2);         // file over site
  EXPECT_EQ(job->parallelism.tp, 2);           // file
  EXPECT_EQ(job->parallelism.pp, 4);           // environment over file
  EXPECT_EQ(job->training.steps, 3);           // command line over environment
  EXPECT_EQ(job->training.seed, 7u);           // file
  EXPECT_EQ(job->run_dir, "runs/job");         // default from the file name
}

TEST(Precedence, DeviceFromTheFileTheEnvironmentAndTheCommandLine) {
  EXPECT_EQ(parsed().device, "cpu");  // default
  JobConfig job = parsed(std::string("[job]\ndevice = \"cuda\"\n") + kJob);
  EXPECT_EQ(job.device, "cuda");
  ASSERT_TRUE(apply_environment({{"PARTRAIN_DEVICE", "cpu"}}, &job).is_ok());
  EXPECT_EQ(job.device, "cpu");  // environment over the file
  Overrides cli;
  cli.device = "cuda";
  ASSERT_TRUE(apply_command_line(cli, &job).is_ok());
  EXPECT_EQ(job.device, "cuda");  // command line over the environment
  // Workers each get their own GPU: a named one is no job-wide device.
  EXPECT_EQ(apply_environment({{"PARTRAIN_DEVICE", "cuda:1"}}, &job).message(),
            "PARTRAIN_DEVICE='cuda:1': the workers' device is cpu or cuda (each worker gets its own "
            "GPU), e.g. PARTRAIN_DEVICE=cuda");
  cli.device = "gpu";
  EXPECT_EQ(apply_command_line(cli, &job).message(),
            "--device gpu: the workers' device is cpu or cuda (each worker gets its own GPU), e.g. "
            "--device cuda");
  EXPECT_EQ(job.device, "cuda");  // refused overrides change nothing
  auto bad = parse_job("[job]\ndevice = \"tpu\"\n", "job.toml");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("device"), std::string::npos) << bad.status().message();
}

TEST(Precedence, EnvironmentErrorsNameTheVariable) {
  JobConfig job = parsed();
  auto bad_steps = apply_environment({{"PARTRAIN_STEPS", "ten"}}, &job);
  EXPECT_EQ(bad_steps.message(),
            "PARTRAIN_STEPS='ten': needs a positive whole number of optimizer steps, e.g. "
            "PARTRAIN_STEPS=100");
  auto zero_steps = apply_environment({{"PARTRAIN_STEPS", "0"}}, &job);
  EXPECT_EQ(zero_steps.message(),
            "PARTRAIN_STEPS='0': needs a positive whole number of optimizer steps, e.g. "
            "PARTRAIN_STEPS=100");
  auto bad_seed = apply_environment({{"PARTRAIN_SEED", "-3"}}, &job);
  EXPECT_EQ(bad_seed.message(),
            "PARTRAIN_SEED='-3': needs a whole number >= 0, e.g. PARTRAIN_SEED=1337");
  auto bad_every = apply_environment({{"PARTRAIN_CHECKPOINT_EVERY", "-1"}}, &job);
  EXPECT_EQ(bad_every.message(),
            "PARTRAIN_CHECKPOINT_EVERY='-1': needs a whole number of steps between checkpoints (0: "
            "only at the end and on SIGTERM), e.g. PARTRAIN_CHECKPOINT_EVERY=100");
  auto bad_spec = apply_environment({{"PARTRAIN_SPEC", "tp2,bogus"}}, &job);
  ASSERT_FALSE(bad_spec.is_ok());
  EXPECT_EQ(bad_spec.message().rfind("'bogus' in PARTRAIN_SPEC: ", 0), 0u) << bad_spec.message();
  EXPECT_EQ(job.training.steps, 100);  // nothing half-applied by the failures
}

TEST(Precedence, CommandLineErrorsNameTheOption) {
  JobConfig job = parsed();
  Overrides cli;
  cli.spec = "tp8";
  cli.steps = 0;
  EXPECT_EQ(apply_command_line(cli, &job).message(),
            "--steps 0: steps must be a positive whole number, e.g. --steps 100");
  EXPECT_EQ(job.parallelism.tp, 2);  // all or nothing: the good --partrain was not applied
  auto bad_spec = overlay_command_line_spec("tp2,tp4", &job);
  ASSERT_FALSE(bad_spec.is_ok());
  EXPECT_EQ(bad_spec.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_spec.message().find("--partrain"), std::string::npos) << bad_spec.message();
  ASSERT_TRUE(overlay_command_line_spec("pp8", &job).is_ok());
  EXPECT_EQ(job.parallelism.pp, 8);
  EXPECT_EQ(job.parallelism.tp, 2);
}

// The 64-GPU example of the seed texts: global batch 256 = micro 4 x accum 8 x dp 8.
TEST(GradAccum, SeedExampleIsEightMicroStepsOnEightDataParallelRanks) {
  JobConfig job = parsed();
  auto accum = grad_accum_steps(job, 8);
  ASSERT_TRUE(accum.is_ok()) << accum.status().message();
  EXPECT_EQ(*accum, 8);
  auto micro = micro_batch_size(job, 8);
  ASSERT_TRUE(micro.is_ok());
  EXPECT_EQ(*micro, 4);
  // The same file on other layouts: the global batch never changes.
  EXPECT_EQ(*grad_accum_steps(job, 1), 64);
  EXPECT_EQ(*grad_accum_steps(job, 4), 16);
  EXPECT_EQ(*grad_accum_steps(job, 64), 1);
  for (int dp : {1, 2, 4, 8, 16, 32, 64}) {
    EXPECT_EQ(*grad_accum_steps(job, dp) * *micro_batch_size(job, dp) * dp, 256) << dp;
  }
}

TEST(GradAccum, NotAWholeNumberIsAnError) {
  JobConfig job = parsed();
  auto accum = grad_accum_steps(job, 3);
  ASSERT_FALSE(accum.is_ok());
  EXPECT_EQ(accum.status().message(),
            "job.toml: global_batch = 256 is not a multiple of micro_batch x dp = 4 x 3 = 12; "
            "the gradient-accumulation count global_batch / (micro_batch x dp) must be whole: "
            "set global_batch = 252 or change micro_batch");
  auto too_wide = grad_accum_steps(job, 128);  // 4 x 128 = 512 > 256
  ASSERT_FALSE(too_wide.is_ok());
  EXPECT_NE(too_wide.status().message().find("set global_batch = 512"), std::string::npos);
  EXPECT_FALSE(grad_accum_steps(job, 0).is_ok());
}

TEST(GradAccum, SpecMbOverridesTheCountAndKeepsTheGlobalBatch) {
  JobConfig job = parsed();
  ASSERT_TRUE(overlay_command_line_spec("mb=16", &job).is_ok());
  EXPECT_EQ(*grad_accum_steps(job, 8), 16);
  EXPECT_EQ(*micro_batch_size(job, 8), 2);  // 256 / (16 x 8)
  ASSERT_TRUE(overlay_command_line_spec("mb=3", &job).is_ok());
  auto bad = grad_accum_steps(job, 8);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(),
            "job.toml: global_batch = 256 does not split into mb=3 micro-batches on each of dp = "
            "8 ranks (3 x 8 = 24 does not divide 256); choose mb so that global_batch / (mb x "
            "dp) is whole");
  EXPECT_FALSE(micro_batch_size(job, 8).is_ok());
}

}  // namespace
}  // namespace partrain::config
