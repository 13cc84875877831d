// The expert-parallel side of the plugin loader: opens plugins that export the
// partrain_expert_v<N> struct of include/partrain/expert.h, with the refusals every family
// shares (versioned_library.h: unsafe permissions before dlopen, no supported symbol, an
// abi_version that disagrees, a file named differently from the plugin it holds).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "partrain/expert.h"
#include "plugin/loader.h"

namespace partrain::plugin {

inline constexpr int kExpertAbiVersion = PARTRAIN_EXPERT_ABI_VERSION;
inline constexpr int kOldestExpertAbiVersion = 1;

class ExpertPlugin {
 public:
  ~ExpertPlugin();
  ExpertPlugin(const ExpertPlugin&) = delete;
  ExpertPlugin& operator=(const ExpertPlugin&) = delete;

  const PluginInfo& info() const { return info_; }  // family "expert"
  const partrain_expert_v1_t* api() const { return api_; }

  struct Lib;  // Boost.DLL's shared_library, kept out of this header

 private:
  friend Result<std::unique_ptr<ExpertPlugin>> open_expert_plugin(const std::string& path,
                                                                  bool* exports_expert);
  ExpertPlugin() = default;
  std::unique_ptr<Lib> lib_;
  const partrain_expert_v1_t* api_ = nullptr;
  PluginInfo info_;
};

// Checks the file and its directory, opens it and finds the newest supported
// partrain_expert_v<N>. *exports_expert (when not null) says whether it exports any.
Result<std::unique_ptr<ExpertPlugin>> open_expert_plugin(const std::string& path,
                                                         bool* exports_expert);

// Loads <dir>/<name>.so as an expert plugin and checks that it calls itself `name`.
Result<std::unique_ptr<ExpertPlugin>> find_expert_plugin(const std::string& dir,
                                                         const std::string& name);

}  // namespace partrain::plugin
