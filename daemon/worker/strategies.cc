// See strategies.h.
#include "worker/strategies.h"

#include <cstdlib>

#include <fmt/format.h>

#include "common/log.h"
#include "plugin/child_probe.h"
#include "worker/pipeline_plan.h"
#include "worker/transports.h"

namespace partrain::worker {
namespace {

// Finds plugin `name` of family P and its table; every load failure is the user's to fix.
template <typename P>
Result<Loaded<P>> load(const std::string& dir, const std::string& name, const config::JobConfig& job,
                       plugin::Open open, bool log) {
  Result<std::unique_ptr<P>> p = plugin::find_plugin<P>(dir, name, open);
  if (!p) return Status::invalid(p.status().message());
  Loaded<P> out;
  out.plugin = std::move(p).value();
  const plugin::PluginInfo& info = out.plugin->info();
  if (auto it = job.plugin_tables.find(info.name); it != job.plugin_tables.end()) out.config = it->second;
  if (log) log::info("worker", "{} plugin {} {} from {}", info.family, info.name, info.version, info.path);
  return out;
}

}  // namespace

Result<Strategies> load_strategies(const config::JobConfig& job, const Layout& layout,
                                   const std::string& plugin_dir, plugin::Open open, bool log) {
  Strategies s;
  if (layout.tp() > 1) {
    Result<Loaded<plugin::TensorPlugin>> t = load<plugin::TensorPlugin>(plugin_dir, "tp", job, open, log);
    if (!t) return t.status();
    const plugin::PluginInfo& info = t->plugin->info();
    PARTRAIN_RETURN_IF_ERROR(check_plugin_memory(job.device, info.capabilities, info.name, info.path, "tensor"));
    s.tensor = std::move(t).value();
  }
  if (layout.ep() > 1) {
    Result<Loaded<plugin::ExpertPlugin>> e = load<plugin::ExpertPlugin>(plugin_dir, "ep", job, open, log);
    if (!e) return e.status();
    const plugin::PluginInfo& info = e->plugin->info();
    PARTRAIN_RETURN_IF_ERROR(check_plugin_memory(job.device, info.capabilities, info.name, info.path, "expert"));
    s.expert = std::move(e).value();
  }
  if (layout.cp() > 1) {  // the spec's cpimpl=NAME
    Result<Loaded<plugin::ContextPlugin>> c = load<plugin::ContextPlugin>(plugin_dir, job.parallelism.cp_impl, job, open, log);
    if (!c) return c.status();
    s.context = std::move(c).value();
  }
  // The data plugin reduces the gradients of the dp x cp group (cp ranks hold the same weights).
  if (layout.dp() * layout.cp() > 1) {
    std::string name = job.parallelism.zero > 0 ? fmt::format("zero{}", job.parallelism.zero) : "dp";
    if (!job.parallelism.grad.empty()) name = job.parallelism.grad;  // grad=NAME (zero0 only: validate.h)
    if (const char* v = std::getenv("PARTRAIN_DATA_PLUGIN"); v != nullptr && *v != '\0') name = v;
    Result<Loaded<plugin::DataPlugin>> d = load<plugin::DataPlugin>(plugin_dir, name, job, open, log);
    if (!d) return d.status();
    const plugin::PluginInfo& info = d->plugin->info();
    if (info.family != "data") {
      return Status::invalid(fmt::format("{}: is a {} plugin; the data-parallel strategy needs a data plugin",
                                         info.path, info.family));
    }
    // GPU ranks hand it device memory: only a plugin that takes it (PARTRAIN_CAP_CUDA), checked
    // before any GPU is touched.
    PARTRAIN_RETURN_IF_ERROR(check_plugin_memory(job.device, info.capabilities, info.name, info.path));
    s.data = std::move(d).value();
  }
  return s;
}

Status check_strategies(const config::JobConfig& job, const Layout& layout, const std::string& plugin_dir) {
  // Each plugin's own probe (30 s) names a plugin that faults or hangs; this child's longer
  // limit only catches a fault in the schedule's code or a hang past every probe.
  const std::string what = "the job's plugins in " + plugin_dir;
  Result<std::string> verdict = plugin::run_probe_in_child(what, [&] {
    Result<Strategies> s = load_strategies(job, layout, plugin_dir, plugin::Open::kChild, false);
    if (!s) return s.status().message();
    if (layout.pp() > 1) {
      Result<PipelinePlan> plan = plan_pipeline(job, layout, plugin_dir, plugin::Open::kChild);
      if (!plan) return plan.status().message();
    }
    return std::string();
  }, std::chrono::minutes(3));
  if (!verdict) return Status::invalid(verdict.status().message());
  if (!verdict->empty()) return Status::invalid(*verdict);
  return Status::ok();
}

}  // namespace partrain::worker
