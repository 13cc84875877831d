// The strategy-plugin loader: finds, checks and opens plugins (Boost.DLL) from the site
// config's plugin directory only. A plugin is refused, before any of its code runs, when
// its file or the directory is writable by group or others or owned by anyone but root or
// the current user; and, once opened, when it exports no partrain_strategy_v<N> this
// partrain supports. Every refusal names the file, the reason and the fix.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "partrain/plugin.h"

namespace partrain::plugin {

// ABI versions this partrain can load, newest first when probing (NCCL's model: v2, then v1).
inline constexpr int kAbiVersion = PARTRAIN_PLUGIN_ABI_VERSION;
inline constexpr int kOldestAbiVersion = 1;

// "data", "tensor", "pipeline", "expert", or "unknown".
const char* family_name(int family);

// What `partrain plugins` shows about one plugin.
struct PluginInfo {
  std::string path;
  std::string name;
  std::string family;
  std::string version;
  std::string description;
  uint64_t capabilities = 0;
  int abi_version = 0;
};

// An opened plugin. The shared object stays loaded while this object lives; the strategy
// table points into it.
class Plugin {
 public:
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;
  const PluginInfo& info() const { return info_; }
  // The table the plugin exports: exactly one of these is non-null (info().abi_version says
  // which). The host drives a v1 plugin through its v1 table (stage 0 only).
  const partrain_strategy_v2_t* v2() const { return api_v2_; }
  const partrain_strategy_v1_t* v1() const { return api_v1_; }

  struct Lib;  // Boost.DLL's shared_library, kept out of this header

 private:
  friend Result<std::unique_ptr<Plugin>> load_plugin(const std::string& path);
  Plugin() = default;
  std::unique_ptr<Lib> lib_;
  const partrain_strategy_v1_t* api_v1_ = nullptr;
  const partrain_strategy_v2_t* api_v2_ = nullptr;
  PluginInfo info_;
};

// Refuses (invalid, naming the path and the fix) a regular file or directory writable by
// group or others or owned by anyone but root or the current user.
Status check_owner_and_mode(const std::string& path, bool is_dir);

// Checks the file and its directory, opens it and finds the newest supported symbol.
Result<std::unique_ptr<Plugin>> load_plugin(const std::string& path);

// Loads <dir>/<name>.so and checks that it calls itself `name`.
Result<std::unique_ptr<Plugin>> find_plugin(const std::string& dir, const std::string& name);

// Every *.so in `dir`, sorted by file name: its info, or why it is refused.
struct ListEntry {
  std::string path;
  Status status;  // ok when info is valid
  PluginInfo info;
};
Result<std::vector<ListEntry>> list_plugins(const std::string& dir);

}  // namespace partrain::plugin
