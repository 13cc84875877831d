// `partrain run --init` on any layout (issue 21): every rank reads only its own slices of the
// Hugging Face weights, by logical name, and the run trains what one rank trains from the
// same weights (1e-5 relative per step). The weights are trained ones, exported as a sharded
// Hugging Face folder, so a rank that kept the seeded initialisation, read a slice from the
// wrong place or missed a shard shows at step 1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime_helpers.h"

namespace {

using namespace partrain::testing;

constexpr int kSteps = 6;

struct Case {
  const char* name;
  const char* spec;
  int nproc;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class InitFromHf : public Runtime, public ::testing::WithParamInterface<Case> {
 protected:
  // Trains 3 steps on one rank and exports the weights as a Hugging Face folder of several
  // shards; returns the folder.
  std::string trained_folder(const std::string& job) {
    Proc p = start({PARTRAIN_CLI, "run", job, "--steps", "3", "--save", dir_ + "/trained.safetensors"}, env("pre"),
                   dir_, "pre");
    EXPECT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
    Proc e = start({PARTRAIN_CLI, "export", job, "--from", dir_ + "/trained.safetensors", "--hf", dir_ + "/hf",
                    "--max-shard-size", "200000"}, env("export"), dir_, "export");
    EXPECT_EQ(wait_exit(e.pid), 0) << slurp(e.err);
    EXPECT_TRUE(fs::exists(dir_ + "/hf/model.safetensors.index.json")) << "expected a sharded folder";
    return dir_ + "/hf";
  }
};

TEST_P(InitFromHf, TrainsWhatOneRankTrains) {
  const Case& c = GetParam();
  const std::string job = job_copy(kTiny, dir_, "job.toml", "");
  // Micro-batches of 2: on dp2 every pipeline keeps pp = 2 of them in flight (1F1B).
  edit_file(job, {{"micro_batch = 8", "micro_batch = 2"}});
  const std::string hf = trained_folder(job);
  Proc one = start({PARTRAIN_CLI, "run", job, "--init", hf, "--steps", std::to_string(kSteps)}, env("one"), dir_,
                   "one");
  ASSERT_EQ(wait_exit(one.pid), 0) << slurp(one.err);
  Proc many = start({PARTRAIN_CLI, "run", job, std::string("--partrain=") + c.spec, "--nproc", std::to_string(c.nproc),
                     "--init", hf, "--steps", std::to_string(kSteps)}, env("many"), dir_, "many");
  ASSERT_EQ(wait_exit(many.pid), 0) << slurp(many.err);
  EXPECT_NE(slurp(many.err).find("starting from the weights of"), std::string::npos) << slurp(many.err);
  const std::vector<double> ref = losses(dir_ + "/one/metrics.jsonl"), got = losses(dir_ + "/many/metrics.jsonl");
  ASSERT_EQ(ref.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_LE(std::fabs(got[i] - ref[i]), 1e-5 * ref[i]) << c.spec << " step " << i + 1;
    worst = std::max(worst, std::fabs(got[i] - ref[i]) / ref[i]);
  }
  std::printf("--init %s: largest relative loss difference %.2e over %d steps\n", c.spec, worst, kSteps);
  // The weights were really used: the run starts below where the seeded model starts
  // (3 steps of training already in them).
  const std::vector<double> pre = losses(dir_ + "/pre/metrics.jsonl");
  ASSERT_EQ(pre.size(), 3u);
  EXPECT_LT(ref.front(), pre.front() - 0.05) << "step 1 from --init looks like the seeded start";
}

INSTANTIATE_TEST_SUITE_P(Layouts, InitFromHf,
                         ::testing::Values(Case{"tp2_pp2_dp2", "tp2,pp2,dp2", 8}, Case{"dp2_zero3", "dp2,zero3", 2}),
                         [](const ::testing::TestParamInfo<Case>& p) { return std::string(p.param.name); });

}  // namespace
