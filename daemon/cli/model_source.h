// Where `partrain generate` and `partrain export` get a model's weights from. A SOURCE
// is one of:
//   a Hugging Face folder (config.json + model.safetensors or an index)   needs nothing else
//   a job file (.toml)                 its run folder's newest checkpoint (or --step's)
//   a run folder or checkpoint root    with --job for the model's shape
//   a .safetensors file                with --job (e.g. `partrain run --save` output)
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/model/model.h"
#include "engine/options.h"
#include "store/state_store.h"

namespace partrain::cli {

// The checkpoint root of RUN_DIR and its committed checkpoints, newest first.
struct OpenedRun {
  std::string root;
  std::unique_ptr<store::StateStore> store;
  std::vector<store::Checkpoint> checkpoints;
};
Result<OpenedRun> open_run(const std::string& run_dir);
// The checkpoint of `step` (-1: the newest).
Result<const store::Checkpoint*> pick_checkpoint(const OpenedRun& o, int64_t step);

struct ModelSource {
  engine::ModelOptions model;
  std::vector<float> weights;  // the parameter table's flat buffer, one rank (tp1)
  std::string tokenizer;       // a tokenizer file beside the weights, or ""
  std::string what;            // for messages: "runs/tiny/checkpoints, step 100"
};

// `job` may be empty where the source names its model itself; `step` -1 is the newest.
Result<ModelSource> open_model_source(const std::string& source, const std::string& job, int64_t step);

// A CPU model holding the source's weights (for export). *backend keeps its device alive.
Result<std::unique_ptr<engine::model::Model>> model_of(const ModelSource& src,
                                                       std::unique_ptr<engine::Backend>* backend);

struct ExportTarget {
  std::string file;                     // -o OUT.safetensors, or
  std::string hf_dir;                   // --hf DIR (config.json, shards, index)
  std::vector<std::string> tokenizers;  // --tokenizer FILE...: copied into DIR
  std::string max_shard_size = "5GB";   // --max-shard-size: 5GB, 500MB, 100KB, or bytes
};
// -o, --hf, --tokenizer, --max-shard-size on an export command.
void add_export_options(CLI::App* cmd, ExportTarget* t);
// Writes the weights of `m` to the target and prints one line saying where and what
// (`what`: "the weights of runs/tiny/checkpoints, step 100").
Status write_export(engine::model::Model& m, const ExportTarget& t, const std::string& what);

// `partrain export` and `partrain ckpt export` (cmd_export.cc): which weights, and where.
struct ExportRequest {
  std::string source;     // as open_model_source reads it
  std::string job;        // --job, "" where SOURCE is the job file or names its model
  std::string from;       // --from FILE: these weights, checked against the job's [model]
  int64_t step = -1;      // --step: that committed checkpoint; -1: the newest that verifies
  bool initial = false;   // --initial: the untrained weights of [training] seed
  ExportTarget target;
};
// Writes the request's weights; returns the exit code (a failure reported on stderr).
int run_export(const ExportRequest& r);

}  // namespace partrain::cli
