// Remote context: in slurmstepd, once per task, as the job's user, just before the task
// is exec'd (slurm_spank_task_init). Computes the task's rank from the step's real
// topology and sets the PARTRAIN_* environment; makes the job's state directory and secret.
//
// Never fails the task: under sbatch a non-zero return here drains the node, and nothing
// a user writes in --partrain should take a node out of service. Problems are reported to
// the task's stderr and the PARTRAIN_* variables are left unset; PARTRAIN_SPANK_ERROR
// carries the reason, which the agent then prints instead of the variable it misses.
#include <optional>
#include <string>
#include <vector>

#include "context.h"
#include "job_secret.h"
#include "layout/topology.h"
#include "step_env.h"
#include "auto_spec.h"

namespace partrain::spank {
namespace {

// Slurm's pseudo step ids (slurm.h): these steps have no step node list.
constexpr uint32_t kBatchStep = 0xfffffffb;        // SLURM_BATCH_SCRIPT
constexpr uint32_t kExternStep = 0xfffffffc;       // SLURM_EXTERN_CONT
constexpr uint32_t kInteractiveStep = 0xfffffffa;  // SLURM_INTERACTIVE_STEP

// A variable of the task's environment, "" when unset. Node lists of big jobs can be long.
std::string task_env(spank_t sp, const char* name) {
  std::vector<char> buf(64 * 1024);
  if (spank_getenv(sp, name, buf.data(), static_cast<int>(buf.size())) != ESPANK_SUCCESS) {
    return "";
  }
  return buf.data();
}

}  // namespace

int set_task_env(spank_t sp) {
  if (!state().spec) return 0;
  uint32_t step = 0;
  if (spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS || step == kBatchStep ||
      step == kExternStep || step == kInteractiveStep) {
    return 0;
  }
  StepFacts facts;
  facts.node_list = task_env(sp, "SLURM_STEP_NODELIST");
  if (facts.node_list.empty()) return 0;
  uint32_t job = 0;
  uint32_t node = 0;
  int local = 0;
  uid_t uid = 0;
  if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_NODEID, &node) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_TASK_ID, &local) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
    report("cannot read the job id, node or task id from Slurm; PARTRAIN_* not set");
    return 0;
  }
  facts.job_id = job;
  facts.node_index = static_cast<int>(node);
  facts.local_task = local;
  facts.tasks_per_node = task_env(sp, "SLURM_STEP_TASKS_PER_NODE");
  facts.distribution = task_env(sp, "SLURM_DISTRIBUTION");
  facts.gpus_on_node = task_env(sp, "SLURM_GPUS_ON_NODE");
  facts.step_gpus = task_env(sp, "SLURM_STEP_GPUS");
  facts.visible_devices = task_env(sp, "CUDA_VISIBLE_DEVICES");

  const PluginArgs& args = state().args;
  std::optional<SwitchTree> switches;
  if (!args.topology.empty()) {
    Result<SwitchTree> tree = SwitchTree::load(args.topology);
    if (tree.is_ok()) {
      switches = std::move(*tree);
    } else if (local == 0) {
      report(unprefixed(tree.status().message()) +
             " (plugstack topology=); placing ranks as if on one switch");
    }
  }

  const std::string where = "step " + std::to_string(job) + "." + std::to_string(step) + ": ";
  // --partrain=auto stands for the layout chosen at submit (auto_spec.h).
  std::string spec = *state().spec;
  if (spec == "auto") {
    spec = task_env(sp, kAutoSpecVar);
    if (spec.empty()) {
      if (local == 0) {
        report(where + "--partrain=auto: the layout chosen at submit did not reach this step (" +
               kAutoSpecVar + " is unset: was the job submitted with --export=NONE?); give the layout, "
               "e.g. --partrain=tp4,pp2 (PARTRAIN_* not set)");
      }
      return 0;
    }
  }
  Result<StepEnv> env = compute_step_env(spec, facts, args, switches);
  if (!env.is_ok()) {
    if (local == 0) report(where + unprefixed(env.status().message()) + " (PARTRAIN_* not set)");
    // The agent names this reason instead of the variables it misses.
    spank_setenv(sp, kSpankErrorVar, (where + unprefixed(env.status().message())).c_str(), 1);
    return 0;
  }
  for (const std::string& w : env->warnings) {
    if (local == 0) report(where + unprefixed(w));
  }
  for (const auto& [name, value] : env->vars) {
    if (spank_setenv(sp, name.c_str(), value.c_str(), 1) != ESPANK_SUCCESS) {
      report(where + "cannot set " + name + " in the task's environment");
      return 0;
    }
  }
  Status dir = ensure_state_dir(args.state_root, env->state_dir, uid);
  if (!dir.is_ok()) {
    report(where + unprefixed(dir.message()) + " (PARTRAIN_JOB_SECRET_FILE not set)");
    return 0;
  }
  Result<std::string> secret = ensure_job_secret(env->state_dir, uid);
  if (!secret.is_ok()) {
    report(where + unprefixed(secret.status().message()) + " (PARTRAIN_JOB_SECRET_FILE not set)");
    return 0;
  }
  spank_setenv(sp, "PARTRAIN_JOB_SECRET_FILE", secret->c_str(), 1);
  // partraind reads the site config the plugin read.
  if (args.site_config_named) spank_setenv(sp, "PARTRAIN_SITE_CONFIG", args.site_config.c_str(), 1);
  return 0;
}

int remove_secret_at_job_end(spank_t sp) {
  uint32_t job = 0;
  uid_t uid = 0;
  if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
    report("job epilog: Slurm gave no job id or uid; the job's secret, if any, is left in place");
    return 0;
  }
  const std::string dir = job_state_dir(state().args.state_root, job);
  if (Status s = remove_job_secret(dir, uid); !s.is_ok()) report("job epilog: " + unprefixed(s.message()));
  return 0;
}

}  // namespace partrain::spank
