// `partrain report`: runs of one job on different rank counts side by side, from their
// metrics files: a scaling table (strong or weak, see planner/scaling.h) and an SVG with
// the speedup and the loss curves overlaid.
//
//   partrain report RUN_DIR... [--svg FILE] [--json]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "common/exit_codes.h"
#include "common/read_file.h"
#include "cli/fail.h"
#include "cli/model_source.h"
#include "common/units.h"
#include "engine/io/json.h"
#include "planner/scaling.h"

namespace partrain::cli {
namespace {

using engine::io::JsonValue;

struct ReportArgs {
  std::vector<std::string> runs;
  std::string svg = "partrain-report.svg";
  bool json = false;
};

const JsonValue* member(const JsonValue& v, const char* key) {
  for (const auto& [k, m] : v.members) {
    if (k == key) return &m;
  }
  return nullptr;
}

// A number field of one metrics line; `required` ones missing are an error.
Result<double> field(const JsonValue& line, const char* key, bool required, double fallback,
                     const std::string& where) {
  const JsonValue* v = member(line, key);
  if (v == nullptr) {
    if (!required) return fallback;
    return Status::invalid("partrain: " + where + ": no \"" + std::string(key) +
                           "\"; is this a partrain metrics.jsonl?");
  }
  if (v->kind != JsonValue::Kind::kNumber) {
    return Status::invalid("partrain: " + where + ": \"" + std::string(key) + "\" is not a number");
  }
  return std::stod(v->text);
}

Result<planner::RunSeries> read_run(const std::string& dir) {
  const std::string path = dir + "/metrics.jsonl";
  // A regular file of at most 1 GiB (millions of steps); a FIFO is refused, never waited on.
  Result<std::string> all = read_regular_file(path, "metrics file", size_t{1} << 30);
  if (!all && all.status().code() == StatusCode::kNotFound) {
    return Status::invalid("partrain: " + path + ": cannot read it; give run folders that "
                           "`partrain run` wrote (they hold metrics.jsonl)");
  }
  if (!all) return Status::invalid("partrain: " + all.status().message());
  std::istringstream in(*all);
  planner::RunSeries s;
  s.name = std::filesystem::path(dir).lexically_normal().filename().string();
  if (s.name.empty()) s.name = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
  double first_tokens = 0, last_tokens = 0;
  int line_no = 0;
  for (std::string text; std::getline(in, text);) {
    ++line_no;
    if (text.empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    Result<JsonValue> line = engine::io::parse_json(text);
    if (!line) return Status::invalid("partrain: " + where + ": " + line.status().message());
    if (member(*line, "event") != nullptr) {
      // A restart marker: the lines of steps after its resume point written before it (a
      // crash's) are replaced by those after it.
      Result<double> at = field(*line, "resumed_at_step", true, 0, where);
      if (!at) return at.status();
      while (!s.val_steps.empty() && static_cast<double>(s.val_steps.back()) > *at) {
        s.val_steps.pop_back();
        s.val_losses.pop_back();
      }
      while (!s.steps.empty() && static_cast<double>(s.steps.back()) > *at) {
        s.steps.pop_back();
        s.loss.pop_back();
        s.step_ms.pop_back();
      }
      continue;
    }
    Result<double> step = field(*line, "step", true, 0, where);
    Result<double> loss = field(*line, "loss", true, 0, where);
    Result<double> ms = field(*line, "step_ms", true, 0, where);
    Result<double> tokens = field(*line, "tokens", true, 0, where);
    Result<double> dp = field(*line, "dp", false, 1, where);
    if (!step) return step.status();
    if (!loss) return loss.status();
    if (!ms) return ms.status();
    if (!tokens) return tokens.status();
    if (!dp) return dp.status();
    Result<double> world = field(*line, "world", false, *dp, where);
    if (!world) return world.status();
    Result<double> val = field(*line, "val_loss", false, -1, where);
    if (!val) return val.status();
    if (*val >= 0) {
      s.val_loss = *val;
      s.val_steps.push_back(static_cast<int64_t>(*step));
      s.val_losses.push_back(*val);
    }
    s.steps.push_back(static_cast<int64_t>(*step));
    s.loss.push_back(*loss);
    s.step_ms.push_back(*ms);
    s.ranks = static_cast<int>(*world);
    if (s.steps.size() == 1) first_tokens = *tokens;
    last_tokens = *tokens;
  }
  s.val_loss = s.val_losses.empty() ? -1 : s.val_losses.back();  // after any restart marker's cut
  // "tokens" counts every token trained so far; a step's worth is the difference.
  if (s.steps.size() > 1) {
    s.tokens_per_step = (last_tokens - first_tokens) /
                        static_cast<double>(s.steps.back() - s.steps.front());
  } else if (s.steps.size() == 1 && s.steps[0] > 0) {
    s.tokens_per_step = first_tokens / static_cast<double>(s.steps[0]);
  }
  return s;
}


// The model a run trained, from its newest checkpoint: each weight tensor's name and
// shape, whatever layout wrote it. Empty when the run has no checkpoint to read.
struct ModelShape {
  std::map<std::string, std::vector<int64_t>> tensors;
  int64_t params = 0;
};

std::optional<ModelShape> model_shape(const std::string& dir) {
  auto o = open_run(dir);
  if (!o) return std::nullopt;
  auto c = pick_checkpoint(*o, -1);
  if (!c) return std::nullopt;
  ModelShape m;
  for (const auto& p : (*c)->pieces) {
    if (p.spec.role != store::Role::kWeight || m.tensors.count(p.spec.tensor)) continue;
    m.tensors[p.spec.tensor] = p.spec.shape;
    int64_t n = 1;
    for (int64_t d : p.spec.shape) n *= d;
    m.params += n;
  }
  return m;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) t += (i ? " x " : "") + std::to_string(s[i]);
  return "[" + t + "]";
}

// Speedup between two models means nothing: runs must have trained the same one.
Status check_same_model(const std::vector<std::string>& dirs) {
  std::optional<ModelShape> first;
  std::string first_dir;
  for (const auto& dir : dirs) {
    auto m = model_shape(dir);
    if (!m) {
      std::fprintf(stderr, "partrain: %s has no checkpoint, so report cannot check that it "
                           "trained the same model as the others\n", dir.c_str());
      continue;
    }
    if (!first) {
      first = std::move(m);
      first_dir = dir;
      continue;
    }
    std::string diff;
    for (const auto& [name, shape] : first->tensors) {
      auto it = m->tensors.find(name);
      if (it == m->tensors.end()) diff = fmt::format("{} has no tensor '{}'", dir, name);
      else if (it->second != shape)
        diff = fmt::format("'{}' is {} in {} and {} in {}", name, shape_text(shape), first_dir,
                           shape_text(it->second), dir);
      if (!diff.empty()) break;
    }
    for (const auto& [name, shape] : m->tensors)
      if (diff.empty() && !first->tensors.count(name)) diff = fmt::format("{} has no tensor '{}'", first_dir, name);
    if (!diff.empty())
      return Status::invalid(fmt::format(
          "report: {} and {} trained different models ({}-parameter and {}-parameter; {}); "
          "report compares runs of one job on different layouts", first_dir, dir,
          human_count(static_cast<double>(first->params)), human_count(static_cast<double>(m->params)), diff));
  }
  return Status::ok();
}

int run_report(const ReportArgs& a) {
  std::vector<planner::RunSeries> runs;
  for (const std::string& dir : a.runs) {
    Result<planner::RunSeries> r = read_run(dir);
    if (!r) return fail(r.status());
    runs.push_back(std::move(r).value());
  }
  if (Status s = check_same_model(a.runs); !s) return fail(s);
  Result<planner::ScalingReport> report = planner::scaling_report(runs);
  if (!report) return fail(report.status());
  {
    std::ofstream svg(a.svg, std::ios::trunc);
    svg << planner::scaling_svg(*report, runs);
    if (!svg.flush()) return fail(Status::io_error("partrain: --svg " + a.svg + ": cannot write it"));
  }
  if (a.json) {
    std::string out = "{\"kind\":\"" + std::string(planner::scaling_kind_name(report->kind)) +
                      "\",\"svg\":";
    engine::io::append_json_string(a.svg, &out);
    out += ",\"runs\":[";
    for (size_t i = 0; i < report->rows.size(); ++i) {
      const planner::ScalingRow& r = report->rows[i];
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    ",\"ranks\":%d,\"tokens_per_step\":%.0f,\"step_ms\":%.6g,\"tokens_per_s\":%.6g,"
                    "\"speedup\":%.6g,\"efficiency\":%.6g,\"final_loss\":%.6g",
                    r.ranks, r.tokens_per_step, r.step_ms, r.tokens_per_s, r.speedup, r.efficiency,
                    r.final_loss);
      out += std::string(i ? "," : "") + "{\"name\":";
      engine::io::append_json_string(r.name, &out);
      out += buf;
      if (r.final_val_loss >= 0) out += fmt::format(",\"final_val_loss\":{:.6g}", r.final_val_loss);
      out += "}";
    }
    std::printf("%s]}\n", out.c_str());
    return kExitOk;
  }
  const char* what = report->kind == planner::ScalingKind::kStrong
                         ? "strong scaling: the same global batch on every run"
                     : report->kind == planner::ScalingKind::kWeak
                         ? "weak scaling: the same tokens per rank on every run"
                         : "mixed: neither the global batch nor the tokens per rank agree; "
                           "speedup and efficiency compare throughput only";
  std::printf("partrain report: %zu run(s), %s\n", runs.size(), what);
  std::printf("%-24s %8s %12s %10s %14s %9s %11s %11s %9s\n", "run", "ranks", "tokens/step", "step",
              "tokens/s", "speedup", "efficiency", "final loss", "val loss");
  for (const planner::ScalingRow& r : report->rows) {
    const std::string val = r.final_val_loss >= 0 ? fmt::format("{:.4f}", r.final_val_loss) : "-";
    std::printf("%-24s %8s %12s %10s %14s %8.2fx %10.1f%% %11.4f %9s\n", r.name.c_str(),
                plural(r.ranks, "rank").c_str(), human_count(r.tokens_per_step).c_str(),
                human_ms(r.step_ms).c_str(), human_count(r.tokens_per_s).c_str(), r.speedup,
                100 * r.efficiency, r.final_loss, val.c_str());
  }
  std::printf("plot: %s\n", a.svg.c_str());
  return kExitOk;
}

}  // namespace

void register_report(CLI::App& app, CommandResult* result) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report", "compare runs of one job on different rank counts: speedup, efficiency, loss curves");
  cmd->add_option("runs", args->runs, "run folders (each with the metrics.jsonl of `partrain run`)")
      ->required();
  cmd->add_option("--svg", args->svg, "where the plot goes (default: partrain-report.svg)");
  cmd->add_flag("--json", args->json, "machine-readable table");
  cmd->callback([args, result] { result->exit_code = run_report(*args); });
}

}  // namespace partrain::cli
