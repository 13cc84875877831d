// The context-parallel family: plugins that export partrain_context_v<N>
// (include/partrain/context.h), opened as every family is (family_plugin.h).
//   plugin::ContextPlugin::find(plugin_dir, "ring")
#pragma once

#include "partrain/context.h"
#include "plugin/family_plugin.h"

namespace partrain::plugin {

struct ContextFamily {
  using Table = partrain_context_v1_t;
  static constexpr int kFamily = PARTRAIN_FAMILY_CONTEXT;
  static constexpr const char* kLabel = "context plugin";
  static FamilyAbi abi() {
    return {"context", "partrain_context_v", 1, PARTRAIN_CONTEXT_ABI_VERSION,
            "PARTRAIN_CONTEXT_PLUGIN from <partrain/context_sdk.h>"};
  }
  static const char* missing(const Table& t) {
    const bool ok = t.name != nullptr && t.version != nullptr && t.init != nullptr && t.scratch_blocks != nullptr &&
                    t.forward != nullptr && t.backward != nullptr && t.gather != nullptr && t.finalize != nullptr;
    return ok ? nullptr : "name, version, init, scratch_blocks, forward, backward, gather or finalize";
  }
  static uint64_t capabilities(const Table& t) { return t.capabilities; }
};

using ContextPlugin = FamilyPlugin<ContextFamily>;

}  // namespace partrain::plugin
