// The shipped schedule plugins (plugins/pipeline/*), loaded from the build tree's plugin
// directory as partrain loads them: each passes the checker over a grid of (p, m, v), and
// its simulated bubble fraction and peak in-flight micro-batches equal the closed forms
// (worked out by hand; see each expectation), never numbers taken from the simulator.
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "pipeline/check.h"
#include "pipeline/simulate.h"
#include "plugin/schedule_loader.h"

namespace partrain::pipeline {
namespace {

std::unique_ptr<plugin::SchedulePlugin> load(const std::string& name) {
  Result<std::unique_ptr<plugin::SchedulePlugin>> p =
      plugin::SchedulePlugin::find(PARTRAIN_BUILD_PLUGINDIR, name);
  EXPECT_TRUE(p) << p.status().message();
  return p ? std::move(*p) : nullptr;
}

// Builds, checks and simulates; fails the test on any refusal.
struct Simulated {
  Schedule schedule;
  Timeline timeline;
};
Simulated run(const plugin::SchedulePlugin& plug, int p, int m, int v, const Costs& c = {}) {
  Simulated r;
  Result<Schedule> s = plugin::build_schedule(plug, p, m, v);
  EXPECT_TRUE(s) << s.status().message();
  if (!s) return r;
  r.schedule = *s;
  Status ok = check(r.schedule);
  EXPECT_TRUE(ok) << ok.message();
  Result<Timeline> t = simulate(r.schedule, c);
  EXPECT_TRUE(t) << t.status().message();
  if (t) r.timeline = *t;
  return r;
}

const int kPipelines[] = {1, 2, 3, 4, 6, 8};

// Uniform stages: the last micro-batch leaves rank p-1's forward after (m+p-1) F and its
// backward reaches rank 0 after (m+p-1) B more; every rank computes m (F+B) of it, so
// bubble = 1 - m(F+B) / ((m+p-1)(F+B)) = (p-1)/(m+p-1), whatever F and B are.
double flat_bubble(int p, int m) { return (p - 1.0) / (m + p - 1.0); }

TEST(Schedules, GpipeBubbleAndMemory) {
  auto g = load("gpipe");
  ASSERT_TRUE(g);
  for (int p : kPipelines) {
    for (int m : {1, p, 2 * p + 1, 4 * p}) {
      for (const Costs& c : {Costs{}, Costs{1, 3, 1, 0}, Costs{2, 3, 1, 0}}) {
        SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
        Simulated r = run(*g, p, m, 1, c);
        EXPECT_NEAR(r.timeline.bubble, flat_bubble(p, m), 1e-12);
        for (const InFlight& f : peak_in_flight(r.schedule)) EXPECT_EQ(f.activations, m);
      }
    }
  }
}

TEST(Schedules, OneFOneBBubbleAndMemory) {
  auto s = load("1f1b");
  ASSERT_TRUE(s);
  for (int p : kPipelines) {
    for (int m : {p, p + 1, 2 * p, 4 * p + 3}) {
      for (const Costs& c : {Costs{}, Costs{1, 3, 1, 0}}) {
        SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
        Simulated r = run(*s, p, m, 1, c);
        EXPECT_NEAR(r.timeline.bubble, flat_bubble(p, m), 1e-12);
        // Rank r runs p-r-1 warm-up forwards plus one before its first backward: p-r in
        // flight, so p on stage 0 and never more.
        std::vector<InFlight> f = peak_in_flight(r.schedule);
        for (int rank = 0; rank < p; ++rank) EXPECT_EQ(f[rank].activations, p - rank);
      }
    }
  }
}

// Interleaved, v chunks per rank, each chunk costing F/v forward and B/v backward: the
// work per rank is still m(F+B), but filling and draining the pipeline now takes p-1
// chunk-slots of (F+B)/v instead of p-1 stage-slots of F+B (Narayanan et al. 2021,
// section 2.2.2), so makespan = m(F+B) + (p-1)(F+B)/v and
// bubble = ((p-1)(F+B)/v) / (m(F+B) + (p-1)(F+B)/v) = (p-1)/(v*m+p-1).
// E.g. p=2, m=2, v=2, F=1, B=2: makespan 2*3 + 1*3/2 = 7.5, bubble 1.5/7.5 = 0.2 = 1/5.
TEST(Schedules, InterleavedBubbleIsDividedByV) {
  auto s = load("interleaved");
  ASSERT_TRUE(s);
  for (int p : kPipelines) {
    for (int v : {2, 3, 4}) {
      for (int m : {p, 2 * p, 3 * p}) {
        SCOPED_TRACE("p=" + std::to_string(p) + " v=" + std::to_string(v) + " m=" +
                     std::to_string(m));
        Simulated r = run(*s, p, m, v);
        EXPECT_NEAR(r.timeline.bubble, (p - 1.0) / (v * m + p - 1.0), 1e-12);
      }
    }
  }
}

// ZB-H1 with F = b = W = 1 (the default costs: B = 2 split into b = 1 and W = 1): the
// paper's bubble (p-1)(F + b - W) = p-1 time units next to m(F + b + W) = 3m of work per
// rank, so (p-1)/(3m+p-1), a third of 1F1B's idle time (p-1)(F+B) = 3(p-1).
TEST(Schedules, Zbh1BeatsOneFOneBAtTheSameMemory) {
  auto z = load("zbh1");
  auto o = load("1f1b");
  ASSERT_TRUE(z && o);
  for (int p : kPipelines) {
    for (int m : {p, p + 1, 2 * p, 4 * p + 3}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      Simulated r = run(*z, p, m, 1);
      EXPECT_NEAR(r.timeline.bubble, (p - 1.0) / (3.0 * m + p - 1.0), 1e-12);
      if (p > 1) {
        EXPECT_LT(r.timeline.bubble, flat_bubble(p, m));
      }
      std::vector<InFlight> f = peak_in_flight(r.schedule);
      for (int rank = 0; rank < p; ++rank) {
        EXPECT_EQ(f[rank].activations, p - rank);  // as 1F1B
        EXPECT_LE(f[rank].held, p);                // weight-gradient inputs too
      }
      // Other costs: still below 1F1B's bubble.
      const Costs c{1, 3, 1, 0};
      if (p > 1) {
        EXPECT_LT(run(*z, p, m, 1, c).timeline.bubble, run(*o, p, m, 1, c).timeline.bubble);
      }
    }
  }
}

TEST(Schedules, RefusalsSayWhatWouldWork) {
  auto o = load("1f1b");
  auto i = load("interleaved");
  auto g = load("gpipe");
  ASSERT_TRUE(o && i && g);
  Result<Schedule> s = build_schedule(*o, 4, 2, 1);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.status().message(),
            "partrain: schedule 1f1b (pp=4, m=2, v=1): 1f1b: needs at least pp micro-batches "
            "(m=2 < pp=4); raise global_batch or lower micro_batch, or use gpipe");
  s = build_schedule(*i, 4, 6, 2);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.status().message(),
            "partrain: schedule interleaved (pp=4, m=6, v=2): interleaved: the micro-batch count "
            "must be a multiple of pp (m=6, pp=4); use m=8 or m=4");
  s = build_schedule(*g, 2, 4, 2);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace partrain::pipeline
