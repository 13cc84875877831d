// partraind: the per-node agent of a partrain job. See partraind(8) and agent.h.
//
//   srun --ntasks-per-node=1 --partrain=SPEC partraind JOB.toml        (under Slurm)
//   partraind --standalone --nproc N [--partrain SPEC] JOB.toml        (one machine)
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "agent/agent.h"
#include "common/cli_checks.h"
#include "common/exit_codes.h"
#include "common/trace.h"
#include "common/version.h"

int main(int argc, char** argv) {
  partrain::agent::AgentOptions o;
  double hb_timeout_s = 30, hb_interval_s = 2, rendezvous_s = 300;
  if (const char* t = std::getenv("PARTRAIN_HEARTBEAT_TIMEOUT"); t != nullptr) hb_timeout_s = std::atof(t);
  if (const char* t = std::getenv("PARTRAIN_RENDEZVOUS_TIMEOUT"); t != nullptr) rendezvous_s = std::atof(t);
  CLI::App app{"partraind: the per-node agent of a partrain job: rendezvous, one worker per "
               "local rank, supervision, heartbeats. See partraind(8)."};
  app.set_version_flag("--version", std::string("partraind ") + partrain::version());
  app.add_option("job", o.job_path, "job file (TOML)")->required()->check(CLI::ExistingFile);
  app.add_flag("--standalone", o.standalone, "one local agent without Slurm (with --nproc)");
  app.add_option("--nproc", o.nproc, "standalone: number of local ranks")->check(partrain::cli_checks::kPositive);
  app.add_option("--partrain", o.spec, "parallel layout items over the job's [parallelism]");
  app.add_option("--steps", o.steps, "optimizer steps (overrides [training] steps)")
      ->check(partrain::cli_checks::kPositive);
  app.add_option("--resume", o.resume,
                 "auto (the newest checkpoint that verifies), never (start over; what is there is moved "
                 "aside) or STEP (that committed checkpoint), on the job's first start (over [checkpoint] "
                 "resume and $PARTRAIN_RESUME)");
  if (const char* w = std::getenv("PARTRAIN_RESUME_WITH_CHANGES"); w != nullptr && std::string(w) == "1") {
    o.resume_with_changes = true;
  }
  app.add_flag("--resume-with-changes", o.resume_with_changes,
               "resume although the run's inputs changed since its checkpoints ([model] keys, the training "
               "data's files or contents, seed, global_batch; refused with exit 2 otherwise); every change is "
               "logged (also $PARTRAIN_RESUME_WITH_CHANGES=1)");
  app.add_option("--site-config", o.site_config, "site config (default: $PARTRAIN_SITE_CONFIG, "
                                                 "else the installed partrain.toml)");
  app.add_option("--worker", o.worker_path, "worker binary (default: the installed partrain-worker)");
  app.add_option("--heartbeat-timeout", hb_timeout_s,
                 "seconds a silent peer is tolerated (default 30, or $PARTRAIN_HEARTBEAT_TIMEOUT)")
      ->check(partrain::cli_checks::kPositive);
  app.add_option("--heartbeat-interval", hb_interval_s, "seconds between heartbeats (default 2)")
      ->check(partrain::cli_checks::kPositive);
  app.add_option("--rendezvous-timeout", rendezvous_s,
                 "seconds the agents wait for each other at start: the coordinator's published address, "
                 "the barrier of all agents (default 300, or $PARTRAIN_RENDEZVOUS_TIMEOUT)")
      ->check(partrain::cli_checks::kPositive);
  if (const char* h = std::getenv("PARTRAIN_HARDWARE"); h != nullptr) o.hardware = h;
  app.add_option("--hardware", o.hardware,
                 "hardware profile for the step line's MFU (a name such as H100-SXM or a .toml file; "
                 "default: $PARTRAIN_HARDWARE, else cpu on CPU ranks and none on GPUs)");
  app.add_option("--init", o.init,
                 "start a fresh run from these Hugging Face weights (.safetensors file or model folder); "
                 "each rank reads only its slices; ignored when the run resumes from a checkpoint")
      ->check(CLI::ExistingPath);
  if (const char* t = std::getenv("PARTRAIN_TRACE"); t != nullptr) o.trace = t;
  app.add_option("--trace", o.trace,
                 "trace these steps on every rank into <run_dir>/trace/rank-R.json (e.g. 5-7; "
                 "default: $PARTRAIN_TRACE)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "partraind: %s (see partraind --help)\n", e.what());
    return partrain::kExitUsage;
  }
  // The workers may start in another folder (a Slurm step's): the path goes to them whole.
  if (!o.init.empty()) o.init = std::filesystem::absolute(o.init).lexically_normal().string();
  if (!o.trace.empty()) {
    if (auto steps = partrain::trace::StepSet::parse(o.trace); !steps) {
      std::fprintf(stderr, "partraind: %s\n", steps.status().message().c_str());
      return partrain::kExitUsage;
    }
  }
  if (o.standalone && o.nproc < 1) {
    std::fprintf(stderr, "partraind: --standalone needs --nproc N\n");
    return partrain::kExitUsage;
  }
  o.heartbeat_timeout = std::chrono::milliseconds(static_cast<int64_t>(hb_timeout_s * 1000));
  o.rendezvous_timeout = std::chrono::milliseconds(static_cast<int64_t>(rendezvous_s * 1000));
  o.heartbeat_interval = std::chrono::milliseconds(static_cast<int64_t>(hb_interval_s * 1000));
  if (o.heartbeat_interval * 2 > o.heartbeat_timeout) o.heartbeat_interval = o.heartbeat_timeout / 2;
  return partrain::agent::run_agent(o);
}
