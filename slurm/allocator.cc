// Local and allocator contexts: sbatch, salloc and srun after their options are read
// (init_post_opt), and srun again once its step's size is known (local_user_init). The
// spec's syntax was already checked when Slurm handed over the option (options.cc); here
// it is checked against the allocation as far as it is visible, so a layout that cannot
// work is refused before the job is queued or the step launched.
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "context.h"
#include "layout/spec.h"
#include "submit_check.h"

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

int refuse_if_invalid(const AllocationFacts& facts) {
  Result<ParallelSpec> spec = parse_spec(*state().spec);
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
  return refuse_if_invalid(facts);
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
  facts.tasks_per_node.reset();
  return refuse_if_invalid(facts);
}

}  // namespace partrain::spank
