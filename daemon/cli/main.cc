// partrain: the user's command. Each subcommand lives in its own cmd_*.cc and registers
// itself here. Exit codes: 0 success, 2 usage or configuration error (one line on stderr,
// never a stack trace), 1 any other failure; `partrain run` documents more in partrain(1).
#include <cstdio>
#include <new>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <omp.h>

#include "cli/commands.h"
#include "cli/suggest.h"
#include "common/cpu_budget.h"
#include "common/exit_codes.h"
#include "common/version.h"

int main(int argc, char** argv) {
  CLI::App app{"partrain: tensor x pipeline x data parallel training of transformer language "
               "models, next to Slurm.\nSee partrain(1)."};
  app.set_version_flag("--version", std::string("partrain ") + partrain::version());
  app.require_subcommand(1);
  app.fallthrough(false);

  // The CPU kernels' threads: OMP_NUM_THREADS, else the CPUs this process may use (its
  // affinity within its cgroup's quota), never every core of a shared machine; a command's
  // --threads overrides it.
  omp_set_num_threads(partrain::thread_count());

  partrain::cli::CommandResult result;
  partrain::cli::register_commands(app, &result);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A mistyped command or option: the nearest that exists where it stood.
    const std::string hint = partrain::cli::suggest_for(app, std::vector<std::string>(argv + 1, argv + argc));
    std::fprintf(stderr, "partrain: %s%s (see partrain --help)\n", e.what(), hint.c_str());
    return partrain::kExitUsage;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "partrain: %s\n", partrain::kOutOfMemoryMessage);
    return partrain::kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "partrain: internal error: %s\n", e.what());
    return partrain::kExitFailure;
  }
  return result.exit_code;
}
