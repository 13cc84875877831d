// The agent->worker environment: what partraind tells each partrain-worker it spawns, on
// one page. The agent fills a WorkerEnv and writes it with to_env(); the worker reads it back
// with from_env(), which checks every number and names the variable and its bad value.
//
// Keys this header owns (set by partraind for its workers only; a user never sets them):
//
//   PARTRAIN_RANK                    global rank, 0 <= rank < world
//   PARTRAIN_LOCAL_RANK              index among this node's workers (>= 0)
//   PARTRAIN_WORLD                   number of ranks in the job (> 0)
//   PARTRAIN_COORDINATOR             HOST:PORT of the rendezvous store, port 0..65535
//   PARTRAIN_NODE_NAME               this node's name (log lines)
//   PARTRAIN_NODE_ADDR               this node's address for collectives (may be empty)
//   PARTRAIN_ATTEMPT                 this worker group's rendezvous key prefix, "a<slurm restart>.<in-job restart>"
//   PARTRAIN_INIT                    initial weights (`--init`), empty when none
//   PARTRAIN_MODEL_FLOPS_PER_TOKEN   for MFU; 0 (unset) when unknown
//   PARTRAIN_PEAK_FLOPS_PER_RANK     for MFU; 0 (unset) when unknown
//
// Settings the agent forwards so the worker resolves the same job. The agent writes them
// here too, but they are also user-facing settings, so the worker reads them through their
// own readers, as any other process does:
//
//   PARTRAIN_SPEC, PARTRAIN_STEPS, PARTRAIN_DEVICE   config/job_config.cc (the environment chain)
//   PARTRAIN_SITE_CONFIG                             config/site_config.cc
//   PARTRAIN_TRACE                                   common/trace.cc
//   PARTRAIN_JOB_SECRET                              comm/rendezvous/secret.cc
//
// and CUDA_VISIBLE_DEVICES (the device this worker may see), read by the CUDA runtime.
//
// Not covered: the Slurm task environment the SPANK plugin writes for the agent
// (slurm/step_env.h, read by agent/placement.cc) and user settings such as
// PARTRAIN_FAULT or PARTRAIN_CUDA_MODULE, each read where it acts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace partrain {

namespace worker_env_key {
inline constexpr const char* kRank = "PARTRAIN_RANK";
inline constexpr const char* kLocalRank = "PARTRAIN_LOCAL_RANK";
inline constexpr const char* kWorld = "PARTRAIN_WORLD";
inline constexpr const char* kCoordinator = "PARTRAIN_COORDINATOR";
inline constexpr const char* kNodeName = "PARTRAIN_NODE_NAME";
inline constexpr const char* kNodeAddr = "PARTRAIN_NODE_ADDR";
inline constexpr const char* kAttempt = "PARTRAIN_ATTEMPT";
inline constexpr const char* kInit = "PARTRAIN_INIT";
inline constexpr const char* kModelFlopsPerToken = "PARTRAIN_MODEL_FLOPS_PER_TOKEN";
inline constexpr const char* kPeakFlopsPerRank = "PARTRAIN_PEAK_FLOPS_PER_RANK";
// Forwarded settings (see above).
inline constexpr const char* kSpec = "PARTRAIN_SPEC";
inline constexpr const char* kSteps = "PARTRAIN_STEPS";
inline constexpr const char* kDevice = "PARTRAIN_DEVICE";
inline constexpr const char* kSiteConfig = "PARTRAIN_SITE_CONFIG";
inline constexpr const char* kTrace = "PARTRAIN_TRACE";
inline constexpr const char* kJobSecret = "PARTRAIN_JOB_SECRET";
inline constexpr const char* kCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";
}  // namespace worker_env_key

// Where one worker stands in the job and what it must know. Default: the empty value
// of each field, which to_env() leaves out where the key is optional.
struct WorkerEnv {
  // The protocol: from_env() reads these.
  int rank = 0;
  int local_rank = 0;
  int world = 0;
  std::string coordinator_host;  // the rendezvous store's
  int coordinator_port = 0;
  std::string node_name;
  std::string node_addr;
  std::string attempt;  // "a0.0": the scope of the group's rendezvous keys (comm/rendezvous/keys.h)
  std::string init;
  double model_flops_per_token = 0;
  double peak_flops_per_rank = 0;
  // Forwarded settings: to_env() writes them, their own readers read them.
  std::string spec;
  std::string job_secret;
  std::string site_config;  // empty: not set
  int64_t steps = 0;        // 0: not set
  std::string device;       // empty: not set
  std::string trace;        // empty: not set
  std::string cuda_visible_devices;  // empty: not set

  // "HOST:PORT", as PARTRAIN_COORDINATOR carries it.
  std::string coordinator() const { return coordinator_host + ":" + std::to_string(coordinator_port); }
};

using EnvList = std::vector<std::pair<std::string, std::string>>;

// The agent's side: the variables to set in the worker's environment.
EnvList to_env(const WorkerEnv& w);

// The worker's side: the protocol keys read through `get` (nullptr or "" = unset), checked.
// An error is one line naming the variable and its value.
using EnvGetter = std::function<const char*(const char*)>;
Result<WorkerEnv> worker_env_from(const EnvGetter& get);
// The same, from this process's environment.
Result<WorkerEnv> worker_env_from_env();

// Splits "HOST:PORT" (the last colon), port 0..65535; `name` names the variable in errors.
Result<std::pair<std::string, int>> parse_host_port(const char* name, const std::string& text);

}  // namespace partrain
