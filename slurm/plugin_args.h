// The plugin's settings. They live in partrain.toml, the file partrain itself reads, so an
// admin sets nvlink_domain and state_root once (site_settings.h reads them); the
// plugstack.conf line only names that file when it is not the installed one:
//
//   required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_partrain.so
//   required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_partrain.so site_config=/shared/partrain.toml
//
// A key may still be given on the line (nvlink_domain=, state_root=, port_base=,
// port_range=, topology=); it then wins over the file. Two keys live on the line only:
// hardware= (the profile --partrain=auto plans with) and partrain_cli= (the partrain
// command it runs, when not the installed one). Parsed strictly: an unknown key or
// a bad value is a load error whose message names the argument and the fix, so a typo
// never silently falls back to a default. No Slurm header is needed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace partrain::spank {

// The compiled-in site config, as partrain's (<sysconfdir>/partrain/partrain.toml).
std::string default_site_config();

struct PluginArgs {
  // The site config read for the settings below (site_config=). Default: default_site_config()
  std::string site_config = default_site_config();
  bool site_config_named = false;  // given on the line: then it must exist
  // GPUs per NVLink/NVSwitch domain; tensor-parallel groups never cross one ([topology]
  // nvlink_domain). 0 = the whole node is one domain. Default: 0
  int nvlink_domain = 0;
  // Where each job's state directory <state_root>/slurm-<job id> is made (its secret and
  // the coordinator's address; the same for every requeue of the job): on storage all nodes
  // share, writable by users (mode 1777) ([paths] state_root). Default: /var/lib/partrain
  std::string state_root = "/var/lib/partrain";
  // 0: the coordinator binds any free port and publishes it in the job's state directory,
  // so jobs (and torchrun) on one node never collide. Else the port it tries first,
  // port_base + (job id mod port_range), for sites whose firewalls open a range; taken, it
  // falls back to any free port, published the same way ([rendezvous] port_base). Default: 0
  int port_base = 0;
  // [rendezvous] port_range. Default: 1000
  int port_range = 1000;
  // Slurm's topology.conf (topology/tree form), for switch-aware rank placement
  // ([topology] file). Default: "" (one flat network)
  std::string topology;

  // The hardware profile --partrain=auto plans with: a name in partrain's profile folder
  // (e.g. H100-SXM) or a profile file. Default: "" (auto is refused, saying so)
  std::string hardware;
  // The partrain command --partrain=auto runs (`partrain plan --auto`). Default: the
  // installed <bindir>/partrain
  std::string partrain_cli;

  // The keys given on the plugstack line (they win over the site config).
  struct Given {
    bool nvlink_domain = false, state_root = false, port_base = false, port_range = false, topology = false;
  } given;
};

// Parses the words after the plugin path on its plugstack.conf line (site config not read).
Result<PluginArgs> parse_plugin_args(const std::vector<std::string_view>& words);

// port_base + port_range stays at or below 65536 (when port_base is set).
Status check_port_range(const PluginArgs& args);

// The coordinator's preferred TCP port for a job; 0 = any free one.
int coordinator_port(const PluginArgs& args, unsigned job_id);

}  // namespace partrain::spank
