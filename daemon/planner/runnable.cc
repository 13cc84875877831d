// The strategies this version runs, per device (see runnable.h).
#include "planner/runnable.h"

#include <algorithm>

#include "config/supported.h"
#include "layout/layout.h"

namespace partrain::planner {
namespace {

// One row per strategy; flip `cuda` when the strategy's GPU path lands (and its worker
// refusal goes).
const std::vector<StrategySupport> kStrategies = {
    {"dp", true, true},
    {"zero1", true, true},
    {"zero2", true, true},
    {"zero3", true, true},
    {"tp", true, true},
    {"sp", true, true},
    {"pp", true, true},
    {"ep", true, true},
    {"cp", true, true},
};

const StrategySupport* find(const std::string& name) {
  for (const StrategySupport& s : kStrategies) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

}  // namespace

const std::vector<StrategySupport>& strategy_support() { return kStrategies; }

std::vector<std::string> strategies_of(const ParallelSpec& spec) {
  std::vector<std::string> out;
  if (spec.dp.value_or(1) > 1) out.push_back("dp");
  if (spec.zero > 0) out.push_back("zero" + std::to_string(spec.zero));
  if (spec.tp > 1) out.push_back("tp");
  if (spec.tp > 1 && spec.sequence_parallel()) out.push_back("sp");
  if (spec.pp > 1) out.push_back("pp");
  if (spec.ep > 1) out.push_back("ep");
  if (spec.cp > 1) out.push_back("cp");
  return out;
}

Status runnable(const ParallelSpec& spec, const config::JobConfig& job, const std::string& device) {
  const std::string layout = "--partrain=" + spec.to_string();
  const bool cuda = device != "cpu";
  // First what the agent refuses before any worker starts, in its words.
  config::JobConfig launched = job;
  launched.parallelism = spec;
  launched.device = cuda ? "cuda" : "cpu";
  const int world = spec.tp * spec.cp * spec.pp * spec.dp.value_or(1);
  Result<Layout> l = Layout::create(world, spec);
  if (!l) return l.status();
  PARTRAIN_RETURN_IF_ERROR(config::check_supported(launched, *l));
  // Then what the workers' plugins refuse on the device (a data plugin without
  // PARTRAIN_CAP_CUDA on GPU ranks, ...): the table.
  for (const std::string& name : strategies_of(spec)) {
    const StrategySupport* s = find(name);
    if (s == nullptr || (cuda ? s->cuda : s->cpu)) continue;
    if (!s->cpu && !s->cuda) {
      return Status::invalid("partrain: " + layout + ": this version does not run " + name +
                             " on any device yet; plan it, but run without " + name);
    }
    return Status::invalid("partrain: " + layout + ": " + name + " runs on CPU ranks only in this "
                           "version; use --device cpu (a cpu profile), or drop " + name);
  }
  return Status::ok();
}

}  // namespace partrain::planner
