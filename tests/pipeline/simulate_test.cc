// The simulator and the drawings on hand-written schedules, against timelines worked out
// by hand (F=1, B=2 unless said otherwise).
#include <gtest/gtest.h>

#include "build_util.h"
#include "pipeline/render.h"
#include "pipeline/simulate.h"

namespace partrain::pipeline {
namespace {

using namespace testing;  // NOLINT: the F/B/... builders

TEST(Simulate, GpipeTwoByTwoByHand) {
  // rank 0: F0 [0,1] F1 [1,2] ... B0 [5,7] B1 [7,9]
  // rank 1: F0 [1,2] F1 [2,3] B0 [3,5] B1 [5,7]
  Result<Timeline> t = simulate(gpipe_2x2());
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_DOUBLE_EQ(t->makespan, 9.0);
  EXPECT_DOUBLE_EQ(t->ranks[0][5].start, 5.0);  // rank 0's B0
  EXPECT_DOUBLE_EQ(t->ranks[0][5].end, 7.0);
  EXPECT_DOUBLE_EQ(t->ranks[1][3].start, 2.0);  // rank 1's F1
  EXPECT_DOUBLE_EQ(t->busy[0], 6.0);
  EXPECT_DOUBLE_EQ(t->busy[1], 6.0);
  // 1 - 12 / (2 * 9) = 1/3 = (p-1)/(m+p-1).
  EXPECT_DOUBLE_EQ(t->bubble, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(t->rank_bubble(0), 1.0 / 3.0);
}

TEST(Simulate, TransferTimeDelaysTheReceiver) {
  // Each receive completes 0.5 after its send: rank 1 F0 [1.5,2.5] F1 [2.5,3.5]
  // B0 [3.5,5.5] B1 [5.5,7.5]; rank 0 B0 [6,8], B1 [8,10].
  Costs c;
  c.transfer = 0.5;
  Result<Timeline> t = simulate(gpipe_2x2(), c);
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_DOUBLE_EQ(t->makespan, 10.0);
  EXPECT_DOUBLE_EQ(t->ranks[1][1].start, 1.5);
  EXPECT_DOUBLE_EQ(t->ranks[0][7].start, 8.0);
}

TEST(Simulate, SplitBackwardCostsBMinusWThenW) {
  // F=1, B=3, W=1: backward-input 2, weight 1; one rank: 1 + 2 + 1.
  Costs c{1.0, 3.0, 1.0, 0.0};
  Result<Timeline> t = simulate(make(1, 1, 1, {{F(0), Bi(0), W(0)}}), c);
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_DOUBLE_EQ(t->ranks[0][1].end - t->ranks[0][1].start, 2.0);
  EXPECT_DOUBLE_EQ(t->ranks[0][2].end - t->ranks[0][2].start, 1.0);
  EXPECT_DOUBLE_EQ(t->makespan, 4.0);
  EXPECT_DOUBLE_EQ(t->bubble, 0.0);
}

TEST(Simulate, ChunksCostOneVthOfAStage) {
  // v=2 on one rank: each action costs half; F+F+B+B = 0.5+0.5+1+1.
  Result<Timeline> t = simulate(make(1, 1, 2, {{F(0, 0), F(0, 1), B(0, 1), B(0, 0)}}));
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_DOUBLE_EQ(t->makespan, 3.0);
}

TEST(Simulate, BadCostsAreRefused) {
  Costs c{1.0, 2.0, 2.0, 0.0};
  Result<Timeline> t = simulate(gpipe_2x2(), c);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.status().message(),
            "partrain: the weight-gradient cost (2.000000) must be less than the whole "
            "backward's (2.000000): W is part of B; e.g. --costs 1,2,1");
  EXPECT_FALSE(validate_costs(Costs{0.0, 2.0, 1.0, 0.0}));
}

TEST(Simulate, PeakInFlightCountsForwardsAwaitingBackward) {
  std::vector<InFlight> p = peak_in_flight(gpipe_2x2());
  EXPECT_EQ(p[0].activations, 2);
  EXPECT_EQ(p[1].activations, 2);
  // F0 F1 b0 F2 W0 b1 W1 b2 W2: at most 2 before their b, 3 before their W (after F2).
  p = peak_in_flight(make(1, 3, 1, {{F(0), F(1), Bi(0), F(2), W(0), Bi(1), W(1), Bi(2), W(2)}}));
  EXPECT_EQ(p[0].activations, 2);
  EXPECT_EQ(p[0].held, 3);
}

TEST(Render, AsciiOfGpipeTwoByTwo) {
  Schedule s = gpipe_2x2();
  Result<Timeline> t = simulate(s);
  ASSERT_TRUE(t);
  EXPECT_DOUBLE_EQ(column_unit(*t), 1.0);
  EXPECT_EQ(render_ascii(s, *t),
            "rank 0  |F0|F1|.........B0   |B1   |  idle 33.3%, peak in flight 2\n"
            "rank 1  |...F0|F1|B0   |B1   |......  idle 33.3%, peak in flight 2\n"
            "one column = 1 time unit; F forward, B backward, b backward-input, W weight "
            "gradient, . idle\n"
            "makespan 9, bubble fraction 0.3333 (33.3%)\n");
}

TEST(Render, HalfUnitColumnsForTwoChunks) {
  Schedule s = make(1, 1, 2, {{F(0, 0), F(0, 1), B(0, 1), B(0, 0)}});
  Result<Timeline> t = simulate(s);
  ASSERT_TRUE(t);
  EXPECT_DOUBLE_EQ(column_unit(*t), 0.5);
  const std::string a = render_ascii(s, *t);
  EXPECT_EQ(a.substr(0, a.find('\n')),
            "rank 0  |F0.0|F0.1|B0.1     |B0.0     |  idle 0.0%, peak in flight 2");
}

TEST(Render, SvgHasOneBoxPerComputeAction) {
  Schedule s = gpipe_2x2();
  Result<Timeline> t = simulate(s);
  ASSERT_TRUE(t);
  const std::string svg = render_svg(s, *t);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  size_t boxes = 0;
  for (size_t at = svg.find("<title>forward"); at != std::string::npos;
       at = svg.find("<title>", at + 1)) {
    ++boxes;
  }
  EXPECT_EQ(boxes, 8u);  // 4 forwards and 4 backwards, titled in that order from the first F
  EXPECT_NE(svg.find("<title>backward mb1 chunk0 7-9</title>"), std::string::npos);
  EXPECT_NE(svg.find("bubble fraction 0.3333"), std::string::npos);
}

}  // namespace
}  // namespace partrain::pipeline
