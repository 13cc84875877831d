// The coordinator's side of checkpointing: it alone opens the state store. At start-up it
// checks the run's metadata, reconciles the step folders with the store and picks the
// checkpoint to resume from (the newest whose every piece verifies); during the run it
// commits each checkpoint once every rank's shards are durable, then applies retention.
//
// Never destroy what verifies. A step folder the store does not list is one of:
//   - a save that never committed (no folder manifest, folder_manifest.h): deleted;
//   - a checkpoint the store lost track of (its manifest is intact and every piece
//     verifies: a damaged or cut WAL, a deleted or unreadable state.db): taken back into
//     the store, logged as an error, and resumed from when it is the newest;
//   - a damaged checkpoint with a manifest: left in place and reported.
// A state.db RocksDB cannot read is moved aside (state.db.damaged-*) and rebuilt from the
// folder manifests, never deleted. Retention keeps the `keep` newest checkpoints that are
// not known to be damaged: a damaged one never pushes a good one out.
#pragma once

#include <memory>
#include <optional>
#include <set>
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
  RunMeta meta;                        // this run's version, config hash, layout and inputs
  // Whether a resume may go on although the run's inputs changed (run_inputs.h): the user's
  // --resume-with-changes, logged with every change. Default: false (refused, naming the key)
  bool allow_changed_inputs = false;
};

// The options for a run of `model` trained with `train` on `data`: the model's tensors (from
// its parameter table) and the config hash over them, the seed, global batch and seq_len, and
// the run's inputs (run_inputs.h).
CoordinatorOptions coordinator_options(const engine::ModelOptions& model,
                                       const engine::TrainOptions& train, const engine::DataOptions& data,
                                       std::string root, int keep, std::string version);

class Coordinator {
 public:
  // Opens the store and refuses (invalid) a store whose checkpoints were trained on other
  // inputs (run_inputs.h; naming each key that changed, unless allow_changed_inputs, which
  // logs them) or whose config hash differs from this run's (other tensors: never resumable).
  static Result<std::unique_ptr<Coordinator>> open(CoordinatorOptions options);

  // Call while no rank writes (before a worker group starts): reconciles the step folders
  // with the store (above), then returns the newest committed checkpoint whose pieces all
  // verify; each one skipped is logged with the file, the expected and the actual checksum
  // and remembered as damaged (for retention). nullopt when none (a fresh run).
  Result<std::optional<Checkpoint>> resume_point();

  // Checks that `c` covers every tensor, commits it (one synced WriteBatch that also drops
  // what retention drops), writes its folder manifest, then deletes the dropped folders.
  Status commit(const Checkpoint& c);

  StateStore& store() { return *store_; }

 private:
  Coordinator() = default;
  // Takes back the step folders the store lost that verify, deletes dead saves' folders and
  // temp files; *have (the store's checkpoints, newest first) gains those taken back.
  Status reconcile_folders(std::vector<Checkpoint>* have);
  // The steps retention drops when `step` commits (newest first, damaged ones not counted).
  std::vector<int64_t> retention_drops(const std::vector<Checkpoint>& have, int64_t step) const;

  CoordinatorOptions o_;
  std::unique_ptr<StateStore> store_;
  std::set<int64_t> damaged_;  // committed steps found damaged by resume_point()
};

}  // namespace partrain::store
