// The agent's exit codes for a worker's end, as partraind(8) documents them (EXIT STATUS):
// killed or 75 -> 75 (requeue), 2 -> 2 (configuration error, never requeued), else 1; and
// the Status that carries each code maps back to it through exit_code_for.
#include <signal.h>

#include <gtest/gtest.h>

#include "agent/supervise.h"
#include "common/exit_codes.h"

namespace partrain::agent {
namespace {

WorkerExit exited(int code) { return {0, 100, false, code}; }
WorkerExit killed(int sig) { return {0, 100, true, sig}; }

TEST(WorkerExitCode, FollowsTheManPage) {
  EXPECT_EQ(exit_code_for_worker(killed(SIGKILL)), 75);  // kill -9, the OOM killer
  EXPECT_EQ(exit_code_for_worker(killed(SIGSEGV)), 75);
  EXPECT_EQ(exit_code_for_worker(killed(SIGTERM)), 75);
  EXPECT_EQ(exit_code_for_worker(exited(75)), 75);       // lost a peer
  EXPECT_EQ(exit_code_for_worker(exited(2)), 2);         // the job file, a plugin's refusal
  EXPECT_EQ(exit_code_for_worker(exited(1)), 1);         // a diverged loss
  EXPECT_EQ(exit_code_for_worker(exited(3)), 1);
  EXPECT_EQ(exit_code_for_worker(exited(127)), 1);       // the worker binary did not exec
}

TEST(WorkerExitCode, StatusMapsBackToTheCode) {
  for (int code : {1, 2, 75}) {
    const Status s = status_for_exit_code(code, "rank 0 (pid 100) died");
    EXPECT_FALSE(s);
    EXPECT_EQ(s.message(), "rank 0 (pid 100) died");
    EXPECT_EQ(exit_code_for(s), code);
  }
  EXPECT_EQ(status_for_exit_code(2, "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status_for_exit_code(75, "x").code(), StatusCode::kUnavailable);
  for (const WorkerExit& e : {killed(SIGKILL), exited(75), exited(2), exited(1), exited(9)}) {
    const int code = exit_code_for_worker(e);
    EXPECT_EQ(exit_code_for(status_for_exit_code(code, "x")), code) << e.describe();
  }
}

}  // namespace
}  // namespace partrain::agent
