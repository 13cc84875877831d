// The whole local job through partraind: dp2 and dp4 train exactly what one rank trains on
// the same global batch; a worker killed with SIGKILL takes the whole job down within the
// bounded time with exit 75, naming the dead rank, leaving no process behind; SIGTERM stops
// every rank at one step boundary; a layout that does not fit is a configuration error (2).
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "runtime_helpers.h"

namespace {

using namespace partrain::testing;

// The single-rank reference comes from `partrain run` (the engine's own trainer; the
// same run as zero_test's and tp_test's, trained once).
TEST_F(Runtime, DataParallelMatchesOneRankOverTwentySteps) {
  constexpr int kSteps = 20;
  const ReferenceRun one = one_rank(job_copy(kTiny, dir_, "one.toml", ""), kSteps);
  // dp2 exactly as a user starts it: `partrain run JOB --partrain=dp2 --nproc 2`.
  Proc dp2 = start({PARTRAIN_CLI, "run", kTiny, "--partrain=dp2", "--nproc", "2", "--steps",
                    std::to_string(kSteps)}, env("dp2"), dir_, "dp2");
  ASSERT_EQ(wait_exit(dp2.pid), 0) << slurp(dp2.err);
  // tiny.toml: global batch 16, micro-batch 8; dp4 needs 4 sequences per micro-batch (mb=1).
  // Its copy has 0.25 MiB buckets, so the 1.7 MB gradient goes in several all-reduces.
  const std::string buckets = job_copy(kTiny, dir_, "tiny-buckets.toml", "[plugins.dp]\nbucket_mb = 0.25\n");
  ASSERT_EQ(agent("dp4", "dp4,mb=1", 4, kSteps, buckets), 0);
  const std::vector<double> ref = losses(one.metrics);
  ASSERT_EQ(ref.size(), static_cast<size_t>(kSteps));
  for (const char* run : {"dp2", "dp4"}) {
    const std::vector<double> got = losses(dir_ + "/" + run + "/metrics.jsonl");
    ASSERT_EQ(got.size(), ref.size()) << run;
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_LE(std::fabs(got[i] - ref[i]), 1e-5 * std::fabs(ref[i]))
          << run << " step " << i + 1 << ": " << got[i] << " vs one rank " << ref[i];
    }
  }
  // The loss actually moved: the comparison is over a real trajectory.
  EXPECT_LT(ref.back(), ref.front() - 0.5);
  // Metrics carry the sync's time and its exposed share; one bucket (default 25 MiB) for
  // dp2; several for dp4: a bucket closes on the tensor edge where it reaches 0.25 MiB, so
  // the 437760-float gradient makes between 2 and ceil(437760 / 65536) = 7 of them.
  const std::string m = slurp(dir_ + "/dp2/metrics.jsonl");
  EXPECT_NE(m.find("\"comm_ms\":"), std::string::npos);
  EXPECT_NE(m.find("\"exposed_share\":"), std::string::npos);
  EXPECT_NE(m.find("\"collectives\":1,"), std::string::npos) << m;
  // dp_bytes: what rank 0 put into the all-reduce, 4 bytes per gradient element.
  EXPECT_NE(m.find("\"dp_bytes\":" + std::to_string(4 * 437760) + "}"), std::string::npos) << m;
  static const std::regex kCollectives("\"collectives\":([0-9]+)");
  std::smatch c;
  const std::string m4 = slurp(dir_ + "/dp4/metrics.jsonl");
  ASSERT_TRUE(std::regex_search(m4, c, kCollectives));
  EXPECT_GE(std::stoi(c[1].str()), 2) << m4;
  EXPECT_LE(std::stoi(c[1].str()), 7) << m4;
}

TEST_F(Runtime, KilledWorkerStopsTheJobWithTheRetryableCode) {
  Proc p = start({PARTRAIND, "--standalone", "--nproc", "2", "--partrain", "dp2", "--steps", "100000",
                  "--heartbeat-timeout", "10", kTiny},
                 env("kill"), dir_, "kill");
  // Wait for both workers and the first step.
  std::map<int, pid_t> pids = started_workers(p, dir_ + "/kill/metrics.jsonl", 2, std::chrono::seconds(60));
  ASSERT_EQ(pids.size(), 2u) << slurp(p.err);
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  const int code = wait_exit(p.pid);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(code, 75);
  EXPECT_LT(secs, 10.0);
  const std::string err = slurp(p.err);
  EXPECT_NE(err.find("rank 1 (pid " + std::to_string(pids[1]) + ") died: killed by signal 9 (SIGKILL)"),
            std::string::npos) << err;
  for (const auto& [rank, pid] : pids) {
    EXPECT_NE(::kill(pid, 0), 0) << "rank " << rank << " (pid " << pid << ") is still there";
  }
}

TEST_F(Runtime, SigtermStopsEveryRankAtAStepBoundary) {
  Proc p = start({PARTRAIND, "--standalone", "--nproc", "2", "--partrain", "dp2", "--steps", "100000", kTiny},
                 env("term"), dir_, "term");
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline && slurp(dir_ + "/term/metrics.jsonl").empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(::kill(p.pid, SIGTERM), 0);
  EXPECT_EQ(wait_exit(p.pid), 75);
  const std::string err = slurp(p.err);
  EXPECT_NE(err.find("rank 0 ("), std::string::npos);
  EXPECT_NE(err.find("stopped at a step boundary"), std::string::npos) << err;
  EXPECT_EQ(err.find("died"), std::string::npos) << err;
}

// A data plugin that is not installed, or that refuses its [plugins.NAME] table, is a
// configuration error (exit 2) with the plugin's own message, not a retryable failure.
TEST_F(Runtime, PluginErrorsAreConfigurationErrors) {
  const std::string bad = job_copy(kTiny, dir_, "bad-table.toml", "[plugins.dp]\nbucket_size = 3\n");
  Proc table = start({PARTRAIND, "--standalone", "--nproc", "2", "--partrain", "dp2", "--steps", "2",
                      bad}, env("table"), dir_, "table");
  EXPECT_EQ(wait_exit(table.pid), 2);
  EXPECT_NE(slurp(table.err).find("data plugin init: [plugins.dp]: unknown key 'bucket_size'; the "
                                  "only key is bucket_mb"), std::string::npos) << slurp(table.err);

  std::map<std::string, std::string> e = env("missing");
  e["PARTRAIN_DATA_PLUGIN"] = "nosuch";
  Proc missing = start({PARTRAIND, "--standalone", "--nproc", "2", "--partrain", "dp2", "--steps",
                        "2", kTiny}, e, dir_, "missing");
  EXPECT_EQ(wait_exit(missing.pid), 2);
  EXPECT_NE(slurp(missing.err).find("plugin 'nosuch' is not installed"), std::string::npos)
      << slurp(missing.err);
}

TEST_F(Runtime, LayoutThatDoesNotFitIsAConfigurationError) {
  // 16 sequences per step cannot be split into micro-batches of 8 over 3 ranks.
  Proc p = start({PARTRAIND, "--standalone", "--nproc", "3", kTiny}, env("bad"), dir_, "bad");
  EXPECT_EQ(wait_exit(p.pid), 2);
  EXPECT_FALSE(slurp(p.err).empty());
}


// Two agents as under Slurm (one per "node", the SPANK plugin's environment), on localhost.
// One of them hangs (SIGSTOP, its worker too): the other must notice within the heartbeat
// timeout, tear down its worker and exit 75, instead of hanging in a collective until
// Gloo's timeout. Node 0 is the coordinator: when it hangs, the store stops answering.
class TwoNodes : public Runtime {
 protected:
  // Returns the survivor's stderr; checks its exit code and how fast it gave up.
  std::string hang(int hung) {
    const std::string secret = dir_ + "/secret";
    {
      std::ofstream f(secret);
      f << "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n";
    }
    EXPECT_EQ(::chmod(secret.c_str(), 0600), 0);
    const std::string coordinator = "127.0.0.1:" + std::to_string(free_port());
    std::vector<Proc> agents;
    for (int node = 0; node < 2; ++node) {
      std::map<std::string, std::string> e = env("hb");
      e["PARTRAIN_WORLD"] = "2";
      e["PARTRAIN_NODE_RANKS"] = std::to_string(node);
      e["PARTRAIN_COORDINATOR"] = coordinator;
      e["PARTRAIN_JOB_SECRET_FILE"] = secret;
      e["SLURM_NODEID"] = std::to_string(node);
      e["SLURM_NNODES"] = "2";
      e["SLURMD_NODENAME"] = "node" + std::to_string(node);
      agents.push_back(start({PARTRAIND, "--partrain", "dp2", "--steps", "100000", "--heartbeat-timeout",
                              "3", "--heartbeat-interval", "0.5", kTiny},
                             e, dir_, "hb" + std::to_string(node)));
    }
    const Proc& stuck = agents[static_cast<size_t>(hung)];
    const Proc& survivor = agents[static_cast<size_t>(1 - hung)];
    // Training runs on both nodes.
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < deadline && slurp(dir_ + "/hb/metrics.jsonl").empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const std::regex started("rank " + std::to_string(hung) + " started: pid ([0-9]+)");
    std::smatch m;
    const std::string err = slurp(stuck.err);
    const bool found = std::regex_search(err, m, started);
    EXPECT_TRUE(found) << err << slurp(survivor.err);
    const pid_t worker = found ? std::stoi(m[1].str()) : -1;
    // The node hangs: its agent and its worker stop answering.
    EXPECT_EQ(::kill(stuck.pid, SIGSTOP), 0);
    if (worker > 0) {
      EXPECT_EQ(::kill(worker, SIGSTOP), 0);
    }
    const auto t0 = Clock::now();
    const int code = wait_exit(survivor.pid);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    ::kill(stuck.pid, SIGKILL);  // its worker follows (PR_SET_PDEATHSIG)
    if (worker > 0) ::kill(worker, SIGKILL);
    wait_exit(stuck.pid);
    EXPECT_EQ(code, 75);
    EXPECT_LT(secs, 3.0 + 3.0);  // the timeout plus a heartbeat round and the teardown
    return slurp(survivor.err);
  }
};

TEST_F(TwoNodes, HungPeerIsDetectedWithinTheHeartbeatTimeout) {
  const std::string err = hang(1);
  EXPECT_NE(err.find("peer node 1 lost: no heartbeat for 3 s"), std::string::npos) << err;
}

TEST_F(TwoNodes, HungCoordinatorIsDetectedWithinTheHeartbeatTimeout) {
  const std::string err = hang(0);
  EXPECT_NE(err.find("the coordinator's store stopped answering for 3 s"), std::string::npos) << err;
}

}  // namespace
