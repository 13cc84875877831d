// Strict parsing of the plugstack.conf arguments (see plugin_args.h).
#include "plugin_args.h"

#include "auto_spec.h"

#include <charconv>

#ifndef PARTRAIN_SITE_CONFIG_DEFAULT
#define PARTRAIN_SITE_CONFIG_DEFAULT "/etc/partrain/partrain.toml"
#endif

namespace partrain::spank {
namespace {

constexpr std::string_view kKnown =
    "site_config=/ABS/PATH, nvlink_domain=N, state_root=/ABS/PATH, port_base=N, port_range=N, topology=/ABS/PATH, "
    "hardware=NAME, partrain_cli=/ABS/PATH";

Status bad(std::string_view word, const std::string& why) {
  return Status::invalid("partrain: plugstack.conf argument '" + std::string(word) + "': " + why);
}

// A whole number in [lo, hi] written with digits only.
bool parse_int(std::string_view text, int lo, int hi, int* out) {
  if (text.empty() || text.size() > 9) return false;
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < lo || value > hi) {
    return false;
  }
  *out = value;
  return true;
}

}  // namespace

std::string default_site_config() { return PARTRAIN_SITE_CONFIG_DEFAULT; }

Result<PluginArgs> parse_plugin_args(const std::vector<std::string_view>& words) {
  PluginArgs args;
  args.partrain_cli = default_partrain_cli();
  for (std::string_view word : words) {
    const size_t eq = word.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return bad(word, "expected KEY=VALUE; known keys: " + std::string(kKnown));
    }
    const std::string_view key = word.substr(0, eq);
    const std::string_view value = word.substr(eq + 1);
    if (key == "nvlink_domain") {
      if (!parse_int(value, 0, 1 << 16, &args.nvlink_domain)) {
        return bad(word, "needs a GPU count, e.g. nvlink_domain=8 (0 = the whole node)");
      }
      args.given.nvlink_domain = true;
    } else if (key == "state_root" || key == "topology" || key == "site_config") {
      if (value.empty() || value.front() != '/') {
        return bad(word, "needs an absolute path, e.g. " + std::string(key) +
                             (key == "topology"      ? "=/etc/slurm/topology.conf"
                              : key == "site_config" ? "=/etc/partrain/partrain.toml"
                                                     : "=/shared/partrain"));
      }
      std::string path(value);
      while (path.size() > 1 && path.back() == '/') path.pop_back();
      if (key == "state_root") {
        args.state_root = path;
        args.given.state_root = true;
      } else if (key == "topology") {
        args.topology = path;
        args.given.topology = true;
      } else {
        args.site_config = path;
        args.site_config_named = true;
      }
    } else if (key == "hardware") {
      if (value.empty()) return bad(word, "needs a profile name or file, e.g. hardware=H100-SXM");
      args.hardware = std::string(value);
    } else if (key == "partrain_cli") {
      if (value.empty() || value.front() != '/') return bad(word, "needs an absolute path, e.g. partrain_cli=/usr/bin/partrain");
      args.partrain_cli = std::string(value);
    } else if (key == "port_base") {
      if (!parse_int(value, 0, 65535, &args.port_base) || (args.port_base != 0 && args.port_base < 1024)) {
        return bad(word, "needs 0 (any free port, the default) or a port number from 1024 to 65535, e.g. "
                         "port_base=29500");
      }
      args.given.port_base = true;
    } else if (key == "port_range") {
      if (!parse_int(value, 1, 65535, &args.port_range)) {
        return bad(word, "needs a positive count of ports, e.g. port_range=1000");
      }
      args.given.port_range = true;
    } else {
      return bad(word, "unknown key; known keys: " + std::string(kKnown));
    }
  }
  PARTRAIN_RETURN_IF_ERROR(check_port_range(args));
  return args;
}

Status check_port_range(const PluginArgs& args) {
  if (args.port_base != 0 && args.port_base + args.port_range > 65536) {
    return Status::invalid("partrain: port_base=" + std::to_string(args.port_base) + " + port_range=" +
                           std::to_string(args.port_range) + " runs past port 65535; lower one of them");
  }
  return Status::ok();
}

int coordinator_port(const PluginArgs& args, unsigned job_id) {
  if (args.port_base == 0) return 0;
  return args.port_base + static_cast<int>(job_id % static_cast<unsigned>(args.port_range));
}

}  // namespace partrain::spank
