// The step tracer: which steps it records, and that its file is a Chrome/Perfetto trace
// (an object with a traceEvents array of "X" events carrying ts, dur, pid and tid).
#include "common/trace.h"

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "engine/io/json.h"
#include "test_util.h"

namespace partrain::trace {
namespace {

using engine::io::JsonValue;

const JsonValue* member(const JsonValue& v, const std::string& key) {
  for (const auto& [k, value] : v.members) {
    if (k == key) return &value;
  }
  return nullptr;
}

std::string text_of(const JsonValue& e, const std::string& key) {
  const JsonValue* v = member(e, key);
  return v != nullptr ? v->text : "";
}

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override { reset(); }
  void TearDown() override { reset(); }
  JsonValue read(const std::string& path) {
    Result<JsonValue> v = engine::io::parse_json(partrain::testing::slurp(path));
    EXPECT_TRUE(v.is_ok()) << v.status().message();
    return v.is_ok() ? *v : JsonValue{};
  }
  const partrain::testing::ScratchDir scratch_{"partrain-trace"};
  const std::string dir_ = scratch_.path().string();
};

TEST(StepSet, ParsesSinglesRangesAndLists) {
  Result<StepSet> s = StepSet::parse("1,4,10-12");
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_TRUE(s->contains(1));
  EXPECT_FALSE(s->contains(2));
  EXPECT_TRUE(s->contains(4));
  EXPECT_TRUE(s->contains(11));
  EXPECT_FALSE(s->contains(13));
  EXPECT_EQ(s->last(), 12);
}

TEST(StepSet, RefusesWhatIsNotAStepList) {
  for (const char* bad : {"", "0", "3-1", "a", "2-", "-2", "1,,2", "1.5"}) {
    Result<StepSet> s = StepSet::parse(bad);
    ASSERT_FALSE(s.is_ok()) << bad;
    EXPECT_EQ(s.status().message(),
              std::string("--trace '") + bad +
                  "': need steps as N, A-B or a comma list of them (1-based), e.g. --trace 5-7");
  }
}

TEST_F(TraceTest, RecordsOnlyTheTracedStepsAndWritesAPerfettoFile) {
  const std::string path = dir_ + "/trace/rank-3.json";
  configure(*StepSet::parse("2"), path, 3, "rank 3");
  begin_step(1);
  EXPECT_FALSE(active());
  { Span s("forward", Lane::kCompute, 0); }
  end_step(1);
  begin_step(2);
  EXPECT_TRUE(active());
  { Span s("forward", Lane::kCompute, 1); }
  record("all_reduce", Lane::kComm, 100, 250, "dp0");
  record("all_gather", Lane::kComm, 300, 310, "tp0");
  end_step(2);  // the last traced step: the file is written now
  begin_step(3);
  record("all_reduce", Lane::kComm, 400, 500, "dp0");
  end_step(3);

  const JsonValue doc = read(path);
  const JsonValue* events = member(doc, "traceEvents");
  ASSERT_NE(events, nullptr);
  int spans = 0, lanes = 0;
  for (const JsonValue& e : events->items) {
    EXPECT_EQ(text_of(e, "pid"), "3");
    if (text_of(e, "ph") == "M" && text_of(e, "name") == "thread_name") ++lanes;
    if (text_of(e, "ph") != "X") continue;
    ++spans;
    EXPECT_EQ(text_of(*member(e, "args"), "step"), "2");
    if (text_of(e, "name") == "all_reduce") {
      EXPECT_EQ(text_of(e, "ts"), "100");
      EXPECT_EQ(text_of(e, "dur"), "150");
      EXPECT_EQ(text_of(e, "tid"), "2");
    }
    if (text_of(e, "name") == "all_gather") {
      EXPECT_EQ(text_of(e, "tid"), "3");
    }
    if (text_of(e, "name") == "forward") {
      EXPECT_EQ(text_of(e, "tid"), "0");
      EXPECT_EQ(text_of(*member(e, "args"), "micro_batch"), "1");
    }
  }
  EXPECT_EQ(spans, 3);  // forward, all_reduce, all_gather of step 2; nothing of steps 1 and 3
  EXPECT_EQ(lanes, 4);  // compute, checkpoint io, comm dp0, comm tp0
}

TEST_F(TraceTest, ASpanBegunInATracedStepIsKeptWhenItEndsAfterIt) {
  const std::string path = dir_ + "/late.json";
  configure(*StepSet::parse("1,3"), path, 0, "rank 0");
  begin_step(1);
  auto late = std::make_unique<Span>("checkpoint write and commit", Lane::kIo);
  end_step(1);
  begin_step(2);  // not traced: a background write of step 1's save still ends in the trace
  late.reset();
  { Span s("forward"); }
  end_step(2);
  ASSERT_TRUE(flush().is_ok());
  const JsonValue doc = read(path);
  int spans = 0;
  for (const JsonValue& e : member(doc, "traceEvents")->items) {
    if (text_of(e, "ph") != "X") continue;
    ++spans;
    EXPECT_EQ(text_of(e, "name"), "checkpoint write and commit");
    EXPECT_EQ(text_of(e, "tid"), "1");
    EXPECT_EQ(text_of(*member(e, "args"), "step"), "1");  // the step it began in, not step 2
  }
  EXPECT_EQ(spans, 1);
}

TEST_F(TraceTest, UnconfiguredTracerRecordsNothingAndWritesNothing) {
  begin_step(1);
  EXPECT_FALSE(active());
  record("all_reduce", Lane::kComm, 1, 2, "dp0");
  EXPECT_TRUE(flush().is_ok());
}

TEST_F(TraceTest, EnvironmentChoosesTheStepsAndTheFile) {
  ::setenv("PARTRAIN_TRACE", "x", 1);
  Status bad = configure_from_env(dir_, 0, "rank 0");
  EXPECT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("PARTRAIN_TRACE: --trace 'x'"), std::string::npos) << bad.message();
  ::setenv("PARTRAIN_TRACE", "1", 1);
  ASSERT_TRUE(configure_from_env(dir_, 5, "rank 5").is_ok());
  ::unsetenv("PARTRAIN_TRACE");
  begin_step(1);
  { Span s("optimizer"); }
  end_step(1);
  const JsonValue doc = read(dir_ + "/trace/rank-5.json");
  ASSERT_NE(member(doc, "traceEvents"), nullptr);
  EXPECT_EQ(member(doc, "traceEvents")->items.size(), 4u);  // process name, 2 lanes, 1 span
}

TEST_F(TraceTest, UnwritableFolderIsAnIoErrorNamingTheFile) {
  configure(*StepSet::parse("1"), "/proc/partrain-no/trace/rank-0.json", 0, "rank 0");
  Status s = flush();
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("/proc/partrain-no/trace/rank-0.json: cannot write the trace"), std::string::npos);
}

}  // namespace
}  // namespace partrain::trace
