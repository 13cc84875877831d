// The agent->worker environment (worker_env.h): written by the agent, read back by the worker.
#include "common/worker_env.h"

#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

namespace partrain {
namespace {

namespace key = worker_env_key;

// Every error says what is wrong and that the agent, not a user, starts workers.
Status bad(const char* name, const std::string& text, const char* need) {
  return Status::invalid(fmt::format("{}='{}': {}; partrain-worker is started by partraind, which sets it (run "
                                     "partraind or `partrain run --nproc N`)", name, text, need));
}

// A whole number of type T in [lo, hi], the whole text.
template <typename T>
Result<T> parse_number(const char* name, const std::string& text, T lo, T hi, const char* need) {
  T v{};
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || v < lo || v > hi) {
    return bad(name, text, need);
  }
  return v;
}

std::string format_double(double v) { return fmt::format("{}", v); }

}  // namespace

Result<std::pair<std::string, int>> parse_host_port(const char* name, const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return Status::invalid(fmt::format("{}={}: need host:port", name, text));
  const std::string port = text.substr(colon + 1);
  int v = 0;
  auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
  if (port.empty() || ec != std::errc() || p != port.data() + port.size() || v < 0 || v > 65535) {
    return Status::invalid(fmt::format("{}={}: need host:port, port 0 (any) to 65535", name, text));
  }
  return std::pair<std::string, int>(text.substr(0, colon), v);
}

EnvList to_env(const WorkerEnv& w) {
  EnvList e = {{key::kRank, std::to_string(w.rank)},
               {key::kLocalRank, std::to_string(w.local_rank)},
               {key::kWorld, std::to_string(w.world)},
               {key::kCoordinator, w.coordinator()},
               {key::kJobSecret, w.job_secret},
               {key::kNodeName, w.node_name},
               {key::kNodeAddr, w.node_addr},
               {key::kSpec, w.spec}};
  if (!w.cuda_visible_devices.empty()) e.emplace_back(key::kCudaVisibleDevices, w.cuda_visible_devices);
  if (!w.site_config.empty()) e.emplace_back(key::kSiteConfig, w.site_config);
  if (w.steps > 0) e.emplace_back(key::kSteps, std::to_string(w.steps));
  if (!w.device.empty()) e.emplace_back(key::kDevice, w.device);
  if (!w.trace.empty()) e.emplace_back(key::kTrace, w.trace);
  if (!w.init.empty()) e.emplace_back(key::kInit, w.init);
  e.emplace_back(key::kModelFlopsPerToken, format_double(w.model_flops_per_token));
  e.emplace_back(key::kPeakFlopsPerRank, format_double(w.peak_flops_per_rank));
  if (!w.attempt.empty()) e.emplace_back(key::kAttempt, w.attempt);
  return e;
}

Result<WorkerEnv> worker_env_from(const EnvGetter& get) {
  auto text = [&get](const char* name) {
    const char* v = get(name);
    return std::string(v != nullptr ? v : "");
  };
  WorkerEnv w;
  Result<int> world = parse_number<int>(key::kWorld, text(key::kWorld), 1, 1 << 30, "need a whole number >= 1");
  if (!world) return world.status();
  w.world = *world;
  Result<int> rank = parse_number<int>(key::kRank, text(key::kRank), 0, w.world - 1,
                                       "need a whole number from 0 to PARTRAIN_WORLD-1");
  if (!rank) return rank.status();
  w.rank = *rank;
  // Optional: a worker group spawned by hand (tests) may leave it out; 0 then.
  if (!text(key::kLocalRank).empty()) {
    Result<int> local = parse_number<int>(key::kLocalRank, text(key::kLocalRank), 0, 1 << 30,
                                          "need a whole number >= 0");
    if (!local) return local.status();
    w.local_rank = *local;
  }
  Result<std::pair<std::string, int>> at = parse_host_port(key::kCoordinator, text(key::kCoordinator));
  if (!at) return bad(key::kCoordinator, text(key::kCoordinator), "need HOST:PORT, port 0 to 65535");
  w.coordinator_host = at->first;
  w.coordinator_port = at->second;
  w.node_name = text(key::kNodeName);
  w.node_addr = text(key::kNodeAddr);
  w.attempt = text(key::kAttempt);
  w.init = text(key::kInit);
  for (auto [name, field] : {std::pair{key::kModelFlopsPerToken, &w.model_flops_per_token},
                             std::pair{key::kPeakFlopsPerRank, &w.peak_flops_per_rank}}) {
    if (text(name).empty()) continue;  // unknown: no MFU
    Result<double> v = parse_number<double>(name, text(name), 0.0, 1e300, "need a number >= 0");
    if (!v) return v.status();
    *field = *v;
  }
  return w;
}

Result<WorkerEnv> worker_env_from_env() {
  return worker_env_from([](const char* name) { return static_cast<const char*>(std::getenv(name)); });
}

}  // namespace partrain
