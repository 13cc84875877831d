// A worker's progress lines (common/progress.h), read back from the pipe as the agent reads
// them: one line per step start and per phase entered, none when nothing changed within a
// second, none at all without PARTRAIN_PROGRESS_FD; trace spans report their phase too.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "common/progress.h"
#include "common/trace.h"

namespace partrain {
namespace {

std::string drain(int fd) {
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

// One test: the reporter reads the variable once, at its first use in the process.
TEST(Progress, LinesGoDownThePipeWhenStepOrPhaseChange) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_NONBLOCK), 0);
  ::setenv(progress::kFdVariable, std::to_string(p[1]).c_str(), 1);
  progress::begin_step(3);
  progress::enter("forward");
  progress::enter("forward");  // unchanged within a second: no line
  progress::enter("backward");
  { trace::Span span("wait for gradient sync"); }
  trace::begin_step(4);
  EXPECT_EQ(drain(p[0]), "3 step start\n3 forward\n3 backward\n3 wait for gradient sync\n4 step start\n");
  // A phase name longer than a line holds is cut, not overflowed.
  progress::enter(std::string(200, 'x'));
  EXPECT_EQ(drain(p[0]), "4 " + std::string(63, 'x') + "\n");
  // Issue 31, item 23: a wait on the peers is said, once however nested, and its end too.
  progress::enter("wait for gradient sync");
  (void)drain(p[0]);
  {
    const progress::Waiting outer;
    const progress::Waiting inner;
  }
  EXPECT_EQ(drain(p[0]), "4 wait for gradient sync\twaiting\n4 wait for gradient sync\n");
  ::close(p[0]);
  ::close(p[1]);
}

}  // namespace
}  // namespace partrain
