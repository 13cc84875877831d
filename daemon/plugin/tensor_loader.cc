// See tensor_loader.h.
#include "plugin/tensor_loader.h"

#include <boost/dll/shared_library.hpp>
#include <fmt/format.h>

#include "plugin/versioned_library.h"

namespace partrain::plugin {

struct TensorPlugin::Lib {
  boost::dll::shared_library lib;
};

TensorPlugin::~TensorPlugin() = default;

Result<std::unique_ptr<TensorPlugin>> open_tensor_plugin(const std::string& path,
                                                         bool* exports_tensor) {
  const FamilyAbi abi{"tensor", "partrain_tensor_v", kOldestTensorAbiVersion, kTensorAbiVersion,
                      "PARTRAIN_TENSOR_PLUGIN from <partrain/tensor_sdk.h>"};
  auto lib = std::make_unique<TensorPlugin::Lib>();
  Result<VersionedTable> t = open_versioned(path, abi, &lib->lib, exports_tensor);
  if (!t) return t.status();
  const auto* api = static_cast<const partrain_tensor_v1_t*>(t->table);
  if (api->name == nullptr || api->version == nullptr || api->init == nullptr ||
      api->reduce == nullptr || api->gather == nullptr || api->scatter == nullptr ||
      api->finalize == nullptr) {
    return Status::invalid(fmt::format("{}: refused: partrain_tensor_v{} lacks a name, version, "
                                       "init, reduce, gather, scatter or finalize", path, t->version));
  }
  std::unique_ptr<TensorPlugin> p(new TensorPlugin());
  p->lib_ = std::move(lib);
  p->api_ = api;
  p->info_ = PluginInfo{path, api->name, family_name(PARTRAIN_FAMILY_TENSOR), api->version,
                        api->description != nullptr ? api->description : "", api->capabilities,
                        t->version};
  return p;
}

Result<std::unique_ptr<TensorPlugin>> find_tensor_plugin(const std::string& dir,
                                                         const std::string& name) {
  Result<std::string> path = plugin_file(dir, name, "tensor plugin");
  if (!path) return path.status();
  Result<std::unique_ptr<TensorPlugin>> p = open_tensor_plugin(*path, nullptr);
  if (!p) return p.status();
  PARTRAIN_RETURN_IF_ERROR(check_plugin_name(*path, "tensor plugin", (*p)->info().name, name));
  return p;
}

}  // namespace partrain::plugin
