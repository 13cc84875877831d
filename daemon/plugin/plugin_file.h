// What every plugin family's loader checks the same way before and around opening a
// shared object: the file and its directory are trusted (checked before dlopen, so an
// untrusted plugin never runs code), `<dir>/<name>.so` exists, and the plugin inside calls
// itself by the file's name. And PluginInfo, what `partrain plugins` shows about one.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace partrain::plugin {

// What `partrain plugins` shows about one plugin.
struct PluginInfo {
  std::string path;
  std::string name;
  std::string family;   // family_name()
  std::string version;  // the plugin's own
  std::string description;
  uint64_t capabilities = 0;
  int abi_version = 0;  // the N of the symbol it was loaded through
};

// "data", "tensor", "pipeline", "expert", "context", or "unknown" for a PARTRAIN_FAMILY_* value.
const char* family_name(int family);

// Refuses (invalid, naming the path and the fix) a regular file or directory writable by
// group or others or owned by anyone but root or the current user.
Status check_owner_and_mode(const std::string& path, bool is_dir);

// Refuses (invalid, naming both paths and the fix) a plugin at `path` that is a link whose
// real file lies outside the plugin directory (the folder `path` is in, resolved), then
// checks the real file and every folder from its own up to the plugin directory with
// check_owner_and_mode(): a link inside the directory to a world-writable folder is
// refused by that folder's name, whoever owns the link.
Status check_real_plugin_file(const std::string& path);

// Refuses (invalid) a plugin name that is not [A-Za-z0-9_.-]+ (at most 255 bytes): a name
// never reaches outside plugin_dir (PARTRAIN_DATA_PLUGIN=../elsewhere/evil is refused).
Status check_plugin_name_text(const std::string& name, const std::string& label);

// <dir>/<name>.so after check_plugin_name_text(), or not_found naming the site config's
// plugin_dir when it is absent. `label` names the kind in the message: "plugin", "tensor
// plugin", "schedule".
Result<std::string> plugin_file(const std::string& dir, const std::string& name,
                                const std::string& label);

// Refuses (invalid) a plugin at `path` whose struct calls itself `actual`, not `wanted`.
Status check_plugin_name(const std::string& path, const std::string& label,
                         const std::string& actual, const std::string& wanted);

}  // namespace partrain::plugin
