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

#include "plugin/data_loader.h"
#include "plugin/list.h"
#include "plugin/plugin_folder.h"

namespace partrain::plugin {
namespace {

namespace fs = std::filesystem;

class LoaderTest : public partrain::testing::PluginFolderTest {
 protected:
  // The test plugin NAME.so built from fixtures/.
  static std::string fixture(const std::string& name) {
    return std::string(PARTRAIN_FIXTURE_DIR) + "/" + name + ".so";
  }
};

TEST_F(LoaderTest, GoodPluginLoadsWithItsDescription) {
  const std::string path = install(fixture("good"), "good.so");
  Result<std::unique_ptr<DataPlugin>> p = DataPlugin::open(path);
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_EQ((*p)->info().name, "good");
  EXPECT_EQ((*p)->info().family, "data");
  EXPECT_EQ((*p)->info().version, "2.3.4");
  EXPECT_EQ((*p)->info().abi_version, 2);  // the SDK macro exports partrain_strategy_v2
  ASSERT_NE((*p)->v2(), nullptr);
  EXPECT_EQ((*p)->v1(), nullptr);
  EXPECT_EQ((*p)->info().capabilities, PARTRAIN_CAP_CPU);
  EXPECT_EQ((*p)->info().path, path);
}

TEST_F(LoaderTest, MissingSymbolIsRefused) {
  const std::string path = install(fixture("nosym"), "nosym.so");
  Result<std::unique_ptr<DataPlugin>> p = DataPlugin::open(path);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(),
            path + ": refused: missing symbol partrain_strategy_v2; export it with "
                   "PARTRAIN_STRATEGY_PLUGIN from <partrain/data_sdk.h>");
}

TEST_F(LoaderTest, FutureAbiIsRefused) {
  const std::string path = install(fixture("v7"), "v7.so");
  Result<std::unique_ptr<DataPlugin>> p = DataPlugin::open(path);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(),
            path + ": refused: unsupported ABI version 7 (exports partrain_strategy_v7); this "
                   "partrain loads versions 1 to 2; rebuild the plugin against this partrain's "
                   "SDK headers");
}

TEST_F(LoaderTest, StructClaimingAnotherAbiIsRefused) {
  const std::string path = install(fixture("badabi"), "badabi.so");
  Result<std::unique_ptr<DataPlugin>> p = DataPlugin::open(path);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(),
            path + ": refused: unsupported ABI version 2 (the partrain_strategy_v1 struct says "
                   "so); this partrain loads versions 1 to 2; rebuild the plugin against this "
                   "partrain's SDK headers");
}

TEST_F(LoaderTest, GroupWritableFileIsRefused) {
  const std::string path = install(fixture("good"), "good.so", 0775);
  Result<std::unique_ptr<DataPlugin>> p = DataPlugin::open(path);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(), path + ": refused: the plugin is writable by group or others "
                                         "(mode 0775); run chmod go-w " + path);
}

TEST_F(LoaderTest, WorldWritableDirectoryIsRefused) {
  const std::string path = install(fixture("good"), "good.so");
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
  Result<std::unique_ptr<DataPlugin>> p = DataPlugin::open(path);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(), dir_ + ": refused: the plugin directory is writable by group "
                                         "or others (mode 0777); run chmod go-w " + dir_);
}

// A link in the plugin folder is followed to its real file: one out of the folder is
// refused naming both (the file it points at may sit in a folder anyone can write), and
// one to a subfolder anyone may write is refused by that folder's name.
TEST_F(LoaderTest, LinkOutOfThePluginDirectoryIsRefused) {
  const partrain::testing::ScratchDir outside("partrain_plugin_outside");
  const std::string target = outside.path().string() + "/good.so";
  fs::copy_file(fixture("good"), target);
  ASSERT_EQ(::chmod(outside.path().c_str(), 0777), 0);  // world-writable, as /tmp
  fs::create_symlink(target, dir_ + "/good.so");
  Result<std::unique_ptr<DataPlugin>> p = DataPlugin::open(dir_ + "/good.so");
  ASSERT_FALSE(p);
  const std::string real_dir = fs::canonical(dir_).string();
  EXPECT_EQ(p.status().message(), dir_ + "/good.so: refused: a link out of the plugin directory " + real_dir +
                                      " (to " + fs::canonical(target).string() + "); copy the library itself into " +
                                      real_dir);
}

TEST_F(LoaderTest, LinkToAWritableSubfolderIsRefused) {
  fs::create_directory(dir_ + "/sub");
  const std::string target = install(fixture("good"), "sub/good.so");
  ASSERT_EQ(::chmod((dir_ + "/sub").c_str(), 0777), 0);
  fs::create_symlink(target, dir_ + "/good.so");
  Result<std::unique_ptr<DataPlugin>> p = DataPlugin::open(dir_ + "/good.so");
  ASSERT_FALSE(p);
  const std::string sub = fs::canonical(dir_ + "/sub").string();
  EXPECT_EQ(p.status().message(), sub + ": refused: the plugin directory is writable by group or others "
                                        "(mode 0777); run chmod go-w " + sub);
  // The same link into a folder only its owner writes loads.
  ASSERT_EQ(::chmod((dir_ + "/sub").c_str(), 0755), 0);
  EXPECT_TRUE(DataPlugin::open(dir_ + "/good.so").is_ok());
}

TEST_F(LoaderTest, ForeignOwnerIsRefused) {
  const std::string path = install(fixture("good"), "good.so");
  const uid_t stranger = ::geteuid() == 0 ? 54321 : ::geteuid() + 1;
  if (::chown(path.c_str(), stranger, static_cast<gid_t>(-1)) != 0) {
    GTEST_SKIP() << "cannot chown here (needs root)";
  }
  Result<std::unique_ptr<DataPlugin>> p = DataPlugin::open(path);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(),
            path + ": refused: the plugin is owned by uid " + std::to_string(stranger) +
                ", neither root nor the current user (uid " + std::to_string(::geteuid()) +
                "); run chown root " + path);
}

TEST_F(LoaderTest, FindPluginChecksTheName) {
  install(fixture("good"), "other.so");
  Result<std::unique_ptr<DataPlugin>> p = DataPlugin::find(dir_, "other");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(), dir_ + "/other.so: refused: the plugin calls itself 'good', "
                                         "not 'other'; rename the file to good.so");
  Result<std::unique_ptr<DataPlugin>> none = DataPlugin::find(dir_, "zero9");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.status().message(),
            "plugin 'zero9' is not installed: no " + dir_ + "/zero9.so (the site config's "
            "[paths] plugin_dir is " + dir_ + "; `partrain plugins` lists what is there)");
  install(fixture("good"), "good.so");
  Result<std::unique_ptr<DataPlugin>> good = DataPlugin::find(dir_, "good");
  ASSERT_TRUE(good) << good.status().message();
}

TEST_F(LoaderTest, ListShowsGoodAndRefusedPlugins) {
  install(fixture("good"), "good.so");
  install(fixture("nosym"), "nosym.so");
  Result<std::vector<ListEntry>> list = list_plugins(dir_);
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 2u);
  EXPECT_TRUE((*list)[0].status.is_ok());
  EXPECT_EQ((*list)[0].info.name, "good");
  EXPECT_FALSE((*list)[1].status.is_ok());
  EXPECT_NE((*list)[1].status.message().find("missing symbol"), std::string::npos);
}

TEST_F(LoaderTest, ExceptionsInThePluginBecomeErrorCodes) {
  Result<std::unique_ptr<DataPlugin>> p = DataPlugin::open(install(fixture("good"), "good.so"));
  ASSERT_TRUE(p);
  const partrain_strategy_v2_t& s = *(*p)->v2();
  partrain_comm_v2_t comm{};
  partrain_init_args_v2_t args{sizeof(partrain_init_args_v2_t), "fail", &comm, 0, 1, 0, 0};
  partrain_data_plan_v2_t plan{sizeof(partrain_data_plan_v2_t), 0, 0, 0, 1};
  char err[256] = {0};
  void* state = nullptr;
  EXPECT_EQ(s.init(&args, &plan, &state, err, sizeof err), PARTRAIN_EINVAL);
  EXPECT_STREQ(err, "[plugins.good]: fail was asked");
  args.config_toml = "std";
  EXPECT_EQ(s.init(&args, &plan, &state, err, sizeof err), PARTRAIN_EINTERNAL);
  EXPECT_STREQ(err, "a std::runtime_error from the plugin");
  args.config_toml = "int";
  EXPECT_EQ(s.init(&args, &plan, &state, err, sizeof err), PARTRAIN_EINTERNAL);
  EXPECT_STREQ(err, "unknown exception in plugin");
  args.config_toml = "";
  ASSERT_EQ(s.init(&args, &plan, &state, err, sizeof err), PARTRAIN_OK);
  ASSERT_NE(state, nullptr);
  // A stage-0 plugin that does not override params_gather refuses it with a message.
  float buf[2] = {0, 0};
  EXPECT_EQ(s.params_gather(state, buf, buf, 0, 2, err, sizeof err), PARTRAIN_EINTERNAL);
  EXPECT_STREQ(err, "this plugin shards no parameters (params_gather)");
  s.finalize(state);
}

// A one-rank communicator of ABI v1 for driving a v1 plugin: the average over one rank
// is the data itself, so the test sees what the plugin asked of it.
struct OneRank {
  size_t reduced = 0;
  int op = -1;
};
int one_rank_all_reduce(void* ctx, float* /*data*/, size_t count, int op, void** work, char*,
                        size_t) {
  static_cast<OneRank*>(ctx)->reduced += count;
  static_cast<OneRank*>(ctx)->op = op;
  *work = ctx;
  return PARTRAIN_OK;
}
int one_rank_wait(void* ctx, void* work, char*, size_t) {
  return work == ctx ? PARTRAIN_OK : PARTRAIN_EINTERNAL;
}

// A plugin built against ABI v1 only still loads (the loader probes v2, then v1) and the
// host drives it through its v1 table.
TEST_F(LoaderTest, VersionOnePluginStillLoadsAndRuns) {
  const std::string path = install(fixture("v1only"), "v1only.so");
  Result<std::unique_ptr<DataPlugin>> p = DataPlugin::open(path);
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_EQ((*p)->info().abi_version, 1);
  EXPECT_EQ((*p)->info().name, "v1only");
  EXPECT_EQ((*p)->v2(), nullptr);
  ASSERT_NE((*p)->v1(), nullptr);
  const partrain_strategy_v1_t& s = *(*p)->v1();
  OneRank ctx;
  partrain_comm_v1_t comm{&ctx, 0, 1, &one_rank_all_reduce, &one_rank_wait};
  partrain_init_args_v1_t args{sizeof(partrain_init_args_v1_t), "", &comm, 0, 1, 3};
  char err[256] = {0};
  void* state = nullptr;
  ASSERT_EQ(s.init(&args, &state, err, sizeof err), PARTRAIN_OK) << err;
  float grads[3] = {1, 2, 3};
  partrain_sync_stats_v1_t stats{};
  ASSERT_EQ(s.grads_done(state, grads, &stats, err, sizeof err), PARTRAIN_OK) << err;
  EXPECT_EQ(ctx.reduced, 3u);
  EXPECT_EQ(ctx.op, PARTRAIN_REDUCE_AVG);
  EXPECT_EQ(stats.collectives, 1u);
  s.finalize(state);
}

}  // namespace
}  // namespace partrain::plugin
