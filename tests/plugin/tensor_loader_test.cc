// The tensor family's loader (daemon/plugin/tensor_loader.h) against the real tp plugin and
// a data plugin: tp loads as family "tensor" with ABI 1; a plugin without
// partrain_tensor_v1, a group-writable file and a file named differently are refused with
// their messages; `list_plugins` describes tp as a tensor plugin.
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "plugin/list.h"
#include "plugin/plugin_folder.h"
#include "plugin/schedule_loader.h"
#include "plugin/tensor_loader.h"

namespace partrain::plugin {
namespace {

namespace fs = std::filesystem;

class TensorLoaderTest : public partrain::testing::PluginFolderTest {
 protected:
  // The shipped plugin NAME.so of the build tree.
  static std::string built(const std::string& name) {
    return std::string(PARTRAIN_BUILD_PLUGINDIR) + "/" + name + ".so";
  }
};

TEST_F(TensorLoaderTest, TpLoadsAsATensorPlugin) {
  install(built("tp"), "tp.so");
  Result<std::unique_ptr<TensorPlugin>> p = TensorPlugin::find(dir_, "tp");
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_EQ((*p)->info().family, "tensor");
  EXPECT_EQ((*p)->info().abi_version, 1);
  EXPECT_EQ((*p)->info().name, "tp");
  EXPECT_NE((*p)->api()->reduce, nullptr);
  Result<std::vector<ListEntry>> list = list_plugins(dir_);
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_TRUE((*list)[0].status) << (*list)[0].status.message();
  EXPECT_EQ((*list)[0].info.family, "tensor");
}

TEST_F(TensorLoaderTest, RefusalsNameTheFileAndTheFix) {
  const std::string dp = install(built("dp"), "dp.so");
  Result<std::unique_ptr<TensorPlugin>> p = TensorPlugin::find(dir_, "dp");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(), dp + ": refused: missing symbol partrain_tensor_v1; export it "
                                        "with PARTRAIN_TENSOR_PLUGIN from <partrain/tensor_sdk.h>");
  const std::string other = install(built("tp"), "mytp.so");
  p = TensorPlugin::find(dir_, "mytp");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(), other + ": refused: the tensor plugin calls itself 'tp', not "
                                           "'mytp'; rename the file to tp.so");
  const std::string writable = install(built("tp"), "tp.so", 0775);
  p = TensorPlugin::find(dir_, "tp");
  ASSERT_FALSE(p);
  EXPECT_NE(p.status().message().find(writable), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("writable"), std::string::npos) << p.status().message();
  p = TensorPlugin::find(dir_, "absent");
  ASSERT_FALSE(p);
  EXPECT_NE(p.status().message().find("tensor plugin 'absent' is not installed"), std::string::npos);
}

}  // namespace
}  // namespace partrain::plugin
