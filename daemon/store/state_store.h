// The run's state store: one RocksDB database at ROOT/state.db, opened by exactly one
// writer, the coordinator (the coordinator's partraind, or the `partrain run` process of a
// single rank); RocksDB's own lock file refuses a second writer. `partrain ckpt` opens it
// read-only. This is the only code in partrain that includes RocksDB.
//
// Keys:
//   meta/version, meta/config_hash, meta/layout   run metadata
//   meta/inputs                                   what the numbers depend on (run_inputs.h)
//   ckpt/<step, 20 digits>                        a committed checkpoint (encode_checkpoint)
//   latest                                        the newest committed step
// A checkpoint is committed by one synced WriteBatch (manifest, state and pointer
// together, the checkpoints retention drops removed in the same batch), after every
// rank's shards are durable. Whatever the batch did not reach does not exist, unless its
// folder holds the copy of its record a commit leaves there (folder_manifest.h): then the
// store lost it (a damaged WAL) and the coordinator takes it back.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/manifest.h"

namespace rocksdb {
class DB;
}

namespace partrain::store {

struct RunMeta {
  std::string version;      // partrain version that last committed
  std::string config_hash;  // what a checkpoint must match to be resumed (see config_hash())
  std::string layout;       // the layout of the last commit, e.g. "dp2"
  std::string inputs;       // run_inputs() of the last commit; "" in stores written before it
};

class StateStore {
 public:
  // Opens (creating when `read_only` is false) ROOT/state.db. invalid, naming the process
  // when it can, when another process holds it (two runs on one checkpoint folder: a
  // restart cannot cure that); corruption when RocksDB cannot recover it.
  static Result<std::unique_ptr<StateStore>> open(const std::string& root, bool read_only = false);
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  const std::string& root() const { return root_; }
  Result<std::optional<RunMeta>> meta() const;
  // Committed checkpoints, newest first.
  Result<std::vector<Checkpoint>> checkpoints() const;
  // The newest committed step, or -1.
  Result<int64_t> latest() const;

  // Commits `c` with `meta` in one synced WriteBatch, which also drops the checkpoints of
  // `drop` from the store (retention: the coordinator decides which; their files are the
  // caller's to delete once this returned, now that the newer one is durable).
  Status commit(const Checkpoint& c, const RunMeta& meta, const std::vector<int64_t>& drop);

 private:
  StateStore() = default;
  std::string root_;
  std::unique_ptr<rocksdb::DB> db_;
  bool read_only_ = false;
};

// Moves a state store RocksDB cannot read (ROOT/state.db) aside to
// ROOT/state.db.damaged-<unix seconds>[-k], keeping every byte of it for inspection, so that
// a fresh one can be made; returns the new name.
Result<std::string> set_aside_store(const std::string& root);

// The config hash: CRC-32C over what a checkpoint's numbers depend on beyond the tensors
// (the seed, global batch and sequence length) and every tensor's name and shape.
std::string config_hash(const std::vector<LogicalTensor>& tensors, uint64_t seed, int global_batch,
                        int seq_len);

}  // namespace partrain::store
