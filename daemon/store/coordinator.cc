// See coordinator.h.
#include "store/coordinator.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/log.h"
#include "engine/model/params.h"
#include "store/fault.h"
#include "store/folder_manifest.h"
#include "store/run_inputs.h"
#include "store/saver.h"
#include "store/shard_file.h"

namespace partrain::store {

CoordinatorOptions coordinator_options(const engine::ModelOptions& model,
                                       const engine::TrainOptions& train, const engine::DataOptions& data,
                                       std::string root, int keep, std::string version) {
  CoordinatorOptions o;
  o.root = std::move(root);
  o.keep = keep;
  o.tensors = logical_tensors(engine::model::build_param_table(model));
  o.meta.version = std::move(version);
  o.meta.config_hash = config_hash(o.tensors, train.seed, train.global_batch, model.seq_len);
  o.meta.inputs = run_inputs(model, train, data);
  return o;
}

namespace {

// The store's metadata and records, read once: what must be readable for a run to trust it.
Status readable(const StateStore& st) {
  Result<std::optional<RunMeta>> meta = st.meta();
  if (!meta) return meta.status();
  Result<std::vector<Checkpoint>> have = st.checkpoints();
  return have.status();
}

// Opens ROOT/state.db. One RocksDB cannot read (corruption) is moved aside, never deleted,
// and a fresh one opened: reconcile_folders() then takes back every checkpoint whose
// folder manifest and pieces verify.
Result<std::unique_ptr<StateStore>> open_store(const std::string& root) {
  for (int attempt = 0;; ++attempt) {
    Result<std::unique_ptr<StateStore>> st = StateStore::open(root);
    const Status s = st ? readable(**st) : st.status();
    if (s) return st;
    if (s.code() != StatusCode::kCorruption || attempt > 0) return s;
    if (st) st->reset();  // closed before it moves
    Result<std::string> aside = set_aside_store(root);
    if (!aside) return aside.status();
    log::error("store", "{}; the damaged state store is kept as {} and a new one made: every checkpoint whose "
               "folder manifest and pieces verify is taken back from its folder", s.message(), *aside);
  }
}

// Every piece of a checkpoint of `step` must be in its own folder.
Status pieces_in_folder(const Checkpoint& c, int64_t step) {
  const std::string dir = step_folder(step) + "/";
  for (const PieceRecord& p : c.pieces) {
    if (!p.file.starts_with(dir)) return Status::corruption(fmt::format("piece file {} is outside {}", p.file, dir));
  }
  return Status::ok();
}

// The run's inputs against those its checkpoints were trained on (run_inputs.h): a change
// is refused naming every key, unless the user allowed it (then each is logged); a change of
// the tensors themselves (the config hash) is refused either way, since nothing could load.
Status check_inputs(const RunMeta& stored, const CoordinatorOptions& o) {
  if (stored.inputs.empty()) return Status::ok();  // a store written before inputs were recorded
  const std::vector<std::string> changed = changed_inputs(stored.inputs, o.meta.inputs);
  if (changed.empty()) return Status::ok();
  const std::string list = fmt::format("{}", fmt::join(changed, "; "));
  if (o.allow_changed_inputs && stored.config_hash == o.meta.config_hash) {
    log::warn("store", "--resume-with-changes: resuming {} although its inputs changed: {}", o.root, list);
    return Status::ok();
  }
  if (stored.config_hash != o.meta.config_hash) {
    return Status::invalid(fmt::format(
        "{}: the checkpoints there are of another model ({}): its tensors differ, so no flag can resume them; "
        "give the job another [checkpoint] dir or run_dir, or start over with --resume never", o.root, list));
  }
  return Status::invalid(fmt::format(
      "{}: this job's inputs differ from those its checkpoints were trained on ({}); resuming would not continue "
      "that run. Restore them, give the job another [checkpoint] dir or run_dir, start over with --resume never, "
      "or resume anyway with --resume-with-changes", o.root, list));
}

}  // namespace

Result<std::unique_ptr<Coordinator>> Coordinator::open(CoordinatorOptions options) {
  std::unique_ptr<Coordinator> c(new Coordinator());
  c->o_ = std::move(options);
  Result<std::unique_ptr<StateStore>> st = open_store(c->o_.root);
  if (!st) return st.status();
  c->store_ = std::move(st).value();
  Result<std::optional<RunMeta>> meta = c->store_->meta();
  if (!meta) return meta.status();
  if (*meta) PARTRAIN_RETURN_IF_ERROR(check_inputs(**meta, c->o_));
  if (*meta && (*meta)->config_hash != c->o_.meta.config_hash) {
    return Status::invalid(fmt::format(
        "{}: the checkpoints there are of another model or data order (config hash {}, this job's "
        "is {}: the tensors' names or shapes, [training] seed, global_batch or seq_len changed); give the job another "
        "[checkpoint] dir or run_dir, or delete that folder to start over",
        c->o_.root, (*meta)->config_hash, c->o_.meta.config_hash));
  }
  return c;
}

Status Coordinator::reconcile_folders(std::vector<Checkpoint>* have) {
  Result<std::vector<int64_t>> steps = list_step_folders(o_.root);
  if (!steps) return steps.status();
  std::set<int64_t> listed;
  for (const Checkpoint& k : *have) listed.insert(k.state.step);
  for (int64_t step : *steps) {
    const std::string dir = o_.root + "/" + step_folder(step);
    if (!listed.count(step)) {
      Result<FolderManifest> m = read_folder_manifest(o_.root, step);
      if (!m && m.status().code() == StatusCode::kNotFound) {
        PARTRAIN_RETURN_IF_ERROR(remove_step(o_.root, step));
        log::info("store", "removed {}: left by a save that never committed", dir);
        continue;
      }
      if (!m) {
        log::error("store", "{} is not in the state store and {}; left in place: restore state.db or delete the "
                   "folder", dir, m.status().message());
        continue;
      }
      if (m->config_hash != o_.meta.config_hash) {
        return Status::invalid(fmt::format(
            "{}: a checkpoint of another model or data order (config hash {}, this job's is {}); give the job "
            "another [checkpoint] dir or run_dir, or move that folder away", dir, m->config_hash,
            o_.meta.config_hash));
      }
      Checkpoint& c = m->checkpoint;
      Status ok = pieces_in_folder(c, step);
      if (ok) ok = check_complete(c.pieces, o_.tensors);
      if (ok) ok = verify_checkpoint(o_.root, c);
      if (!ok) {
        log::error("store", "{} is not in the state store and does not verify ({}); left in place: delete it "
                   "when it is no longer needed", dir, ok.message());
        continue;
      }
      RunMeta meta = o_.meta;
      meta.layout = c.state.layout;
      PARTRAIN_RETURN_IF_ERROR(store_->commit(c, meta, {}));
      log::error("store", "the state store had lost the checkpoint of step {} (a damaged or cut write-ahead log, or "
                 "a lost state.db); its folder manifest is intact and every piece verifies: taken back", step);
      have->push_back(std::move(c));
    }
    Result<std::vector<std::string>> tmp = remove_temp_files(o_.root, step);
    if (!tmp) return tmp.status();
    for (const std::string& r : *tmp) log::info("store", "removed {}: left by a save that never committed", r);
  }
  std::sort(have->begin(), have->end(),
            [](const Checkpoint& a, const Checkpoint& b) { return a.state.step > b.state.step; });
  return Status::ok();
}

Result<std::optional<Checkpoint>> Coordinator::resume_point() {
  // No rank is writing now: a folder no commit names is a dead save's or one the store lost.
  Result<std::vector<Checkpoint>> have = store_->checkpoints();
  if (!have) return have.status();
  PARTRAIN_RETURN_IF_ERROR(reconcile_folders(&*have));
  damaged_.clear();
  for (Checkpoint& c : *have) {
    if (Status s = check_complete(c.pieces, o_.tensors); !s) {
      log::warn("store", "checkpoint of step {} does not fit this model ({}); trying the previous one",
                c.state.step, s.message());
      damaged_.insert(c.state.step);
      continue;
    }
    if (Status s = verify_checkpoint(o_.root, c); !s) {
      log::error("store", "checkpoint of step {} is damaged: {}; trying the previous one",
                 c.state.step, s.message());
      damaged_.insert(c.state.step);
      continue;
    }
    return std::optional<Checkpoint>(std::move(c));
  }
  if (!have->empty()) log::error("store", "no committed checkpoint under {} verifies; starting from step 0", o_.root);
  return std::optional<Checkpoint>();
}

std::vector<int64_t> Coordinator::retention_drops(const std::vector<Checkpoint>& have, int64_t step) const {
  std::vector<int64_t> steps{step};
  for (const Checkpoint& h : have) {
    if (h.state.step != step) steps.push_back(h.state.step);
  }
  std::sort(steps.rbegin(), steps.rend());
  // The `keep` newest not known to be damaged stay (the new one always counts); older ones go,
  // and so do damaged ones older than the oldest kept. Damaged ones newer than that stay
  // until a commit of their step replaces them.
  std::vector<int64_t> drop;
  int kept = 0;
  int64_t oldest_kept = step;
  for (int64_t s : steps) {
    if (s != step && damaged_.count(s)) continue;
    if (kept < std::max(1, o_.keep)) {
      ++kept;
      oldest_kept = s;
    } else {
      drop.push_back(s);
    }
  }
  for (int64_t s : steps) {
    if (s != step && damaged_.count(s) && s < oldest_kept) drop.push_back(s);
  }
  return drop;
}

Status Coordinator::commit(const Checkpoint& c) {
  if (Status s = check_complete(c.pieces, o_.tensors); !s) {
    return Status::internal(fmt::format("checkpoint of step {} is incomplete: {}", c.state.step, s.message()));
  }
  RunMeta meta = o_.meta;
  meta.layout = c.state.layout;
  Result<std::vector<Checkpoint>> have = store_->checkpoints();
  if (!have) return have.status();
  const std::vector<int64_t> dropped = retention_drops(*have, c.state.step);
  crash_point("before_commit", c.state.step, 0);
  if (fault_armed("eio_commit", c.state.step, 0)) {  // the disk fails the store's write (tests)
    return Status::io_error(fmt::format("{}/state.db: commit: IO error: {} (PARTRAIN_FAULT)", o_.root,
                                        std::strerror(EIO)));
  }
  PARTRAIN_RETURN_IF_ERROR(store_->commit(c, meta, dropped));
  damaged_.erase(c.state.step);
  crash_point("after_commit", c.state.step, 0);
  // The folder's own copy of the record: what lets a later start take this checkpoint back
  // if the store ever loses it. The commit stands without it.
  if (Status s = write_folder_manifest(o_.root, {o_.meta.config_hash, c}); !s) {
    log::warn("store", "checkpoint of step {}: its folder manifest was not written ({}); the state store alone "
              "records it", c.state.step, s.message());
  }
  log::info("store", "checkpoint of step {} committed: {} pieces, {:.2f} MiB from {} ranks", c.state.step,
            c.pieces.size(), static_cast<double>(c.total_bytes()) / (1 << 20), c.state.world);
  crash_point("after_manifest", c.state.step, 0);
  for (int64_t step : dropped) {
    damaged_.erase(step);
    if (Status s = remove_step(o_.root, step); !s) log::warn("store", "{}", s.message());
  }
  return Status::ok();
}

}  // namespace partrain::store
