// The arguments an admin gives the plugin on its plugstack.conf line, e.g.
//
//   required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_partrain.so nvlink_domain=4
//            state_root=/shared/partrain          (all on one line)
//
// Parsed strictly: an unknown key or a bad value is a load error whose message names the
// argument and the fix, so a typo never silently falls back to a default. The plugin takes
// these here rather than from /etc/partrain/partrain.toml because it links nothing heavy
// (no TOML parser inside sbatch, srun or slurmstepd). No Slurm header is needed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace partrain::spank {

struct PluginArgs {
  // GPUs per NVLink/NVSwitch domain; tensor-parallel groups never cross one.
  // 0 = the whole node is one domain. Default: 0
  int nvlink_domain = 0;
  // Where each job's state directory <state_root>/slurm-<job id> is made (the same for
  // every requeue of the job). Must be shared by all nodes (checkpoints and the job secret
  // live there) and writable by users (mode 1777); the site config's [paths] state_root
  // names the same place. Default: /var/lib/partrain
  std::string state_root = "/var/lib/partrain";
  // The coordinator listens on port_base + (job id mod port_range). Default: 29500
  int port_base = 29500;
  // Default: 1000
  int port_range = 1000;
  // Slurm's topology.conf (topology/tree form), for switch-aware rank placement.
  // Default: "" (one flat network)
  std::string topology;
};

// Parses the words after the plugin path on its plugstack.conf line.
Result<PluginArgs> parse_plugin_args(const std::vector<std::string_view>& words);

// The coordinator's TCP port for a job.
int coordinator_port(const PluginArgs& args, unsigned job_id);

}  // namespace partrain::spank
