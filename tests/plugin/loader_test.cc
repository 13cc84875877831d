// The plugin loader against real shared objects: a good plugin loads and describes itself;
// each refusal (missing symbol, unsupported ABI, group-writable file, world-writable
// directory, foreign owner, wrong name) carries its exact message; exceptions thrown in a
// plugin come back as error codes, never crossing the C boundary.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "plugin/loader.h"

namespace partrain::plugin {
namespace {

namespace fs = std::filesystem;

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/partrain_plugin_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Copies fixture NAME.so into the test folder as FILE with `mode`; returns its path.
  std::string install(const std::string& name, const std::string& file, mode_t mode = 0755) {
    const std::string to = dir_ + "/" + file;
    fs::copy_file(std::string(PARTRAIN_FIXTURE_DIR) + "/" + name + ".so", to);
    EXPECT_EQ(::chmod(to.c_str(), mode), 0);
    return to;
  }

  std::string dir_;
};

TEST_F(LoaderTest, GoodPluginLoadsWithItsDescription) {
  const std::string path = install("good", "good.so");
  Result<std::unique_ptr<Plugin>> p = load_plugin(path);
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_EQ((*p)->info().name, "good");
  EXPECT_EQ((*p)->info().family, "data");
  EXPECT_EQ((*p)->info().version, "2.3.4");
  EXPECT_EQ((*p)->info().abi_version, 1);
  EXPECT_EQ((*p)->info().capabilities, PARTRAIN_CAP_CPU);
  EXPECT_EQ((*p)->info().path, path);
}

TEST_F(LoaderTest, MissingSymbolIsRefused) {
  const std::string path = install("nosym", "nosym.so");
  Result<std::unique_ptr<Plugin>> p = load_plugin(path);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(),
            path + ": refused: missing symbol partrain_strategy_v1; export it with "
                   "PARTRAIN_STRATEGY_PLUGIN from <partrain/plugin_sdk.h>");
}

TEST_F(LoaderTest, FutureAbiIsRefused) {
  const std::string path = install("v7", "v7.so");
  Result<std::unique_ptr<Plugin>> p = load_plugin(path);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(),
            path + ": refused: unsupported ABI version 7 (exports partrain_strategy_v7); this "
                   "partrain loads versions 1 to 1; rebuild the plugin against this partrain's "
                   "SDK headers");
}

TEST_F(LoaderTest, StructClaimingAnotherAbiIsRefused) {
  const std::string path = install("badabi", "badabi.so");
  Result<std::unique_ptr<Plugin>> p = load_plugin(path);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(),
            path + ": refused: unsupported ABI version 2 (the partrain_strategy_v1 struct says "
                   "so); this partrain loads versions 1 to 1; rebuild the plugin against this "
                   "partrain's SDK headers");
}

TEST_F(LoaderTest, GroupWritableFileIsRefused) {
  const std::string path = install("good", "good.so", 0775);
  Result<std::unique_ptr<Plugin>> p = load_plugin(path);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(), path + ": refused: the plugin is writable by group or others "
                                         "(mode 0775); run chmod go-w " + path);
}

TEST_F(LoaderTest, WorldWritableDirectoryIsRefused) {
  const std::string path = install("good", "good.so");
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
  Result<std::unique_ptr<Plugin>> p = load_plugin(path);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(), dir_ + ": refused: the plugin directory is writable by group "
                                         "or others (mode 0777); run chmod go-w " + dir_);
}

TEST_F(LoaderTest, ForeignOwnerIsRefused) {
  const std::string path = install("good", "good.so");
  const uid_t stranger = ::geteuid() == 0 ? 54321 : ::geteuid() + 1;
  if (::chown(path.c_str(), stranger, static_cast<gid_t>(-1)) != 0) {
    GTEST_SKIP() << "cannot chown here (needs root)";
  }
  Result<std::unique_ptr<Plugin>> p = load_plugin(path);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(),
            path + ": refused: the plugin is owned by uid " + std::to_string(stranger) +
                ", neither root nor the current user (uid " + std::to_string(::geteuid()) +
                "); run chown root " + path);
}

TEST_F(LoaderTest, FindPluginChecksTheName) {
  install("good", "other.so");
  Result<std::unique_ptr<Plugin>> p = find_plugin(dir_, "other");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(), dir_ + "/other.so: refused: the plugin calls itself 'good', "
                                         "not 'other'; rename the file to good.so");
  Result<std::unique_ptr<Plugin>> none = find_plugin(dir_, "zero9");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.status().message(),
            "plugin 'zero9' is not installed: no " + dir_ + "/zero9.so (the site config's "
            "[paths] plugin_dir is " + dir_ + "; `partrain plugins` lists what is there)");
  install("good", "good.so");
  Result<std::unique_ptr<Plugin>> good = find_plugin(dir_, "good");
  ASSERT_TRUE(good) << good.status().message();
}

TEST_F(LoaderTest, ListShowsGoodAndRefusedPlugins) {
  install("good", "good.so");
  install("nosym", "nosym.so");
  Result<std::vector<ListEntry>> list = list_plugins(dir_);
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 2u);
  EXPECT_TRUE((*list)[0].status.is_ok());
  EXPECT_EQ((*list)[0].info.name, "good");
  EXPECT_FALSE((*list)[1].status.is_ok());
  EXPECT_NE((*list)[1].status.message().find("missing symbol"), std::string::npos);
}

TEST_F(LoaderTest, ExceptionsInThePluginBecomeErrorCodes) {
  Result<std::unique_ptr<Plugin>> p = load_plugin(install("good", "good.so"));
  ASSERT_TRUE(p);
  const partrain_strategy_v1_t& s = (*p)->strategy();
  partrain_comm_v1_t comm{};
  partrain_init_args_v1_t args{sizeof(partrain_init_args_v1_t), "fail", &comm, 0, 1, 0};
  char err[256] = {0};
  void* state = nullptr;
  EXPECT_EQ(s.init(&args, &state, err, sizeof err), PARTRAIN_EINVAL);
  EXPECT_STREQ(err, "[plugins.good]: fail was asked");
  args.config_toml = "std";
  EXPECT_EQ(s.init(&args, &state, err, sizeof err), PARTRAIN_EINTERNAL);
  EXPECT_STREQ(err, "a std::runtime_error from the plugin");
  args.config_toml = "int";
  EXPECT_EQ(s.init(&args, &state, err, sizeof err), PARTRAIN_EINTERNAL);
  EXPECT_STREQ(err, "unknown exception in plugin");
  args.config_toml = "";
  ASSERT_EQ(s.init(&args, &state, err, sizeof err), PARTRAIN_OK);
  ASSERT_NE(state, nullptr);
  s.finalize(state);
}

}  // namespace
}  // namespace partrain::plugin
