// See data_loader.h.
#include "plugin/data_loader.h"

#include <fmt/format.h>

namespace partrain::plugin {

DataPlugin::~DataPlugin() = default;

namespace {

// The checks both versions' tables get (they start with the same descriptive fields); fills
// *info from it.
template <typename Table>
Status check_table(const Table& api, const std::string& path, int found, PluginInfo* info) {
  if (api.name == nullptr || api.version == nullptr || api.init == nullptr || api.finalize == nullptr) {
    return Status::invalid(fmt::format("{}: refused: partrain_strategy_v{} lacks a name, version, init or "
                                       "finalize", path, found));
  }
  *info = PluginInfo{path, api.name, family_name(api.family), api.version,
                     api.description != nullptr ? api.description : "", api.capabilities, found};
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<DataPlugin>> DataPlugin::open(const std::string& path, bool* exports) {
  const FamilyAbi abi{"", "partrain_strategy_v", kOldestDataAbiVersion, kDataAbiVersion,
                      "PARTRAIN_STRATEGY_PLUGIN from <partrain/data_sdk.h>"};
  Result<VersionedTable> t = open_versioned(path, abi, exports);
  if (!t) return t.status();
  std::unique_ptr<DataPlugin> p(new DataPlugin());
  if (t->version == PARTRAIN_PLUGIN_ABI_V2) {
    p->api_v2_ = static_cast<const partrain_strategy_v2_t*>(t->table);
    PARTRAIN_RETURN_IF_ERROR(check_table(*p->api_v2_, path, t->version, &p->info_));
  } else {
    p->api_v1_ = static_cast<const partrain_strategy_v1_t*>(t->table);
    PARTRAIN_RETURN_IF_ERROR(check_table(*p->api_v1_, path, t->version, &p->info_));
  }
  p->lib_ = std::move(t->lib);
  return p;
}

Result<std::unique_ptr<DataPlugin>> DataPlugin::find(const std::string& dir, const std::string& name) {
  Result<std::string> path = plugin_file(dir, name, "plugin");
  if (!path) return path.status();
  Result<std::unique_ptr<DataPlugin>> p = open(*path);
  if (!p) return p.status();
  PARTRAIN_RETURN_IF_ERROR(check_plugin_name(*path, "plugin", (*p)->info().name, name));
  return p;
}

}  // namespace partrain::plugin
