// See expert_loader.h.
#include "plugin/expert_loader.h"

#include <boost/dll/shared_library.hpp>
#include <fmt/format.h>

#include "plugin/versioned_library.h"

namespace partrain::plugin {

struct ExpertPlugin::Lib {
  boost::dll::shared_library lib;
};

ExpertPlugin::~ExpertPlugin() = default;

Result<std::unique_ptr<ExpertPlugin>> open_expert_plugin(const std::string& path,
                                                         bool* exports_expert) {
  const FamilyAbi abi{"expert", "partrain_expert_v", kOldestExpertAbiVersion, kExpertAbiVersion,
                      "PARTRAIN_EXPERT_PLUGIN from <partrain/expert_sdk.h>"};
  auto lib = std::make_unique<ExpertPlugin::Lib>();
  Result<VersionedTable> t = open_versioned(path, abi, &lib->lib, exports_expert);
  if (!t) return t.status();
  const auto* api = static_cast<const partrain_expert_v1_t*>(t->table);
  if (api->name == nullptr || api->version == nullptr || api->init == nullptr ||
      api->all_to_all == nullptr || api->reduce == nullptr || api->reduce_expert_grads == nullptr ||
      api->finalize == nullptr) {
    return Status::invalid(fmt::format("{}: refused: partrain_expert_v{} lacks a name, version, "
                                       "init, all_to_all, reduce, reduce_expert_grads or finalize",
                                       path, t->version));
  }
  std::unique_ptr<ExpertPlugin> p(new ExpertPlugin());
  p->lib_ = std::move(lib);
  p->api_ = api;
  p->info_ = PluginInfo{path, api->name, family_name(PARTRAIN_FAMILY_EXPERT), api->version,
                        api->description != nullptr ? api->description : "", api->capabilities,
                        t->version};
  return p;
}

Result<std::unique_ptr<ExpertPlugin>> find_expert_plugin(const std::string& dir,
                                                         const std::string& name) {
  Result<std::string> path = plugin_file(dir, name, "expert plugin");
  if (!path) return path.status();
  Result<std::unique_ptr<ExpertPlugin>> p = open_expert_plugin(*path, nullptr);
  if (!p) return p.status();
  PARTRAIN_RETURN_IF_ERROR(check_plugin_name(*path, "expert plugin", (*p)->info().name, name));
  return p;
}

}  // namespace partrain::plugin
