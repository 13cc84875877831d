// The site config: one table of accepted keys (site_rules), read with the same machinery
// as the job file.
#include "config/site_config.h"

#include <cstdlib>
#include <filesystem>

#include "config/key_table.h"
#include "layout/spec.h"

#ifndef PARTRAIN_SITE_CONFIG_DEFAULT
#define PARTRAIN_SITE_CONFIG_DEFAULT "/etc/partrain/partrain.toml"
#endif
#ifndef PARTRAIN_PLUGIN_DIR_DEFAULT
#define PARTRAIN_PLUGIN_DIR_DEFAULT "/usr/lib/partrain/plugins"
#endif

namespace partrain::config {
namespace {

using detail::KeyRule;
using detail::Source;

#define FIELD(member) [](SiteConfig& s) -> auto& { return s.member; }

// Every key a site config may set; partrain.toml(5) documents each entry.
const std::vector<KeyRule<SiteConfig>>& site_rules() {
  static const std::vector<KeyRule<SiteConfig>> kRules = {
      detail::path_key<SiteConfig>("paths", "plugin_dir", FIELD(plugin_dir)),
      detail::path_key<SiteConfig>("paths", "state_root", FIELD(state_root)),
      detail::path_key<SiteConfig>("paths", "hardware_dir", FIELD(hardware_dir)),
      detail::integer_key<SiteConfig>("topology", "gpus_per_node", FIELD(gpus_per_node),
                                      detail::at_least(0)),
      detail::integer_key<SiteConfig>("topology", "nvlink_domain", FIELD(nvlink_domain),
                                      detail::at_least(0)),
      detail::path_key<SiteConfig>("topology", "file", FIELD(topology_file)),
      {"rendezvous", "port_base",
       [](const toml::node& node, SiteConfig* s, const Source&) -> Status {
         auto v = detail::read_integer(node, detail::closed(0, 65535));
         if (!v) return v.status();
         if (*v != 0 && *v < 1024) return Status::invalid("must be 0 (any free port) or a port from 1024 to 65535");
         s->rendezvous_port_base = static_cast<int>(*v);
         return Status::ok();
       }},
      detail::integer_key<SiteConfig>("rendezvous", "port_range", FIELD(rendezvous_port_range),
                                      detail::closed(1, 65535)),
      {"defaults", "spec",
       [](const toml::node& node, SiteConfig* s, const Source&) -> Status {
         auto v = detail::read_string(node);
         if (!v) return v.status();
         auto spec = parse_spec(*v);
         if (!spec) {
           return Status::invalid("is not a valid spec: " +
                                  detail::respell_spec_error(spec.status().message(), ""));
         }
         s->default_spec = *v;
         return Status::ok();
       }},
      detail::integer_key<SiteConfig>("agent", "progress_timeout", FIELD(progress_timeout), detail::at_least(0)),
      detail::choice_key<SiteConfig>("log", "level", FIELD(log_level),
                                     std::vector<std::pair<std::string, log::Level>>{
                                         {"debug", log::Level::kDebug},
                                         {"info", log::Level::kInfo},
                                         {"warn", log::Level::kWarn},
                                         {"error", log::Level::kError}}),
  };
  return kRules;
}

#undef FIELD

}  // namespace

std::string default_site_config_path() { return PARTRAIN_SITE_CONFIG_DEFAULT; }
std::string default_plugin_dir() { return PARTRAIN_PLUGIN_DIR_DEFAULT; }

std::string site_config_path(const std::string& cli_path) {
  if (!cli_path.empty()) return cli_path;
  if (const char* env = std::getenv("PARTRAIN_SITE_CONFIG"); env != nullptr && *env != '\0') {
    return env;
  }
  return default_site_config_path();
}

Result<SiteConfig> parse_site(std::string_view text, const std::string& path) {
  const Source src = Source::of(path);
  auto root = detail::parse_toml(src, text);
  if (!root) return root.status();
  SiteConfig site;
  site.path = path;
  detail::SeenKeys seen;
  PARTRAIN_RETURN_IF_ERROR(detail::apply_rules(*root, site_rules(), src, {}, "", &site, &seen));
  if (site.nvlink_domain > 0 && site.gpus_per_node > 0 && site.nvlink_domain > site.gpus_per_node) {
    // An NVLink domain spanning nodes (NVL72 racks) is real, but then it must be whole nodes.
    if (site.nvlink_domain % site.gpus_per_node != 0) {
      return Status::invalid(
          detail::where(src, seen["topology.nvlink_domain"]) +
          "[topology] nvlink_domain = " + std::to_string(site.nvlink_domain) +
          " spans part of a node of gpus_per_node = " + std::to_string(site.gpus_per_node) +
          "; a domain larger than a node must hold whole nodes");
    }
  }
  return site;
}

Result<SiteConfig> load_site_file(const std::string& path) {
  auto text = detail::read_file(path, "site config");
  if (!text) return text.status();
  return parse_site(*text, path);
}

Result<SiteConfig> load_site_config(const std::string& cli_path) {
  const std::string path = site_config_path(cli_path);
  const char* env = std::getenv("PARTRAIN_SITE_CONFIG");
  const bool named = !cli_path.empty() || (env != nullptr && *env != '\0');
  std::error_code ec;
  if (!named && !std::filesystem::exists(path, ec)) return SiteConfig{};  // built-in defaults
  auto site = load_site_file(path);
  if (!site && site.status().code() == StatusCode::kNotFound) {
    return Status::not_found(path + ": no such site config (named by " +
                             (cli_path.empty() ? "PARTRAIN_SITE_CONFIG" : "--site-config") +
                             "); check the path");
  }
  return site;
}

void apply_log_level(const SiteConfig& site) {
  if (const char* env = std::getenv("PARTRAIN_LOG_LEVEL"); env != nullptr && *env != '\0') {
    log::Level level;
    if (log::parse_level(env, &level)) {
      log::set_level(level);
      return;
    }
  }
  log::set_level(site.log_level);
}

std::vector<std::string> known_site_keys() {
  std::vector<std::string> keys;
  for (const auto& rule : site_rules()) keys.push_back(rule.table + "." + rule.key);
  return keys;
}

}  // namespace partrain::config
