// The planner's memory prediction against what the engine measures: for each layout,
// `partrain plan --json --hardware cpu` next to `partrain run` (one rank, or dp2, tp2, tp4,
// tp2 x dp2 through the local agent), and the run's "peak memory: ... total X MiB" line of
// every rank must lie within 10% of the predicted engine-accounted total (weights,
// gradients, optimizer state, activations, workspace: the engine's MemoryStats
// categories), and so must each category of every rank's memory.rank<R>.json. Pipeline
// layouts are a separate suite, each rank against its own stage's figures. Every rank runs one
// thread, as the cpu profile (one core per rank) assumes. The predicted step time is
// printed next to the measured one, wall clock and CPU time per rank (which other work on
// a shared machine does not inflate), for the record: timing is not a test.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

#if !defined(PARTRAIN_CLI) || !defined(PARTRAIN_SOURCE_DIR) || !defined(PARTRAIN_SITE_CONFIG_FILE)
#error "PARTRAIN_CLI, PARTRAIN_SOURCE_DIR and PARTRAIN_SITE_CONFIG_FILE must be defined"
#endif

namespace {

namespace fs = std::filesystem;
using partrain::engine::io::JsonValue;
using namespace partrain::planner::testing;

struct Case {
  const char* name;
  const char* example;    // etc/examples/NAME.toml
  const char* recompute;  // [model] recompute
  int micro_batch;        // [training] micro_batch
  int nproc;              // 1: `partrain run`; more: --partrain=SPEC --nproc N
  const char* spec = "";  // the layout when nproc > 1, e.g. "dp2,zero1", "tp2,nosp"
  int layers = 0;         // [model] layers instead of the example's (0: keep)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// The engine's memory categories (engine/backend.h), as memory.rank<R>.json and the plan's
// "memory" object name them.
constexpr const char* kCategories[] = {"weights", "grads", "optimizer", "activations", "workspace"};

double children_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_CHILDREN, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

// " weights 0.854/0.854" (MiB, predicted/measured).
std::string fmt_mib(const char* what, double predicted, double measured) {
  char buf[96];
  std::snprintf(buf, sizeof buf, " %s %.3f/%.3f", what, predicted / (1 << 20), measured / (1 << 20));
  return buf;
}

class MemoryVsRun : public ::testing::TestWithParam<Case> {
 protected:

  // The example with absolute data paths, the case's recompute mode and micro-batch.
  fs::path write_job(const Case& c) {
    const fs::path examples = fs::path(PARTRAIN_SOURCE_DIR) / "etc/examples";
    std::string text = slurp(examples / (std::string(c.example) + ".toml"));
    text = std::regex_replace(text, std::regex("\"data/"), "\"" + examples.string() + "/data/");
    text = std::regex_replace(text, std::regex("\\[model\\]\n"),
                              "[model]\nrecompute = \"" + std::string(c.recompute) + "\"\n");
    text = std::regex_replace(text, std::regex("\nmicro_batch = [0-9]+"),
                              "\nmicro_batch = " + std::to_string(c.micro_batch));
    if (c.layers > 0) {
      text = std::regex_replace(text, std::regex("\nlayers = [0-9]+"), "\nlayers = " + std::to_string(c.layers));
    }
    const fs::path job = dir_ / (std::string(c.name) + ".toml");
    std::ofstream(job) << text;
    return job;
  }

  std::string spec(const Case& c) const {
    return c.nproc > 1 ? std::string(" --partrain=") + c.spec : "";
  }
  std::string env() const {
    return std::string("PARTRAIN_SITE_CONFIG='") + PARTRAIN_SITE_CONFIG_FILE +
           "' PARTRAIN_RUN_DIR='" + (dir_ / "run").string() + "' ";
  }
  static std::string cli() { return std::string("'") + PARTRAIN_CLI + "'"; }

  // `partrain plan --json` of the case on one node of nproc cpu ranks, into *plan.
  void plan_json(const Case& c, const fs::path& job, JsonValue* plan) {
    ASSERT_EQ(sh(env() + cli() + " plan '" + job.string() + "' --hardware cpu --hardware-dir '" +
                     PARTRAIN_SOURCE_DIR + "/etc/hardware' --gpus-per-node " +
                     std::to_string(c.nproc) + spec(c) + " --json",
                 dir_ / "plan.json"),
              0)
        << slurp(dir_ / "plan.json");
    partrain::Result<JsonValue> p = partrain::engine::io::parse_json(slurp(dir_ / "plan.json"));
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    *plan = *p;
  }

  // The command that trains the case for `steps` steps, one thread per rank.
  std::string run_command(const Case& c, const fs::path& job, int steps) const {
    return env() + "OMP_NUM_THREADS=1 " + cli() + " run '" + job.string() + "' --steps " +
           std::to_string(steps) + spec(c) + (c.nproc > 1 ? " --nproc " + std::to_string(c.nproc) : "");
  }

  // Rank r's measured peak bytes per category against `want` (a plan memory object): each
  // category that is at least 5% of the total within 10%, the rest within 10% of the total.
  // Workers write memory.rank<R>.json (bytes); one rank's `partrain run` has its metrics'
  // peak_mib (MiB to 1e-3).
  void expect_rank_memory(const Case& c, int r, const JsonValue& want) {
    const fs::path file = dir_ / "run" / ("memory.rank" + std::to_string(r) + ".json");
    std::string text = slurp(file);
    double unit = 1;
    if (c.nproc == 1) {
      const std::string metrics = slurp(dir_ / "run/metrics.jsonl");
      const size_t last = metrics.rfind("\"peak_mib\":");
      ASSERT_NE(last, std::string::npos) << metrics;
      text = metrics.substr(last + 11, metrics.find('}', last) - last - 10);
      unit = 1 << 20;
    }
    partrain::Result<JsonValue> mem = partrain::engine::io::parse_json(text);
    ASSERT_TRUE(mem.is_ok()) << file << ": " << mem.status().message() << ": " << text;
    const double total = number(want, "engine_total");
    std::string row;
    for (const char* cat : kCategories) {
      const double predicted = number(want, cat), got = number(*mem, cat) * unit;
      row += fmt_mib(cat, predicted, got);
      const double scale = got >= 0.05 * total ? got : total;
      EXPECT_LE(std::abs(predicted - got), 0.10 * scale) << c.name << " rank " << r << " " << cat;
    }
    std::printf("[%s] rank %d predicted/measured MiB:%s\n", c.name, r, row.c_str());
  }
  const partrain::testing::ScratchDir scratch_{"partrain_planner"};
  const fs::path dir_ = scratch_.path();
};

TEST_P(MemoryVsRun, PredictedPeakWithinTenPercentOfMeasured) {
  const Case& c = GetParam();
  const fs::path job = write_job(c);
  JsonValue plan;
  ASSERT_NO_FATAL_FAILURE(plan_json(c, job, &plan));
  const double predicted = number(plan, "memory.engine_total");
  const double predicted_step = number(plan, "time.step");

  // CPU seconds of every rank (children's rusage includes the agent's workers), for a step
  // time that other work on the machine does not inflate: a 1-step run is subtracted.
  const double before = children_cpu_seconds();
  ASSERT_EQ(sh(run_command(c, job, 1), dir_ / "warmup.log"), 0) << slurp(dir_ / "warmup.log");
  const double one_step = children_cpu_seconds() - before;
  ASSERT_EQ(sh(run_command(c, job, 4), dir_ / "run.log"), 0) << slurp(dir_ / "run.log");
  const double cpu_ms = (children_cpu_seconds() - before - 2 * one_step) / 3 / c.nproc * 1e3;
  const std::string log = slurp(dir_ / "run.log");
  const std::regex peak(R"(peak memory: .*total ([0-9.]+) MiB)");
  int ranks = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), peak), end; it != end; ++it) {
    const double measured = std::stod((*it)[1].str()) * (1 << 20);
    ++ranks;
    const double error = (predicted - measured) / measured;
    std::printf("[%s] rank peak: predicted %.3f MiB, measured %.3f MiB (%+.2f%%)\n", c.name,
                predicted / (1 << 20), measured / (1 << 20), 100 * error);
    EXPECT_LE(std::abs(error), 0.10) << c.name;
  }
  EXPECT_EQ(ranks, c.nproc) << "one peak-memory line per rank expected in\n" << log;
  // Per category, every rank against the plan (the worst rank of the worst stage).
  for (int r = 0; r < c.nproc; ++r) expect_rank_memory(c, r, at(plan, "memory"));

  // Step time: the median of steps 2..4 (step 1 warms caches up), and of each axis'
  // exposed collective time next to the plan's (tp: all of it; dp: the exposed part).
  std::vector<double> ms, tp_ms, dp_ms;
  std::istringstream metrics(slurp(dir_ / "run/metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    // The second run appends after the warm-up's line and a restart marker (from step 0).
    if (line.find("\"event\":\"restart\"") != std::string::npos) continue;
    partrain::Result<JsonValue> m = partrain::engine::io::parse_json(line);
    ASSERT_TRUE(m.is_ok()) << line;
    if (number(*m, "step") == 1) continue;
    ms.push_back(number(*m, "step_ms"));
    if (line.find("\"tp_exposed_ms\"") != std::string::npos) tp_ms.push_back(number(*m, "tp_exposed_ms"));
    if (line.find("\"dp_exposed_ms\"") != std::string::npos) dp_ms.push_back(number(*m, "dp_exposed_ms"));
  }
  ASSERT_EQ(ms.size(), 3u);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  const double p = predicted_step * 1e3, wall = median(ms);
  std::printf("[%s] step time: predicted %.2f ms; measured %.2f ms wall (%+.0f%%), %.2f ms of "
              "CPU per rank (%+.0f%%); exposed tp predicted %.2f ms, measured %.2f ms; dp "
              "predicted %.2f ms, measured %.2f ms\n",
              c.name, p, wall, 100 * (p - wall) / wall, cpu_ms, 100 * (p - cpu_ms) / cpu_ms,
              number(plan, "time.tp") * 1e3, median(tp_ms), number(plan, "time.dp_exposed") * 1e3,
              median(dp_ms));
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, MemoryVsRun,
    ::testing::Values(Case{"gpt2_none", "tiny", "none", 8, 1},
                      Case{"gpt2_selective", "tiny", "selective", 8, 1},
                      Case{"gpt2_full_mb4", "tiny", "full", 4, 1},
                      Case{"llama_none", "llama-tiny", "none", 8, 1},
                      Case{"moe_selective", "moe-tiny", "selective", 8, 1},
                      Case{"gpt2_dp2", "tiny", "none", 8, 2, "dp2"},
                      Case{"llama_full_dp2_mb4", "llama-tiny", "full", 4, 2, "dp2"},
                      Case{"moe_none_dp2_mb2", "moe-tiny", "none", 2, 2, "dp2"},
                      Case{"gpt2_zero1_dp2", "tiny", "none", 8, 2, "dp2,zero1"},
                      Case{"llama_zero2_dp2", "llama-tiny", "selective", 8, 2, "dp2,zero2"},
                      Case{"gpt2_zero3_dp2_mb4", "tiny", "full", 4, 2, "dp2,zero3"},
                      // Tensor parallel: sequence parallel (the default) and nosp, each
                      // recompute mode, tp4, and tp with dp and ZeRO on four ranks.
                      Case{"gpt2_tp2", "tiny", "none", 8, 2, "tp2"},
                      Case{"gpt2_tp2_nosp", "tiny", "none", 8, 2, "tp2,nosp"},
                      Case{"gpt2_tp4_selective", "tiny", "selective", 8, 4, "tp4"},
                      Case{"gpt2_tp4_nosp_full", "tiny", "full", 8, 4, "tp4,nosp"},
                      Case{"llama_tp2_full_mb4", "llama-tiny", "full", 4, 2, "tp2"},
                      Case{"llama_tp2_nosp_selective", "llama-tiny", "selective", 8, 2, "tp2,nosp"},
                      Case{"gpt2_tp2_dp2", "tiny", "none", 4, 4, "tp2,dp2"},
                      Case{"llama_tp2_zero1_dp2", "llama-tiny", "none", 8, 4, "tp2,dp2,zero1"},
                      // Experts: ZeRO with ep (dense over dp, experts over expert-dp), and
                      // experts whole per tp rank (with and without sequence parallelism).
                      Case{"moe_ep2_dp4_zero1_mb2", "moe-tiny", "none", 2, 4, "ep2,dp4,zero1"},
                      Case{"moe_ep2_dp4_zero3_mb2", "moe-tiny", "selective", 2, 4, "ep2,dp4,zero3"},
                      Case{"moe_tp2_ep2", "moe-tiny", "none", 8, 4, "tp2,ep2"},
                      Case{"moe_tp2_ep2_nosp_full", "moe-tiny", "full", 8, 4, "tp2,ep2,nosp"},
                      // Context parallel: the packed K/V block, its gradient and each
                      // plugin's scratch blocks (the ring's 5, the all-gather's 2 cp).
                      Case{"gpt2_cp2", "tiny", "none", 8, 2, "cp2"},
                      Case{"llama_cp2_allgather", "llama-tiny", "selective", 8, 2, "cp2,cpimpl=allgather"}),
    [](const ::testing::TestParamInfo<Case>& p) { return std::string(p.param.name); });

// Pipeline layouts: every rank against the plan's figures for its own stage (pp is the
// outermost axis: rank r is on stage r / (world / pp)). The build always has the pipeline
// runtime and the schedule plugins (this test depends on them), so a run that fails, for
// whatever reason, fails the test.
class PipelineMemoryVsRun : public MemoryVsRun {};

TEST_P(PipelineMemoryVsRun, EveryStageWithinTenPercentOfMeasured) {
  const Case& c = GetParam();
  const fs::path job = write_job(c);
  JsonValue plan;
  ASSERT_NO_FATAL_FAILURE(plan_json(c, job, &plan));
  ASSERT_EQ(sh(run_command(c, job, 2), dir_ / "run.log"), 0) << slurp(dir_ / "run.log");
  const JsonValue& stages = at(at(plan, "memory"), "stages");
  const int pp = static_cast<int>(number(plan, "pp"));
  ASSERT_EQ(stages.items.size(), static_cast<size_t>(pp));
  for (int r = 0; r < c.nproc; ++r) {
    const size_t stage = static_cast<size_t>(r / (c.nproc / pp));
    expect_rank_memory(c, r, stages.items[stage]);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, PipelineMemoryVsRun,
    ::testing::Values(Case{"gpt2_pp2_1f1b_mb2", "tiny", "none", 2, 2, "pp2"},
                      Case{"gpt2_pp2_gpipe_mb4", "tiny", "selective", 4, 2, "pp2,sched=gpipe"},
                      Case{"llama_pp2_full_mb2", "llama-tiny", "full", 2, 2, "pp2"},
                      Case{"gpt2_pp2_dp2_mb2", "tiny", "none", 2, 4, "pp2,dp2"},
                      Case{"gpt2_pp2_dp2_zero1_mb2", "tiny", "none", 2, 4, "pp2,dp2,zero1"},
                      Case{"llama_pp2_dp2_zero2_mb2", "llama-tiny", "selective", 2, 4, "pp2,dp2,zero2"},
                      Case{"gpt2_pp2_dp2_zero3_mb2", "tiny", "none", 2, 4, "pp2,dp2,zero3"},
                      Case{"gpt2_pp2_zbh1_mb2", "tiny", "none", 2, 2, "pp2,sched=zbh1"},
                      Case{"gpt2_l4_pp2_interleaved_mb2", "tiny", "selective", 2, 2,
                           "pp2,sched=interleaved:2", 4},
                      Case{"moe_ep2_pp2_dp4_zero1_mb2", "moe-tiny", "none", 2, 8, "ep2,pp2,zero1"},
                      Case{"moe_tp2_ep2_pp2_mb2", "moe-tiny", "none", 2, 8, "tp2,ep2,pp2"}),
    [](const ::testing::TestParamInfo<Case>& p) { return std::string(p.param.name); });

}  // namespace
