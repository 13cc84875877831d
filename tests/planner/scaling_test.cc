// Scaling tables by hand arithmetic: strong scaling (same global batch), weak scaling (same
// tokens per rank), the baseline being the fewest ranks, step 1 left out as warm-up; the
// SVG has one loss curve per run and the speedup points.
#include <gtest/gtest.h>

#include <string>

#include "planner/scaling.h"

namespace partrain::planner {
namespace {

RunSeries series(const std::string& name, int ranks, double tokens, std::vector<double> ms) {
  RunSeries s;
  s.name = name;
  s.ranks = ranks;
  s.tokens_per_step = tokens;
  for (size_t i = 0; i < ms.size(); ++i) {
    s.steps.push_back(static_cast<int64_t>(i) + 1);
    s.loss.push_back(5.0 - 0.1 * static_cast<double>(i));
  }
  s.step_ms = std::move(ms);
  return s;
}

TEST(PlannerScaling, StrongScalingAgainstTheFewestRanks) {
  // Given out of order; step 1 (900 ms) is warm-up; medians 100 and 60 ms.
  const std::vector<RunSeries> runs = {series("dp2", 2, 1024, {900, 60, 61, 59}),
                                       series("one", 1, 1024, {900, 100, 99, 101})};
  Result<ScalingReport> r = scaling_report(runs);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->kind, ScalingKind::kStrong);
  ASSERT_EQ(r->rows.size(), 2u);
  EXPECT_EQ(r->rows[0].name, "one");
  EXPECT_DOUBLE_EQ(r->rows[0].step_ms, 100);
  EXPECT_DOUBLE_EQ(r->rows[0].tokens_per_s, 10240);
  EXPECT_DOUBLE_EQ(r->rows[1].speedup, 100.0 / 60);
  EXPECT_DOUBLE_EQ(r->rows[1].efficiency, 100.0 / 60 / 2);
}

TEST(PlannerScaling, WeakScalingWhenEveryRankHasTheSameShare) {
  const std::vector<RunSeries> runs = {series("one", 1, 1024, {100, 100}),
                                       series("four", 4, 4096, {110, 110})};
  Result<ScalingReport> r = scaling_report(runs);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->kind, ScalingKind::kWeak);
  // Throughput 4096 / 0.11 s over 1024 / 0.1 s; efficiency = that / 4 = 100 / 110.
  EXPECT_DOUBLE_EQ(r->rows[1].speedup, (4096 / 0.11) / (1024 / 0.1));
  EXPECT_NEAR(r->rows[1].efficiency, 100.0 / 110, 1e-12);
  const std::vector<RunSeries> mixed = {series("a", 1, 1024, {100}), series("b", 2, 1536, {100})};
  EXPECT_EQ(scaling_report(mixed)->kind, ScalingKind::kMixed);
}

TEST(PlannerScaling, BadRunsAreNamed) {
  Result<ScalingReport> empty = scaling_report({series("nothing", 1, 1024, {})});
  ASSERT_FALSE(empty.is_ok());
  EXPECT_NE(empty.status().message().find("nothing"), std::string::npos);
  EXPECT_FALSE(scaling_report({}).is_ok());
  EXPECT_FALSE(scaling_report({series("zero", 1, 1024, {0, 0})}).is_ok());
}

TEST(PlannerScaling, SvgHasEveryRunsLossCurve) {
  const std::vector<RunSeries> runs = {series("one", 1, 1024, {100, 100, 100}),
                                       series("dp2 <x>", 2, 1024, {60, 60, 60})};
  const std::string svg = scaling_svg(*scaling_report(runs), runs);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t lines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++lines;
  EXPECT_EQ(lines, 2u + 2u);  // ideal, measured speedup, two loss curves
  EXPECT_NE(svg.find("dp2 &lt;x&gt; (2 ranks)"), std::string::npos);  // names are escaped
}

}  // namespace
}  // namespace partrain::planner
