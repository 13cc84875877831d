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
