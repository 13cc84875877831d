// The learning-rate schedule's length in a checkpoint's training state: kept through the
// text encoding, and 0 (the resumed run's own) in records written before it was kept.
#include "store/manifest.h"

#include <gtest/gtest.h>

namespace partrain::store {
namespace {

TEST(TrainState, KeepsTheScheduleLength) {
  TrainState s;
  s.step = 20;
  s.decay_steps = 20;
  const std::string text = encode_state(s);
  EXPECT_NE(text.find("\tdecay_steps=20\t"), std::string::npos) << text;
  Result<TrainState> back = decode_state(text);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->decay_steps, 20);
}

TEST(TrainState, RecordsWithoutItReadAsZero) {
  const std::string old = "state\tstep=8\tconsumed=128\tepoch=0\tseed=1337\tadam_steps=8\tlr_step=8\t"
                          "loss_scale=1\ttokens=8192\tlayout=dp2\tworld=2\n";
  Result<TrainState> s = decode_state(old);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(s->step, 8);
  EXPECT_EQ(s->decay_steps, 0);
  EXPECT_FALSE(decode_state("state\tstep=8\tconsumed=128\tepoch=0\tseed=1\tadam_steps=8\tlr_step=8\tdecay_steps=x\t"
                            "loss_scale=1\ttokens=8\tlayout=-\tworld=1\n").is_ok());
}

}  // namespace
}  // namespace partrain::store
