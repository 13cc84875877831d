// Rank coordinates and groups: the worked example of layout.h checked by hand, and
// properties over many (W, tp, cp, pp, ep) combinations.
#include "layout/layout.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "layout/layout_spec.h"

namespace partrain {
namespace {

using testing::spec;

TEST(LayoutTest, SixtyFourGpuWorkedExample) {
  Result<Layout> l = Layout::create(64, spec(4, 2));
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(l->dp(), 8);
  EXPECT_EQ(l->spec().dp, 8);
  // rank = tp + 4*dp + 32*pp, by hand: 13 = 1 + 4*3 + 0.
  RankCoord c = l->coord(13);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.dp, 3);
  EXPECT_EQ(c.pp, 0);
  EXPECT_EQ(l->group(Axis::kTp, 13), (std::vector<int>{12, 13, 14, 15}));
  EXPECT_EQ(l->group(Axis::kDp, 13), (std::vector<int>{1, 5, 9, 13, 17, 21, 25, 29}));
  EXPECT_EQ(l->group(Axis::kPp, 13), (std::vector<int>{13, 45}));
  EXPECT_EQ(l->group(Axis::kModel, 13), (std::vector<int>{12, 13, 14, 15, 44, 45, 46, 47}));
  EXPECT_EQ(l->coord(45).pp, 1);
  EXPECT_EQ(l->groups(Axis::kTp).size(), 16u);
  EXPECT_EQ(l->groups(Axis::kDp).size(), 8u);
  EXPECT_EQ(l->groups(Axis::kPp).size(), 32u);
}

TEST(LayoutTest, ExpertParallelSplitsDataParallel) {
  // The ep2 extension of the worked example: dp = ep + 2 * edp.
  Result<Layout> l = Layout::create(64, spec(4, 2, 2));
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  RankCoord c = l->coord(13);
  EXPECT_EQ(c.ep, 1);
  EXPECT_EQ(c.expert_dp, 1);
  EXPECT_EQ(l->group(Axis::kEp, 13), (std::vector<int>{9, 13}));
  EXPECT_EQ(l->group(Axis::kExpertDp, 13), (std::vector<int>{5, 13, 21, 29}));
  EXPECT_EQ(l->group(Axis::kDp, 13), (std::vector<int>{1, 5, 9, 13, 17, 21, 25, 29}));
}

TEST(LayoutTest, ContextParallelSitsBetweenTpAndDp) {
  // tp2, cp2, pp2 on 16: rank = tp + 2*cp + 4*dp + 8*pp, dp = 2.
  Result<Layout> l = Layout::create(16, spec(2, 2, 1, 2));
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->dp(), 2);
  EXPECT_EQ(l->group(Axis::kCp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(l->group(Axis::kDp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(l->group(Axis::kPp, 5), (std::vector<int>{5, 13}));
}

// The cp2 x ep2 example of layout.h on 8 ranks (tp1, dp2, pp1): the experts' grid folds
// the dp x cp block into ep x edp, ep first, so the ep group is the cp group here.
TEST(LayoutTest, ExpertGridFoldsContextAndDataParallel) {
  Result<Layout> l = Layout::create(8, spec(1, 1, 2, 2));
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(l->dp(), 4);
  EXPECT_EQ(l->expert_dp(), 4);
  const RankCoord c = l->coord(5);  // rank 5 = cp 1 + 2 * dp 2
  EXPECT_EQ(c.cp, 1);
  EXPECT_EQ(c.dp, 2);
  EXPECT_EQ(c.dp_cp, 5);
  EXPECT_EQ(c.ep, 1);
  EXPECT_EQ(c.expert_dp, 2);
  EXPECT_EQ(l->group(Axis::kEp, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(l->group(Axis::kCp, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(l->group(Axis::kExpertDp, 5), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(l->group(Axis::kDp, 5), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(l->group(Axis::kDpCp, 5), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  // ep divides dp x cp, not dp: cp2, ep2 on dp1 holds half the experts on each cp rank.
  Result<Layout> one = Layout::create(2, spec(1, 1, 2, 2));
  ASSERT_TRUE(one.is_ok()) << one.status().message();
  EXPECT_EQ(one->group(Axis::kEp, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(one->expert_dp(), 1);
  EXPECT_EQ(Layout::create(12, spec(1, 1, 8, 2)).status().message(),
            "partrain: ep8 does not divide dp6 x cp2 = 12 (experts are sharded inside each dp x cp "
            "group, as in Megatron-core); use an ep that divides 12");
  EXPECT_TRUE(Layout::create(12, spec(1, 1, 4, 2)).is_ok());  // 4 divides 12, not dp6
  EXPECT_EQ(Layout::create(8, spec(1, 1, 3, 2)).status().message(),
            "partrain: ep3 does not divide dp4 x cp2 = 8 (experts are sharded inside each dp x cp "
            "group, as in Megatron-core); use an ep that divides 8");
}

TEST(LayoutTest, RefusesImpossibleSizesWithAFix) {
  EXPECT_EQ(Layout::create(12, spec(4, 2)).status().message(),
            "partrain: world size 12 is not a multiple of tp4 x pp2 = 8; use a multiple of 8 "
            "ranks or smaller tp/pp");
  ParallelSpec s = spec(4, 2);
  s.dp = 4;
  EXPECT_EQ(Layout::create(64, s).status().message(),
            "partrain: tp4 x pp2 x dp4 = 32 ranks, but the job has 64; drop dp4 to derive dp8 "
            "from the world size");
  EXPECT_EQ(Layout::create(48, spec(4, 2, 4)).status().message(),
            "partrain: ep4 does not divide dp6 (experts are sharded inside each data-parallel "
            "group); use an ep that divides 6");
  EXPECT_EQ(Layout::create(0, spec(1, 1)).status().message(),
            "partrain: the job has 0 ranks; run at least one task");
  s.dp = 8;
  EXPECT_TRUE(Layout::create(64, s).is_ok());
}

// Every rank is in exactly one group per axis; groups have the right size; members agree
// on every coordinate except the axis' own; TP groups are consecutive and PP is outermost.
TEST(LayoutTest, GroupPropertiesHoldOverManyLayouts) {
  int checked = 0;
  for (int world : {1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128}) {
    for (int tp : {1, 2, 3, 4, 8}) {
      for (int pp : {1, 2, 3, 4, 8}) {
        for (int cp : {1, 2}) {
          for (int ep : {1, 2, 4}) {
            if (world % (tp * pp * cp) != 0) continue;
            const int dp = world / (tp * pp * cp);
            if ((dp * cp) % ep != 0) continue;
            Result<Layout> l = Layout::create(world, spec(tp, pp, ep, cp));
            ASSERT_TRUE(l.is_ok()) << l.status().message();
            SCOPED_TRACE(l->spec().to_string() + " W=" + std::to_string(world));
            ++checked;
            const int sizes[] = {tp, cp, ep, dp, dp * cp / ep, pp, tp * pp, dp * cp};
            for (size_t a = 0; a < kAllAxes.size(); ++a) {
              const Axis axis = kAllAxes[a];
              EXPECT_EQ(l->group_size(axis), sizes[a]);
              std::vector<int> seen(static_cast<size_t>(world), 0);
              for (const std::vector<int>& g : l->groups(axis)) {
                ASSERT_EQ(static_cast<int>(g.size()), sizes[a]);
                for (int r : g) {
                  ++seen[r];
                  EXPECT_EQ(l->group(axis, r), g);
                }
                // Members agree on the coordinates the axis does not vary.
                const RankCoord first = l->coord(g.front());
                const bool dense_dp_cp = axis == Axis::kDp || axis == Axis::kDpCp;
                const bool expert = axis == Axis::kEp || axis == Axis::kExpertDp;
                for (int r : g) {
                  const RankCoord c = l->coord(r);
                  if (axis != Axis::kTp && axis != Axis::kModel) {
                    EXPECT_EQ(c.tp, first.tp);
                  }
                  if (axis != Axis::kCp && axis != Axis::kDpCp && !expert) {
                    EXPECT_EQ(c.cp, first.cp);
                  }
                  if (axis != Axis::kPp && axis != Axis::kModel) {
                    EXPECT_EQ(c.pp, first.pp);
                  }
                  if (!dense_dp_cp && !expert) {
                    EXPECT_EQ(c.dp, first.dp);
                  }
                  if (axis == Axis::kEp) {
                    EXPECT_EQ(c.expert_dp, first.expert_dp);
                  }
                  if (axis == Axis::kExpertDp) {
                    EXPECT_EQ(c.ep, first.ep);
                  }
                }
              }
              for (int r = 0; r < world; ++r) ASSERT_EQ(seen[r], 1) << "rank " << r;
            }
            for (int r = 0; r < world; ++r) {
              const RankCoord c = l->coord(r);
              EXPECT_EQ(l->rank_of(c), r);
              EXPECT_EQ(c.tp, r % tp);                 // tp fastest
              EXPECT_EQ(c.pp, r / (world / pp));       // pp outermost
              EXPECT_EQ(c.dp_cp, c.cp + cp * c.dp);
              EXPECT_EQ(c.ep, c.dp_cp % ep);           // ep inside dp x cp, cp first
              EXPECT_EQ(c.expert_dp, c.dp_cp / ep);
              std::vector<int> g = l->group(Axis::kTp, r);
              EXPECT_EQ(g.front(), r - r % tp);        // consecutive
              EXPECT_EQ(g.back(), r - r % tp + tp - 1);
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 150);
}

}  // namespace
}  // namespace partrain
