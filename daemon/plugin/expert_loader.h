// The expert-parallel family: plugins that export partrain_expert_v<N>
// (include/partrain/expert.h), opened as every family is (family_plugin.h).
//   plugin::ExpertPlugin::find(plugin_dir, "ep")
#pragma once

#include "partrain/expert.h"
#include "plugin/family_plugin.h"

namespace partrain::plugin {

struct ExpertFamily {
  using Table = partrain_expert_v1_t;
  static constexpr int kFamily = PARTRAIN_FAMILY_EXPERT;
  static constexpr const char* kLabel = "expert plugin";
  static FamilyAbi abi() {
    return {"expert", "partrain_expert_v", 1, PARTRAIN_EXPERT_ABI_VERSION,
            "PARTRAIN_EXPERT_PLUGIN from <partrain/expert_sdk.h>"};
  }
  static const char* missing(const Table& t) {
    const bool ok = t.name != nullptr && t.version != nullptr && t.init != nullptr && t.all_to_all != nullptr &&
                    t.reduce != nullptr && t.reduce_expert_grads != nullptr && t.finalize != nullptr;
    return ok ? nullptr : "name, version, init, all_to_all, reduce, reduce_expert_grads or finalize";
  }
  static uint64_t capabilities(const Table& t) { return t.capabilities; }
};

using ExpertPlugin = FamilyPlugin<ExpertFamily>;

}  // namespace partrain::plugin
