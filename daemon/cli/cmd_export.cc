// `partrain export`: a model's weights under Hugging Face names, one file or a Hugging Face
// folder, from whatever holds them:
//
//   partrain export JOB.toml [--step N] -o OUT.safetensors | --hf DIR [--tokenizer F...] [--max-shard-size 5GB]
//   partrain export JOB.toml --from FILE.safetensors ...     (`partrain run --save` output)
//   partrain export JOB.toml --initial ...                   (the untrained weights, asked for)
//   partrain export RUN_DIR --job JOB.toml ...               (= partrain ckpt export RUN_DIR --job JOB.toml)
//
// For a job file the default is its run's newest committed checkpoint that verifies (in
// [checkpoint] dir, else <run_dir>/checkpoints): a run that saved none is an error naming
// --initial, never a silent copy of the initial weights. The line printed names the step.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/fail.h"
#include "cli/model_source.h"
#include "common/cli_checks.h"
#include "common/exit_codes.h"
#include "config/job_config.h"
#include "engine/backend.h"
#include "engine/model/model.h"

namespace partrain::cli {
namespace {

// The job's untrained weights ([training] seed, PARTRAIN_* overrides applied).
int export_initial(const ExportRequest& r, const std::string& job_path) {
  Result<config::JobConfig> job = config::load_job(job_path);
  if (!job) return fail(job.status());
  if (Status s = config::apply_environment(&job.value()); !s) return fail(s);
  Result<std::unique_ptr<engine::Backend>> be = engine::make_backend("cpu");
  if (!be) return fail(be.status());
  auto m = engine::model::Model::create(job->model, be->get(), 1, job->training.seed);
  if (!m) return fail(m.status());
  return fail_or_ok(write_export(**m, r.target, fmt::format("the untrained initial weights of {} ([training] seed {})",
                                                            job_path, job->training.seed)));
}

}  // namespace

int run_export(const ExportRequest& r) {
  const bool is_job = std::filesystem::path(r.source).extension() == ".toml";
  if (int(r.initial) + int(!r.from.empty()) + int(r.step >= 0) > 1)
    return fail(Status::invalid("export: --initial, --from and --step each choose the weights; give one of them"));
  const std::string job_path = is_job ? r.source : r.job;
  if ((r.initial || !r.from.empty()) && job_path.empty())
    return fail(Status::invalid(fmt::format("export {}: --{} needs the job file: partrain export JOB.toml --{}",
                                            r.source, r.initial ? "initial" : "from",
                                            r.initial ? "initial" : "from FILE.safetensors")));
  if (r.initial) return export_initial(r, job_path);
  Result<ModelSource> src = r.from.empty() ? open_model_source(r.source, r.job, r.step)
                                           : open_model_source(r.from, job_path, -1);
  if (!src && is_job && r.from.empty() && r.step < 0 && src.status().code() == StatusCode::kNotFound) {
    return fail(Status::not_found(fmt::format(
        "export: {}; train it first (partrain run {}), give the weights with --from FILE.safetensors, "
        "or export the untrained ones with --initial", src.status().message(), r.source)));
  }
  if (!src) return fail(src.status());
  std::unique_ptr<engine::Backend> be;
  auto m = model_of(*src, &be);
  if (!m) return fail(m.status());
  return fail_or_ok(write_export(**m, r.target, "the weights of " + src->what));
}

void register_export(CLI::App& app, CommandResult* result) {
  auto r = std::make_shared<ExportRequest>();
  CLI::App* exp = app.add_subcommand(
      "export", "Write a model's weights as safetensors with Hugging Face names, or a Hugging Face folder with "
                "--hf. From a job file: its run's newest committed checkpoint (or --step's), and the line "
                "printed names the step; --from FILE or --initial for other weights.");
  exp->add_option("source", r->source,
                  "a job file (its run's checkpoints), a run folder or [checkpoint] dir (with --job), a Hugging "
                  "Face folder, or a .safetensors file (with --job)")
      ->required()
      ->check(CLI::ExistingPath);
  exp->add_option("--job", r->job, "the job file whose [model] the weights belong to (for a run folder or a file)")
      ->check(CLI::ExistingFile);
  exp->add_option("--step", r->step, "the committed checkpoint of this step (default: the newest that verifies)")
      ->check(cli_checks::kNonNegative);
  exp->add_option("--from", r->from,
                  "these weights (safetensors, e.g. `partrain run --save` output) instead of a checkpoint, "
                  "checked against the job's [model]")
      ->check(CLI::ExistingFile);
  exp->add_flag("--initial", r->initial, "the job's untrained initial weights ([training] seed) instead of a checkpoint");
  add_export_options(exp, &r->target);
  exp->callback([r, result] { result->exit_code = run_export(*r); });
}

}  // namespace partrain::cli
