// What every plugin family's loader does the same way (the data family's loader.cc keeps
// its own, older path): check the file and its directory (loader.h's check_owner_and_mode,
// before dlopen), open it, probe the family's versioned symbol `<prefix><N>` newest first,
// refuse an exported version this partrain does not load or a struct whose leading
// abi_version disagrees with its symbol; and find `<dir>/<name>.so`. Used by
// schedule_loader.cc (partrain_schedule_v<N>) and tensor_loader.cc (partrain_tensor_v<N>).
#pragma once

#include <memory>
#include <string>

#include <boost/dll/shared_library.hpp>

#include "common/status.h"

namespace partrain::plugin {

struct FamilyAbi {
  std::string label;   // in messages: "schedule", "tensor"
  std::string prefix;  // symbol prefix: "partrain_schedule_v"
  int oldest = 1, newest = 1;
  std::string macro;   // the SDK macro that exports it: "PARTRAIN_SCHEDULE_PLUGIN from <...>"
};

// The table found: its address inside `lib` (which must stay loaded) and its version.
struct VersionedTable {
  const void* table = nullptr;
  int version = 0;
};

// Opens `path` into *lib and finds the newest supported table of `abi`. *exports (when not
// null) says whether the library exports any `<prefix><N>` at all, supported or not.
Result<VersionedTable> open_versioned(const std::string& path, const FamilyAbi& abi,
                                      boost::dll::shared_library* lib, bool* exports);

// <dir>/<name>.so, or not_found naming the site config's plugin_dir when it is absent.
Result<std::string> plugin_file(const std::string& dir, const std::string& name,
                                const std::string& label);

// Refuses (invalid) a plugin at `path` whose struct calls itself `actual`, not `wanted`.
Status check_plugin_name(const std::string& path, const std::string& label,
                         const std::string& actual, const std::string& wanted);

}  // namespace partrain::plugin
