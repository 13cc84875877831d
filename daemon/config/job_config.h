// The job file: what to train and how. TOML with the tables
//   [job] [model] [data] [training] [parallelism] [checkpoint]
// plus one table per strategy plugin, passed to that plugin verbatim. See partrain.toml(5).
// A plugin's table is [plugins.NAME] (NAME as in the spec, e.g. sched=myschedule reads
// [plugins.myschedule]); any other top-level table is an error, so a typo like [trainig]
// is caught instead of being handed to a plugin.
// Unknown or mistyped keys are errors naming the file, line and key.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/options.h"
#include "layout/spec.h"

namespace partrain::config {

struct CheckpointOptions {
  std::string dir;        // where checkpoints go; "" = <run_dir>/checkpoints. Default: ""
  int64_t every = 0;      // save every N steps; 0 = only at the end and on SIGTERM. Default: 0
  int keep = 3;           // committed checkpoints kept. Default: 3
  bool async = true;      // write and commit on a background thread. Default: true
  int max_restarts = 0;   // in-job restarts of the worker group after a worker died. Default: 0
};

struct JobConfig {
  std::string path;                   // the file this came from
  std::string name;                   // [job] name. Default: the file's stem
  std::string run_dir;                // [job] run_dir: metrics.jsonl, logs. Default: runs/<name>
  std::string device = "cpu";         // [job] device: "cpu" or "cuda" (one GPU per worker). Default: cpu
  // [job] precision: the storage of weights and activations, "fp32" or "bf16" (gradients,
  // master weights and optimizer state are fp32 in both). Default: "" = fp32 on CPU ranks,
  // bf16 on GPUs. bf16 on CPU ranks is a test mode (engine/cpu/cpu_bf16_backend.h).
  std::string precision;
  engine::ModelOptions model;         // [model]
  engine::DataOptions data;           // [data]; relative paths resolved against the job file's folder
  engine::TrainOptions training;      // [training]
  ParallelSpec parallelism;           // [parallelism]
  // [parallelism] stage_layers: the transformer blocks of each pipeline stage, in stage order
  // (pp x virtual stages entries, each >= 1, summing to [model] layers), e.g. Llama 3 405B's
  // 126 layers on pp16 as [7, 8, ..., 8, 7] (fewer on the stages with the embedding and the
  // head). Default: empty, the cost-balanced split (pipeline/partition.h).
  std::vector<int> stage_layers;
  CheckpointOptions checkpoint;       // [checkpoint]
  std::map<std::string, std::string> plugin_tables;  // [plugins.NAME]: NAME -> the table as TOML text
  // The [parallelism] items the file set, in the order they were laid over each other
  // (spec first, then the single keys: {"tp2,pp2", "zero1"}), so that the site's default
  // spec can be put underneath them (apply_site_defaults). Empty when the file set none.
  std::vector<std::string> parallelism_items;
};

struct SiteConfig;  // site_config.h

// Values given on the command line (or read from PARTRAIN_*); unset ones change nothing.
// Messages name them by the options below; a command offers the ones it needs.
struct Overrides {
  std::optional<std::string> spec;     // --partrain / PARTRAIN_SPEC: items overlaid on [parallelism]
  std::optional<int64_t> steps;        // --steps / PARTRAIN_STEPS
  std::optional<uint64_t> seed;        // --seed / PARTRAIN_SEED
  std::optional<std::string> run_dir;  // --run-dir / PARTRAIN_RUN_DIR
  std::optional<int64_t> checkpoint_every;  // PARTRAIN_CHECKPOINT_EVERY: [checkpoint] every
  std::optional<std::string> device;   // --device / PARTRAIN_DEVICE: [job] device, cpu or cuda
};

// Reads and validates a job file. Every error names the file, the line and the key.
Result<JobConfig> load_job(const std::string& path);

// Parses job-file text; `path` names it in messages and anchors relative [data] paths.
Result<JobConfig> parse_job(std::string_view text, const std::string& path);

// Puts the site config's default spec underneath the job file's [parallelism] items
// (precedence: site defaults < job file). Call before apply_environment.
Status apply_site_defaults(const SiteConfig& site, JobConfig* job);

// Applies PARTRAIN_* environment overrides (PARTRAIN_SPEC, PARTRAIN_STEPS, PARTRAIN_SEED,
// PARTRAIN_RUN_DIR, PARTRAIN_CHECKPOINT_EVERY, PARTRAIN_DEVICE) on top of the file; the command line is applied after this by the caller.
Status apply_environment(JobConfig* job);
// The same from an explicit environment (name -> value), for tests and for agents that
// pass a worker's environment on.
Status apply_environment(const std::map<std::string, std::string>& env, JobConfig* job);

// Applies command-line values (the last word): the spec is overlaid item by item on
// job->parallelism; steps must be > 0. Errors name the option, e.g. "--steps 0: ...".
Status apply_command_line(const Overrides& cli, JobConfig* job);
// Only a command-line spec (`--partrain=SPEC`), for commands that take no other override.
Status overlay_command_line_spec(std::string_view spec, JobConfig* job);

// The whole chain in order: site defaults < job file < PARTRAIN_* environment < command line.
Result<JobConfig> resolve_job(const std::string& path, const SiteConfig& site,
                              const Overrides& cli);

// Gradient-accumulation steps (= the pipeline's micro-batch count):
// global_batch / (micro_batch * dp), or spec.mb when given. Error when not a whole number.
Result<int> grad_accum_steps(const JobConfig& job, int dp);

// The layout core's checks (layout/validate.h) of the job's [parallelism] on `world` ranks
// against its [model] (heads, kv_heads, hidden, seq_len, layers, experts, vocabulary): the
// first violation, named with its fix, or OK. Run before any worker starts.
Status validate_layout(const JobConfig& job, int world);
// [parallelism] stage_layers against the layout's stage count and [model] layers (part of
// validate_layout).
Status check_stage_layers(const JobConfig& job);

// Sequences per micro-batch on one rank: [training] micro_batch, or, when spec.mb overrides
// the micro-batch count, global_batch / (mb * dp) so the global batch stays what the file says.
Result<int> micro_batch_size(const JobConfig& job, int dp);

// Every "table.key" a job file may set (plugin tables aside), from the parser's own table.
std::vector<std::string> known_job_keys();

}  // namespace partrain::config
