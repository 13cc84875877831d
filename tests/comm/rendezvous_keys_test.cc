// The rendezvous key space (comm/rendezvous/keys.h): each builder gives exactly the key the
// agents and workers used before the builders existed (the literal formats below are the
// ones partraind and partrain-worker wrote), so nothing a running job's processes read moved.
#include "comm/rendezvous/keys.h"

#include <gtest/gtest.h>

namespace partrain::rdzv_keys {
namespace {

TEST(RendezvousKeys, JobKeysKeepTheirNames) {
  EXPECT_EQ(agents_barrier("0"), "agents/0");
  EXPECT_EQ(agents_barrier("3"), "agents/3");
  EXPECT_EQ(heartbeat(0), "hb/0");
  EXPECT_EQ(heartbeat(17), "hb/17");
  EXPECT_EQ(done(2), "done/2");
  EXPECT_EQ(job_abort(), "job/abort");
  EXPECT_EQ(restart(1), "restart/1");
  EXPECT_EQ(restart_barrier(2), "restart/2/agents");
}

TEST(RendezvousKeys, AttemptKeysLiveUnderTheAttempt) {
  EXPECT_EQ(attempt("0", 0), "a0.0");
  EXPECT_EQ(attempt("1", 2), "a1.2");
  const std::string s = attempt_scope("a1.2");
  EXPECT_EQ(s, "a1.2/");
  EXPECT_EQ(attempt_scope(""), "");  // no attempt: keys at the top
  EXPECT_EQ(resume(s), "a1.2/resume");
  EXPECT_EQ(checkpoint_rank(s, 40, 3), "a1.2/ckpt/40/3");
  EXPECT_EQ(checkpoint_ack(s, 40), "a1.2/ckpt/40/ack");
  EXPECT_EQ(checkpoint_seq(s, 0), "a1.2/ckpt/seq/0");
  EXPECT_EQ(finished(s, 3), "a1.2/finished/3");
  EXPECT_EQ(gpu(s, 5), "a1.2/gpu/5");
  EXPECT_EQ(group(s, "tp", 4), "a1.2/tp4");
  EXPECT_EQ(pp_channel(s, true, 0, 4), "a1.2/ppa0-4");
  EXPECT_EQ(pp_channel(s, false, 4, 0), "a1.2/ppg4-0");
}

TEST(RendezvousKeys, CommunicatorKeysLiveUnderTheGroup) {
  EXPECT_EQ(gloo_context("a0.0/dp0", "0"), "gloo/a0.0/dp0/0/");
  EXPECT_EQ(nccl_id("a0.0/tp0"), "nccl/a0.0/tp0/id");
  EXPECT_EQ(emu_gpu("a0.0/tp0", 1), "emu/a0.0/tp0/gpu/1");
}

// A step past 2^31 (long runs at small batches) stays a whole number in the key.
TEST(RendezvousKeys, LargeStepsAreNotTruncated) {
  EXPECT_EQ(checkpoint_ack("a0.0/", 4294967296LL), "a0.0/ckpt/4294967296/ack");
}

// Keys of two attempts never collide: a restarted group cannot read its predecessor's acks.
TEST(RendezvousKeys, AttemptsDoNotShareKeys) {
  EXPECT_NE(checkpoint_ack(attempt_scope(attempt("0", 0)), 10), checkpoint_ack(attempt_scope(attempt("0", 1)), 10));
  EXPECT_NE(finished(attempt_scope(attempt("0", 1)), 0), finished(attempt_scope(attempt("1", 0)), 0));
  // "a1.1" vs "a11.": the dot keeps Slurm's count and the in-job count apart.
  EXPECT_NE(attempt("1", 11), attempt("11", 1));
}

}  // namespace
}  // namespace partrain::rdzv_keys
