// The agent->worker environment (common/worker_env.h): what the agent writes, the worker
// reads back unchanged, and a bad or missing value is refused naming the variable.
#include "common/worker_env.h"

#include <map>
#include <string>

#include <gtest/gtest.h>

namespace partrain {
namespace {

using Env = std::map<std::string, std::string>;

Result<WorkerEnv> read(const Env& e) {
  return worker_env_from([&e](const char* k) -> const char* {
    auto it = e.find(k);
    return it == e.end() ? nullptr : it->second.c_str();
  });
}

// A worker's environment as partraind wrote it before this header existed (agent.cc).
Env agent_written() {
  return {{"PARTRAIN_RANK", "3"},        {"PARTRAIN_LOCAL_RANK", "1"},     {"PARTRAIN_WORLD", "4"},
          {"PARTRAIN_COORDINATOR", "node7:29400"}, {"PARTRAIN_NODE_NAME", "node8"}, {"PARTRAIN_NODE_ADDR", "10.0.0.8"},
          {"PARTRAIN_ATTEMPT", "a2.1"},  {"PARTRAIN_MODEL_FLOPS_PER_TOKEN", "7.5e+08"},
          {"PARTRAIN_PEAK_FLOPS_PER_RANK", "0"}};
}

TEST(WorkerEnv, ReadsWhatTheAgentWrites) {
  Result<WorkerEnv> w = read(agent_written());
  ASSERT_TRUE(w) << w.status().message();
  EXPECT_EQ(w->rank, 3);
  EXPECT_EQ(w->local_rank, 1);
  EXPECT_EQ(w->world, 4);
  EXPECT_EQ(w->coordinator_host, "node7");
  EXPECT_EQ(w->coordinator_port, 29400);
  EXPECT_EQ(w->node_name, "node8");
  EXPECT_EQ(w->node_addr, "10.0.0.8");
  EXPECT_EQ(w->attempt, "a2.1");
  EXPECT_EQ(w->model_flops_per_token, 7.5e8);
  EXPECT_EQ(w->peak_flops_per_rank, 0.0);
}

TEST(WorkerEnv, RoundTrip) {
  WorkerEnv w;
  w.rank = 5;
  w.local_rank = 2;
  w.world = 8;
  w.coordinator_host = "fe80::1";  // the last colon splits
  w.coordinator_port = 65535;
  w.node_name = "gpu-12";
  w.attempt = "a0.3";
  w.init = "/models/gpt2.safetensors";
  w.model_flops_per_token = 1.25e9;
  w.peak_flops_per_rank = 9.89e14;
  w.spec = "tp2,pp2";
  w.job_secret = "0123456789abcdef0123";
  w.steps = 40;
  w.device = "cuda";
  w.cuda_visible_devices = "GPU-1234";
  Env e;
  for (const auto& [k, v] : to_env(w)) EXPECT_TRUE(e.emplace(k, v).second) << k << " written twice";
  // Forwarded settings go under the names their own readers read.
  EXPECT_EQ(e.at("PARTRAIN_SPEC"), "tp2,pp2");
  EXPECT_EQ(e.at("PARTRAIN_STEPS"), "40");
  EXPECT_EQ(e.at("PARTRAIN_DEVICE"), "cuda");
  EXPECT_EQ(e.at("PARTRAIN_JOB_SECRET"), "0123456789abcdef0123");
  EXPECT_EQ(e.at("CUDA_VISIBLE_DEVICES"), "GPU-1234");
  EXPECT_EQ(e.count("PARTRAIN_SITE_CONFIG"), 0u);  // unset stays unset
  EXPECT_EQ(e.count("PARTRAIN_TRACE"), 0u);
  Result<WorkerEnv> back = read(e);
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->rank, w.rank);
  EXPECT_EQ(back->local_rank, w.local_rank);
  EXPECT_EQ(back->world, w.world);
  EXPECT_EQ(back->coordinator_host, w.coordinator_host);
  EXPECT_EQ(back->coordinator_port, w.coordinator_port);
  EXPECT_EQ(back->node_name, w.node_name);
  EXPECT_EQ(back->node_addr, "");
  EXPECT_EQ(back->attempt, w.attempt);
  EXPECT_EQ(back->init, w.init);
  EXPECT_EQ(back->model_flops_per_token, w.model_flops_per_token);  // exact: shortest round-trip text
  EXPECT_EQ(back->peak_flops_per_rank, w.peak_flops_per_rank);
}

// One line naming the variable and the value it refused.
void expect_refused(Env e, const std::string& key, const std::string& value) {
  if (value == "<unset>") {
    e.erase(key);
  } else {
    e[key] = value;
  }
  Result<WorkerEnv> w = read(e);
  ASSERT_FALSE(w) << key << "=" << value << " was accepted";
  const std::string m = w.status().message();
  EXPECT_NE(m.find(key), std::string::npos) << m;
  if (value != "<unset>") {
    EXPECT_NE(m.find(value), std::string::npos) << m;
  }
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(WorkerEnv, RefusesABadPort) {
  for (const char* bad : {"node7:", "node7:http", "node7:65536", "node7:-1", "node7:29400x", "node7", ":29400"}) {
    expect_refused(agent_written(), "PARTRAIN_COORDINATOR", bad);
  }
}

TEST(WorkerEnv, RefusesAMissingKey) {
  for (const char* key : {"PARTRAIN_RANK", "PARTRAIN_WORLD", "PARTRAIN_COORDINATOR"}) {
    expect_refused(agent_written(), key, "<unset>");
  }
}

TEST(WorkerEnv, RefusesBadNumbers) {
  expect_refused(agent_written(), "PARTRAIN_RANK", "4");  // not below PARTRAIN_WORLD=4
  expect_refused(agent_written(), "PARTRAIN_RANK", "-1");
  expect_refused(agent_written(), "PARTRAIN_RANK", "1.5");
  expect_refused(agent_written(), "PARTRAIN_WORLD", "0");
  expect_refused(agent_written(), "PARTRAIN_LOCAL_RANK", "x");
  expect_refused(agent_written(), "PARTRAIN_MODEL_FLOPS_PER_TOKEN", "lots");
  expect_refused(agent_written(), "PARTRAIN_PEAK_FLOPS_PER_RANK", "-3");
}

TEST(WorkerEnv, OptionalKeysDefault) {
  Env e = agent_written();
  for (const char* k : {"PARTRAIN_LOCAL_RANK", "PARTRAIN_ATTEMPT", "PARTRAIN_MODEL_FLOPS_PER_TOKEN",
                        "PARTRAIN_PEAK_FLOPS_PER_RANK", "PARTRAIN_NODE_ADDR"}) {
    e.erase(k);
  }
  Result<WorkerEnv> w = read(e);
  ASSERT_TRUE(w) << w.status().message();
  EXPECT_EQ(w->local_rank, 0);
  EXPECT_EQ(w->attempt, "");
  EXPECT_EQ(w->model_flops_per_token, 0.0);
}

TEST(WorkerEnv, HostPortAsTheAgentChecksIt) {
  Result<std::pair<std::string, int>> ok = parse_host_port("X", "h:0");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->first, "h");
  EXPECT_EQ(ok->second, 0);
  EXPECT_EQ(parse_host_port("X", "h").status().message(), "X=h: need host:port");
  EXPECT_EQ(parse_host_port("X", "h:70000").status().message(), "X=h:70000: need host:port, port 0 (any) to 65535");
}

}  // namespace
}  // namespace partrain
