// --partrain=auto's submit-time pieces without Slurm: finding the job file a batch script or
// command runs, the planner's command line from the allocation and the plugstack settings,
// reading the planner's choice, and running it as a separate process.
#include "auto_spec.h"

#include <gtest/gtest.h>

namespace partrain::spank {
namespace {

TEST(AutoSpec, FindsTheJobFileTheScriptRuns) {
  EXPECT_EQ(find_job_file("#!/bin/bash\n#SBATCH -N 2\n# partraind old.toml\nsrun --ntasks-per-node=1 "
                          "partraind tiny.toml --steps 5\n"),
            "tiny.toml");
  EXPECT_EQ(find_job_file("srun /opt/partrain/bin/partraind \"/shared/jobs/a b.toml\"\n"), "");
  EXPECT_EQ(find_job_file("srun /opt/partrain/bin/partraind '/shared/jobs/ab.toml'\n"), "/shared/jobs/ab.toml");
  EXPECT_EQ(find_job_file("partrain run jobs/llama.toml --nproc 8"), "jobs/llama.toml");
  EXPECT_EQ(find_job_file("partrain plan jobs/llama.toml"), "");  // not a run
  EXPECT_EQ(find_job_file("echo config.toml; hostname"), "");
}

TEST(AutoSpec, ThePlannersCommandLineFromTheAllocation) {
  PluginArgs args;
  args.partrain_cli = "/usr/bin/partrain";
  AllocationFacts facts;
  facts.nodes = 4;
  facts.gpus_per_node = 8;
  // No profile: refused, saying how the admin gives one.
  Result<std::vector<std::string>> none = auto_command("job.toml", facts, args);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("hardware=NAME"), std::string::npos);
  args.hardware = "H100-SXM";
  Result<std::vector<std::string>> argv = auto_command("job.toml", facts, args);
  ASSERT_TRUE(argv.is_ok()) << argv.status().message();
  EXPECT_EQ(*argv, (std::vector<std::string>{"/usr/bin/partrain", "plan", "job.toml", "--auto", "--nodes", "4",
                                             "--gpus-per-node", "8", "--hardware", "H100-SXM"}));
  // CPU ranks: the tasks per node stand for the devices.
  facts.gpus_per_node.reset();
  facts.tasks_per_node = 2;
  EXPECT_EQ((*auto_command("job.toml", facts, args))[7], "2");
  facts.tasks_per_node.reset();
  Result<std::vector<std::string>> unknown = auto_command("job.toml", facts, args);
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("--gpus-per-node"), std::string::npos);
  Result<std::vector<std::string>> no_job = auto_command("", facts, args);
  ASSERT_FALSE(no_job.is_ok());
  EXPECT_NE(no_job.status().message().find("partraind JOB.toml"), std::string::npos);
}

TEST(AutoSpec, ReadsThePlannersChoice) {
  Result<std::string> spec = parse_auto_choice(
      "partrain: --partrain=auto chose --partrain=tp2,pp1,dp4,zero1,sp,sched=1f1b: predicted 1.2 s per step\n"
      "partrain: runner-up --partrain=tp1,pp1,dp8: 1.3 s per step\n");
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  EXPECT_EQ(*spec, "tp2,pp1,dp4,zero1,sp,sched=1f1b");
  EXPECT_FALSE(parse_auto_choice("partrain: --partrain=auto: no layout of x fits").is_ok());
}

TEST(AutoSpec, RunsThePlannerAsItsOwnProcess) {
  PluginArgs args;
  args.site_config = "/nonexistent/partrain.toml";
  // The child sees the plugin's site config and its output comes back.
  Result<std::string> out = run_planner({"/bin/sh", "-c", "echo \"site $PARTRAIN_SITE_CONFIG\"; echo err >&2"}, args);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(*out, "site /nonexistent/partrain.toml\nerr\n");
  // A failing planner's words are the error.
  Result<std::string> failed = run_planner({"/bin/sh", "-c", "echo 'partrain: no layout fits' >&2; exit 2"}, args);
  ASSERT_FALSE(failed.is_ok());
  EXPECT_EQ(failed.status().message(), "partrain: no layout fits");
  Result<std::string> missing = run_planner({"/nonexistent/partrain", "plan"}, args);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("partrain_cli="), std::string::npos);
}

}  // namespace
}  // namespace partrain::spank
