// The strategy plugins a rank's layout names, loaded the same way for every family from the
// site's plugin directory (daemon/plugin), each with its [plugins.NAME] table from the job:
//   data    "dp", "zeroN" for --partrain=...,zeroN, NAME for grad=NAME, or
//           PARTRAIN_DATA_PLUGIN                                                (dp x cp > 1)
//   tensor  "tp"                                                                (tp > 1)
//   expert  "ep"                                                                (ep > 1)
//   context the spec's cpimpl= (default "ring")                                 (cp > 1)
// (The pipeline family's schedule is loaded by pipeline_plan.h, which checks it first.)
// A plugin that does not load, or a data plugin that cannot take GPU memory on a GPU rank,
// is a configuration error (invalid, exit 2) naming the file and the fix.
//
// Decided once, before any worker starts: the agent calls check_strategies on its node, which
// makes the workers' own load (and the pipeline plan) in a throw-away child process, each
// plugin probed in a child of its own, so a refusal is one line from the agent instead of one
// from every rank, and no rank forks a probe. A worker then opens the same files directly.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "config/job_config.h"
#include "layout/layout.h"
#include "plugin/child_probe.h"
#include "plugin/context_loader.h"
#include "plugin/data_loader.h"
#include "plugin/expert_loader.h"
#include "plugin/tensor_loader.h"

namespace partrain::worker {

// A loaded plugin of any family (null when its axis has one rank) and its table as TOML
// text ("" when the job has none).
template <typename P>
struct Loaded {
  std::unique_ptr<P> plugin;
  std::string config;
  explicit operator bool() const { return plugin != nullptr; }
};

struct Strategies {
  Loaded<plugin::DataPlugin> data;
  Loaded<plugin::TensorPlugin> tensor;
  Loaded<plugin::ExpertPlugin> expert;
  Loaded<plugin::ContextPlugin> context;
};

// Loads what `layout` needs, each plugin opened as `open` says; `log` (one rank) says which
// plugin came from where.
Result<Strategies> load_strategies(const config::JobConfig& job, const Layout& layout,
                                   const std::string& plugin_dir, plugin::Open open, bool log);

// The agent's check, once per node before it starts any worker: load_strategies and, under
// pp > 1, plan_pipeline (pipeline_plan.h: the schedule built and checked) run in a child
// process, every plugin probed (plugin/child_probe.h). The agent itself never loads a
// plugin. The first refusal, one line (invalid).
Status check_strategies(const config::JobConfig& job, const Layout& layout, const std::string& plugin_dir);

}  // namespace partrain::worker
