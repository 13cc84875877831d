// A data plugin's refusals of bad [plugins.NAME] tables, through its own ABI v2 init: each
// table given to plugin `name` of the build's plugin folder (a two-rank group, 100 elements)
// is refused with PARTRAIN_EINVAL and exactly its message, e.g.
//
//   expect_tables_refused("onebit", {{"chunk = -2\n", "[plugins.onebit] chunk: ..."}});
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "plugin/data_loader.h"

namespace partrain::testing {

inline void expect_tables_refused(const std::string& name,
                                  const std::vector<std::pair<std::string, std::string>>& cases) {
  Result<std::unique_ptr<plugin::DataPlugin>> p = plugin::DataPlugin::find(PARTRAIN_BUILD_PLUGINDIR, name);
  ASSERT_TRUE(p) << p.status().message();
  for (const auto& [table, message] : cases) {
    partrain_comm_v2_t comm{};
    comm.size = 2;
    partrain_init_args_v2_t args{sizeof args, table.c_str(), &comm, 0, 2, 100, 0};
    partrain_data_plan_v2_t plan{sizeof plan, 0, 0, 100, 1};
    void* state = nullptr;
    char err[256] = {0};
    EXPECT_EQ((*p)->v2()->init(&args, &plan, &state, err, sizeof err), PARTRAIN_EINVAL) << table;
    EXPECT_STREQ(err, message.c_str()) << table;
  }
}

}  // namespace partrain::testing
