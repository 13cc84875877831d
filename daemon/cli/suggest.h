// "Did you mean" for the command line: after CLI11 refuses `partrain rnu JOB` or
// `partrain run JOB --stpes 3`, the word it tripped on is compared with the commands and
// options that exist where it stood (config's nearest(), the same rule as for TOML keys).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace partrain::cli {

// " (did you mean 'run'?)" for the first unknown command or option in `args` (argv
// without the program), or "" when there is none or nothing close.
std::string suggest_for(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace partrain::cli
