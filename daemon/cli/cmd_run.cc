// `partrain run`: single-rank training, or the local agent with --nproc.
//
//   partrain run JOB.toml [--steps N] [--init FILE.safetensors|DIR] [--save FILE.safetensors]
//                [--device cpu|cuda|cuda:N] [--partrain SPEC|auto] [--nproc N] [--trace STEPS]
//                [--resume auto|never|STEP] [--resume-with-changes]
//
// run trains on one rank, printing one line per step and writing <run_dir>/metrics.jsonl
// (one JSON object per step: step, loss, lr, grad_norm, tokens, step_ms, fwd_ms, bwd_ms,
// opt_ms). --save writes the final weights under Hugging Face names; --init starts from
// such a file (`partrain export`, cmd_export.cc, writes a run's checkpoints so). With --nproc N,
// run starts one local partraind agent (daemon/agent)
// that trains the SPEC on N worker ranks: CPU ranks, or with --device cuda one GPU each
// (data-parallel layouts on GPUs).
// Both forms save checkpoints as [checkpoint] says and resume as [checkpoint] resume (--resume)
// says, by default from the newest committed one that verifies (daemon/store,
// agent/resume_policy.h). Both check the job with the agent's own check (config/supported.h
// check_job); on one rank this process is the coordinator and runs the worker's training
// (worker/worker_run.h) on a world of one.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "agent/agent.h"
#include "agent/gpu_binding.h"
#include "agent/resume_policy.h"
#include "cli/auto_spec.h"
#include "cli/commands.h"
#include "common/cli_checks.h"
#include "common/exit_codes.h"
#include "cli/fail.h"
#include "cli/model_source.h"
#include "common/log.h"
#include "common/stop_signal.h"
#include "common/trace.h"
#include "common/version.h"
#include "config/job_config.h"
#include "config/site_config.h"
#include "config/supported.h"
#include "layout/layout.h"
#include "planner/run_accounting.h"
#include "store/coordinator.h"
#include "store/saver.h"
#include "worker/process_groups.h"
#include "worker/strategies.h"
#include "worker/worker_run.h"

namespace partrain::cli {
namespace {

struct RunArgs {
  std::string job;
  int64_t steps = 0;
  std::string init, save, spec, trace, hardware, hardware_dir;
  std::string device;  // "" = [job] device
  std::string resume;  // "" = [checkpoint] resume
  bool resume_with_changes = false;  // resume although the run's inputs changed (logged)
  int nproc = 0;  // > 0: the local agent with this many worker ranks
};

// The job as the agent resolves it (config::resolve_job): the file, the site's defaults, the
// PARTRAIN_* environment, then this command's options.
Result<config::JobConfig> resolve(const RunArgs& a) {
  Result<config::SiteConfig> site = config::load_site_config("");
  if (!site) return site.status();
  config::apply_log_level(*site);
  config::Overrides ov;
  if (!a.spec.empty()) ov.spec = a.spec;
  if (a.steps > 0) ov.steps = a.steps;
  if (!a.resume.empty()) ov.resume = a.resume;
  // The workers' device (cpu or cuda: each gets its own GPU); one rank may name one, cuda:N.
  if (!a.device.empty() && a.nproc > 0) ov.device = a.device;
  Result<config::JobConfig> job = config::resolve_job(a.job, *site, ov);
  if (job && !a.device.empty() && a.nproc == 0) job->device = a.device;
  return job;
}

// Without --nproc a run has one rank: a layout of more says how to start them.
Status check_one_rank(const config::JobConfig& job) {
  const ParallelSpec& spec = job.parallelism;
  if (spec.tp != 1 || spec.pp != 1 || spec.dp.value_or(1) != 1 || spec.ep != 1 || spec.cp != 1) {
    return Status::invalid(fmt::format(
        "--partrain={}: more than one rank; add --nproc N to start N local worker ranks "
        "(e.g. --partrain=dp2 --nproc 2), or submit through Slurm with partraind", spec.to_string()));
  }
  return Status::ok();
}

// --nproc N: one local partraind agent (standalone) running N worker ranks.
int run_local_agent(const RunArgs& a) {
  if (!a.save.empty()) {
    return fail(Status::invalid("--nproc: --save needs one rank; on several, export a checkpoint instead: "
                                "partrain export JOB.toml --hf DIR"));
  }
  // The workers' device (over [job] device): the agent passes it to every worker.
  if (!a.device.empty() && a.device != "cpu" && a.device != "cuda") {
    return fail(Status::invalid(fmt::format("--device {}: with --nproc every worker gets its own GPU; "
                                            "use --device cuda (or cpu)", a.device)));
  }
  // The job as the agent will check it (config/supported.h check_job), before it starts any
  // worker, so the refusal is this command's one line.
  {
    Result<config::JobConfig> job = resolve(a);
    if (!job) return fail(job.status());
    if (Status s = config::check_job(*job, a.nproc); !s) return fail(s);
    // One GPU per worker, checked as the agent will check it, in one line.
    if (job->device == "cuda") {
      const agent::NodeGpus gpus = agent::node_gpus(std::getenv("CUDA_VISIBLE_DEVICES"));
      if (Result<std::vector<std::string>> g = agent::gpus_per_worker(gpus, a.nproc, "cuda", agent::share_gpus_from_env());
          !g) {
        return fail(g.status());
      }
    }
  }
  agent::AgentOptions o;
  o.job_path = a.job;
  o.spec = a.spec;
  o.standalone = true;
  o.nproc = a.nproc;
  o.steps = a.steps;
  o.device = a.device;
  o.resume = a.resume;
  o.resume_with_changes = a.resume_with_changes;
  o.trace = a.trace;
  o.hardware = a.hardware;
  o.hardware_dir = a.hardware_dir;
  o.init = a.init;
  return agent::run_agent(o);
}

// One rank is its own coordinator: it commits its shard straight into the state store.
class LocalCommitter final : public store::Committer {
 public:
  explicit LocalCommitter(store::Coordinator* c) : c_(c) {}
  Status commit(const store::TrainState& state, int, std::vector<store::PieceRecord> pieces) override {
    return c_->commit(store::Checkpoint{state, std::move(pieces)});
  }

 private:
  store::Coordinator* c_;
};

// Logs the restart count Slurm gives a requeued job.
void log_restart_count() {
  if (const char* n = std::getenv("SLURM_RESTART_COUNT"); n != nullptr) {
    log::info("store", "SLURM_RESTART_COUNT={}", n);
  }
}

// One rank, no agent: this process is the job's coordinator (the state store, the resume
// point, the commits) and its only worker, running the worker's own training
// (worker/worker_run.h) on a world of one.
int run_one_rank(const RunArgs& a) {
  Result<config::JobConfig> job = resolve(a);
  if (!job) return fail(job.status());
  if (Status s = check_one_rank(*job); !s) return fail(s);
  if (Status s = config::check_job(*job, 1); !s) return fail(s);
  Result<Layout> layout = Layout::create(1, job->parallelism);
  if (!layout) return fail(layout.status());
  Result<planner::RunAccounting> acct = planner::run_accounting(job->model, job->device, a.hardware, a.hardware_dir);
  if (!acct) return fail(acct.status());
  log::set_context(job->name, "", 0);
  if (!a.trace.empty()) {
    trace::configure(*trace::StepSet::parse(a.trace), job->run_dir + "/trace/rank-0.json", 0, "rank 0");
  }
  // The state store: resume from the newest checkpoint that verifies, if any.
  log_restart_count();
  store::CoordinatorOptions co = store::coordinator_options(
      job->model, job->training, job->data, store::checkpoint_root(job->checkpoint.dir, job->run_dir),
      job->checkpoint.keep, partrain::version());
  co.allow_changed_inputs = a.resume_with_changes;
  Result<std::unique_ptr<store::Coordinator>> coord =
      agent::open_for_resume(co, job->checkpoint.resume, agent::first_start_of_job());
  if (!coord) return fail(coord.status());
  Result<std::optional<store::Checkpoint>> resume = (*coord)->resume_point();
  if (!resume) return fail(resume.status());
  LocalCommitter committer(coord->get());
  worker::ProcessGroups no_groups;      // a world of one talks to no one
  worker::Strategies no_strategies;     // and runs no strategy plugin
  worker::WorkerRun r;
  r.job = &*job;
  r.layout = &*layout;
  r.groups = &no_groups;
  r.strategies = &no_strategies;
  r.stop = &install_stop_signal();
  r.model_flops_per_token = acct->model_flops_per_token;
  r.peak_flops_per_rank = acct->peak_flops_per_rank;
  r.ckpt_root = (*coord)->store().root();
  r.committer = &committer;
  r.resume = *resume ? &**resume : nullptr;
  r.init = a.init;
  r.save_path = a.save;
  r.progress_bar = isatty(STDOUT_FILENO) != 0;
  if (Status s = worker::train(r); !s) return fail(s);
  std::printf("metrics: %s/metrics.jsonl\n", job->run_dir.c_str());
  return kExitOk;
}

int run_train(const RunArgs& given) {
  RunArgs a = given;
  if (a.spec == "auto") {  // the planner's choice, as if the user had typed it
    Result<std::string> spec = auto_spec(a.job, a.nproc, a.device, a.hardware, a.hardware_dir);
    if (!spec) return fail(spec.status());
    a.spec = *spec;
  }
  if (!a.trace.empty()) {
    if (Result<trace::StepSet> steps = trace::StepSet::parse(a.trace); !steps) return fail(steps.status());
  }
  if (a.nproc > 0) return run_local_agent(a);
  return run_one_rank(a);
}

}  // namespace

void register_run(CLI::App& app, CommandResult* result) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* run = app.add_subcommand(
      "run", "Train the job's model: on one rank (CPU or one GPU), or with --nproc N on N local ranks "
             "(any layout: --partrain=tp2,pp2 --nproc 4). One line per step; metrics in "
             "<run_dir>/metrics.jsonl. Saves checkpoints ([checkpoint]) and resumes from the newest "
             "committed one.");
  run->add_option("job", args->job, "job file (TOML)")->required()->check(CLI::ExistingFile);
  run->add_option("--steps", args->steps, "optimizer steps (overrides [training] steps)")
      ->check(cli_checks::kPositive);
  run->add_option("--init", args->init,
                  "start from these Hugging Face weights (a .safetensors file, or a model folder with "
                  "sharded files and their index, e.g. from --save, `partrain export` or `partrain ckpt "
                  "export --hf`); on any layout, each rank reads only its slices")
      ->check(CLI::ExistingPath);
  run->add_option("--save", args->save,
                  "write the final weights here (safetensors, Hugging Face names)");
  run->add_option("--device", args->device,
                  "cpu, cuda or cuda:N (default: [job] device, cpu); with --nproc, cpu or cuda: "
                  "one GPU per worker");
  run->add_option("--resume", args->resume,
                  "auto (the newest checkpoint that verifies), never (start over; what is there is moved "
                  "aside) or STEP (that committed checkpoint); default: [checkpoint] resume, auto");
  run->add_flag("--resume-with-changes", args->resume_with_changes,
                "resume although the run's inputs changed since its checkpoints ([model] keys, the training "
                "data's files or contents, seed, global_batch; refused with exit 2 otherwise); every change is "
                "logged");
  run->add_option("--partrain", args->spec,
                  "parallel layout, e.g. dp2, tp2,dp2, dp2,ep2 or pp4,sched=interleaved:2 (more "
                  "than one rank needs --nproc), or auto: the fastest that fits, as partrain plan --auto "
                  "chooses it for --nproc ranks");
  run->add_option("--nproc", args->nproc,
                  "local ranks: start the partraind agent with N worker processes (the layout's "
                  "world size, e.g. --partrain=dp2 --nproc 2)")
      ->check(cli_checks::kPositive);
  run->add_option("--hardware", args->hardware,
                  "hardware profile for the step line's MFU (a name such as H100-SXM or a .toml "
                  "file, as for `partrain plan`); default: cpu on CPU ranks, none on GPUs");
  run->add_option("--hardware-dir", args->hardware_dir,
                  "folder of hardware profiles for --hardware NAME (default: $PARTRAIN_HARDWARE_DIR, "
                  "else the site config's [paths] hardware_dir, else the installed ones), as for `partrain plan`")
      ->check(CLI::ExistingDirectory);
  run->add_option("--trace", args->trace,
                  "write a Chrome/Perfetto trace of these steps per rank to "
                  "<run_dir>/trace/rank-R.json (e.g. 5-7; merge with `partrain trace merge`)");
  run->callback([args, result] { result->exit_code = run_train(*args); });
}

}  // namespace partrain::cli
