// The site config: what an admin sets once per cluster, in /etc/partrain/partrain.toml
// (etc/partrain.toml in the source tree). TOML with the tables
//   [paths] [topology] [defaults] [agent] [log]
// documented key by key in partrain.toml(5). Which file is read: --site-config FILE, else
// $PARTRAIN_SITE_CONFIG, else the compiled-in default; a missing compiled-in default means
// "use the built-in defaults below", a missing file that was named explicitly is an error.
#pragma once

#include <string>
#include <vector>

#include "common/log.h"
#include "common/status.h"

namespace partrain::config {

// The compiled-in locations: <sysconfdir>/partrain/partrain.toml and <libdir>/partrain/plugins
// of the installation prefix (GNUInstallDirs: /etc/partrain/partrain.toml for prefix /usr,
// /usr/local/etc/partrain/partrain.toml for the default /usr/local).
std::string default_site_config_path();
std::string default_plugin_dir();

struct SiteConfig {
  std::string path;  // the file read; "" when none was found and the defaults below hold

  // [paths]
  std::string plugin_dir = default_plugin_dir();  // strategy plugins (*.so). Default: compiled in
  // Where each Slurm job's state directory <state_root>/slurm-<job id> is made (the job
  // secret, the coordinator's address; the same for every requeue). Shared by all nodes,
  // writable by users (mode 1777); the SPANK plugin reads it from this file too.
  // Default: /var/lib/partrain
  std::string state_root = "/var/lib/partrain";
  // Hardware profiles (NAME.toml) for `--hardware NAME`, over the installed
  // <sysconfdir>/partrain/hardware; a build tree's site config names the source tree's
  // etc/hardware. Default: "" (the installed folder)
  std::string hardware_dir;
  // [topology]: hints for machines where detection is impossible or wrong.
  int gpus_per_node = 0;      // devices per node; 0 = detect (Slurm, CUDA). Default: 0
  int nvlink_domain = 0;      // GPUs sharing one NVLink/NVSwitch domain; 0 = gpus_per_node. Default: 0
  std::string topology_file;  // Slurm topology.conf describing the switch tree; "" = none. Default: ""
  // [rendezvous] (read by the SPANK plugin): 0 = the coordinator binds any free port and
  // publishes it in the job's state directory; else it tries port_base + (job id mod
  // port_range) first (firewalled sites). Default: 0 and 1000
  int rendezvous_port_base = 0;
  int rendezvous_port_range = 1000;
  // [defaults]
  std::string default_spec;   // spec items every job starts from, below its [parallelism],
                              // e.g. "zero1,sched=1f1b". Default: "" (the spec's own defaults)
  // [agent]
  // Seconds a rank may make no progress (enter no phase of a step: forward, backward,
  // gradient sync, optimizer, checkpoint ...) before its agent ends the job with exit 75
  // naming it; 0 = never. Must exceed the longest single phase (a checkpoint write
  // included). Default: 600
  int progress_timeout = 600;
  // [log]
  log::Level log_level = log::Level::kInfo;  // debug|info|warn|error. Default: info
};

// Which file to read: `cli_path` when not empty, else $PARTRAIN_SITE_CONFIG when set and
// not empty, else default_site_config_path().
std::string site_config_path(const std::string& cli_path);

// Finds (as above) and reads the site config. Defaults hold when the compiled-in file is
// absent; an explicitly named file that is absent is an error naming it.
Result<SiteConfig> load_site_config(const std::string& cli_path = "");

// Reads one site config file. Relative paths in it are resolved against its folder.
Result<SiteConfig> load_site_file(const std::string& path);
Result<SiteConfig> parse_site(std::string_view text, const std::string& path);

// Sets the logger's level from the site config unless $PARTRAIN_LOG_LEVEL is set (the
// environment wins over the site file).
void apply_log_level(const SiteConfig& site);

// Every "table.key" a site config may set, from the parser's own table.
std::vector<std::string> known_site_keys();

}  // namespace partrain::config
