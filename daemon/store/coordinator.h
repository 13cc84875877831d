// The coordinator's side of checkpointing: it alone opens the state store. At start-up it
// checks the run's metadata, removes what uncommitted saves left behind and picks the
// checkpoint to resume from (the newest whose every piece verifies); during the run it
// commits each checkpoint once every rank's shards are durable, then applies retention.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/options.h"
#include "store/manifest.h"
#include "store/state_store.h"

namespace partrain::store {

struct CoordinatorOptions {
  std::string root;                    // the checkpoint root ([checkpoint] dir). Required
  int keep = 3;                        // committed checkpoints kept. Default: 3
  std::vector<LogicalTensor> tensors;  // the model's tensors: every commit must cover them
  RunMeta meta;                        // this run's version, config hash and layout
};

// The options for a run of `model` trained with `train`: the model's tensors (from its
// parameter table) and the config hash over them, the seed, global batch and seq_len.
CoordinatorOptions coordinator_options(const engine::ModelOptions& model,
                                       const engine::TrainOptions& train, std::string root,
                                       int keep, std::string version);

class Coordinator {
 public:
  // Opens the store and refuses (invalid) a store whose config hash differs from this run's.
  static Result<std::unique_ptr<Coordinator>> open(CoordinatorOptions options);

  // Call while no rank writes (before a worker group starts): removes the step folders and
  // temp files no committed checkpoint names, then returns the newest committed checkpoint
  // whose pieces all verify; each one skipped is logged with the file, the expected and the
  // actual checksum. nullopt when none (a fresh run).
  Result<std::optional<Checkpoint>> resume_point();

  // Checks that `c` covers every tensor, commits it (one synced WriteBatch) and deletes the
  // files of the checkpoints retention dropped.
  Status commit(const Checkpoint& c);

  StateStore& store() { return *store_; }

 private:
  Coordinator() = default;
  CoordinatorOptions o_;
  std::unique_ptr<StateStore> store_;
};

}  // namespace partrain::store
