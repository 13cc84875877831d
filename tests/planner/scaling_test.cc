// Scaling tables by hand arithmetic: strong scaling (same global batch), weak scaling (same
// tokens per rank), the baseline being the fewest ranks, step 1 left out as warm-up; the
// SVG has one loss curve per run and the speedup points.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

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

// Every tick label of `svg` with class `cls` ("xtick", "ytick"), as numbers, in order.
std::vector<double> ticks(const std::string& svg, const std::string& cls, size_t from = 0, size_t to = std::string::npos) {
  std::vector<double> out;
  const std::string key = "class=\"" + cls + "\"";
  for (size_t at = svg.find(key, from); at != std::string::npos && at < to; at = svg.find(key, at + 1)) {
    const size_t b = svg.find('>', at) + 1;
    out.push_back(std::stod(svg.substr(b, svg.find('<', b) - b)));
  }
  return out;
}

// A tick set is round: equally spaced by 1, 2 or 5 x 10^k, each a multiple of the spacing.
void expect_round(const std::vector<double>& t, const std::string& what) {
  ASSERT_GE(t.size(), 2u) << what;
  const double step = t[1] - t[0];
  const double mag = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double m = step / mag;
  EXPECT_TRUE(std::fabs(m - 1) < 1e-6 || std::fabs(m - 2) < 1e-6 || std::fabs(m - 5) < 1e-6) << what << " step " << step;
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_NEAR(t[i] / step, std::round(t[i] / step), 1e-6) << what << " tick " << t[i];
    if (i > 0) {
      EXPECT_NEAR(t[i] - t[i - 1], step, 1e-9 * std::max(1.0, step)) << what;
    }
  }
}

TEST(PlannerScaling, NiceTicksAreRoundAndInside) {
  const std::vector<double> t = nice_ticks(0.514, 3.7, 5, false);
  expect_round(t, "0.514..3.7");
  EXPECT_GE(t.front(), 0.514);
  EXPECT_LE(t.back(), 3.7);
  EXPECT_EQ(t, (std::vector<double>{1, 1.5, 2, 2.5, 3, 3.5}));
  for (double v : nice_ticks(1, 7, 6, true)) {
    EXPECT_EQ(v, std::round(v));  // steps: whole
  }
  EXPECT_EQ(nice_ticks(1, 3, 6, true), (std::vector<double>{1, 2, 3}));   // never 1.5
}

// The ranks axis is log2, ticked at the runs' rank counts (whole numbers); the loss axes
// tick at round values; a run that evaluated gets its validation curve.
TEST(PlannerScaling, SvgAxesAndTheValidationCurve) {
  std::vector<RunSeries> runs = {series("one", 1, 1024, {100, 100, 100, 100, 100, 100, 100}),
                                 series("dp2", 2, 1024, {60, 60, 60, 60, 60, 60, 60}),
                                 series("dp8", 8, 1024, {20, 20, 20, 20, 20, 20, 20})};
  runs[0].loss = {5.514, 4.9, 4.2, 3.6, 3.1, 2.8, 2.6};
  runs[0].val_steps = {3, 7};
  runs[0].val_losses = {4.4, 2.9};
  const std::string svg = scaling_svg(*scaling_report(runs), runs);
  const size_t split = svg.find("loss curves");  // the left panel comes first
  ASSERT_NE(split, std::string::npos);
  EXPECT_EQ(ticks(svg, "xtick", 0, split), (std::vector<double>{1, 2, 8}));
  // log2: 1 -> 2 is one third of 1 -> 8.
  std::vector<double> cx;
  for (size_t at = svg.find("<circle cx=\""); at != std::string::npos && at < split; at = svg.find("<circle cx=\"", at + 1))
    cx.push_back(std::stod(svg.substr(at + 12)));
  ASSERT_EQ(cx.size(), 3u);
  EXPECT_NEAR((cx[1] - cx[0]) * 3, cx[2] - cx[0], 0.2);
  const std::vector<double> steps = ticks(svg, "xtick", split), losses = ticks(svg, "ytick", split);
  for (double s : steps) {
    EXPECT_EQ(s, std::round(s)) << "a fractional step tick";
  }
  expect_round(steps, "steps");
  expect_round(losses, "losses");
  for (double v : ticks(svg, "ytick", 0, split)) {
    EXPECT_GT(v, 0);  // a log axis
  }
  size_t val = 0;
  for (size_t at = svg.find("class=\"val\""); at != std::string::npos; at = svg.find("class=\"val\"", at + 1)) ++val;
  EXPECT_EQ(val, 1u + 2u);  // one dotted polyline, two points
  EXPECT_NE(svg.find("dots: validation"), std::string::npos);
}

}  // namespace
}  // namespace partrain::planner
