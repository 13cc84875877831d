// The schedule checker against hand-written schedules: a good one passes; each kind of
// violation is refused with the rank, the action and what is wrong, in exact words.
#include <gtest/gtest.h>

#include "build_util.h"
#include "pipeline/check.h"

namespace partrain::pipeline {
namespace {

using namespace testing;  // NOLINT: the F/B/... builders

const char* kHead = "schedule t (pp=2, m=2, v=1): ";

std::string message_of(const Schedule& s) {
  Status st = check(s);
  return st.is_ok() ? "ok" : st.message();
}

TEST(Check, HandWrittenGpipePasses) { EXPECT_EQ(message_of(gpipe_2x2()), "ok"); }

TEST(Check, SplitBackwardPasses) {
  // One rank, one micro-batch: F, backward-input, weight gradient.
  EXPECT_EQ(message_of(make(1, 1, 1, {{F(0), Bi(0), W(0)}})), "ok");
}

TEST(Check, MissingBackwardIsNamed) {
  Schedule s = gpipe_2x2();
  s.ranks[1] = {RA(0, 0), F(0), RA(1, 0), F(1), B(0), SG(0, 0)};  // no B1, no send of its grad
  EXPECT_EQ(message_of(s), std::string(kHead) + "rank 1: stage 1 (chunk 0) never backwards "
                                                 "micro-batch 1 (no backward or backward-input)");
}

TEST(Check, MissingWeightGradientIsNamed) {
  EXPECT_EQ(message_of(make(1, 1, 1, {{F(0), Bi(0)}})),
            "schedule t (pp=1, m=1, v=1): rank 0: stage 0 (chunk 0) never computes the weight "
            "gradient of micro-batch 0 (backward-input without backward-weight)");
}

TEST(Check, DeadlockIsNamedWithBothWaits) {
  Schedule s = gpipe_2x2();
  // Rank 0 waits for the first gradient before sending the first activations.
  s.ranks[0] = {F(0), RG(0, 1), SA(0, 1), F(1), SA(1, 1), B(0), RG(1, 1), B(1)};
  EXPECT_EQ(message_of(s),
            std::string(kHead) +
                "deadlock: rank 0 waits at action 1 (recv-grad mb0 chunk0 from rank 1) for rank "
                "1's action 5 (send-grad mb0 chunk0 to rank 0); rank 1 waits at action 0 "
                "(recv-activation mb0 chunk0 from rank 0) for rank 0's action 2 "
                "(send-activation mb0 chunk0 to rank 1); no rank can proceed: list each receive "
                "after the actions that its send waits for");
}

TEST(Check, TransfersInDifferentOrdersAreRefused) {
  Schedule s = gpipe_2x2();
  s.ranks[1] = {RA(1, 0), RA(0, 0), F(0), F(1), B(0), SG(0, 0), B(1), SG(1, 0)};
  EXPECT_EQ(message_of(s),
            std::string(kHead) +
                "rank 1, action 0 (recv-activation mb1 chunk0 from rank 0): receive #0 of this "
                "activation stream meets send #0 of rank 0, action 1 (send-activation mb0 chunk0 "
                "to rank 1): list the transfers between the two ranks in the same order");
}

TEST(Check, ForwardBeforeItsInputIsRefused) {
  Schedule s = gpipe_2x2();
  s.ranks[1] = {F(0), RA(0, 0), RA(1, 0), F(1), B(0), SG(0, 0), B(1), SG(1, 0)};
  EXPECT_EQ(message_of(s), std::string(kHead) +
                               "rank 1, action 0 (forward mb0 chunk0): forward before its input "
                               "arrived: no recv-activation of micro-batch 0 from rank 0 (stage "
                               "0) before it");
}

TEST(Check, BackwardBeforeItsGradientIsRefused) {
  Schedule s = gpipe_2x2();
  s.ranks[0] = {F(0), SA(0, 1), F(1), SA(1, 1), B(0), RG(0, 1), RG(1, 1), B(1)};
  EXPECT_EQ(message_of(s), std::string(kHead) +
                               "rank 0, action 4 (backward mb0 chunk0): backward before its "
                               "output gradient arrived: no recv-grad of micro-batch 0 from rank "
                               "1 (stage 1) before it");
}

TEST(Check, BackwardBeforeForwardIsRefused) {
  EXPECT_EQ(message_of(make(1, 1, 1, {{B(0), F(0)}})),
            "schedule t (pp=1, m=1, v=1): rank 0, action 0 (backward mb0 chunk0): backward "
            "before the forward of micro-batch 0 on this stage");
}

TEST(Check, TwiceIsRefused) {
  EXPECT_EQ(message_of(make(1, 1, 1, {{F(0), F(0), B(0)}})),
            "schedule t (pp=1, m=1, v=1): rank 0, action 1 (forward mb0 chunk0): micro-batch 0 "
            "is forwarded twice on stage 0");
  EXPECT_EQ(message_of(make(1, 1, 1, {{F(0), B(0), Bi(0)}})),
            "schedule t (pp=1, m=1, v=1): rank 0, action 2 (backward-input mb0 chunk0): "
            "micro-batch 0 is backwarded twice on stage 0");
}

TEST(Check, WeightGradientAfterWholeBackwardIsRefused) {
  EXPECT_EQ(message_of(make(1, 1, 1, {{F(0), B(0), W(0)}})),
            "schedule t (pp=1, m=1, v=1): rank 0, action 2 (backward-weight mb0 chunk0): weight "
            "gradient after a whole backward of micro-batch 0, which computed it already; use "
            "backward-input for the first part");
}

TEST(Check, WrongPeerAndImpossibleTransfersAreRefused) {
  Schedule s = gpipe_2x2();
  s.ranks[0][1] = SA(0, 0);
  EXPECT_EQ(message_of(s), std::string(kHead) +
                               "rank 0, action 1 (send-activation mb0 chunk0 to rank 0): "
                               "activations of stage 0 go to rank 1 (stage 1), not rank 0");
  s = gpipe_2x2();
  s.ranks[1].push_back(SA(1, 0));
  EXPECT_EQ(message_of(s), std::string(kHead) +
                               "rank 1, action 8 (send-activation mb1 chunk0 to rank 0): stage 1 "
                               "has no stage 2 to send to (it is the last)");
}

TEST(Check, OutOfRangeFieldsAreRefused) {
  EXPECT_EQ(message_of(make(1, 1, 1, {{F(1)}})),
            "schedule t (pp=1, m=1, v=1): rank 0, action 0 (forward mb1 chunk0): micro-batch 1 "
            "outside 0..0");
  EXPECT_EQ(message_of(make(1, 1, 1, {{F(0, 1)}})),
            "schedule t (pp=1, m=1, v=1): rank 0, action 0 (forward mb0 chunk1): chunk 1 outside "
            "0..0");
  EXPECT_EQ(message_of(make(2, 1, 1, {{F(0)}})),
            "schedule t: 1 action lists for pp=2 ranks");
}

TEST(Check, ChunksOnOneRankKeepStageOrder) {
  // pp=1, v=2: both stages on rank 0, no transfers; stage 1 must follow stage 0.
  EXPECT_EQ(message_of(make(1, 1, 2, {{F(0, 0), F(0, 1), B(0, 1), B(0, 0)}})), "ok");
  EXPECT_EQ(message_of(make(1, 1, 2, {{F(0, 1), F(0, 0), B(0, 1), B(0, 0)}})),
            "schedule t (pp=1, m=1, v=2): rank 0, action 0 (forward mb0 chunk1): forward of "
            "stage 1 before stage 0 forwarded micro-batch 0");
  EXPECT_EQ(message_of(make(1, 1, 2, {{F(0, 0), F(0, 1), B(0, 0), B(0, 1)}})),
            "schedule t (pp=1, m=1, v=2): rank 0, action 2 (backward mb0 chunk0): backward of "
            "stage 0 before stage 1 backwarded micro-batch 0");
}

TEST(Check, UnsentActivationsAreNamed) {
  Schedule s = gpipe_2x2();
  s.ranks[0] = {F(0), SA(0, 1), F(1), RG(0, 1), B(0), RG(1, 1), B(1)};
  EXPECT_EQ(message_of(s), std::string(kHead) +
                               "rank 0: stage 0 (chunk 0) never sends to rank 1 the activations "
                               "of micro-batch 1");
}

}  // namespace
}  // namespace partrain::pipeline
