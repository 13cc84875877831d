// `partrain report` on real runs: the demo job on one rank and on dp2 (the same global
// batch, so strong scaling), read back from --json; a folder without metrics is one line
// on stderr and exit code 2.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_util.h"

#if !defined(PARTRAIN_CLI) || !defined(PARTRAIN_SOURCE_DIR) || !defined(PARTRAIN_SITE_CONFIG_FILE)
#error "PARTRAIN_CLI, PARTRAIN_SOURCE_DIR and PARTRAIN_SITE_CONFIG_FILE must be defined"
#endif

namespace {

namespace fs = std::filesystem;
using partrain::engine::io::JsonValue;
using namespace partrain::planner::testing;

TEST(PlannerReport, OneRankAndDp2AreStrongScalingWithTheSameLoss) {
  char tmpl[] = "/tmp/partrain_report_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  const std::string cli = std::string("'") + PARTRAIN_CLI + "'";
  const std::string job = std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/tiny.toml";
  auto env = [&](const std::string& run) {
    return std::string("PARTRAIN_SITE_CONFIG='") + PARTRAIN_SITE_CONFIG_FILE + "' PARTRAIN_RUN_DIR='" +
           (dir / run).string() + "' OMP_NUM_THREADS=1 ";
  };
  ASSERT_EQ(sh(env("one") + cli + " run '" + job + "' --steps 5", dir / "o", dir / "e"), 0)
      << slurp(dir / "e");
  ASSERT_EQ(sh(env("dp2") + cli + " run '" + job + "' --steps 5 --partrain=dp2 --nproc 2", dir / "o",
               dir / "e"),
            0)
      << slurp(dir / "e");
  const fs::path svg = dir / "scaling.svg";
  ASSERT_EQ(sh(cli + " report '" + (dir / "dp2").string() + "' '" + (dir / "one").string() +
                   "' --json --svg '" + svg.string() + "'",
               dir / "o", dir / "e"),
            0)
      << slurp(dir / "e");
  partrain::Result<JsonValue> r = partrain::engine::io::parse_json(slurp(dir / "o"));
  ASSERT_TRUE(r.is_ok()) << r.status().message() << "\n" << slurp(dir / "o");
  EXPECT_EQ(at(*r, "kind").text, "strong");
  const JsonValue& runs = at(*r, "runs");
  ASSERT_EQ(runs.items.size(), 2u);
  EXPECT_EQ(at(runs.items[0], "name").text, "one");  // the baseline first
  EXPECT_EQ(at(runs.items[0], "ranks").text, "1");
  EXPECT_EQ(at(runs.items[1], "ranks").text, "2");
  EXPECT_EQ(at(runs.items[1], "tokens_per_step").text, "1024");  // 16 sequences x 64
  EXPECT_EQ(at(runs.items[0], "speedup").text, "1");
  EXPECT_GT(std::stod(at(runs.items[1], "speedup").text), 0);
  // The same global batch learns the same thing on either layout.
  const double a = std::stod(at(runs.items[0], "final_loss").text);
  const double b = std::stod(at(runs.items[1], "final_loss").text);
  EXPECT_LE(std::fabs(a - b), 1e-4 * std::fabs(a));
  const std::string plot = slurp(svg);
  EXPECT_EQ(plot.rfind("<?xml", 0), 0u);
  EXPECT_NE(plot.find("one (1 rank)"), std::string::npos);
  EXPECT_NE(plot.find("dp2 (2 ranks)"), std::string::npos);

  // A folder with no metrics: one line, exit 2.
  fs::create_directories(dir / "empty");
  EXPECT_EQ(sh(cli + " report '" + (dir / "empty").string() + "'", dir / "o", dir / "e"), 2);
  const std::string err = slurp(dir / "e");
  EXPECT_NE(err.find("metrics.jsonl"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), err.size() - 1) << err;
  fs::remove_all(dir);
}

}  // namespace
