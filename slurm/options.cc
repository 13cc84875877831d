// The plugin's options, in one table, registered with spank_option_register in
// slurm_spank_init (a static spank_options table does not reach sbatch or salloc).
// The value given to sbatch/salloc travels to every srun step of the job through the
// environment Slurm sets up; `srun --partrain=...` overrides it for one step.
#include <exception>

#include "context.h"
#include "layout/spec.h"

namespace partrain::spank {
namespace {

enum OptionId { kOptSpec = 1 };

// Called in sbatch/salloc/srun (remote = 0) with the user's text, and in slurmstepd
// (remote = 1) with the value forwarded to the step. Only the local side refuses: a
// failure in slurmstepd is reported to the job by task_init instead.
int on_option(int id, const char* optarg, int remote) noexcept {
  try {
    if (id != kOptSpec) return 0;
    std::string text = optarg ? optarg : "";
    if (!remote && text != "auto") {  // auto: the planner's choice at submit (auto_spec.h)
      Result<ParallelSpec> spec = parse_spec(text);
      if (!spec.is_ok()) {
        report(spec.status().message());
        return -1;
      }
    }
    state().spec = std::move(text);
    return 0;
  } catch (const std::exception& e) {
    slurm_error("partrain: internal error reading --partrain: %s", e.what());
  } catch (...) {
    slurm_error("partrain: internal error reading --partrain");
  }
  return remote ? 0 : -1;
}

char kName[] = "partrain";
char kArgInfo[] = "SPEC";
char kUsage[] =
    "[partrain] parallel layout of a partrain job, e.g. tp4,pp2: degrees tpN ppN dpN epN "
    "cpN, zero0..zero3, sp|nosp, sched=NAME[:V], mb=M; or auto: the fastest layout that fits, "
    "chosen at submit by partrain plan --auto. Checked at submit; sets PARTRAIN_* in every "
    "task. See spank_partrain(8).";

struct spank_option kOptions[] = {
    {kName, kArgInfo, kUsage, 1, kOptSpec, on_option},
    SPANK_OPTIONS_TABLE_END,
};

}  // namespace

int register_options(spank_t sp) {
  for (struct spank_option* opt = kOptions; opt->name != nullptr; ++opt) {
    spank_err_t rc = spank_option_register(sp, opt);
    if (rc != ESPANK_SUCCESS) {
      slurm_error("partrain: cannot register --%s: %s", opt->name, spank_strerror(rc));
      return -1;
    }
  }
  return 0;
}

}  // namespace partrain::spank
