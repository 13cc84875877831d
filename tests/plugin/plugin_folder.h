// The loader tests' plugin folder (tests/plugin, tests/pipeline's schedule loader): a
// scratch folder of mode 0755, as the loaders require of a plugin folder (one that anyone
// but its owner may write is refused), and install(FROM, FILE, MODE), which copies a built
// shared object in under FILE with MODE, e.g. install(built("tp"), "mytp.so", 0775).
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "test_util.h"

namespace partrain::testing {

class PluginFolderTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0); }

  // Copies `from` to dir_/FILE with `mode`; returns the copy's path.
  std::string install(const std::string& from, const std::string& file, mode_t mode = 0755) {
    const std::string to = dir_ + "/" + file;
    std::filesystem::copy_file(from, to);
    EXPECT_EQ(::chmod(to.c_str(), mode), 0) << to;
    return to;
  }

  const ScratchDir scratch_{"partrain-plugins"};
  const std::string dir_ = scratch_.path().string();
};

}  // namespace partrain::testing
