// Who may break a state store's lock (store/store_lock.h): the judge of a recorded owner
// against this process, with the system's answers stubbed, and the owner record's text.
#include "store/store_lock.h"

#include <gtest/gtest.h>

namespace partrain::store {
namespace {

LockOwner owner(std::string host, pid_t pid, std::string job = "-", long restart = 0) {
  LockOwner o;
  o.host = std::move(host);
  o.pid = pid;
  o.start = 777;
  o.boot = "boot-a";
  o.job = std::move(job);
  o.restart = restart;
  return o;
}

Liveness answers(bool process_alive, std::optional<bool> job_running) {
  Liveness l;
  l.process_alive = [process_alive](pid_t, unsigned long long) { return process_alive; };
  l.job_running = [job_running](const std::string&) { return job_running; };
  return l;
}

TEST(StoreLock, SameHostTheProcessDecides) {
  const LockOwner me = owner("n1", 100);
  EXPECT_TRUE(owner_gone(owner("n1", 42), me, answers(false, std::nullopt)));
  EXPECT_FALSE(owner_gone(owner("n1", 42), me, answers(true, std::nullopt)));
  LockOwner rebooted = owner("n1", 42);
  rebooted.boot = "boot-b";  // the pid may live again after a reboot: not the owner
  EXPECT_TRUE(owner_gone(rebooted, me, answers(true, std::nullopt)));
}

TEST(StoreLock, AnotherHostSlurmDecides) {
  const LockOwner me = owner("n2", 100, "1234", 1);
  // This job's own earlier attempt: Slurm requeued it only once that one ended.
  EXPECT_TRUE(owner_gone(owner("n1", 42, "1234", 0), me, answers(true, true)));
  // Another job that ended (squeue no longer lists it).
  EXPECT_TRUE(owner_gone(owner("n1", 42, "999"), me, answers(true, false)));
  // Another job still running, or no way to tell: alive.
  EXPECT_FALSE(owner_gone(owner("n1", 42, "999"), me, answers(false, true)));
  EXPECT_FALSE(owner_gone(owner("n1", 42, "999"), me, answers(false, std::nullopt)));
  // Outside Slurm on another host: cannot tell, never broken.
  EXPECT_FALSE(owner_gone(owner("n1", 42), owner("n2", 100), answers(false, false)));
}

TEST(StoreLock, OwnerRecordsRoundTrip) {
  const LockOwner o = owner("node-7", 4242, "55", 3);
  EXPECT_EQ(encode_owner(o), "host=node-7 pid=4242 start=777 boot=boot-a job=55 restart=3\n");
  Result<LockOwner> back = decode_owner(encode_owner(o));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->host, "node-7");
  EXPECT_EQ(back->pid, 4242);
  EXPECT_EQ(back->start, 777u);
  EXPECT_EQ(back->job, "55");
  EXPECT_EQ(back->restart, 3);
  EXPECT_FALSE(decode_owner("host=n1 pid=3\n").is_ok());
  EXPECT_FALSE(decode_owner("garbage").is_ok());
}

}  // namespace
}  // namespace partrain::store
