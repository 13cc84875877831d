// Reading hardware profiles (TOML): every key checked, unknown ones refused by name.
#include "planner/hardware.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include <toml++/toml.h>

#include "common/read_file.h"
#include "config/site_config.h"
#include "planner/rates.h"

#ifndef PARTRAIN_HARDWARE_DIR_DEFAULT
#define PARTRAIN_HARDWARE_DIR_DEFAULT "/etc/partrain/hardware"
#endif

namespace partrain::planner {
namespace {

Status bad(const std::string& path, const std::string& what) {
  return Status::invalid("partrain: " + path + ": " + what);
}

// One accepted key: its table, name, and where a number (or, for names, a string) goes.
struct Key {
  const char* table;
  const char* name;
  double HardwareProfile::*number = nullptr;
  std::string HardwareProfile::*text = nullptr;
  bool required = false;
};

const std::vector<Key>& keys() {
  using H = HardwareProfile;
  static const std::vector<Key> k = {
      {"device", "name", nullptr, &H::name, true},
      {"device", "kind", nullptr, &H::kind, false},
      {"compute", "peak_bf16_flops", &H::peak_bf16},
      {"compute", "peak_fp32_flops", &H::peak_fp32, nullptr, true},
      {"compute", "matmul_efficiency", &H::matmul_efficiency},
      {"compute", "gemm_k_half", &H::gemm_k_half},
      {"compute", "sm_count", &H::sm_count},
      {"compute", "kernel_overhead", &H::kernel_overhead},
      {"compute", "elementwise_efficiency", &H::elementwise_efficiency},
      {"compute", "attention_efficiency", &H::attention_efficiency},
      {"compute", "attention_efficiency_fa2", &H::attention_efficiency_fa2},
      {"compute", "attention_seq_half", &H::attention_seq_half},
      {"compute", "attention_head_dim_half", &H::attention_head_dim_half},
      {"compute", "sustained_clock", &H::sustained_clock},
      {"compute", "comm_sm_share", &H::comm_sm_share},
      {"compute", "measured_rates", nullptr, &H::measured_rates},
      {"memory", "bytes", &H::memory_bytes, nullptr, true},
      {"memory", "bandwidth", &H::memory_bandwidth, nullptr, true},
      {"memory", "reserved_bytes", &H::reserved_bytes},
      {"memory", "fragmentation", &H::fragmentation},
      {"links", "intra_node_bandwidth", &H::intra_bandwidth, nullptr, true},
      {"links", "intra_node_latency", &H::intra_latency},
      {"links", "inter_node_bandwidth", &H::inter_bandwidth, nullptr, true},
      {"links", "inter_node_latency", &H::inter_latency},
      {"links", "inter_switch_bandwidth", &H::inter_switch_bandwidth},
      {"links", "collective_latency", &H::collective_latency},
  };
  return k;
}

}  // namespace

Precision HardwareProfile::precision() const {
  if (kind == "cpu") return Precision{4, 4, 4, false};
  return Precision{};
}

Result<HardwareProfile> parse_hardware(std::string_view text, const std::string& path) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::ostringstream where;
    where << e.source().begin.line;
    return bad(path + ":" + where.str(), std::string(e.description()));
  }
  HardwareProfile h;
  h.path = path;
  std::set<std::string> seen;
  bool has_gpus = false;
  for (const auto& [table_name, node] : root) {
    const toml::table* table = node.as_table();
    if (table == nullptr) {
      return bad(path, "'" + std::string(table_name.str()) +
                           "' must be a table: [device] [compute] [memory] [node] [links]");
    }
    for (const auto& [key_name, value] : *table) {
      const std::string t(table_name.str()), k(key_name.str());
      const std::string full = t + "." + k;
      const int line = static_cast<int>(value.source().begin.line);
      const std::string at = path + ":" + std::to_string(line);
      if (t == "node" && k == "gpus_per_node") {
        const std::optional<int64_t> n = value.value<int64_t>();
        if (!n || *n < 1) return bad(at, "node.gpus_per_node must be a positive whole number");
        h.gpus_per_node = static_cast<int>(*n);
        has_gpus = true;
        continue;
      }
      const Key* match = nullptr;
      for (const Key& key : keys()) {
        if (t == key.table && k == key.name) match = &key;
      }
      if (match == nullptr) {
        return bad(at, "unknown key '" + full + "'; see partrain-plan(1) for the profile keys");
      }
      seen.insert(full);
      if (match->text != nullptr) {
        const std::optional<std::string> s = value.value<std::string>();
        if (!s || s->empty()) return bad(at, full + " must be a non-empty string");
        h.*(match->text) = *s;
      } else {
        const std::optional<double> d = value.value<double>();
        if (!d || !(*d >= 0)) return bad(at, full + " must be a number >= 0");
        h.*(match->number) = *d;
      }
    }
  }
  for (const Key& key : keys()) {
    const std::string full = std::string(key.table) + "." + key.name;
    if (key.required && !seen.count(full)) return bad(path, "missing " + full);
  }
  if (!has_gpus) return bad(path, "missing node.gpus_per_node");
  if (h.kind != "cuda" && h.kind != "cpu") {
    return bad(path, "device.kind '" + h.kind + "' is not cuda or cpu");
  }
  if (h.kind == "cuda" && h.peak_bf16 <= 0) {
    return bad(path, "a cuda profile needs compute.peak_bf16_flops > 0");
  }
  for (const auto& [name, v] :
       std::map<std::string, double>{{"compute.peak_fp32_flops", h.peak_fp32},
                                     {"memory.bytes", h.memory_bytes},
                                     {"memory.bandwidth", h.memory_bandwidth},
                                     {"links.intra_node_bandwidth", h.intra_bandwidth},
                                     {"links.inter_node_bandwidth", h.inter_bandwidth}}) {
    if (v <= 0) return bad(path, name + " must be greater than 0");
  }
  if (h.matmul_efficiency <= 0 || h.matmul_efficiency > 1) {
    return bad(path, "compute.matmul_efficiency must be in (0, 1]");
  }
  if (h.elementwise_efficiency <= 0 || h.elementwise_efficiency > 1) {
    return bad(path, "compute.elementwise_efficiency must be in (0, 1]");
  }
  if (h.attention_efficiency <= 0) h.attention_efficiency = h.matmul_efficiency;
  if (h.attention_efficiency > 1) return bad(path, "compute.attention_efficiency must be in (0, 1]");
  if (h.attention_efficiency_fa2 <= 0) h.attention_efficiency_fa2 = h.attention_efficiency;
  if (h.attention_efficiency_fa2 > 1) return bad(path, "compute.attention_efficiency_fa2 must be in (0, 1]");
  if (h.sustained_clock <= 0 || h.sustained_clock > 1) {
    return bad(path, "compute.sustained_clock must be in (0, 1]");
  }
  if (h.comm_sm_share >= 1) return bad(path, "compute.comm_sm_share must be a fraction below 1");
  if (h.fragmentation >= 1) return bad(path, "memory.fragmentation must be a fraction below 1");
  if (h.inter_switch_bandwidth <= 0) h.inter_switch_bandwidth = h.inter_bandwidth;
  return h;
}

std::string default_hardware_dir() { return PARTRAIN_HARDWARE_DIR_DEFAULT; }

Result<HardwareProfile> load_hardware(const std::string& name_or_path, const std::string& dir) {
  namespace fs = std::filesystem;
  if (name_or_path.empty()) {
    return Status::invalid("partrain: --hardware needs a profile name (e.g. H100-SXM) or a file");
  }
  const bool is_file = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 5 &&
                        name_or_path.compare(name_or_path.size() - 5, 5, ".toml") == 0);
  const char* env = std::getenv("PARTRAIN_HARDWARE_DIR");
  std::string folder = !dir.empty() ? dir : env != nullptr && *env != 0 ? std::string(env) : "";
  if (folder.empty() && !is_file) {
    // The site's folder ([paths] hardware_dir), read only when a name needs it.
    Result<config::SiteConfig> site = config::load_site_config("");
    if (!site) return site.status();
    folder = site->hardware_dir;
  }
  if (folder.empty()) folder = default_hardware_dir();
  const std::string path = is_file ? name_or_path : folder + "/" + name_or_path + ".toml";
  // A profile is a few kilobytes; a FIFO or device is refused, never waited on.
  Result<std::string> text = read_regular_file(path, "hardware profile", size_t{1} << 20);
  if (!text && text.status().code() != StatusCode::kNotFound) {
    return Status::invalid("partrain: --hardware " + text.status().message());
  }
  if (!text) {
    if (is_file) return Status::invalid("partrain: --hardware " + path + ": cannot read the file");
    std::set<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(folder, ec)) {
      if (e.path().extension() == ".toml") names.insert(e.path().stem().string());
    }
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    return Status::invalid("partrain: --hardware " + name_or_path + ": no such profile in " +
                           folder +
                           (list.empty() ? std::string(" (the folder has none; from a build tree, set "
                                                       "PARTRAIN_SITE_CONFIG=build/etc/partrain.toml, which names "
                                                       "etc/hardware, or use --hardware-dir etc/hardware)")
                                         : "; choose one of " + list) +
                           ", or give a profile file");
  }
  Result<HardwareProfile> hw = parse_hardware(*text, path);
  if (!hw || hw->measured_rates.empty()) return hw;
  // The device's measurement, when it is there: a path relative to the profile's folder.
  const std::string rates = (fs::path(path).parent_path() / hw->measured_rates).string();
  Result<std::string> measured = read_regular_file(rates, "measured rates", size_t{4} << 20);
  if (!measured && measured.status().code() == StatusCode::kNotFound) return hw;
  if (!measured) return Status::invalid("partrain: " + path + ": measured_rates " + measured.status().message());
  Result<MeasuredRates> parsed = parse_rates(*measured, rates);
  if (!parsed) return parsed.status();
  apply_rates(*parsed, &*hw);
  return hw;
}

}  // namespace partrain::planner
