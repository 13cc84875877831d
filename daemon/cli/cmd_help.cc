// `partrain help [COMMAND...]`: the same text as `partrain [COMMAND...] --help`, for those
// who type it the git way (`partrain help data encode`). An unknown command is a usage
// error (exit 2) that lists the known ones.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "common/exit_codes.h"
#include "cli/fail.h"

namespace partrain::cli {
namespace {

int run_help(CLI::App& app, const std::vector<std::string>& words) {
  CLI::App* at = &app;
  std::string path = app.get_name();  // as the usage line of --help: the program, then the commands
  for (const auto& w : words) {
    CLI::App* next = nullptr;
    std::vector<std::string> names;
    for (CLI::App* sub : at->get_subcommands([](CLI::App*) { return true; })) {
      if (sub->get_name() == "help") continue;
      names.push_back(sub->get_name());
      if (sub->get_name() == w) next = sub;
    }
    if (next == nullptr)
      return fail(Status::invalid(fmt::format("help: '{}' is not a command of {}; its commands are: {}",
                                              w, at == &app ? "partrain" : "partrain" + path.substr(app.get_name().size()),
                                              fmt::join(names, ", "))));
    at = next;
    path += " " + w;
  }
  // The formatter directly: App::help() would describe the parsed `help` command instead.
  std::fputs(at->get_formatter()->make_help(at, path, CLI::AppFormatMode::Normal).c_str(), stdout);
  return kExitOk;
}

}  // namespace

void register_help(CLI::App& app, CommandResult* result) {
  auto words = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("help", "Show the help of partrain or of a command: partrain help data encode");
  cmd->add_option("command", *words, "the command (and subcommand) to describe");
  CLI::App* root = &app;
  cmd->callback([root, words, result] { result->exit_code = run_help(*root, *words); });
}

}  // namespace partrain::cli
