// `partrain trace merge INPUT... -o OUT.json`: joins the per-rank traces of
// `partrain run --trace STEPS` (RUN_DIR/trace/rank-R.json; a folder stands for every
// rank-*.json in it) into one Chrome/Perfetto trace that ui.perfetto.dev opens, one
// process row per rank. Every input is checked: it must be a trace file (an object with a
// traceEvents array), and no two inputs may claim the same rank.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "common/exit_codes.h"
#include "common/read_file.h"
#include "cli/fail.h"
#include "engine/io/json.h"
#include "engine/io/trace_file.h"

namespace partrain::cli {
namespace {

namespace fs = std::filesystem;
using engine::io::JsonValue;

struct MergeArgs {
  std::vector<std::string> inputs;
  std::string output;
};


// The files named, folders expanded to their rank-*.json in name order.
Result<std::vector<std::string>> expand(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (!fs::is_directory(in, ec)) {
      files.push_back(in);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(in, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("rank-", 0) == 0 && e.path().extension() == ".json") found.push_back(e.path().string());
    }
    if (found.empty()) {
      return Status::not_found(fmt::format("{}: no rank-*.json traces in this folder; run with "
                                           "`partrain run --trace STEPS` first", in));
    }
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

// The traceEvents of one file, and the pid its events carry (-1 when none does).
Result<engine::io::TraceEvents> read_events(const std::string& path) {
  // A regular file of at most 1 GiB; a FIFO or device is refused, never waited on.
  Result<std::string> text = read_regular_file(path, "trace file", size_t{1} << 30);
  if (!text && text.status().code() == StatusCode::kNotFound) {
    return Status::not_found(path + ": cannot open the trace file");
  }
  if (!text) return text.status();
  return engine::io::parse_trace_events(*text, path);
}

int run_merge(const MergeArgs& a) {
  Result<std::vector<std::string>> files = expand(a.inputs);
  if (!files) return fail(files.status());
  std::map<long long, std::string> owner;  // pid -> file
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  size_t count = 0;
  for (const std::string& path : *files) {
    Result<engine::io::TraceEvents> events = read_events(path);
    if (!events) return fail(events.status());
    if (const long long pid = events->pid; pid >= 0) {
      auto [it, fresh] = owner.emplace(pid, path);
      if (!fresh) {
        return fail(Status::invalid(fmt::format("{} and {} both hold rank {}: merge the traces of one "
                                                "run at a time", it->second, path, pid)));
      }
    }
    for (const JsonValue& e : events->events) {
      out += count++ == 0 ? "\n" : ",\n";
      engine::io::append_json_value(e, &out);
    }
  }
  out += "\n]}\n";
  std::ofstream f(a.output, std::ios::binary | std::ios::trunc);
  f << out;
  f.close();
  if (!f) return fail(Status::io_error(a.output + ": cannot write the merged trace"));
  std::printf("wrote %s: %zu events from %zu ranks; open it in ui.perfetto.dev\n", a.output.c_str(),
              count, files->size());
  return kExitOk;
}

}  // namespace

void register_trace(CLI::App& app, CommandResult* result) {
  CLI::App* trace = app.add_subcommand("trace", "Work with the per-rank traces of `partrain run --trace`.");
  trace->require_subcommand(1);
  auto args = std::make_shared<MergeArgs>();
  CLI::App* merge = trace->add_subcommand(
      "merge", "Join per-rank traces (files, or a RUN_DIR/trace folder) into one Perfetto trace.");
  merge->add_option("inputs", args->inputs, "rank-R.json files or folders holding them")
      ->required()
      ->check(CLI::ExistingPath);
  merge->add_option("-o,--output", args->output, "the merged trace (JSON)")->required();
  merge->callback([args, result] { result->exit_code = run_merge(*args); });
}

}  // namespace partrain::cli
