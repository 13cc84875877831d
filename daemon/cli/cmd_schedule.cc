// `partrain schedule`: a pipeline schedule plugin's timeline, before any job runs. Loads
// the schedule from the site's plugin directory, checks it (daemon/pipeline/check.h),
// simulates it under a cost model and prints one row per rank, the bubble fraction and
// the peak in-flight micro-batches per rank; --svg also draws it. With --job, the pipeline
// settings default to the job file's and the stage partition of its model is printed.
//
//   partrain schedule --pp 4 --mb 8 --sched interleaved:2 [--costs 1,2,1] [--svg t.svg]
//   partrain schedule --job train.toml [--pp 2]
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "common/exit_codes.h"
#include "cli/fail.h"
#include "config/job_config.h"
#include "config/site_config.h"
#include "engine/model/params.h"
#include "layout/spec.h"
#include "pipeline/check.h"
#include "pipeline/partition.h"
#include "pipeline/render.h"
#include "pipeline/simulate.h"
#include "plugin/child_probe.h"
#include "plugin/schedule_loader.h"

namespace partrain::cli {
namespace {

// Keeps the drawing printable and the plugin's lists small.
constexpr int kMaxPp = 256;
constexpr int kMaxMb = 4096;
constexpr int kMaxV = 64;

struct ScheduleArgs {
  std::optional<int> pp;
  std::optional<int> mb;
  std::string sched;
  std::string costs;
  std::string svg;
  std::string job;
  std::string site;
};

struct Settings {
  int pp = 0;
  int mb = 0;
  std::string name;
  int v = 1;
  pipeline::Costs costs;
};


Result<pipeline::Costs> parse_costs(const std::string& text) {
  pipeline::Costs c;
  std::vector<double> v;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      v.push_back(std::stod(item, &used));
      if (used != item.size()) v.clear();
    } catch (const std::exception&) {
      v.clear();
    }
    if (v.empty()) break;
  }
  if (v.size() != 3) {
    return Status::invalid("partrain: --costs '" + text + "': give three numbers F,B,W (forward, "
                           "whole backward, its weight-gradient part), e.g. --costs 1,2,1");
  }
  c.forward = v[0];
  c.backward = v[1];
  c.weight = v[2];
  PARTRAIN_RETURN_IF_ERROR(validate_costs(c));
  return c;
}

Status check_range(const char* what, int value, int max) {
  if (value < 1 || value > max) {
    return Status::invalid(fmt::format("partrain: {} {} is outside 1..{}", what, value, max));
  }
  return Status::ok();
}

// Command line over the job file (if any) over the defaults.
Result<Settings> settings_from(const ScheduleArgs& a, const config::JobConfig* job) {
  Settings s;
  ParallelSpec spec;
  if (job != nullptr) spec = job->parallelism;
  if (!a.sched.empty()) {
    Result<ParallelSpec> over = overlay_spec(spec, "sched=" + a.sched);
    if (!over) {
      // The spec parser names --partrain; here the item came from --sched.
      std::string msg = over.status().message();
      const std::string from = "' in --partrain:";
      if (size_t at = msg.find(from); at != std::string::npos) {
        msg.replace(at, from.size(), "' (from --sched):");
      }
      return Status::invalid(msg);
    }
    spec = *over;
  }
  s.name = spec.sched;
  s.v = spec.virtual_stages;
  s.pp = a.pp.value_or(job != nullptr ? spec.pp : 0);
  if (a.mb) {
    s.mb = *a.mb;
  } else if (job != nullptr) {
    Result<int> m = config::grad_accum_steps(*job, spec.dp.value_or(1));
    if (!m) return m.status();
    s.mb = *m;
  }
  if (job == nullptr && (!a.pp || !a.mb)) {
    return Status::invalid("partrain: schedule needs --pp P and --mb M (or --job FILE to take "
                           "them from), e.g. partrain schedule --pp 4 --mb 8 --sched 1f1b");
  }
  PARTRAIN_RETURN_IF_ERROR(check_range(a.pp ? "--pp" : "the job file's pp", s.pp, kMaxPp));
  PARTRAIN_RETURN_IF_ERROR(
      check_range(a.mb ? "--mb" : "the job file's micro-batch count", s.mb, kMaxMb));
  PARTRAIN_RETURN_IF_ERROR(check_range("the virtual-stage count", s.v, kMaxV));
  if (!a.costs.empty()) {
    Result<pipeline::Costs> c = parse_costs(a.costs);
    if (!c) return c.status();
    s.costs = *c;
  }
  return s;
}

// The partition of the job's model over pp * v stages.
Result<std::string> partition_text(const config::JobConfig& job, const Settings& s) {
  Result<std::vector<pipeline::PieceCost>> pieces =
      pipeline::piece_costs(engine::model::resolved(job.model));
  if (!pieces) return pieces.status();
  const bool own_split = static_cast<int>(job.stage_layers.size()) == s.pp * s.v;
  Result<std::vector<pipeline::StagePart>> parts =
      pipeline::partition_stages(*pieces, s.pp * s.v, own_split ? job.stage_layers : std::vector<int>{});
  if (!parts) return parts.status().prefixed(job.path + ": ");
  return pipeline::describe_partition(*parts, s.pp);
}

int run_schedule(const ScheduleArgs& a) {
  std::optional<config::JobConfig> job;
  if (!a.job.empty()) {
    Result<config::JobConfig> j = config::load_job(a.job);
    if (!j) return fail(j.status());
    job = std::move(*j);
  }
  Result<Settings> s = settings_from(a, job ? &*job : nullptr);
  if (!s) return fail(s.status());
  Result<config::SiteConfig> site = config::load_site_config(a.site);
  if (!site) return fail(site.status());
  Result<std::unique_ptr<plugin::SchedulePlugin>> plug =
      plugin::find_probed<plugin::SchedulePlugin>(site->plugin_dir, s->name);
  if (!plug) return fail(plug.status());
  Result<pipeline::Schedule> sched = plugin::build_schedule(**plug, s->pp, s->mb, s->v);
  if (!sched) return fail(sched.status());
  if (Status ok = pipeline::check(*sched); !ok) return fail(ok);
  Result<pipeline::Timeline> t = pipeline::simulate(*sched, s->costs);
  if (!t) return fail(t.status());

  std::printf("schedule %s %s from %s: pp=%d, m=%d, v=%d; costs F=%g B=%g W=%g (checked: every "
              "micro-batch forward and backward once per stage, transfers matched, no "
              "deadlock)\n",
              (*plug)->info().name.c_str(), (*plug)->info().version.c_str(),
              (*plug)->info().path.c_str(), s->pp, s->mb, s->v, s->costs.forward,
              s->costs.backward, s->costs.weight);
  if (job) {
    Result<std::string> parts = partition_text(*job, *s);
    if (!parts) return fail(parts.status());
    std::printf("stage partition of %s (forward FLOPs per token):\n%s", job->path.c_str(),
                parts->c_str());
  }
  std::fputs(pipeline::render_ascii(*sched, *t).c_str(), stdout);
  if (!a.svg.empty()) {
    std::ofstream out(a.svg, std::ios::binary | std::ios::trunc);
    out << pipeline::render_svg(*sched, *t);
    out.close();
    if (!out) {
      std::fprintf(stderr, "partrain: cannot write the SVG to %s; check the folder exists and "
                           "is writable\n", a.svg.c_str());
      return kExitFailure;
    }
    std::printf("wrote %s\n", a.svg.c_str());
  }
  return kExitOk;
}

}  // namespace

void register_schedule(CLI::App& app, CommandResult* result) {
  auto a = std::make_shared<ScheduleArgs>();
  CLI::App* cmd = app.add_subcommand(
      "schedule", "Check a pipeline schedule plugin and print its timeline per rank, bubble "
                  "fraction and peak in-flight micro-batches (and an SVG with --svg).");
  cmd->add_option("--pp", a->pp, "pipeline ranks P (default: the job file's pp)");
  cmd->add_option("--mb", a->mb, "micro-batches per step M (default: the job file's)");
  cmd->add_option("--sched", a->sched,
                  "schedule NAME[:V]: gpipe, 1f1b, interleaved:V, zbh1 or an installed "
                  "plugin's name (default: the job file's, else 1f1b)");
  cmd->add_option("--costs", a->costs,
                  "F,B,W: forward, whole backward and its weight-gradient part, per micro-batch "
                  "and rank (default: 1,2,1)");
  cmd->add_option("--svg", a->svg, "also write the timeline as SVG to FILE");
  cmd->add_option("--job", a->job, "job file: take pp, micro-batches and schedule from it and "
                                   "print its model's stage partition");
  cmd->add_option("--site-config", a->site, "site config (default: $PARTRAIN_SITE_CONFIG, else "
                                            "the installed partrain.toml)");
  cmd->callback([a, result] { result->exit_code = run_schedule(*a); });
}

}  // namespace partrain::cli
