// partraind's exit code and its one error line for failures before any worker starts, as
// partraind(8) documents them: an unreadable job secret is a configuration error (2); a
// rendezvous store that cannot listen is retryable (75). Run as Slurm runs the agent (the
// SPANK plugin's environment), on loopback.
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
    char tmpl[] = "/tmp/partrain_agent_exit_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    secret_ = dir_ + "/secret";
    std::ofstream(secret_) << "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n";
    ASSERT_EQ(::chmod(secret_.c_str(), 0600), 0);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Node 0 of one, as under Slurm; returns the exit code, and stderr in *err.
  int agent(const std::string& secret_file, int port, std::string* err) {
    const std::map<std::string, std::string> env = {
        {"PARTRAIN_SITE_CONFIG", PARTRAIN_SITE_CONFIG_FILE}, {"PARTRAIN_RUN_DIR", dir_ + "/run"},
        {"PARTRAIN_WORLD", "1"}, {"PARTRAIN_NODE_RANKS", "0"},
        {"PARTRAIN_COORDINATOR", "127.0.0.1:" + std::to_string(port)},
        {"PARTRAIN_JOB_SECRET_FILE", secret_file}, {"SLURM_NODEID", "0"}, {"SLURM_NNODES", "1"},
        {"SLURMD_NODENAME", "127.0.0.1"}};
    testing::Proc p = testing::start({PARTRAIND, "--steps", "1", kTiny}, env, dir_, "agent");
    const int code = testing::wait_exit(p.pid);
    *err = slurp(p.err);
    return code;
  }

  std::string dir_, secret_;
};

TEST_F(AgentExit, UnreadableSecretIsAConfigurationError) {
  std::string err;
  EXPECT_EQ(agent(dir_ + "/missing", testing::free_port(), &err), 2);
  EXPECT_EQ(count(err, "job secret file " + dir_ + "/missing does not exist"), 1) << err;
  EXPECT_NE(last_line(err).find("exit 2: configuration error"), std::string::npos) << err;
  EXPECT_EQ(count(err, " started: pid "), 0) << err;
}

TEST_F(AgentExit, StoreThatCannotListenIsRetryable) {
  // Someone else holds the coordinator's port.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  std::string err;
  EXPECT_EQ(agent(secret_, ntohs(a.sin_port), &err), 75);
  ::close(fd);
  EXPECT_EQ(count(err, "cannot start the rendezvous store: "), 1) << err;
  EXPECT_NE(last_line(err).find("exit 75: retryable"), std::string::npos) << err;
  EXPECT_EQ(count(err, " started: pid "), 0) << err;
}

}  // namespace
}  // namespace partrain::agent
