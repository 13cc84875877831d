// See pipeline_plan.h.
#include "worker/pipeline_plan.h"

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "engine/model/model.h"
#include "pipeline/check.h"
#include "plugin/child_probe.h"
#include "plugin/schedule_loader.h"

namespace partrain::worker {

using pipeline::Action;
using pipeline::Kind;

Result<PipelinePlan> plan_pipeline(const config::JobConfig& job, const Layout& layout,
                                   const std::string& plugin_dir, plugin::Open open) {
  const ParallelSpec& spec = job.parallelism;
  Result<int> m = config::grad_accum_steps(job, layout.dp());
  if (!m) return m.status();
  Result<std::unique_ptr<plugin::SchedulePlugin>> plug = plugin::find_plugin<plugin::SchedulePlugin>(plugin_dir, spec.sched, open);
  if (!plug) return Status::invalid(plug.status().message());
  Result<pipeline::Schedule> sched = plugin::build_schedule(**plug, layout.pp(), *m, spec.virtual_stages);
  if (!sched) return Status::invalid(sched.status().message());
  PARTRAIN_RETURN_IF_ERROR(pipeline::check(*sched));
  Result<std::vector<pipeline::PieceCost>> pieces = pipeline::piece_costs(engine::model::resolved(job.model));
  if (!pieces) return pieces.status();
  Result<std::vector<pipeline::StagePart>> parts =
      pipeline::partition_stages(*pieces, layout.pp() * spec.virtual_stages, job.stage_layers);
  if (!parts) return parts.status();
  PipelinePlan plan;
  plan.schedule = std::move(sched).value();
  plan.parts = std::move(parts).value();
  plan.source = fmt::format("{} {} from {}", (*plug)->info().name, (*plug)->info().version, (*plug)->info().path);
  return plan;
}

namespace {

// The most micro-batches of one chunk whose activations are held at once in the rank's
// action order: from the first of its recv-activation and forward to its backward (or
// backward-weight).
int slots_needed(const std::vector<Action>& list, int chunk, int m) {
  std::vector<bool> held(static_cast<size_t>(m), false);
  int now = 0, peak = 0;
  for (const Action& a : list) {
    if (a.chunk != chunk) continue;
    if ((a.kind == Kind::kRecvActivation || a.kind == Kind::kForward) && !held[static_cast<size_t>(a.mb)]) {
      held[static_cast<size_t>(a.mb)] = true;
      peak = std::max(peak, ++now);
    } else if (a.kind == Kind::kBackward || a.kind == Kind::kBackwardWeight) {
      --now;  // a backward-input keeps the activations for its backward-weight
    }
  }
  return std::max(peak, 1);
}

}  // namespace

std::vector<engine::model::StageOptions> stage_options(const PipelinePlan& plan, int pp_rank) {
  const pipeline::Shape& shape = plan.schedule.shape;
  const std::vector<Action>& actions = plan.schedule.ranks[static_cast<size_t>(pp_rank)];
  std::vector<engine::model::StageOptions> out;
  for (int c = 0; c < shape.v; ++c) {
    const pipeline::StagePart& part = plan.parts[static_cast<size_t>(shape.stage(pp_rank, c))];
    bool split = false;
    for (const Action& a : actions) split = split || (a.chunk == c && a.kind == Kind::kBackwardInput);
    out.push_back({part.first_block, part.end_block, slots_needed(actions, c, shape.m), split});
  }
  return out;
}

}  // namespace partrain::worker
