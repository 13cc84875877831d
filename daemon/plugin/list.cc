// See list.h.
#include "plugin/list.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

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
    ListEntry entry;
    entry.path = e.path().string();
    // The data family first; its refusal stands when no other family claims the library.
    Result<std::unique_ptr<DataPlugin>> p = DataPlugin::open(entry.path);
    entry.status = p ? Status::ok() : p.status();
    if (p) entry.info = (*p)->info();
    if (!p) {
      (void)(describe<SchedulePlugin>(&entry) || describe<TensorPlugin>(&entry) || describe<ExpertPlugin>(&entry) ||
             describe<ContextPlugin>(&entry));
    }
    out.push_back(std::move(entry));
  }
  std::sort(out.begin(), out.end(), [](const ListEntry& a, const ListEntry& b) { return a.path < b.path; });
  return out;
}

}  // namespace partrain::plugin
