// Context parallelism end to end (engine/model/context_parallel.h, the context plugins
// plugins/context/ring and plugins/context/allgather, worker/context_plugin_comm.h): cp2 and
// cp4 with each plugin, cp2 x tp2, cp2 x dp2 x zero1, cp2 x pp2 (1F1B), cp2 on LLaMA (GQA,
// RoPE), cp2 with dropout and cp2 x dp2 x ep2, cp2 x tp2 (sp, nosp), cp2 x tp2 x ep2 and
// cp2 x dp2 x ep2 x zero1 on the MoE example train exactly what one rank trains (20 steps,
// 1e-5 relative; MoE routing counts exactly); the step's K/V transfers
// are in metrics.jsonl (cp_comm_ms, cp_exposed_ms); a cp4 checkpoint resumes on one rank
// and back on cp4; at seq 4096 a cp4 rank keeps a quarter of one rank's activations, as
// `partrain plan` predicts; a layout the model cannot take is refused before any worker
// starts.
#include <cstdio>
#include <map>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "runtime_helpers.h"

namespace {

using namespace partrain::testing;

const std::string kLlama = std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/llama-tiny.toml";
const std::string kMoe = std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/moe-tiny.toml";
constexpr int kSteps = 20;

struct Case {
  const char* name;    // test name suffix
  const char* job;     // "gpt2", "llama" or "moe"
  const char* spec;    // --partrain
  int nproc;
  const char* edits;   // appended to [model] (moe: replaces its capacity line), or ""
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// A copy of the example with the case's edits of its [model] table.
std::string job_for(const Case& c, const std::string& dir) {
  const std::string name = c.job;
  const std::string path = job_copy(name == "llama" ? kLlama : name == "moe" ? kMoe : kTiny, dir, "job.toml", "");
  if (name == "moe") {
    if (*c.edits != '\0') edit_file(path, {{"moe_capacity_factor = 1.25", c.edits}});
    return path;
  }
  if (name == "gpt2") edit_file(path, {{"dropout = 0.0\n", ""}});  // the case says its own
  if (*c.edits != '\0') edit_file(path, {{"[model]\n", "[model]\n" + std::string(c.edits) + "\n"}});
  return path;
}

class CpMatchesOneRank : public Runtime, public ::testing::WithParamInterface<Case> {};

// The reference is `partrain run` on one rank (the engine's trainer, whole sequences).
TEST_P(CpMatchesOneRank, OverTwentySteps) {
  const Case c = GetParam();
  const std::string job = job_for(c, dir_);
  Proc one = start({PARTRAIN_CLI, "run", job, "--steps", std::to_string(kSteps)}, env("one"), dir_, "one");
  ASSERT_EQ(wait_exit(one.pid), 0) << slurp(one.err);
  const std::string spec = std::string("--partrain=") + c.spec;
  Proc p = start({PARTRAIN_CLI, "run", job, spec, "--nproc", std::to_string(c.nproc), "--steps",
                  std::to_string(kSteps)}, env("cp"), dir_, "cp");
  ASSERT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
  const std::string plugin = std::string(c.spec).find("cpimpl=allgather") != std::string::npos ? "allgather" : "ring";
  EXPECT_NE(slurp(p.err).find("context plugin " + plugin + " "), std::string::npos) << slurp(p.err);
  const std::string ref = dir_ + "/one/metrics.jsonl", got = dir_ + "/cp/metrics.jsonl";
  expect_same_losses(ref, got, kSteps, std::string(c.name) + " " + spec);
  if (std::string(c.job) == "moe") {
    const long long dropped = expect_same_routing(ref, got, c.name);
    std::printf("%s: %lld tokens dropped over %d steps, on one rank and on %s\n", c.name, dropped, kSteps, c.spec);
    EXPECT_GT(dropped, 0) << "the capacity should drop tokens: routed over the whole micro-batch, as one rank";
  }
  // The K/V transfers are counted per step, on the cp axis.
  const std::vector<std::string> comm = column(got, "cp_comm_ms"), exposed = column(got, "cp_exposed_ms");
  ASSERT_EQ(comm.size(), static_cast<size_t>(kSteps));
  for (int s = 0; s < kSteps; ++s) {
    ASSERT_FALSE(comm[static_cast<size_t>(s)].empty()) << "step " << s + 1;
    EXPECT_GE(std::stod(comm[static_cast<size_t>(s)]), std::stod(exposed[static_cast<size_t>(s)]));
  }
  EXPECT_NE(slurp(got).find("\"cp\":"), std::string::npos);
}

constexpr const char* kDrop = "dropout = 0.1";

INSTANTIATE_TEST_SUITE_P(
    Layouts, CpMatchesOneRank,
    ::testing::Values(Case{"gpt2_cp2_ring", "gpt2", "cp2", 2, ""},
                      Case{"gpt2_cp2_allgather", "gpt2", "cp2,cpimpl=allgather", 2, ""},
                      Case{"gpt2_cp4_ring", "gpt2", "cp4", 4, ""},
                      Case{"gpt2_cp4_allgather", "gpt2", "cp4,cpimpl=allgather", 4, ""},
                      Case{"gpt2_cp2_tp2", "gpt2", "cp2,tp2", 4, ""},
                      Case{"gpt2_cp2_dp2_zero1", "gpt2", "cp2,dp2,zero1", 4, ""},
                      Case{"gpt2_cp2_pp2_1f1b", "gpt2", "cp2,pp2,sched=1f1b", 4, ""},
                      Case{"llama_cp2_gqa_rope", "llama", "cp2", 2, ""},
                      Case{"gpt2_cp2_dropout", "gpt2", "cp2", 2, kDrop},
                      Case{"moe_cp2_dp2_ep2", "moe", "cp2,dp2,ep2", 4, "moe_capacity_factor = 1.0"},
                      // With the experts' tp (moe_tp.cc): the router gathers the logits over
                      // tp, then cp (moe.cc moe_route); with ep over the cp ranks; with ZeRO's
                      // expert shards over expert-dp = dp x cp / ep.
                      Case{"moe_cp2_tp2", "moe", "cp2,tp2", 4, "moe_capacity_factor = 1.0"},
                      Case{"moe_cp2_tp2_nosp", "moe", "cp2,tp2,nosp", 4, "moe_capacity_factor = 1.0"},
                      Case{"moe_cp2_tp2_ep2", "moe", "cp2,tp2,ep2", 4, "moe_capacity_factor = 1.0"},
                      Case{"moe_cp2_dp2_ep2_zero1", "moe", "cp2,dp2,ep2,zero1", 4, "moe_capacity_factor = 1.0"}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// cp does not change what is saved: a checkpoint written on cp4 resumes on one rank, and
// that one's resumes on cp4 again, on one rank's trajectory (every leg on the 20-step
// learning-rate schedule: schedule_over).
TEST_F(Runtime, CpCheckpointResumesOnOneRankAndBack) {
  const std::string job = job_copy(kTiny, dir_, "job.toml", "");
  schedule_over(job, kSteps);
  Proc one = start({PARTRAIN_CLI, "run", job, "--steps", std::to_string(kSteps)}, env("one"), dir_, "one");
  ASSERT_EQ(wait_exit(one.pid), 0) << slurp(one.err);
  Proc a = start({PARTRAIN_CLI, "run", job, "--partrain=cp4", "--nproc", "4", "--steps", "5"}, env("cp"), dir_, "a");
  ASSERT_EQ(wait_exit(a.pid), 0) << slurp(a.err);
  Proc b = start({PARTRAIN_CLI, "run", job, "--partrain=dp1", "--nproc", "1", "--steps", "10"}, env("cp"), dir_, "b");
  ASSERT_EQ(wait_exit(b.pid), 0) << slurp(b.err);
  EXPECT_NE(slurp(b.err).find("resuming at step 5"), std::string::npos) << slurp(b.err);
  Proc c = start({PARTRAIN_CLI, "run", job, "--partrain=cp4", "--nproc", "4", "--steps", std::to_string(kSteps)},
                 env("cp"), dir_, "c");
  ASSERT_EQ(wait_exit(c.pid), 0) << slurp(c.err);
  EXPECT_NE(slurp(c.err).find("resuming at step 10"), std::string::npos) << slurp(c.err);
  expect_same_losses(dir_ + "/one/metrics.jsonl", dir_ + "/cp/metrics.jsonl", kSteps, "cp4 -> one rank -> cp4");
}

// The number `key` of a `partrain plan --json` output's "memory" object.
double planned(const std::string& plan, const std::string& key) {
  const size_t at = plan.find("\"memory\":{");
  EXPECT_NE(at, std::string::npos) << plan;
  const std::string memory = at == std::string::npos ? "" : plan.substr(at);
  std::smatch m;
  const std::regex re("\"" + key + "\":([-0-9.eE+]+)");
  if (!std::regex_search(memory, m, re)) {
    ADD_FAILURE() << key << " missing in " << plan;
    return 0;
  }
  return std::stod(m[1].str());
}

// At seq 4096 (tiny.toml, one sequence per step) every cp4 rank keeps a quarter of one
// rank's activations: each per-token tensor (residual stream, norms, q/k/v, attention
// output and its log-sum-exp, MLP, logits, tokens) holds T/4 rows, and cp stores no
// activation of its own (its K/V blocks, their gradients and the plugin's scratch are
// workspace). `partrain plan` predicts the same within 10%. The workspace is printed next
// to the plan's for the record: the ring's seven K/V blocks (the packed block and its
// gradient, five of scratch) are cp's addition to it.
TEST_F(Runtime, CpActivationsAreAQuarterAtSeq4096) {
  const std::string job = job_copy(kTiny, dir_, "long.toml", "");
  edit_file(job, {{"seq_len = 64", "seq_len = 4096"}, {"global_batch = 16", "global_batch = 1"},
                  {"micro_batch = 8", "micro_batch = 1"}});
  struct Layout {
    std::string spec;
    int nproc;
  };
  std::map<std::string, std::string> plan;
  for (const Layout& l : {Layout{"dp1", 1}, Layout{"cp4", 4}}) {
    Proc run = start({PARTRAIN_CLI, "run", job, "--partrain=" + l.spec, "--nproc", std::to_string(l.nproc),
                      "--steps", "1"}, env(l.spec), dir_, l.spec);
    ASSERT_EQ(wait_exit(run.pid), 0) << slurp(run.err);
    Proc p = start({PARTRAIN_CLI, "plan", job, "--hardware", "cpu", "--hardware-dir",
                    std::string(PARTRAIN_SOURCE_DIR) + "/etc/hardware", "--gpus-per-node", std::to_string(l.nproc),
                    "--partrain=" + l.spec, "--json"}, env("plan"), dir_, "plan-" + l.spec);
    ASSERT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
    plan[l.spec] = slurp(p.out);
  }
  const double one = field(slurp(dir_ + "/dp1/memory.rank0.json"), "activations");
  const double predicted = planned(plan["cp4"], "activations");
  std::printf("activations per rank at seq 4096: one rank %.2f MiB (plan %.2f MiB)\n", one / (1 << 20),
              planned(plan["dp1"], "activations") / (1 << 20));
  for (int r = 0; r < 4; ++r) {
    const std::string m = slurp(dir_ + "/cp4/memory.rank" + std::to_string(r) + ".json");
    const double act = field(m, "activations");
    std::printf("  cp4 rank %d: %.2f MiB = %.4f of one rank's (plan %.2f MiB); workspace %.2f MiB (plan %.2f MiB)\n",
                r, act / (1 << 20), act / one, predicted / (1 << 20), field(m, "workspace") / (1 << 20),
                planned(plan["cp4"], "workspace") / (1 << 20));
    EXPECT_NEAR(act, one / 4, 0.10 * one / 4) << "rank " << r;
    EXPECT_NEAR(predicted, act, 0.10 * act) << "rank " << r;
  }
}

// etc/examples/long-context.toml needs cp to fit: on the cpu hardware profile (12 GiB per
// rank) `partrain plan` finds one rank too small for it and a cp4 rank large enough.
TEST_F(Runtime, LongContextExampleNeedsCpToFit) {
  const std::string job = std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/long-context.toml";
  for (const auto& [spec, nproc, says] : {std::tuple<std::string, std::string, std::string>{"cp1", "1", "DOES NOT FIT"},
                                          {"cp4", "4", "fits"}}) {
    Proc p = start({PARTRAIN_CLI, "plan", job, "--hardware", "cpu", "--hardware-dir",
                    std::string(PARTRAIN_SOURCE_DIR) + "/etc/hardware", "--gpus-per-node", nproc, "--partrain=" + spec},
                   env("plan"), dir_, "plan-" + spec);
    ASSERT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
    const std::string out = slurp(p.out);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex("\\n  total +([0-9.]+ GiB of 12.00 GiB: )([A-Za-z ]+)\\n")))
        << out;
    EXPECT_EQ(m[2].str(), says) << spec << ": " << m[0].str();
    std::printf("long-context.toml on %s: %s%s\n", spec.c_str(), m[1].str().c_str(), m[2].str().c_str());
  }
}

// Refused before any worker starts, exit 2, one line with the fix: a seq_len that does not
// cut into 2cp chunks (the layout core), cp x tp whose chunks do not split over tp under
// sp, cp in bf16 storage on GPU ranks (config::check_supported); a context plugin that is not installed
// and a key its table does not take are configuration errors too.
TEST_F(Runtime, BadCpLayoutsAreRefused) {
  struct Bad {
    std::string spec, nproc, seq_len, says, table;
    bool before_workers, cuda;
  };
  const std::vector<Bad> bad = {
      {"cp3", "3", "64", "cp3 cuts every sequence into 6 chunks, which do not divide seq_len 64; use a seq_len "
                         "that is a multiple of 6", "", true, false},
      {"cp2,tp4", "8", "68", "sequence parallelism splits each cp rank's 34 of seq_len 68 over tp4, which does "
                             "not divide it; use a seq_len that is a multiple of 2 x cp2 x tp4 = 16, or nosp", "",
       true, false},
      {"cp2", "2", "64", "[job] precision = \"bf16\" (the default on GPUs) runs plain data parallelism only",
       "", true, true},
      {"cp2,cpimpl=ulysses", "2", "64", "ulysses.so", "", false, false},
      {"cp2", "2", "64", "[plugins.ring]: unknown key 'chunks'; this plugin takes no keys: remove it",
       "[plugins.ring]\nchunks = 4\n", false, false},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.spec);
    const std::string job = job_copy(kTiny, dir_, "bad.toml", b.table);
    edit_file(job, {{"seq_len = 64", "seq_len = " + b.seq_len}});
    std::vector<std::string> args = {PARTRAIN_CLI, "run", job, "--partrain=" + b.spec, "--nproc", b.nproc,
                                     "--steps", "2"};
    std::map<std::string, std::string> e = env("bad");
    if (b.cuda) {  // GPUs named, need not exist: refused before CUDA is touched
      args.insert(args.end(), {"--device", "cuda"});
      e["CUDA_VISIBLE_DEVICES"] = "0,1";
    }
    Proc p = start(args, e, dir_, "bad");
    EXPECT_EQ(wait_exit(p.pid), 2);
    const std::string err = slurp(p.err);
    EXPECT_NE(err.find(b.says), std::string::npos) << err;
    if (b.before_workers) {
      EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
      EXPECT_EQ(err.find("started"), std::string::npos) << err;
    }
  }
}

}  // namespace
