// Local and allocator contexts: sbatch, salloc and srun after their options are read
// (init_post_opt), and srun again once its step's size is known (local_user_init). The
// spec's syntax was already checked when Slurm handed over the option (options.cc); here
// it is checked against the allocation as far as it is visible, so a layout that cannot
// work is refused before the job is queued or the step launched.
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "context.h"
#include "layout/spec.h"
#include "submit_check.h"
#include "auto_spec.h"

namespace partrain::spank {
namespace {

// This process's argv (sbatch, salloc or srun): Slurm shows a SPANK plugin no job facts in
// the allocator context, but the command line is the user's own request.
std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    args.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  if (!args.empty()) args.erase(args.begin());  // the program itself
  return args;
}

bool is_sbatch() {
  std::ifstream in("/proc/self/comm");
  std::string comm;
  std::getline(in, comm);
  return comm == "sbatch";
}

// The #SBATCH options of the batch script, which the command line overrides.
AllocationFacts script_facts(const std::string& script) {
  std::ifstream in(script, std::ios::binary);
  if (!in) return {};
  std::string text(64 * 1024, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  std::string ignored;
  return scan_options(sbatch_directives(text), &ignored);
}

// srun --partrain on its own command line. A value inherited from the job (sbatch
// --partrain) is checked by each task instead: helper steps of other sizes in a batch
// script must still run.
bool given_on_command_line(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--partrain" || a.rfind("--partrain=", 0) == 0) return true;
  }
  return false;
}

// --partrain=auto: the planner's choice for the job file `text` names (a batch script or
// the command) on the allocation `facts` shows, reported and put in the environment Slurm
// hands to the job (auto_spec.h). The chosen spec, or "" after a refusal was reported.
std::string choose(const AllocationFacts& facts, const std::string& text) {
  // A relative job file is where the job will run: under --chdir when given.
  std::string job = find_job_file(text);
  if (!job.empty() && job.front() != '/' && !facts.chdir.empty()) job = facts.chdir + "/" + job;
  Result<std::vector<std::string>> argv = auto_command(job, facts, state().args);
  Result<std::string> out = argv.is_ok() ? run_planner(*argv, state().args) : Result<std::string>(argv.status());
  Result<std::string> spec = out.is_ok() ? parse_auto_choice(*out) : Result<std::string>(out.status());
  if (!spec.is_ok()) {
    report(spec.status().message());
    return "";
  }
  std::istringstream lines(*out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("partrain: ", 0) == 0) tell(line);
  }
  ::setenv(kAutoSpecVar, spec->c_str(), 1);
  return *spec;
}

// The batch script's text (its first 64 KiB), "" when unreadable.
std::string script_text(const std::string& script) {
  std::ifstream in(script, std::ios::binary);
  if (!in) return "";
  std::string text(64 * 1024, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

// The words after the options: srun's command.
std::string command_text(const std::vector<std::string>& args, const std::string& operand) {
  std::string text;
  bool after = false;
  for (const std::string& a : args) {
    after = after || a == operand;
    if (after) text += a + " ";
  }
  return text;
}

int refuse_if_invalid(const AllocationFacts& facts, const std::string& auto_from = "") {
  std::string chosen = *state().spec;
  if (chosen == "auto") {
    chosen = choose(facts, auto_from);
    if (chosen.empty()) return -1;
  }
  Result<ParallelSpec> spec = parse_spec(chosen);
  Status status = spec.is_ok() ? check_spec(*spec, facts, state().args) : spec.status();
  if (status.is_ok()) return 0;
  report(status.message());
  return -1;
}

}  // namespace

int check_at_submit(spank_t) {
  if (!state().spec) return 0;
  const std::vector<std::string> args = own_command_line();
  if (spank_context() == S_CTX_LOCAL && !given_on_command_line(args)) return 0;
  std::string script;
  AllocationFacts facts = scan_options(args, &script);
  if (is_sbatch() && !script.empty()) facts = scan_options(args, &script, script_facts(script));
  // srun outside a job learns its size at launch (check_at_launch) and chooses there.
  if (*state().spec == "auto" && spank_context() == S_CTX_LOCAL) return 0;
  return refuse_if_invalid(facts, is_sbatch() ? script_text(script) : command_text(args, script));
}

int check_at_launch(spank_t sp) {
  if (!state().spec) return 0;
  const std::vector<std::string> args = own_command_line();
  if (!given_on_command_line(args)) return 0;

  uint32_t tasks = 0;
  uint32_t nodes = 0;
  if (spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &tasks) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_NNODES, &nodes) != ESPANK_SUCCESS) {
    return 0;  // not known here: the tasks check
  }
  AllocationFacts base;
  if (const char* g = std::getenv("SLURM_GPUS_PER_NODE")) {
    std::string ignored;
    base = scan_options({std::string("--gpus-per-node=") + g}, &ignored);
  }
  std::string command;
  AllocationFacts facts = scan_options(args, &command, base);
  facts.nodes = static_cast<int>(nodes);
  facts.tasks = static_cast<int>(tasks);
  if (*state().spec == "auto" && !facts.gpus_per_node && nodes > 0) {
    facts.gpus_per_node = static_cast<int>(tasks / nodes);  // CPU ranks: one per task
  }
  facts.tasks_per_node.reset();
  return refuse_if_invalid(facts, command_text(args, command));
}

}  // namespace partrain::spank
