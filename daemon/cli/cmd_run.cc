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
// agent/resume_policy.h); on one rank this process is the coordinator.
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
#include "engine/model/hf_io.h"
#include "engine/model/model.h"
#include "engine/train/trainer.h"
#include "planner/run_accounting.h"
#include "store/coordinator.h"
#include "store/saver.h"

namespace partrain::cli {
namespace {

namespace engine = partrain::engine;

struct RunArgs {
  std::string job;
  int64_t steps = 0;
  std::string init, save, spec, trace, hardware, hardware_dir;
  std::string device;  // "" = [job] device
  std::string resume;  // "" = [checkpoint] resume
  bool resume_with_changes = false;  // resume although the run's inputs changed (logged)
  int nproc = 0;  // > 0: the local agent with this many worker ranks
};

// Loads the job file with PARTRAIN_* environment overrides applied.
Result<config::JobConfig> load(const std::string& path) {
  Result<config::JobConfig> job = config::load_job(path);
  if (!job) return job.status();
  PARTRAIN_RETURN_IF_ERROR(config::apply_environment(&job.value()));
  return job;
}

// One rank only, for now: every degree of the layout must be 1.
Status check_single_rank(const config::JobConfig& job, const std::string& cli_spec) {
  ParallelSpec spec = job.parallelism;
  if (!cli_spec.empty()) {
    Result<ParallelSpec> s = overlay_spec(spec, cli_spec);
    if (!s) return s.status();
    spec = *s;
  }
  const int dp = spec.dp.value_or(1);
  if (spec.tp != 1 || spec.pp != 1 || dp != 1 || spec.ep != 1 || spec.cp != 1) {
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
  // The layout against the model (heads, kv_heads, hidden, seq_len % tp, ...), by the
  // layout core, before the agent starts any worker.
  {
    Result<config::SiteConfig> site = config::load_site_config("");
    if (!site) return fail(site.status());
    config::Overrides ov;
    if (!a.spec.empty()) ov.spec = a.spec;
    if (!a.device.empty()) ov.device = a.device;
    if (!a.resume.empty()) ov.resume = a.resume;
    Result<config::JobConfig> job = config::resolve_job(a.job, *site, ov);
    if (!job) return fail(job.status());
    if (Status s = config::validate_layout(*job, a.nproc); !s) {
      std::fprintf(stderr, "%s\n", s.message().c_str());  // the layout core's, prefixed
      return exit_code_for(s);
    }
    Result<Layout> layout = Layout::create(a.nproc, job->parallelism);
    if (!layout) return fail(layout.status());
    if (Status s = config::check_supported(*job, *layout); !s) return fail(s);
    if (Status s = config::check_paths(*job); !s) return fail(s);
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

int run_train(const RunArgs& given) {
  // --hardware-dir reaches load_hardware here and in the workers as PARTRAIN_HARDWARE_DIR.
  if (!given.hardware_dir.empty()) ::setenv("PARTRAIN_HARDWARE_DIR", given.hardware_dir.c_str(), 1);
  RunArgs a = given;
  if (a.spec == "auto") {  // the planner's choice, as if the user had typed it
    Result<std::string> spec = auto_spec(a.job, a.nproc, a.device, a.hardware);
    if (!spec) return fail(spec.status());
    a.spec = *spec;
  }
  if (!a.trace.empty()) {
    if (Result<trace::StepSet> steps = trace::StepSet::parse(a.trace); !steps) return fail(steps.status());
  }
  if (a.nproc > 0) return run_local_agent(a);
  Result<config::JobConfig> job = load(a.job);
  if (!job) return fail(job.status());
  if (!a.resume.empty()) {
    config::Overrides ov;
    ov.resume = a.resume;
    if (Status s = config::apply_command_line(ov, &*job); !s) return fail(s);
  }
  if (Status s = check_single_rank(*job, a.spec); !s) return fail(s);
  if (Status s = config::check_paths(*job); !s) return fail(s);
  engine::train::RunOptions o;
  o.model = job->model;
  o.train = job->training;
  o.data = job->data;
  o.name = job->name;
  o.run_dir = job->run_dir;
  o.device = a.device.empty() ? job->device : a.device;
  o.precision = job->precision;
  Result<planner::RunAccounting> acct = planner::run_accounting(job->model, o.device, a.hardware);
  if (!acct) return fail(acct.status());
  o.model_flops_per_token = acct->model_flops_per_token;
  o.peak_flops_per_rank = acct->peak_flops_per_rank;
  o.save_path = a.save;
  if (a.steps > 0) o.train.steps = a.steps;
  o.progress_bar = isatty(STDOUT_FILENO) != 0;
  log::set_context(job->name, "", 0);
  if (!a.trace.empty()) {
    trace::configure(*trace::StepSet::parse(a.trace), o.run_dir + "/trace/rank-0.json", 0, "rank 0");
  }
  o.stop = &install_stop_signal();
  // The state store: resume from the newest checkpoint that verifies, if any.
  log_restart_count();
  store::CoordinatorOptions co = store::coordinator_options(
      job->model, o.train, job->data, store::checkpoint_root(job->checkpoint.dir, job->run_dir), job->checkpoint.keep,
      partrain::version());
  co.allow_changed_inputs = a.resume_with_changes;
  Result<std::unique_ptr<store::Coordinator>> coord =
      agent::open_for_resume(co, job->checkpoint.resume, agent::first_start_of_job());
  if (!coord) return fail(coord.status());
  Result<std::optional<store::Checkpoint>> resume = (*coord)->resume_point();
  if (!resume) return fail(resume.status());
  Result<std::unique_ptr<engine::train::Trainer>> t = engine::train::Trainer::create(o);
  if (!t) return fail(t.status());
  if (*resume) {
    const store::Checkpoint& c = **resume;
    if (!a.init.empty()) {
      log::warn("store", "--init {} is not used: the run resumes from its checkpoint of step {}", a.init,
                c.state.step);
    }
    if (Status s = store::restore_trainer(**t, (*coord)->store().root(), c, nullptr, true); !s) return fail(s);
  } else if (!a.init.empty()) {
    if (Status s = store::init_from_hf(**t, a.init, nullptr); !s) return fail(s);
    log::info("engine", "starting from the weights of {}", a.init);
  }
  LocalCommitter committer(coord->get());
  store::SaverOptions so;
  so.root = (*coord)->store().root();
  so.every = job->checkpoint.every;
  so.async = job->checkpoint.async;
  store::CheckpointSaver saver(so, &committer);
  (*t)->set_save_hook(&saver);
  if (Status s = (*t)->run(); !s) return fail(s);
  if (Status s = saver.wait(); !s) return fail(s);
  std::printf("metrics: %s/metrics.jsonl\n", o.run_dir.c_str());
  return kExitOk;
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
