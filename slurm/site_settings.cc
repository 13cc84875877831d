// See site_settings.h. The only file of the plugin that includes TOML++.
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 0
#include "site_settings.h"

#include <sys/stat.h>

#include <filesystem>
#include <optional>
#include <string>

#include <toml++/toml.h>

namespace partrain::spank {
namespace {

std::string where(const std::string& path, const toml::node& node) {
  return "partrain: " + path + ":" + std::to_string(node.source().begin.line) + ": ";
}

// An integer key in [lo, hi]; nullopt when absent.
Result<std::optional<int>> integer(const toml::table& root, const std::string& path, const char* table,
                                   const char* key, int lo, int hi) {
  const toml::node* node = root.at_path(std::string(table) + "." + key).node();
  if (node == nullptr) return std::optional<int>();
  const std::optional<int64_t> v = node->value_exact<int64_t>();
  if (!v || *v < lo || *v > hi) {
    return Status::invalid(where(path, *node) + "[" + table + "] key '" + key + "' must be an integer from " +
                           std::to_string(lo) + " to " + std::to_string(hi));
  }
  return std::optional<int>(static_cast<int>(*v));
}

// A path key, relative ones taken from the file's folder; nullopt when absent.
Result<std::optional<std::string>> path_key(const toml::table& root, const std::string& path, const char* table,
                                            const char* key) {
  const toml::node* node = root.at_path(std::string(table) + "." + key).node();
  if (node == nullptr) return std::optional<std::string>();
  const std::optional<std::string> v = node->value_exact<std::string>();
  if (!v) return Status::invalid(where(path, *node) + "[" + table + "] key '" + key + "' must be a string (a path)");
  if (v->empty()) return std::optional<std::string>(std::string());
  std::filesystem::path p(*v);
  if (p.is_relative()) p = std::filesystem::absolute(path).parent_path() / p;
  std::string out = p.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return std::optional<std::string>(out);
}

}  // namespace

Status apply_site_config(PluginArgs* args) {
  const std::string& path = args->site_config;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (!args->site_config_named) return Status::ok();  // no site config: the built-in defaults
    return Status::invalid("partrain: site_config=" + path + ": no such file; name the site's partrain.toml");
  }
  toml::parse_result parsed = toml::parse_file(path);
  if (!parsed) {
    const toml::parse_error& e = parsed.error();
    return Status::invalid("partrain: " + path + ":" + std::to_string(e.source().begin.line) + ": " +
                           std::string(e.description()));
  }
  const toml::table& root = parsed.table();
  PluginArgs::Given& given = args->given;
  if (!given.nvlink_domain) {
    auto v = integer(root, path, "topology", "nvlink_domain", 0, 1 << 16);
    if (!v) return v.status();
    if (*v) args->nvlink_domain = **v;
  }
  if (!given.port_base) {
    auto v = integer(root, path, "rendezvous", "port_base", 0, 65535);
    if (!v) return v.status();
    if (*v && **v != 0 && **v < 1024) {
      return Status::invalid("partrain: " + path + ": [rendezvous] key 'port_base' must be 0 (any free port) or "
                             "a port from 1024 to 65535");
    }
    if (*v) args->port_base = **v;
  }
  if (!given.port_range) {
    auto v = integer(root, path, "rendezvous", "port_range", 1, 65535);
    if (!v) return v.status();
    if (*v) args->port_range = **v;
  }
  if (!given.state_root) {
    auto v = path_key(root, path, "paths", "state_root");
    if (!v) return v.status();
    if (*v && !(*v)->empty()) args->state_root = **v;
  }
  if (!given.topology) {
    auto v = path_key(root, path, "topology", "file");
    if (!v) return v.status();
    if (*v) args->topology = **v;
  }
  return check_port_range(*args);
}

}  // namespace partrain::spank
