// The pipeline-schedule family: plugins that export partrain_schedule_v<N>
// (include/partrain/schedule.h), opened as every family is (family_plugin.h), and the
// action lists they build.
//   auto p = plugin::SchedulePlugin::find(plugin_dir, "1f1b");
//   Result<pipeline::Schedule> s = plugin::build_schedule(**p, pp, m, v);
#pragma once

#include "common/status.h"
#include "partrain/schedule.h"
#include "pipeline/schedule.h"
#include "plugin/family_plugin.h"

namespace partrain::plugin {

struct ScheduleFamily {
  using Table = partrain_schedule_v1_t;
  static constexpr int kFamily = PARTRAIN_FAMILY_PIPELINE;
  static constexpr const char* kLabel = "schedule";
  static FamilyAbi abi() {
    return {"schedule", "partrain_schedule_v", 1, PARTRAIN_SCHEDULE_ABI_VERSION,
            "PARTRAIN_SCHEDULE_PLUGIN from <partrain/schedule_sdk.h>"};
  }
  static const char* missing(const Table& t) {
    const bool ok = t.name != nullptr && t.version != nullptr && t.build != nullptr;
    return ok ? nullptr : "name, version or build";
  }
  static uint64_t capabilities(const Table&) { return 0; }
};

using SchedulePlugin = FamilyPlugin<ScheduleFamily>;

// Every rank's action list from the plugin, unchecked (pipeline::check is the caller's next
// step). Invalid with the plugin's message when it refuses (pp, m, v).
Result<pipeline::Schedule> build_schedule(const SchedulePlugin& plugin, int pp, int m, int v);

}  // namespace partrain::plugin
