// `partrain plugins`: every *.so of a plugin directory, whatever its family, with its info
// or the reason it is refused.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "plugin/plugin_file.h"

namespace partrain::plugin {

struct ListEntry {
  std::string path;
  Status status;  // ok when info is valid
  PluginInfo info;
};

// Sorted by file name. A library that exports no family's symbol keeps the data family's
// refusal ("missing symbol partrain_strategy_v2").
Result<std::vector<ListEntry>> list_plugins(const std::string& dir);

}  // namespace partrain::plugin
