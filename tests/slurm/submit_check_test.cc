// What sbatch/salloc/srun command lines and #SBATCH lines reveal of the allocation, and
// the submit-time check of a spec against it.
#include "submit_check.h"

#include <gtest/gtest.h>

namespace partrain::spank {
namespace {

AllocationFacts scan(const std::vector<std::string>& args, std::string* operand = nullptr) {
  std::string ignored;
  return scan_options(args, operand ? operand : &ignored);
}

TEST(ScanOptions, ReadsEveryFormOfTheOptions) {
  std::string script;
  AllocationFacts f = scan({"-N", "2", "--gpus-per-node=4", "--requeue", "--partrain=tp4,pp2",
                            "train.sbatch", "-N", "9"},
                           &script);
  EXPECT_EQ(f.nodes, 2);
  EXPECT_EQ(f.gpus_per_node, 4);
  EXPECT_FALSE(f.tasks);
  EXPECT_EQ(script, "train.sbatch");  // the script's own arguments are not sbatch's
  EXPECT_EQ(scan({"--chdir=/shared/jobs", "x.sbatch"}).chdir, "/shared/jobs");
  EXPECT_EQ(scan({"-D", "jobs", "x.sbatch"}).chdir, "jobs");

  f = scan({"-N3", "-n12", "--ntasks-per-node", "4", "--gres=gpu:a100:8", "-J", "x", "cmd"});
  EXPECT_EQ(f.nodes, 3);
  EXPECT_EQ(f.tasks, 12);
  EXPECT_EQ(f.tasks_per_node, 4);
  EXPECT_EQ(f.gpus_per_node, 8);

  f = scan({"--nodes=2-2", "--gpus-per-node", "h100:8"});
  EXPECT_EQ(f.nodes, 2);
  EXPECT_EQ(f.gpus_per_node, 8);
}

TEST(ScanOptions, UnclearValuesStayUnknown) {
  AllocationFacts f = scan({"--nodes=2-4", "--gres=shard:2", "-n", "many"});
  EXPECT_FALSE(f.nodes);  // the scheduler picks from a range
  EXPECT_FALSE(f.gpus_per_node);
  EXPECT_FALSE(f.tasks);
}

TEST(ScanOptions, CommandLineOverridesTheBase) {
  AllocationFacts base = scan({"-N", "4", "--gpus-per-node=8"});
  std::string operand;
  AllocationFacts f = scan_options({"-N", "2", "job.sh"}, &operand, base);
  EXPECT_EQ(f.nodes, 2);
  EXPECT_EQ(f.gpus_per_node, 8);
}

TEST(SbatchDirectives, LeadingDirectivesOnlyWithCommentsStripped) {
  const char* script =
      "#!/bin/bash\n"
      "#SBATCH -N 2   # two nodes\n"
      "\n"
      "# a plain comment\n"
      "#SBATCH --gpus-per-node=4\n"
      "#SBATCHX --ignored\n"
      "srun hostname\n"
      "#SBATCH -N 7\n";
  std::vector<std::string> want = {"-N", "2", "--gpus-per-node=4"};
  EXPECT_EQ(sbatch_directives(script), want);
}

TEST(WorldSize, OneRankPerGpuOrPerTask) {
  AllocationFacts f;
  EXPECT_FALSE(world_size(f));
  f.nodes = 2;
  f.gpus_per_node = 4;
  EXPECT_EQ(world_size(f), 8);  // tasks not given: one rank per GPU
  f.tasks = 2;
  EXPECT_EQ(world_size(f), 8);  // one agent per node
  f.tasks = 8;
  EXPECT_EQ(world_size(f), 8);  // one task per GPU
  f.tasks = 6;
  EXPECT_EQ(world_size(f), 6);  // something else: one rank per task
  AllocationFacts cpu;
  cpu.nodes = 3;
  cpu.tasks_per_node = 2;
  EXPECT_EQ(world_size(cpu), 6);
}

// sbatch -N 2 with no task or GPU option (etc/examples/train.sbatch): Slurm's default of
// one task per node, so 2 CPU ranks; an option that lets a step run more tasks leaves
// the world unknown.
TEST(WorldSize, NodesAloneMeanOneTaskPerNode) {
  EXPECT_EQ(world_size(scan({"-N", "2", "train.sbatch"})), 2);
  EXPECT_EQ(world_size(scan({"--nodes=3", "--requeue", "--signal=USR1@120", "x.sbatch"})), 3);
  for (const std::vector<std::string>& open :
       std::vector<std::vector<std::string>>{{"-N", "2", "-c", "4"}, {"-N", "2", "--exclusive"},
                                             {"-N", "2", "-O"}, {"-N", "2", "--overcommit"},
                                             {"-N", "2", "--gpus=8"}, {"-N", "2", "--gpus-per-task=1"},
                                             {"-N", "2", "--ntasks-per-socket", "2"}, {"-N", "2", "--gres=gpu"}}) {
    std::vector<std::string> args = open;
    args.push_back("x.sbatch");
    AllocationFacts f = scan(args);
    if (args[2] == "--gres=gpu") {
      EXPECT_EQ(world_size(f), 2) << "one GPU per node, one rank each";
      continue;
    }
    EXPECT_FALSE(world_size(f)) << args[2];
  }
}

TEST(CheckSpec, RefusesASpecTheDefaultTaskCountCannotHold) {
  PluginArgs args;
  AllocationFacts f = scan({"-N", "2", "train.sbatch"});
  EXPECT_TRUE(check_spec(*parse_spec("dp2"), f, args).is_ok());
  Status s = check_spec(*parse_spec("tp3"), f, args);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(), "partrain: world size 2 is not a multiple of tp3 x pp1 = 3; use a multiple of 3 ranks "
                         "or smaller tp/pp (the job has 2 nodes x 1 task, Slurm's default without -n or "
                         "--ntasks-per-node)");
  EXPECT_TRUE(check_spec(*parse_spec("tp3"), scan({"-N", "2", "--exclusive", "x.sbatch"}), args).is_ok());
}

TEST(CheckSpec, RefusesWhatTheAllocationCannotHold) {
  PluginArgs args;
  args.nvlink_domain = 4;
  AllocationFacts f;
  f.nodes = 2;
  f.gpus_per_node = 4;
  EXPECT_TRUE(check_spec(*parse_spec("tp4,pp2"), f, args).is_ok());
  EXPECT_TRUE(check_spec(*parse_spec("tp2,pp2"), f, args).is_ok());

  Status s = check_spec(*parse_spec("tp8"), f, args);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("tp8"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("NVLink"), std::string::npos) << s.message();

  s = check_spec(*parse_spec("tp2,pp3"), f, args);  // 8 ranks, 6 per model copy
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("8"), std::string::npos) << s.message();

  s = check_spec(*parse_spec("tp2,dp3"), f, args);  // 2 x 3 = 6, not 8
  EXPECT_FALSE(s.is_ok());
}

TEST(CheckSpec, WithoutSizesOnlyTheSpecItselfIsChecked) {
  PluginArgs args;
  AllocationFacts unknown;
  EXPECT_TRUE(check_spec(*parse_spec("tp3,pp5"), unknown, args).is_ok());
  EXPECT_TRUE(check_spec(*parse_spec("tp2,dp4,ep2"), unknown, args).is_ok());
  Status s = check_spec(*parse_spec("dp3,ep2"), unknown, args);  // ep must divide dp
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("ep2"), std::string::npos) << s.message();
  args.nvlink_domain = 8;
  EXPECT_FALSE(check_spec(*parse_spec("tp16"), unknown, args).is_ok());
}

}  // namespace
}  // namespace partrain::spank
