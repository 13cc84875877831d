// See list.h.
#include "plugin/list.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "plugin/child_probe.h"
#include "plugin/context_loader.h"
#include "plugin/data_loader.h"
#include "plugin/expert_loader.h"
#include "plugin/schedule_loader.h"
#include "plugin/tensor_loader.h"

namespace partrain::plugin {

namespace fs = std::filesystem;

namespace {

// Tries `P::open`; true (with *e filled) when the library is of P's family at all.
template <typename P>
bool describe(ListEntry* e) {
  bool exports = false;
  auto p = P::open(e->path, &exports);
  if (!exports) return false;
  e->status = p ? Status::ok() : p.status();
  if (p) e->info = (*p)->info();
  return true;
}

// One library, whatever its family: the data family first; its refusal stands when no
// other family claims the library.
ListEntry describe_library(const std::string& path) {
  ListEntry entry;
  entry.path = path;
  Result<std::unique_ptr<DataPlugin>> p = DataPlugin::open(entry.path);
  entry.status = p ? Status::ok() : p.status();
  if (p) entry.info = (*p)->info();
  if (!p) {
    (void)(describe<SchedulePlugin>(&entry) || describe<TensorPlugin>(&entry) || describe<ExpertPlugin>(&entry) ||
           describe<ContextPlugin>(&entry));
  }
  return entry;
}

// A ListEntry through the child's pipe: its fields separated by NUL bytes.
std::string encode_entry(const ListEntry& e) {
  const PluginInfo& i = e.info;
  return fmt::format("{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}", static_cast<int>(e.status.code()), '\0', e.status.message(),
                     '\0', i.name, '\0', i.family, '\0', i.version, '\0', i.description, '\0', i.capabilities,
                     '\0', i.abi_version);
}

ListEntry decode_entry(const std::string& path, const std::string& text) {
  std::vector<std::string> f;
  size_t a = 0;
  for (size_t b; (b = text.find('\0', a)) != std::string::npos; a = b + 1) f.push_back(text.substr(a, b - a));
  f.push_back(text.substr(a));
  ListEntry e;
  e.path = path;
  if (f.size() != 8) {
    e.status = Status::internal(path + ": the plugin probe answered in a form partrain does not read");
    return e;
  }
  const int code = std::atoi(f[0].c_str());
  e.status = code == 0 ? Status::ok() : code == static_cast<int>(StatusCode::kNotFound) ? Status::not_found(f[1])
                                                                                       : Status::invalid(f[1]);
  e.info = PluginInfo{path, f[2], f[3], f[4], f[5], std::strtoull(f[6].c_str(), nullptr, 10), std::atoi(f[7].c_str())};
  return e;
}

}  // namespace

Result<std::vector<ListEntry>> list_plugins(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    return Status::not_found(fmt::format("{}: cannot list the plugin directory ({}); check the "
                                         "site config's [paths] plugin_dir", dir, ec.message()));
  }
  std::vector<ListEntry> out;
  for (const fs::directory_entry& e : it) {
    if (e.path().extension() != ".so") continue;
    const std::string path = e.path().string();
    // Each library is opened in a child process: one whose constructors fault is listed as
    // refused, and no library's code runs in this process.
    Result<std::string> answer = run_probe_in_child(path, [&path] { return encode_entry(describe_library(path)); });
    if (answer) {
      out.push_back(decode_entry(path, *answer));
    } else {
      out.push_back(ListEntry{path, answer.status(), {}});
    }
  }
  std::sort(out.begin(), out.end(), [](const ListEntry& a, const ListEntry& b) { return a.path < b.path; });
  return out;
}

}  // namespace partrain::plugin
