// partraind's exit code and its one error line for failures before any worker starts, as
// partraind(8) documents them: an unreadable job secret, a state directory that is missing
// or not shared are configuration errors (2); a coordinator that never published its
// address while other nodes did is retryable (75); a taken port is no failure at all. Run
// as Slurm runs the agent (the SPANK plugin's environment), on loopback.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "test_util.h"

namespace partrain::agent {
namespace {

using testing::slurp;

const std::string kTiny = std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/tiny.toml";

// Occurrences of `what` in `text`.
int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string last_line(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const size_t nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

class AgentExit : public ::testing::Test {
 protected:
  void SetUp() override {
    secret_ = dir_ + "/secret";
    state_ = dir_ + "/slurm-7";
    ASSERT_EQ(::mkdir(state_.c_str(), 0700), 0);
    std::ofstream(secret_) << "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n";
    ASSERT_EQ(::chmod(secret_.c_str(), 0600), 0);
  }

  // Node 0 of one, as under Slurm (`extra` over that); returns the exit code, and stderr in *err.
  int agent(const std::string& secret_file, int port, std::string* err,
            const std::map<std::string, std::string>& extra = {}) {
    std::map<std::string, std::string> env = {
        {"PARTRAIN_SITE_CONFIG", PARTRAIN_SITE_CONFIG_FILE}, {"PARTRAIN_RUN_DIR", dir_ + "/run"},
        {"PARTRAIN_WORLD", "1"}, {"PARTRAIN_NODE_RANKS", "0"},
        {"PARTRAIN_COORDINATOR", "127.0.0.1:" + std::to_string(port)},
        {"PARTRAIN_JOB_SECRET_FILE", secret_file}, {"SLURM_NODEID", "0"}, {"SLURM_NNODES", "1"},
        {"SLURMD_NODENAME", "127.0.0.1"}, {"OMP_NUM_THREADS", "1"}};
    for (const auto& [k, v] : extra) env[k] = v;
    testing::Proc p = testing::start({PARTRAIND, "--steps", "1", kTiny}, env, dir_, "agent");
    const int code = testing::wait_exit(p.pid);
    *err = slurp(p.err);
    return code;
  }

  const partrain::testing::ScratchDir scratch_{"partrain_agent_exit"};
  const std::string dir_ = scratch_.path().string();
  std::string secret_, state_;
};

TEST_F(AgentExit, UnreadableSecretIsAConfigurationError) {
  std::string err;
  EXPECT_EQ(agent(dir_ + "/missing", testing::free_port(), &err), 2);
  EXPECT_EQ(count(err, "job secret file " + dir_ + "/missing does not exist"), 1) << err;
  EXPECT_NE(last_line(err).find("exit 2: configuration error"), std::string::npos) << err;
  EXPECT_EQ(count(err, " started: pid "), 0) << err;
}

// The coordinator's port is taken (another job, a torchrun): it binds another one and
// publishes it in the job's state directory; the job runs.
TEST_F(AgentExit, ATakenPortIsNoFailure) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int taken = ntohs(a.sin_port);
  std::string err;
  EXPECT_EQ(agent(secret_, taken, &err, {{"PARTRAIN_STATE_DIR", state_}}), 0) << err;
  ::close(fd);
  EXPECT_EQ(count(err, "binding any free port instead"), 1) << err;
  const std::string published = slurp(state_ + "/rendezvous.0.0");
  EXPECT_EQ(published.rfind("127.0.0.1 ", 0), 0u) << published;
  EXPECT_NE(std::stoi(published.substr(10)), taken);
  EXPECT_NE(last_line(err).find("exit 0: done"), std::string::npos) << err;
}

// Node 1 of 2 never sees the coordinator's address in the state directory, nor any other
// node's marker: the folder is not shared, a configuration error (exit 2, never a requeue
// loop), warned of at half the timeout and named with its file system. With node 0's
// marker there, the coordinator is merely late or gone: 75, and no such warning.
TEST_F(AgentExit, AStateDirectoryNotSharedIsAConfigurationError) {
  const std::map<std::string, std::string> second = {
      {"PARTRAIN_STATE_DIR", state_}, {"SLURM_NODEID", "1"}, {"SLURM_NNODES", "2"},
      {"PARTRAIN_WORLD", "2"}, {"PARTRAIN_NODE_RANKS", "1"}, {"PARTRAIN_RENDEZVOUS_TIMEOUT", "2"}};
  const std::string warning = "the site's state_root may not be shared by the nodes of the allocation";
  std::string err;
  EXPECT_EQ(agent(secret_, 0, &err, second), 2) << err;
  EXPECT_EQ(count(err, "the site's state_root is not shared by the nodes of the allocation"), 1) << err;
  EXPECT_EQ(count(err, "after 1 s, and none of the other nodes' agents' files there ("), 1) << err;
  EXPECT_EQ(count(err, warning), 1) << err;
  EXPECT_EQ(count(err, " here): the site's state_root is not shared"), 1) << err;
  EXPECT_TRUE(std::filesystem::exists(state_ + "/agent.0.0.1")) << "node 1 left no marker";
  std::ofstream(state_ + "/agent.0.0.0");  // node 0 started, then nothing
  EXPECT_EQ(agent(secret_, 0, &err, second), 75) << err;
  EXPECT_EQ(count(err, "the coordinator's agent did not publish its address"), 1) << err;
  EXPECT_EQ(count(err, warning), 0) << err;
}

// A state directory that does not exist (state_root missing) is exit 2 naming state_root.
TEST_F(AgentExit, AMissingStateDirectoryIsAConfigurationError) {
  std::string err;
  EXPECT_EQ(agent(secret_, 0, &err, {{"PARTRAIN_STATE_DIR", dir_ + "/no-root/slurm-7"}}), 2) << err;
  EXPECT_EQ(count(err, "the job's state directory " + dir_ + "/no-root/slurm-7 does not exist: the site's state_root " +
                           dir_ + "/no-root must exist"), 1) << err;
}

}  // namespace
}  // namespace partrain::agent
