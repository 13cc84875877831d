// The schedule side of the plugin loader against real shared objects: the shipped gpipe
// loads as a pipeline plugin; the refusals of the data family (missing symbol, wrong ABI,
// unsafe permissions, wrong name) hold for schedules too; `partrain plugins`' listing
// describes schedules instead of refusing them; an exception in a plugin comes back as an
// error.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "pipeline/check.h"
#include "pipeline/simulate.h"
#include "plugin/list.h"
#include "plugin/plugin_folder.h"
#include "plugin/schedule_loader.h"

namespace partrain::plugin {
namespace {

namespace fs = std::filesystem;

class ScheduleLoaderTest : public partrain::testing::PluginFolderTest {
 protected:
  std::string fixture(const std::string& name) {
    return std::string(PARTRAIN_FIXTURE_DIR) + "/" + name + ".so";
  }
  std::string shipped(const std::string& name) {
    return std::string(PARTRAIN_BUILD_PLUGINDIR) + "/" + name + ".so";
  }
};

TEST_F(ScheduleLoaderTest, ShippedScheduleLoadsAsPipelineFamily) {
  const std::string path = install(shipped("gpipe"), "gpipe.so");
  Result<std::unique_ptr<SchedulePlugin>> p = SchedulePlugin::find(dir_, "gpipe");
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_EQ((*p)->info().family, "pipeline");
  EXPECT_EQ((*p)->info().version, "1.0.0");
  EXPECT_EQ((*p)->info().abi_version, 1);
  EXPECT_EQ((*p)->info().path, path);
  Result<pipeline::Schedule> s = build_schedule(**p, 2, 2, 1);
  ASSERT_TRUE(s) << s.status().message();
  // GPipe, pp=2, m=2, rank 0: F0 send F1 send recv B0 recv B1.
  ASSERT_EQ(s->ranks[0].size(), 8u);
  EXPECT_EQ(s->ranks[0][1].kind, pipeline::Kind::kSendActivation);
  EXPECT_EQ(s->ranks[0][1].peer, 1);
  EXPECT_EQ(s->ranks[0][5].kind, pipeline::Kind::kBackward);
}

TEST_F(ScheduleLoaderTest, MissingSymbolIsRefused) {
  // The shipped data plugin dp exports partrain_strategy_v2 but no schedule.
  const std::string dp = install(shipped("dp"), "dp.so");
  Result<std::unique_ptr<SchedulePlugin>> p = SchedulePlugin::open(dp, nullptr);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(),
            dp + ": refused: missing symbol partrain_schedule_v1; export it with "
                 "PARTRAIN_SCHEDULE_PLUGIN from <partrain/schedule_sdk.h>");
}

TEST_F(ScheduleLoaderTest, WrongAbiIsRefused) {
  const std::string v9 = install(fixture("sched_v9"), "sched_v9.so");
  Result<std::unique_ptr<SchedulePlugin>> p = SchedulePlugin::open(v9, nullptr);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(),
            v9 + ": refused: unsupported schedule ABI version 9 (exports partrain_schedule_v9); "
                 "this partrain loads versions 1 to 1; rebuild the plugin against this "
                 "partrain's SDK headers");
  const std::string bad = install(fixture("sched_badabi"), "sched_badabi.so");
  p = SchedulePlugin::open(bad, nullptr);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(),
            bad + ": refused: unsupported schedule ABI version 2 (the partrain_schedule_v1 "
                  "struct says so); this partrain loads versions 1 to 1; rebuild the plugin "
                  "against this partrain's SDK headers");
}

TEST_F(ScheduleLoaderTest, UnsafePermissionsAreRefusedBeforeLoading) {
  const std::string path = install(shipped("gpipe"), "gpipe.so", 0775);
  Result<std::unique_ptr<SchedulePlugin>> p = SchedulePlugin::open(path, nullptr);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(),
            path + ": refused: the plugin is writable by group or others (mode 0775); run "
                   "chmod go-w " + path);
}

TEST_F(ScheduleLoaderTest, FileNamedAfterAnotherScheduleIsRefused) {
  install(shipped("gpipe"), "mine.so");
  Result<std::unique_ptr<SchedulePlugin>> p = SchedulePlugin::find(dir_, "mine");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(), dir_ + "/mine.so: refused: the schedule calls itself 'gpipe', "
                                         "not 'mine'; rename the file to gpipe.so");
  p = SchedulePlugin::find(dir_, "absent");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
}

TEST_F(ScheduleLoaderTest, ListingDescribesSchedulesAndKeepsOtherRefusals) {
  install(shipped("1f1b"), "1f1b.so");
  install(shipped("dp"), "dp.so");
  install(fixture("sched_none"), "none.so");
  install(fixture("sched_v9"), "sched_v9.so");
  Result<std::vector<ListEntry>> list = list_plugins(dir_);
  ASSERT_TRUE(list) << list.status().message();
  ASSERT_EQ(list->size(), 4u);
  EXPECT_TRUE((*list)[0].status);  // 1f1b.so
  EXPECT_EQ((*list)[0].info.family, "pipeline");
  EXPECT_TRUE((*list)[1].status);  // dp.so, a data plugin
  EXPECT_EQ((*list)[1].info.family, "data");
  EXPECT_FALSE((*list)[2].status);  // none.so: the data family's message
  EXPECT_NE((*list)[2].status.message().find("missing symbol partrain_strategy_v2"),
            std::string::npos);
  EXPECT_FALSE((*list)[3].status);  // sched_v9.so: the schedule family's message
  EXPECT_NE((*list)[3].status.message().find("unsupported schedule ABI version 9"),
            std::string::npos);
}

TEST_F(ScheduleLoaderTest, ExceptionInBuildBecomesAnError) {
  install(fixture("sched_throws"), "sched_throws.so");
  Result<std::unique_ptr<SchedulePlugin>> p = SchedulePlugin::find(dir_, "sched_throws");
  ASSERT_TRUE(p) << p.status().message();
  Result<pipeline::Schedule> s = build_schedule(**p, 2, 2, 1);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.status().code(), StatusCode::kInternal);
  EXPECT_EQ(s.status().message(),
            "partrain: schedule sched_throws (pp=2, m=2, v=1): sched_throws: out of ideas");
}

TEST_F(ScheduleLoaderTest, PlainCPluginLoadsAndPassesTheChecker) {
  install(fixture("sched_c"), "sched_c.so");
  Result<std::unique_ptr<SchedulePlugin>> p = SchedulePlugin::find(dir_, "sched_c");
  ASSERT_TRUE(p) << p.status().message();
  Result<pipeline::Schedule> s = build_schedule(**p, 3, 4, 1);
  ASSERT_TRUE(s) << s.status().message();
  Status ok = pipeline::check(*s);
  EXPECT_TRUE(ok) << ok.message();
  Result<pipeline::Timeline> t = pipeline::simulate(*s);
  ASSERT_TRUE(t);
  EXPECT_NEAR(t->bubble, 2.0 / 6.0, 1e-12);  // GPipe: (p-1)/(m+p-1) = 2/6
  s = build_schedule(**p, 3, 4, 2);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.status().message(),
            "partrain: schedule sched_c (pp=3, m=4, v=2): sched_c: one chunk per rank only (got "
            "v=2)");
}

}  // namespace
}  // namespace partrain::plugin
