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
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "config/job_config.h"
#include "layout/layout.h"
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

// Loads what `layout` needs; `log` (one rank) says which plugin came from where.
Result<Strategies> load_strategies(const config::JobConfig& job, const Layout& layout,
                                   const std::string& plugin_dir, bool log);

}  // namespace partrain::worker
