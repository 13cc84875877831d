// `partrain run --partrain=auto --nproc 2` on CPU ranks: the planner's choice is printed with
// its runner-up, and the workers run exactly that layout (its data plugin and dp degree in
// their start-up lines), as if the user had typed it. About 2 s.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "test_util.h"

#if !defined(PARTRAIN_CLI) || !defined(PARTRAIN_SOURCE_DIR) || !defined(PARTRAIN_SITE_CONFIG_FILE)
#error "PARTRAIN_CLI, PARTRAIN_SOURCE_DIR and PARTRAIN_SITE_CONFIG_FILE must be defined"
#endif

namespace {

namespace fs = std::filesystem;
using namespace partrain::planner::testing;

TEST(PlannerAutoRun, RunsTheLayoutThePlannerChose) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("partrain_auto_run." + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path examples = fs::path(PARTRAIN_SOURCE_DIR) / "etc/examples";
  std::string text = slurp(examples / "tiny.toml");
  text = std::regex_replace(text, std::regex("\"data/"), "\"" + examples.string() + "/data/");
  std::ofstream(dir / "tiny.toml") << text;
  const std::string cmd = std::string("PARTRAIN_SITE_CONFIG='") + PARTRAIN_SITE_CONFIG_FILE + "' PARTRAIN_RUN_DIR='" +
                          (dir / "run").string() + "' PARTRAIN_HARDWARE_DIR='" + PARTRAIN_SOURCE_DIR +
                          "/etc/hardware' OMP_NUM_THREADS=1 '" + PARTRAIN_CLI + "' run '" +
                          (dir / "tiny.toml").string() + "' --partrain=auto --nproc 2 --steps 2";
  ASSERT_EQ(sh(cmd, dir / "out.log"), 0) << slurp(dir / "out.log");
  const std::string log = slurp(dir / "out.log");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("--partrain=auto chose --partrain=(\\S+): predicted"))) << log;
  const std::string spec = m[1];
  EXPECT_NE(log.find("partrain: runner-up --partrain="), std::string::npos) << log;
  std::smatch z;
  ASSERT_TRUE(std::regex_search(spec, z, std::regex("dp2,zero([0-3])"))) << spec;
  const std::string plugin = z[1] == "0" ? "data plugin dp " : "data plugin zero" + std::string(z[1]) + " ";
  EXPECT_NE(log.find(plugin), std::string::npos) << "chose " << spec << "; the workers said:\n" << log;
  EXPECT_NE(log.find("x dp 2,"), std::string::npos) << log;
  fs::remove_all(dir);
}

}  // namespace
