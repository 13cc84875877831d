// The settings spank_partrain.so takes from the site config, partrain.toml, so that an
// admin writes nvlink_domain and state_root once for both the plugin and partrain:
//   [paths] state_root   [topology] nvlink_domain, file   [rendezvous] port_base, port_range
// (partrain.toml(5)). Keys given on the plugstack line win. Relative paths are taken from
// the file's folder, as partrain takes them. Other keys are partrain's to check.
//
// Read with TOML++, the parser partrain itself uses, compiled into the plugin header-only:
// the file reads the same for both, no library is loaded into sbatch, srun or slurmstepd,
// and it costs the plugin about 150 KB of code. A hand-written subset parser would be
// smaller but could read a valid file differently from partrain.
#pragma once

#include "common/status.h"
#include "plugin_args.h"

namespace partrain::spank {

// Fills the settings of *args not given on the plugstack line from args->site_config. A
// missing file keeps the built-in defaults unless site_config= named it (then it is an
// error); a malformed file or a key of the wrong type or range is an error naming the
// file, the line and the key.
Status apply_site_config(PluginArgs* args);

}  // namespace partrain::spank
