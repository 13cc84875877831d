// Published large-scale training runs, as `partrain plan` is checked against them: each
// run's model, layout, batch, hardware and framework, the throughput its paper reports and
// how the paper counts FLOPs. bench/planner/validate prints the table and fits the
// profiles' constants on half of it; tests/planner/accuracy_test.cc asserts every row
// within 10%. The published number is the independent reference; what a paper does not
// state is assumed once per source (Source::assumptions).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "config/job_config.h"
#include "planner/hardware.h"
#include "planner/plan.h"
#include "planner/runtime.h"

namespace partrain::bench {

// How a source turns a step time into TFLOP/s per GPU.
enum class FlopCount {
  kSc21,    // 96 B s l h^2 (1 + s/6h + V/16lh): hardware FLOPs with full recompute (SC'21 eq. 3)
  kNeox,    // 96 B s l h^2 (1 + s/6h): GPT-NeoX's logger (its vocabulary term is added, not multiplied)
  kModel,   // 6 x matmul weights + 12 L T C per token (Megatron's num_floating_point_operations)
  kCausal,  // 6 x matmul weights + 6 L T C per token (attention counted once, causal)
  kParams,  // 6 x every parameter + 12 L T C per token (llm-foundry's MFU, torchtitan's)
};

// Which half of the table a row belongs to: the profiles' calibrated constant
// (sustained_clock) is fitted on kCalibration rows only; CI asserts the kHeldOut rows.
enum class Half { kCalibration, kHeldOut };

struct Source {
  std::string key;          // "sc21", "mcore", ...
  std::string citation;     // paper, table, where the configuration comes from
  std::string framework;    // what the runtime fields below describe
  std::string assumptions;  // what the paper does not state and the table assumes
  planner::Runtime runtime;
  FlopCount count = FlopCount::kModel;
};

struct PublishedRun {
  std::string name;
  std::string source;     // Source::key
  std::string profile;    // shipped hardware profile
  double nic_per_gpu = 0;  // the cluster's inter-node bytes/s per GPU; 0 = the profile's
  // The model.
  std::string arch;       // "gpt2" or "llama"
  int vocab = 0, seq = 0, layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0;
  bool tied = true;
  std::string recompute;  // "none", "selective", "full"
  // The layout and batch.
  std::string spec;       // --partrain
  int gpus = 0;
  int global_batch = 0, micro_batch = 1;
  std::string cp_impl;    // context plugin for cp > 1
  int dp_overlap = -1;    // 1 or 0 overrides the source's runtime (SC'21: torch DDP or local DDP)
  double published_tflops = 0;  // per GPU, counted as the source counts
  // Tokens/s per GPU, where the source states them (then published_tflops is derived).
  double published_tokens_per_gpu = 0;
  // The source's own words for the row (its table row, or the sentence that gives it).
  std::string quote;
  int grad_wire_bytes = 0;  // > 0 overrides the source's runtime (FSDP's reduce dtype)
  Half half = Half::kCalibration;  // set by published_runs() (alternating within a source)
  // Why the row's memory is not checked (the layout ran, but how the framework held it is
  // not known well enough); empty for the rows whose fit is asserted.
  std::string memory_unverified;
  // Why the row is shown but neither fitted nor asserted; empty for the rows that are.
  std::string excluded;
};

const std::vector<Source>& sources();
// Every row, each with its half: within each source, alternately calibration and held out
// in the table's order (the rows shown but not asserted take no half).
const std::vector<PublishedRun>& published_runs();
// The rows of the sources in published_runs_fsdp.cc (llm-foundry, torchtitan).
std::vector<Source> fsdp_sources();
std::vector<PublishedRun> fsdp_runs();
const Source& source_of(const PublishedRun& run);

// The run as a job file would state it.
Result<config::JobConfig> job_of(const PublishedRun& run);

// The shipped profile from `hardware_dir`, with the run's cluster network.
Result<planner::HardwareProfile> profile_of(const PublishedRun& run, const std::string& hardware_dir);

// FLOPs per token the source counts.
double source_flops_per_token(const PublishedRun& run);

struct Prediction {
  planner::Plan plan;
  double tflops = 0;     // predicted TFLOP/s per GPU, counted as the source counts
  double mfu = 0;        // predicted MFU (model FLOPs, the profile's peak)
  double published_mfu = 0;
  double error = 0;      // tflops / published - 1 (= predicted / published tokens per GPU - 1)
};

// Plans the run on `hw` (profile_of, possibly with fitted constants).
Result<Prediction> predict(const PublishedRun& run, const planner::HardwareProfile& hw);

// Re-times an existing prediction's plan on `hw` (the same layout, traffic and spans).
Prediction retime(const PublishedRun& run, const Prediction& p, const planner::HardwareProfile& hw);

}  // namespace partrain::bench
