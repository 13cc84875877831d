// See coordinator.h.
#include "store/coordinator.h"

#include <fmt/format.h>

#include "common/log.h"
#include "engine/model/params.h"
#include "store/fault.h"
#include "store/saver.h"
#include "store/shard_file.h"

namespace partrain::store {

CoordinatorOptions coordinator_options(const engine::ModelOptions& model,
                                       const engine::TrainOptions& train, std::string root,
                                       int keep, std::string version) {
  CoordinatorOptions o;
  o.root = std::move(root);
  o.keep = keep;
  o.tensors = logical_tensors(engine::model::build_param_table(model));
  o.meta.version = std::move(version);
  o.meta.config_hash = config_hash(o.tensors, train.seed, train.global_batch, model.seq_len);
  return o;
}

Result<std::unique_ptr<Coordinator>> Coordinator::open(CoordinatorOptions options) {
  std::unique_ptr<Coordinator> c(new Coordinator());
  c->o_ = std::move(options);
  Result<std::unique_ptr<StateStore>> st = StateStore::open(c->o_.root);
  if (!st) return st.status();
  c->store_ = std::move(st).value();
  Result<std::optional<RunMeta>> meta = c->store_->meta();
  if (!meta) return meta.status();
  if (*meta && (*meta)->config_hash != c->o_.meta.config_hash) {
    return Status::invalid(fmt::format(
        "{}: the checkpoints there are of another model or data order (config hash {}, this job's "
        "is {}: [model], [training] seed, global_batch or seq_len changed); give the job another "
        "[checkpoint] dir or run_dir, or delete that folder to start over",
        c->o_.root, (*meta)->config_hash, c->o_.meta.config_hash));
  }
  return c;
}

Result<std::optional<Checkpoint>> Coordinator::resume_point() {
  // No rank is writing now: whatever no commit names is a dead save's.
  Result<std::vector<Checkpoint>> have = store_->checkpoints();
  if (!have) return have.status();
  std::vector<int64_t> steps;
  for (const Checkpoint& k : *have) steps.push_back(k.state.step);
  Result<std::vector<std::string>> removed = remove_uncommitted(o_.root, steps);
  if (!removed) return removed.status();
  for (const std::string& r : *removed) log::info("store", "removed {}: left by a save that never committed", r);
  for (Checkpoint& c : *have) {
    if (Status s = check_complete(c.pieces, o_.tensors); !s) {
      log::warn("store", "checkpoint of step {} does not fit this model ({}); trying the previous one",
                c.state.step, s.message());
      continue;
    }
    if (Status s = verify_checkpoint(o_.root, c); !s) {
      log::error("store", "checkpoint of step {} is damaged: {}; trying the previous one",
                 c.state.step, s.message());
      continue;
    }
    return std::optional<Checkpoint>(std::move(c));
  }
  if (!have->empty()) log::error("store", "no committed checkpoint under {} verifies; starting from step 0", o_.root);
  return std::optional<Checkpoint>();
}

Status Coordinator::commit(const Checkpoint& c) {
  if (Status s = check_complete(c.pieces, o_.tensors); !s) {
    return Status::internal(fmt::format("checkpoint of step {} is incomplete: {}", c.state.step, s.message()));
  }
  RunMeta meta = o_.meta;
  meta.layout = c.state.layout;
  crash_point("before_commit", c.state.step, 0);
  Result<std::vector<int64_t>> dropped = store_->commit(c, meta, o_.keep);
  if (!dropped) return dropped.status();
  crash_point("after_commit", c.state.step, 0);
  log::info("store", "checkpoint of step {} committed: {} pieces, {:.2f} MiB from {} ranks", c.state.step,
            c.pieces.size(), static_cast<double>(c.total_bytes()) / (1 << 20), c.state.world);
  for (int64_t step : *dropped) {
    if (Status s = remove_step(o_.root, step); !s) log::warn("store", "{}", s.message());
  }
  return Status::ok();
}

}  // namespace partrain::store
