// Strict parsing of the plugstack.conf arguments (see plugin_args.h).
#include "plugin_args.h"

#include <charconv>

namespace partrain::spank {
namespace {

constexpr std::string_view kKnown =
    "nvlink_domain=N, state_root=/ABS/PATH, port_base=N, port_range=N, topology=/ABS/PATH";

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

Result<PluginArgs> parse_plugin_args(const std::vector<std::string_view>& words) {
  PluginArgs args;
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
    } else if (key == "state_root" || key == "topology") {
      if (value.empty() || value.front() != '/') {
        return bad(word, "needs an absolute path, e.g. " + std::string(key) +
                             (key == "topology" ? "=/etc/slurm/topology.conf"
                                                : "=/shared/partrain"));
      }
      std::string path(value);
      while (path.size() > 1 && path.back() == '/') path.pop_back();
      (key == "state_root" ? args.state_root : args.topology) = path;
    } else if (key == "port_base") {
      if (!parse_int(value, 1024, 65535, &args.port_base)) {
        return bad(word, "needs a port number from 1024 to 65535, e.g. port_base=29500");
      }
    } else if (key == "port_range") {
      if (!parse_int(value, 1, 65535, &args.port_range)) {
        return bad(word, "needs a positive count of ports, e.g. port_range=1000");
      }
    } else {
      return bad(word, "unknown key; known keys: " + std::string(kKnown));
    }
  }
  if (args.port_base + args.port_range > 65536) {
    return Status::invalid("partrain: plugstack.conf: port_base=" +
                           std::to_string(args.port_base) + " + port_range=" +
                           std::to_string(args.port_range) +
                           " runs past port 65535; lower one of them");
  }
  return args;
}

int coordinator_port(const PluginArgs& args, unsigned job_id) {
  return args.port_base + static_cast<int>(job_id % static_cast<unsigned>(args.port_range));
}

}  // namespace partrain::spank
