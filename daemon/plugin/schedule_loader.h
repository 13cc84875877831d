// The pipeline-schedule side of the plugin loader: opens plugins that export the
// partrain_schedule_v<N> struct of include/partrain/schedule.h (the pipeline family has
// its own ABI, apart from the data family's partrain_strategy_v<N>), with the same
// refusals as loader.h: unsafe file or directory permissions (checked before dlopen, by
// loader.h's check_owner_and_mode), no supported symbol, an abi_version that disagrees,
// or a file named differently from the schedule it holds.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "partrain/schedule.h"
#include "pipeline/schedule.h"
#include "plugin/loader.h"

namespace partrain::plugin {

inline constexpr int kScheduleAbiVersion = PARTRAIN_SCHEDULE_ABI_VERSION;
inline constexpr int kOldestScheduleAbiVersion = 1;

class SchedulePlugin {
 public:
  ~SchedulePlugin();
  SchedulePlugin(const SchedulePlugin&) = delete;
  SchedulePlugin& operator=(const SchedulePlugin&) = delete;

  const PluginInfo& info() const { return info_; }  // family "pipeline"
  // Every rank's action list from the plugin, unchecked (pipeline::check is the caller's
  // next step). Invalid with the plugin's message when it refuses (pp, m, v).
  Result<pipeline::Schedule> build(int pp, int m, int v) const;

  struct Lib;  // Boost.DLL's shared_library, kept out of this header

 private:
  friend Result<std::unique_ptr<SchedulePlugin>> open_schedule_plugin(const std::string& path,
                                                                      bool* exports_schedule);
  SchedulePlugin() = default;
  std::unique_ptr<Lib> lib_;
  const partrain_schedule_v1_t* api_ = nullptr;
  PluginInfo info_;
};

// Checks the file and its directory, opens it and finds the newest supported
// partrain_schedule_v<N>. *exports_schedule (when not null) says whether the library
// exports any partrain_schedule_v* symbol at all, supported or not.
Result<std::unique_ptr<SchedulePlugin>> open_schedule_plugin(const std::string& path,
                                                             bool* exports_schedule);
Result<std::unique_ptr<SchedulePlugin>> load_schedule_plugin(const std::string& path);

// Loads <dir>/<name>.so as a schedule plugin and checks that it calls itself `name`.
Result<std::unique_ptr<SchedulePlugin>> find_schedule_plugin(const std::string& dir,
                                                             const std::string& name);

// list_plugins (loader.h) with the schedule, tensor and expert plugins among them described
// (family "pipeline", "tensor", "expert") instead of refused for lacking partrain_strategy_v1.
Result<std::vector<ListEntry>> list_all_plugins(const std::string& dir);

}  // namespace partrain::plugin
