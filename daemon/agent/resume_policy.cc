// See resume_policy.h.
#include "agent/resume_policy.h"

#include <ctime>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/log.h"
#include "store/shard_file.h"
#include "store/state_store.h"

namespace partrain::agent {
namespace {

namespace fs = std::filesystem;

// Whether the folder holds anything of a run: a state store or a step folder.
bool holds_a_run(const std::string& root) {
  std::error_code ec;
  if (fs::exists(fs::path(root) / "state.db", ec)) return true;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    if (store::parse_step_folder(e.path().filename().string()) >= 0) return true;
  }
  return false;
}

Result<std::string> move_aside(const std::string& root) {
  const std::string aside = superseded_name(root, static_cast<int64_t>(::time(nullptr)));
  std::error_code ec;
  fs::rename(root, aside, ec);
  if (ec) {
    return Status::io_error(fmt::format("{}: cannot move it aside to {}: {}; move or remove it yourself, or give the "
                                        "job another [checkpoint] dir", root, aside, ec.message()));
  }
  return aside;
}

// Hard-links (or copies, across file systems) every file of step `step`'s folder from
// `from` into `to`.
Status link_step(const std::string& from, const std::string& to, int64_t step) {
  const fs::path src = fs::path(from) / store::step_folder(step), dst = fs::path(to) / store::step_folder(step);
  std::error_code ec;
  fs::create_directories(dst, ec);
  if (ec) return Status::io_error(fmt::format("{}: cannot create: {}", dst.string(), ec.message()));
  for (const fs::directory_entry& e : fs::directory_iterator(src, ec)) {
    const fs::path target = dst / e.path().filename();
    fs::create_hard_link(e.path(), target, ec);
    if (ec) {
      ec.clear();
      fs::copy_file(e.path(), target, fs::copy_options::overwrite_existing, ec);
    }
    if (ec) return Status::io_error(fmt::format("{}: cannot link or copy to {}: {}", e.path().string(),
                                                target.string(), ec.message()));
  }
  if (ec) return Status::io_error(fmt::format("{}: cannot list: {}", src.string(), ec.message()));
  return Status::ok();
}

// --resume STEP on an open store: STEP's checkpoint if it is there and verifies, with the
// steps newer than it; invalid naming what is there otherwise.
Result<std::pair<store::Checkpoint, std::vector<int64_t>>> find_step(store::Coordinator& c, const std::string& root,
                                                                     int64_t step) {
  Result<std::vector<store::Checkpoint>> have = c.store().checkpoints();
  if (!have) return have.status();
  std::optional<store::Checkpoint> found;
  std::vector<int64_t> newer, all;
  for (store::Checkpoint& k : *have) {
    all.push_back(k.state.step);
    if (k.state.step > step) newer.push_back(k.state.step);
    if (k.state.step == step) found = std::move(k);
  }
  if (!found) {
    return Status::invalid(fmt::format("--resume {}: {} holds no committed checkpoint of step {} ({}); give one of "
                                       "its steps, or auto", step, root, step,
                                       all.empty() ? std::string("it holds none")
                                                   : fmt::format("it holds steps {}", fmt::join(all, ", "))));
  }
  if (Status s = store::verify_checkpoint(root, *found); !s) {
    return Status::invalid(fmt::format("--resume {}: the checkpoint of step {} under {} does not verify: {}; give "
                                       "another step, or auto", step, step, root, s.message()));
  }
  return std::make_pair(std::move(*found), std::move(newer));
}

}  // namespace

bool first_start_of_job() {
  const char* n = std::getenv("SLURM_RESTART_COUNT");
  return n == nullptr || *n == '\0' || std::string(n) == "0";
}

std::string superseded_name(const std::string& root, int64_t unix_seconds) {
  std::string base = root;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  const std::string first = fmt::format("{}.superseded-{}", base, stamp);
  std::string name = first;
  std::error_code ec;
  for (int k = 2; fs::exists(name, ec); ++k) name = fmt::format("{}-{}", first, k);
  return name;
}

Result<std::unique_ptr<store::Coordinator>> open_for_resume(const store::CoordinatorOptions& options,
                                                            const config::ResumeMode& mode, bool first_start) {
  using Kind = config::ResumeMode::Kind;
  const std::string& root = options.root;
  if (!first_start || mode.kind == Kind::kAuto) return store::Coordinator::open(options);
  if (mode.kind == Kind::kNever) {
    if (holds_a_run(root)) {
      // The store's lock first, as for STEP: a live run's folder is never moved from under it.
      Result<std::unique_ptr<store::StateStore>> held = store::StateStore::open(root);
      if (!held && held.status().code() == StatusCode::kInvalidArgument) {
        return held.status().prefixed("--resume never: ");
      }
      // A store RocksDB cannot read is no live run's: it moves aside with the folder.
      if (!held && held.status().code() != StatusCode::kCorruption) return held.status();
      if (held) held->reset();  // closed before its folder moves
      Result<std::string> aside = move_aside(root);
      if (!aside) return aside.status();
      log::warn("store", "--resume never: the checkpoints under {} were moved aside to {}; training starts at step 1",
                root, *aside);
    }
    return store::Coordinator::open(options);
  }
  Result<std::unique_ptr<store::Coordinator>> c = store::Coordinator::open(options);
  if (!c) return c;
  auto found = find_step(**c, root, mode.step);
  if (!found) return found.status();
  auto& [checkpoint, newer] = *found;
  if (newer.empty()) return c;
  c->reset();  // closes the state store before its folder moves
  Result<std::string> aside = move_aside(root);
  if (!aside) return aside.status();
  log::warn("store", "--resume {}: {} held newer checkpoints (steps {}); the folder was moved aside to {} and step {} "
            "linked back, so the run goes on from it", mode.step, root, fmt::join(newer, ", "), *aside, mode.step);
  PARTRAIN_RETURN_IF_ERROR(link_step(*aside, root, mode.step));
  Result<std::unique_ptr<store::Coordinator>> fresh = store::Coordinator::open(options);
  if (!fresh) return fresh;
  PARTRAIN_RETURN_IF_ERROR((*fresh)->commit(checkpoint));
  return fresh;
}

}  // namespace partrain::agent
