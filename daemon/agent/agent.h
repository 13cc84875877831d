// partraind: one agent per node per job. It reads where it stands (SLURM_* and the
// PARTRAIN_* variables of the SPANK plugin, or --standalone --nproc N), runs the rendezvous
// store on the coordinator node, spawns one worker per local rank, supervises them,
// heartbeats its peers, and on any failure kills its whole worker group and exits with a
// documented code (common/exit_codes.h): 0 done, 2 configuration error, 75 retryable failure
// (a worker died, a peer was lost, or SIGTERM stopped the job at a step boundary).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "agent/supervise.h"
#include "common/status.h"

namespace partrain::agent {

struct AgentOptions {
  std::string job_path;        // the job file (TOML). Required
  std::string spec;            // --partrain items over the job's [parallelism]. Default: ""
  std::string site_config;     // --site-config; "" = $PARTRAIN_SITE_CONFIG or installed. Default: ""
  bool standalone = false;     // one local agent, no Slurm. Default: false
  int nproc = 0;               // standalone: local ranks (= world). Default: 0
  int64_t steps = 0;           // overrides [training] steps when > 0. Default: 0
  std::string device;          // overrides [job] device ("cpu", "cuda") when set. Default: ""
  std::string resume;          // overrides [checkpoint] resume (auto, never, STEP) when set. Default: ""
  // Resume although the run's inputs changed (store/run_inputs.h): --resume-with-changes,
  // each change logged. Default: false (refused with exit 2, naming the key)
  bool resume_with_changes = false;
  std::string trace;           // steps every worker traces (e.g. "5-7"); "" = none. Default: ""
  // Hugging Face weights (a .safetensors file or a model folder) a fresh run starts from;
  // each rank reads only its slices. A run that resumes from a checkpoint ignores it.
  // Default: "" (the seeded initialisation)
  std::string init;
  // The hardware profile MFU is counted against (a name or .toml file, as `partrain plan`
  // takes); "" = the device's default (cpu on CPU ranks, none on GPUs). Default: ""
  std::string hardware;
  // Where a profile name is looked up; "" = $PARTRAIN_HARDWARE_DIR, else the site's
  // [paths] hardware_dir, else the installed profiles (planner/hardware.h). Default: ""
  std::string hardware_dir;
  std::string worker_path;     // the worker binary; "" = next to partraind. Default: ""
  // Heartbeat period and how long a silent peer may stay silent before the job is torn
  // down. Default: 2 s and 30 s (PARTRAIN_HEARTBEAT_TIMEOUT, in seconds, overrides).
  std::chrono::milliseconds heartbeat_interval{2000};
  std::chrono::milliseconds heartbeat_timeout{30000};
  // After SIGTERM/SIGINT/SIGHUP is forwarded, how long workers have to reach a step
  // boundary and save before they are killed. Default: kStopGrace (20 s; supervise.h says
  // why: under Slurm's KillWait).
  std::chrono::milliseconds stop_grace{kStopGrace};
  // How long the agents of a job wait for each other at start: for the coordinator's
  // published address, and at the barrier of all agents (PARTRAIN_RENDEZVOUS_TIMEOUT, in
  // seconds, overrides). Default: 300 s.
  std::chrono::milliseconds rendezvous_timeout{300000};
};

// Where this agent stands in the job.
struct Placement {
  int world = 0;                 // ranks in the job
  int node = 0;                  // this node's index (0 = coordinator)
  int num_nodes = 1;
  std::vector<int> node_ranks;   // global ranks this node runs, in local order
  std::string coordinator_host;  // where the store runs
  // The coordinator's preferred port (the SPANK plugin's port_base); 0: any free one. The
  // coordinator publishes the one it bound in state_dir. Default: 0
  int coordinator_port = 0;
  std::string secret_file;       // PARTRAIN_JOB_SECRET_FILE; "" standalone
  // The job's state directory on shared storage (PARTRAIN_STATE_DIR; "" standalone): the
  // coordinator publishes its address there (coordinator_address.h).
  std::string state_dir;
  std::string step_id = "0";     // SLURM_STEP_ID: the publication's name
  std::string node_name;         // for logs
  std::string node_addr;         // this node's address for the workers' collectives; "" = theirs to pick
};

// From --standalone --nproc, or from SLURM_* and PARTRAIN_* (`env` name -> value).
// invalid, naming the variable, when one is missing or malformed.
Result<Placement> placement_from(const AgentOptions& o,
                                 const std::vector<std::pair<std::string, std::string>>& env);

// Under Slurm: replaces the coordinator's node name by its address and sets node_addr,
// both from Slurm's NodeAddr (node_address.h); logs what it chose.
void resolve_node_addresses(Placement* p);

// Runs the agent to the end; returns the process exit code. Its phases (agent.cc) return a
// Status, mapped here once by exit_code_for: kInvalidArgument (and kNotFound, kCorruption)
// 2, kUnavailable 75, anything else 1; a group stopped by SIGTERM/SIGINT 75. Logs the
// failure's one line, then the exit line. Never throws.
int run_agent(const AgentOptions& options);

}  // namespace partrain::agent
