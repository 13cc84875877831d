// What every rank of a pipeline-parallel job (pp > 1) decides alone, before any rank
// talks to another: the schedule plugin's action lists, checked (daemon/pipeline/check.h),
// the cost-balanced stage partition, and the stage models this rank holds.
//
// Placement (include/partrain/schedule.h): with v chunks per rank there are S = pp * v
// stages, stage s = chunk * pp + rank; daemon/pipeline/partition splits the blocks into
// them by estimated cost (the embeddings with stage 0, the head with stage S-1). Each chunk
// is one engine stage model (engine/model/stage.h) with as many activation slots as the
// schedule has micro-batches in flight on that chunk in this rank's action order (GPipe m,
// 1F1B at most pp); a chunk whose list splits backward (ZB-H1) keeps its GEMMs' output
// gradients for the weight half.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/job_config.h"
#include "engine/model/stage.h"
#include "layout/layout.h"
#include "pipeline/partition.h"
#include "pipeline/schedule.h"
#include "plugin/child_probe.h"

namespace partrain::worker {

struct PipelinePlan {
  pipeline::Schedule schedule;             // checked (pipeline::check)
  std::vector<pipeline::StagePart> parts;  // pp * v stages
  std::string source;                      // "1f1b 0.1.0 from PATH", for the log
};

// Loads the schedule plugin the spec names (sched=NAME[:V]) from `plugin_dir` (opened as
// `open` says: strategies.h), builds it for (pp, m = grad_accum, v), checks it and
// partitions the model. invalid with the checker's first violation for a bad schedule.
Result<PipelinePlan> plan_pipeline(const config::JobConfig& job, const Layout& layout,
                                   const std::string& plugin_dir, plugin::Open open);

// The stage model of each chunk pipeline rank `pp_rank` holds, in chunk order.
std::vector<engine::model::StageOptions> stage_options(const PipelinePlan& plan, int pp_rank);

}  // namespace partrain::worker
