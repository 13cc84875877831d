// The agent's watchdog (agent/progress_watch.h) on real pipes with a hand-held clock: a
// line is progress, a partial line is not yet, a rank is watched from its first line on and
// only while it runs, and of several silent ranks a suspect (stopped) is named first, then
// the one silent longest.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "agent/progress_watch.h"

namespace partrain::agent {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

struct Pipe {
  int fd[2];
  Pipe() { EXPECT_EQ(::pipe2(fd, O_NONBLOCK), 0); }
  ~Pipe() {
    ::close(fd[0]);
    ::close(fd[1]);
  }
  void say(const std::string& s) const { EXPECT_EQ(::write(fd[1], s.data(), s.size()), static_cast<ssize_t>(s.size())); }
};

TEST(ProgressWatch, NamesTheRankSilentLongestOnceTheTimeoutPassed) {
  const ProgressWatch::Clock::time_point t0{};
  Pipe r0, r1, r2;
  ProgressWatch w({{0, r0.fd[0]}, {1, r1.fd[0]}, {5, r2.fd[0]}}, t0);
  auto all = [](size_t) { return true; };
  // Nobody reported yet: nobody is watched, however long.
  EXPECT_FALSE(w.stalled(seconds(60), all, t0 + seconds(600)));
  r0.say("7 forward\n");
  r1.say("7 back");  // a partial line is not progress yet
  w.drain(t0 + seconds(100));
  EXPECT_FALSE(w.stalled(seconds(60), all, t0 + seconds(160)));  // exactly the timeout: not past it
  std::optional<ProgressWatch::Stall> s = w.stalled(seconds(60), all, t0 + milliseconds(160001));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 0);
  EXPECT_EQ(s->step, "7");
  EXPECT_EQ(s->phase, "forward");
  // Rank 1 finishes its line at 101 s, then says nothing; rank 0 moves on at 130 s.
  r1.say("ward\n");
  w.drain(t0 + seconds(101));
  r0.say("7 wait for gradient sync\n");
  w.drain(t0 + seconds(130));
  s = w.stalled(seconds(60), all, t0 + seconds(200));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 1);  // silent since 101 s, rank 0 only since 130 s
  EXPECT_EQ(s->phase, "backward");
  EXPECT_EQ(s->silent, seconds(99));
  // A rank that ended is not watched.
  s = w.stalled(seconds(60), [](size_t i) { return i != 1; }, t0 + seconds(200));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 0);
  // A suspect silent for over half the timeout is named before a peer silent longer: rank 0
  // has waited since 130 s; rank 1 said something at 201 s, then was stopped.
  r1.say("8 wait for gradient sync\n");
  w.drain(t0 + seconds(201));
  auto rank1_stopped = [](size_t i) { return i == 1; };
  s = w.stalled(seconds(60), all, t0 + seconds(240), rank1_stopped);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 1);
  EXPECT_EQ(s->silent, seconds(39));
  // Not a suspect silent for half the timeout or less (rank 1: 24 s of 60) ...
  s = w.stalled(seconds(60), all, t0 + seconds(225), rank1_stopped);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 0);
  // ... and nobody while no rank is past the timeout (rank 0: 110 s of 120).
  EXPECT_FALSE(w.stalled(seconds(120), all, t0 + seconds(240), rank1_stopped));
  // Rank 5 (the third pipe) never said anything.
  EXPECT_FALSE(w.stalled(seconds(60), [](size_t i) { return i == 2; }, t0 + seconds(999)));
}

// Issue 31, item 23: a hang inside a plugin (rank 1 stuck in the plugin's code, running, not
// stopped) while rank 0, which reached the gradient sync first, waits for it in the
// collective. The watchdog named rank 0, silent longest. A rank whose line says it waits on
// its peers ("\twaiting", common/progress.h) is named only after one that does not.
TEST(ProgressWatch, NamesTheHungRankNotThePeerWaitingForIt) {
  const ProgressWatch::Clock::time_point t0{};
  Pipe r0, r1;
  ProgressWatch w({{0, r0.fd[0]}, {1, r1.fd[0]}}, t0);
  auto all = [](size_t) { return true; };
  r0.say("7 wait for gradient sync\n7 wait for gradient sync\twaiting\n");
  w.drain(t0 + seconds(100));
  r1.say("7 wait for gradient sync\n");  // then it hangs inside the data plugin, in no wait
  w.drain(t0 + seconds(101));
  std::optional<ProgressWatch::Stall> s = w.stalled(seconds(60), all, t0 + seconds(170));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 1);
  EXPECT_EQ(s->phase, "wait for gradient sync");
  EXPECT_FALSE(s->waiting);
  EXPECT_EQ(s->silent, seconds(69));
  // Rank 0's own stall, alone: named, its phase without the marker, and said to be waiting.
  s = w.stalled(seconds(60), [](size_t i) { return i == 0; }, t0 + seconds(170));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 0);
  EXPECT_EQ(s->phase, "wait for gradient sync");
  EXPECT_TRUE(s->waiting);
  // A stopped rank (a suspect) still comes first, waiting or not.
  s = w.stalled(seconds(60), all, t0 + seconds(170), [](size_t i) { return i == 0; });
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 0);
}

}  // namespace
}  // namespace partrain::agent
