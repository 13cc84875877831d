// Runs the built `partrain schedule` as a user would, against the build tree's plugins:
// the bubble fraction of each shipped schedule equals its closed form (worked out by
// hand below), the ASCII rows and the SVG are there, and bad input exits 2 with one line
// on stderr naming the fix.
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

#ifndef PARTRAIN_CLI
#error "PARTRAIN_CLI must name the partrain executable"
#endif

namespace {

using partrain::testing::Outcome;

// `partrain ARGS` with the build tree's plugins.
Outcome partrain(const std::string& args) {
  return partrain::testing::run_shell(std::string("PARTRAIN_SITE_CONFIG='") + PARTRAIN_SITE_CONFIG_FILE +
                                      "' '" + PARTRAIN_CLI + "' " + args);
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ScheduleCli, BubbleOfEachShippedScheduleForFourRanksAndEightMicroBatches) {
  // (p-1)/(m+p-1) = 3/11 for gpipe and 1f1b, (p-1)/(v*m+p-1) = 3/19 for interleaved:2,
  // (p-1)/(3m+p-1) = 3/27 for zbh1.
  const std::pair<const char*, const char*> cases[] = {{"gpipe", "0.2727"},
                                                       {"1f1b", "0.2727"},
                                                       {"interleaved:2", "0.1579"},
                                                       {"zbh1", "0.1111"}};
  for (const auto& [sched, bubble] : cases) {
    Outcome r = partrain(std::string("schedule --pp 4 --mb 8 --sched ") + sched);
    EXPECT_EQ(r.rc, 0) << sched << ": " << r.err;
    EXPECT_TRUE(has(r.out, std::string("bubble fraction ") + bubble)) << sched << ":\n" << r.out;
    EXPECT_TRUE(has(r.out, "\nrank 3  |")) << r.out;
  }
}

TEST(ScheduleCli, PeakInFlightPerRank) {
  Outcome r = partrain("schedule --pp 4 --mb 8 --sched 1f1b");
  ASSERT_EQ(r.rc, 0) << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    // 1F1B: p - rank micro-batches in flight on rank `rank`.
    EXPECT_TRUE(has(r.out, "peak in flight " + std::to_string(4 - rank) + "\n")) << r.out;
  }
  r = partrain("schedule --pp 4 --mb 8 --sched gpipe");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(has(r.out, "idle 27.3%, peak in flight 8\nrank 1")) << r.out;  // GPipe: m
}

TEST(ScheduleCli, CostsChangeTheTimelineNotTheFlatBubble) {
  // 1F1B's bubble does not depend on F and B: still 3/11 with F=1, B=3.
  Outcome r = partrain("schedule --pp 4 --mb 8 --sched 1f1b --costs 1,3,1");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(has(r.out, "costs F=1 B=3 W=1")) << r.out;
  EXPECT_TRUE(has(r.out, "makespan 44, bubble fraction 0.2727")) << r.out;  // (8+3) * (1+3)
}

TEST(ScheduleCli, WritesTheSvg) {
  const partrain::testing::ScratchDir dir;
  const std::string svg = (dir.path() / "schedule.svg").string();
  Outcome r = partrain("schedule --pp 2 --mb 2 --sched gpipe --svg '" + svg + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string doc = partrain::testing::slurp(svg);
  EXPECT_EQ(doc.rfind("<svg ", 0), 0u);
  EXPECT_TRUE(has(doc, "bubble fraction 0.3333"));  // (2-1)/(2+2-1)
}

TEST(ScheduleCli, BadInputExitsTwoWithOneLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"schedule --pp 2", "partrain: schedule needs --pp P and --mb M"},
      {"schedule --pp 0 --mb 4", "partrain: --pp 0 is outside 1..256"},
      {"schedule --pp 2 --mb 4 --costs 1,2", "give three numbers F,B,W"},
      {"schedule --pp 2 --mb 4 --costs 1,1,1", "must be less than the whole backward's"},
      {"schedule --pp 2 --mb 4 --sched nosuch", "schedule 'nosuch' is not installed"},
      {"schedule --pp 2 --mb 4 --sched interleaved", "(from --sched): interleaved needs a"},
      {"schedule --pp 4 --mb 6 --sched interleaved:2", "use m=8 or m=4"},
      {"schedule --pp 4 --mb 2 --sched 1f1b", "needs at least pp micro-batches"},
      {"schedule --job /nonexistent/job.toml", "/nonexistent/job.toml"},
  };
  for (const auto& [args, part] : cases) {
    Outcome r = partrain(args);
    EXPECT_EQ(r.rc, 2) << args;
    EXPECT_TRUE(has(r.err, part)) << args << ": " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << args << ": " << r.err;
  }
}

TEST(ScheduleCli, HelpNamesEveryOption) {
  Outcome r = partrain("schedule --help");
  EXPECT_EQ(r.rc, 0);
  for (const char* opt : {"--pp", "--mb", "--sched", "--costs", "--svg", "--job", "--site-config"}) {
    EXPECT_TRUE(has(r.out, opt)) << opt;
  }
}

}  // namespace
