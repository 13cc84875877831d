// The data family: plugins that export partrain_strategy_v<N> (include/partrain/data.h:
// dp, zero1-3), opened with the checks every family gets (versioned_library.h). The only
// family with two live table layouts: a v2 plugin is driven through v2(), one built against
// the first ABI through v1() (stage 0 only).
//   plugin::DataPlugin::find(plugin_dir, "zero2")
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "partrain/data.h"
#include "plugin/plugin_file.h"
#include "plugin/versioned_library.h"

namespace partrain::plugin {

// ABI versions of the data family this partrain can load, newest first when probing.
inline constexpr int kDataAbiVersion = PARTRAIN_PLUGIN_ABI_VERSION;
inline constexpr int kOldestDataAbiVersion = 1;

class DataPlugin {
 public:
  ~DataPlugin();
  DataPlugin(const DataPlugin&) = delete;
  DataPlugin& operator=(const DataPlugin&) = delete;
  const PluginInfo& info() const { return info_; }
  // Exactly one is non-null (info().abi_version says which).
  const partrain_strategy_v2_t* v2() const { return api_v2_; }
  const partrain_strategy_v1_t* v1() const { return api_v1_; }

  // Checks the file and its directory, opens it and finds the newest supported symbol.
  // *exports (when not null) says whether it exports any partrain_strategy_v<N>.
  static Result<std::unique_ptr<DataPlugin>> open(const std::string& path, bool* exports = nullptr);
  // Opens <dir>/<name>.so and checks that it calls itself `name`.
  static Result<std::unique_ptr<DataPlugin>> find(const std::string& dir, const std::string& name);

 private:
  DataPlugin() = default;
  std::unique_ptr<Library> lib_;
  const partrain_strategy_v1_t* api_v1_ = nullptr;
  const partrain_strategy_v2_t* api_v2_ = nullptr;
  PluginInfo info_;
};

}  // namespace partrain::plugin
