// `partrain ckpt`: the committed checkpoints of a run, read from its state store (opened
// read-only, so it works while the job runs).
//
//   partrain ckpt list RUN_DIR
//   partrain ckpt verify RUN_DIR [--step N]
//   partrain ckpt export RUN_DIR --job JOB.toml -o OUT.safetensors [--step N]
//   partrain ckpt export RUN_DIR --job JOB.toml --hf DIR [--tokenizer FILE...] [--max-shard-size 5GB]
//
// RUN_DIR is a run folder (its checkpoints/ holds state.db) or a checkpoint root itself
// ([checkpoint] dir). export is `partrain export RUN_DIR --job JOB.toml` (cmd_export.cc):
// one checkpoint's weights under Hugging Face names, whatever layout wrote them.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "common/cli_checks.h"
#include "common/exit_codes.h"
#include "cli/fail.h"
#include "cli/model_source.h"
#include "config/job_config.h"
#include "engine/backend.h"
#include "engine/model/hf_io.h"
#include "engine/model/model.h"
#include "store/folder_manifest.h"
#include "store/shard_file.h"
#include "store/state_store.h"

namespace partrain::cli {
namespace {

namespace fs = std::filesystem;

struct CkptArgs {
  std::string run_dir, job;
  ExportTarget target;
  int64_t step = -1;  // -1: the newest
};

// `ckpt export RUN_DIR --job JOB` is `partrain export RUN_DIR --job JOB` (cmd_export.cc).
int export_checkpoint(const CkptArgs& a) {
  ExportRequest r;
  r.source = a.run_dir;
  r.job = a.job;
  r.step = a.step;
  r.target = a.target;
  return run_export(r);
}


using Opened = OpenedRun;

Result<const store::Checkpoint*> pick(const Opened& o, int64_t step) { return pick_checkpoint(o, step); }

int run_list(const CkptArgs& a) {
  Result<Opened> o = open_run(a.run_dir);
  if (!o) return fail(o.status());
  Result<std::optional<store::RunMeta>> meta = o->store->meta();
  if (!meta) return fail(meta.status());
  // Folders the store does not list but whose manifest records a commit (the store lost
  // them): the next start takes each back when its pieces verify.
  std::set<int64_t> listed;
  for (const store::Checkpoint& c : o->checkpoints) listed.insert(c.state.step);
  std::vector<int64_t> lost;
  Result<std::vector<int64_t>> folders = store::list_step_folders(o->root);
  for (int64_t step : folders ? *folders : std::vector<int64_t>{}) {
    if (!listed.count(step) && store::read_folder_manifest(o->root, step)) lost.push_back(step);
  }
  if (o->checkpoints.empty() && lost.empty()) {
    return fail(Status::not_found(o->root + ": no committed checkpoint (no save of this run ever committed); "
                                  "the run saves as [checkpoint] every says, and at its end and on SIGTERM"));
  }
  if (*meta) {
    std::printf("%s: written by partrain %s, config %s, %zu committed checkpoint(s)\n", o->root.c_str(),
                (*meta)->version.c_str(), (*meta)->config_hash.c_str(), o->checkpoints.size());
  }
  std::printf("%8s  %10s  %6s  %12s  %6s  %8s  %s\n", "step", "MiB", "ranks", "samples", "epoch", "pieces", "layout");
  for (const store::Checkpoint& c : o->checkpoints) {
    std::printf("%8lld  %10.2f  %6d  %12llu  %6llu  %8zu  %s%s\n", static_cast<long long>(c.state.step),
                static_cast<double>(c.total_bytes()) / (1 << 20), c.state.world,
                static_cast<unsigned long long>(c.state.consumed_samples),
                static_cast<unsigned long long>(c.state.epoch), c.pieces.size(),
                c.state.layout.empty() ? "one rank" : c.state.layout.c_str(),
                &c == &o->checkpoints.front() ? "  (newest)" : "");
  }
  for (int64_t step : lost) {
    std::printf("%8lld  not in the state store, but its folder manifest records a commit: the next start takes it "
                "back if every piece verifies\n", static_cast<long long>(step));
  }
  return kExitOk;
}

// Whether the run's store, read again now, still lists `step`: on a live run, retention may
// have dropped it (and deleted its folder) while this command verified it.
bool still_listed(const std::string& run_dir, int64_t step) {
  Result<Opened> now = open_run(run_dir);
  if (!now) return true;
  for (const store::Checkpoint& c : now->checkpoints) {
    if (c.state.step == step) return true;
  }
  return false;
}

int run_verify(const CkptArgs& a) {
  Result<Opened> o = open_run(a.run_dir);
  if (!o) return fail(o.status());
  if (a.step >= 0 && !pick(*o, a.step)) return fail(pick(*o, a.step).status());
  int bad = 0, checked = 0;
  for (const store::Checkpoint& c : o->checkpoints) {
    if (a.step >= 0 && c.state.step != a.step) continue;
    ++checked;
    if (Status s = store::verify_checkpoint(o->root, c); !s && !still_listed(a.run_dir, c.state.step)) {
      std::printf("step %lld: removed by retention while it was verified (the run is live; not damaged)\n",
                  static_cast<long long>(c.state.step));
    } else if (!s) {
      std::printf("step %lld: DAMAGED: %s\n", static_cast<long long>(c.state.step), s.message().c_str());
      ++bad;
    } else {
      std::printf("step %lld: ok (%zu pieces, %.2f MiB, every CRC-32C matches)\n", static_cast<long long>(c.state.step),
                  c.pieces.size(), static_cast<double>(c.total_bytes()) / (1 << 20));
    }
  }
  if (checked == 0) return fail(Status::not_found(o->root + ": no committed checkpoint"));
  if (bad > 0) {
    std::fprintf(stderr, "partrain: %d of %d checkpoint(s) under %s are damaged; a resume skips them\n", bad,
                 checked, o->root.c_str());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

void register_ckpt(CLI::App& app, CommandResult* result) {
  CLI::App* ckpt = app.add_subcommand("ckpt", "Committed checkpoints of a run: list, verify, export.");
  ckpt->require_subcommand(1);
  auto args = std::make_shared<CkptArgs>();
  CLI::App* list = ckpt->add_subcommand("list", "List the committed checkpoints with step, size and layout.");
  list->add_option("run_dir", args->run_dir, "run folder, or the [checkpoint] dir")->required();
  list->callback([args, result] { result->exit_code = run_list(*args); });
  CLI::App* verify = ckpt->add_subcommand("verify", "Check every piece's size and CRC-32C.");
  verify->add_option("run_dir", args->run_dir, "run folder, or the [checkpoint] dir")->required();
  verify->add_option("--step", args->step, "only this step's checkpoint")->check(cli_checks::kNonNegative);
  verify->callback([args, result] { result->exit_code = run_verify(*args); });
  CLI::App* exp = ckpt->add_subcommand("export", "Write one checkpoint's weights as safetensors (Hugging Face names), or a "
                                                 "Hugging Face folder with --hf: the same as partrain export RUN_DIR --job JOB.toml.");
  exp->add_option("run_dir", args->run_dir, "run folder, or the [checkpoint] dir")->required();
  exp->add_option("--job", args->job, "the job file the run trained (for [model])")->required()->check(CLI::ExistingFile);
  add_export_options(exp, &args->target);
  exp->add_option("--step", args->step, "the checkpoint's step (default: the newest that verifies)")
      ->check(cli_checks::kNonNegative);
  exp->callback([args, result] { result->exit_code = export_checkpoint(*args); });
}

}  // namespace partrain::cli
