// `partrain plugins [--site-config FILE]`: the strategy plugins installed in the site
// config's plugin directory, with family, version and path, and why any is refused.
#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "common/exit_codes.h"
#include "cli/fail.h"
#include "config/site_config.h"
#include "plugin/list.h"

namespace partrain::cli {
namespace {

int list_installed(const std::string& site_path) {
  Result<config::SiteConfig> site = config::load_site_config(site_path);
  if (!site) return fail(site.status());
  Result<std::vector<plugin::ListEntry>> list = plugin::list_plugins(site->plugin_dir);
  if (!list) return fail(list.status());
  std::printf("plugin directory: %s\n", site->plugin_dir.c_str());
  if (list->empty()) {
    std::printf("no plugins installed\n");
    return kExitOk;
  }
  std::printf("%-14s %-9s %-9s %s\n", "NAME", "FAMILY", "VERSION", "PATH");
  int refused = 0;
  for (const plugin::ListEntry& e : *list) {
    if (e.status) {
      std::printf("%-14s %-9s %-9s %s\n", e.info.name.c_str(), e.info.family.c_str(),
                  e.info.version.c_str(), e.path.c_str());
    } else {
      ++refused;
      std::printf("%-14s %-9s %-9s %s\n", "-", "-", "-", e.path.c_str());
      std::fprintf(stderr, "partrain: %s\n", e.status.message().c_str());
    }
  }
  return refused == 0 ? kExitOk : kExitFailure;
}

}  // namespace

void register_plugins(CLI::App& app, CommandResult* result) {
  auto site = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "plugins", "List the strategy plugins installed in the site config's plugin directory "
                 "(name, family, version, path); refused ones are named with the reason.");
  cmd->add_option("--site-config", *site, "site config (default: $PARTRAIN_SITE_CONFIG, else "
                                          "the installed partrain.toml)");
  cmd->callback([site, result] { result->exit_code = list_installed(*site); });
}

}  // namespace partrain::cli
