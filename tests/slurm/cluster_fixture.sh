#!/usr/bin/env bash
# CTest fixture: starts (fresh) and stops the local Slurm cluster the slurm-label tests use.
#   cluster_fixture.sh start DIR SPANK_SO BUILD_SITE_CONFIG PARTRAIN
#   cluster_fixture.sh stop  DIR
# The plugin gets its settings as a site would give them: from a partrain.toml (DIR's,
# the build's plugin folder plus state_root and nvlink_domain = 4) named on the
# plugstack.conf line, which the tasks' partraind then reads too.
# Where the cluster cannot run (not root, no daemons) `start` writes DIR/skip and exits 77,
# and every test that uses the cluster skips too.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
action=$1
dir=$2
cluster=$repo/scripts/slurm-cluster.sh

case $action in
  start)
    bash "$cluster" stop "$dir" >/dev/null 2>&1 || true
    rm -rf "$dir"
    mkdir -p "$dir"
    if [ "$(id -u)" -ne 0 ]; then
      echo "a local Slurm cluster needs root" >"$dir/skip"
      echo "SKIP: $(cat "$dir/skip")"
      exit 77
    fi
    begin=$(( $(date +%s%N) / 1000000 ))
    plugins=$(sed -n 's/^plugin_dir *= *"\(.*\)"/\1/p' "$4")
    mkdir -p "$dir/partrain-state"
    chmod 1777 "$dir/partrain-state"
    printf '[paths]\nplugin_dir = "%s"\nstate_root = "%s"\n\n[topology]\nnvlink_domain = 4\n' \
      "$plugins" "$dir/partrain-state" >"$dir/partrain.toml"
    # --partrain=auto plans with the cpu profile (one CPU rank per task) and the build's partrain.
    bash "$cluster" start "$dir" --nodes 3 --spank "$3" --site-config "$dir/partrain.toml" \
      --spank-args "hardware=$repo/etc/hardware/cpu.toml partrain_cli=$(realpath "$5")"
    ms=$(( $(date +%s%N) / 1000000 - begin ))
    printf "cluster up in %d.%03d s\n" $((ms / 1000)) $((ms % 1000))
    ;;
  stop)
    [ -f "$dir/skip" ] && exit 0
    bash "$cluster" stop "$dir"
    ;;
  *) echo "usage: $0 start DIR SPANK_SO BUILD_SITE_CONFIG PARTRAIN | stop DIR" >&2; exit 2 ;;
esac
