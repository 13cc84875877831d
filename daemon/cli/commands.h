// The subcommands of `partrain`. Each cmd_NAME.cc defines one register_NAME that adds a
// CLI11 subcommand whose callback stores its exit code in *result.
#pragma once

#include <CLI/CLI.hpp>

namespace partrain::cli {

struct CommandResult {
  int exit_code = 0;
};

void register_layout(CLI::App& app, CommandResult* result);
void register_data(CLI::App& app, CommandResult* result);
void register_run(CLI::App& app, CommandResult* result);
void register_export(CLI::App& app, CommandResult* result);
void register_plugins(CLI::App& app, CommandResult* result);
void register_trace(CLI::App& app, CommandResult* result);
void register_schedule(CLI::App& app, CommandResult* result);
void register_plan(CLI::App& app, CommandResult* result);
void register_report(CLI::App& app, CommandResult* result);
void register_ckpt(CLI::App& app, CommandResult* result);
void register_import(CLI::App& app, CommandResult* result);
void register_generate(CLI::App& app, CommandResult* result);
void register_help(CLI::App& app, CommandResult* result);

inline void register_commands(CLI::App& app, CommandResult* result) {
  register_layout(app, result);
  register_data(app, result);
  register_run(app, result);
  register_export(app, result);
  register_plugins(app, result);
  register_trace(app, result);
  register_schedule(app, result);
  register_plan(app, result);
  register_report(app, result);
  register_ckpt(app, result);
  register_import(app, result);
  register_generate(app, result);
  register_help(app, result);
}

}  // namespace partrain::cli
