// The tensor-parallel family: plugins that export partrain_tensor_v<N>
// (include/partrain/tensor.h), opened as every family is (family_plugin.h).
//   plugin::TensorPlugin::find(plugin_dir, "tp")
#pragma once

#include "partrain/tensor.h"
#include "plugin/family_plugin.h"

namespace partrain::plugin {

struct TensorFamily {
  using Table = partrain_tensor_v1_t;
  static constexpr int kFamily = PARTRAIN_FAMILY_TENSOR;
  static constexpr const char* kLabel = "tensor plugin";
  static FamilyAbi abi() {
    return {"tensor", "partrain_tensor_v", 1, PARTRAIN_TENSOR_ABI_VERSION,
            "PARTRAIN_TENSOR_PLUGIN from <partrain/tensor_sdk.h>"};
  }
  static const char* missing(const Table& t) {
    const bool ok = t.name != nullptr && t.version != nullptr && t.init != nullptr && t.reduce != nullptr &&
                    t.gather != nullptr && t.scatter != nullptr && t.finalize != nullptr;
    return ok ? nullptr : "name, version, init, reduce, gather, scatter or finalize";
  }
  static uint64_t capabilities(const Table& t) { return t.capabilities; }
};

using TensorPlugin = FamilyPlugin<TensorFamily>;

}  // namespace partrain::plugin
