// The job file: what to train and how. TOML with the tables
//   [job] [model] [data] [training] [parallelism] [checkpoint]
// plus one table per strategy plugin, passed to that plugin verbatim. See partrain.toml(5).
// Unknown or mistyped keys are errors naming the file, line and key.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "engine/options.h"
#include "layout/spec.h"

namespace partrain::config {

struct CheckpointOptions {
  std::string dir;        // where checkpoints go; "" = <run_dir>/checkpoints. Default: ""
  int64_t every = 0;      // save every N steps; 0 = only at the end and on SIGTERM. Default: 0
  int keep = 3;           // committed checkpoints kept. Default: 3
};

struct JobConfig {
  std::string path;                   // the file this came from
  std::string name;                   // [job] name. Default: the file's stem
  std::string run_dir;                // [job] run_dir: metrics.jsonl, logs. Default: runs/<name>
  engine::ModelOptions model;         // [model]
  engine::DataOptions data;           // [data]; relative paths resolved against the job file's folder
  engine::TrainOptions training;      // [training]
  ParallelSpec parallelism;           // [parallelism]
  CheckpointOptions checkpoint;       // [checkpoint]
  std::map<std::string, std::string> plugin_tables;  // [<plugin>] name -> the table as TOML text
};

// Reads and validates a job file. Every error names the file, the line and the key.
Result<JobConfig> load_job(const std::string& path);

// Applies PARTRAIN_* environment overrides (PARTRAIN_SPEC, PARTRAIN_STEPS, PARTRAIN_SEED,
// PARTRAIN_RUN_DIR) on top of the file; the command line is applied after this by the caller.
Status apply_environment(JobConfig* job);

// Gradient-accumulation steps (= the pipeline's micro-batch count):
// global_batch / (micro_batch * dp), or spec.mb when given. Error when not a whole number.
Result<int> grad_accum_steps(const JobConfig& job, int dp);

}  // namespace partrain::config
