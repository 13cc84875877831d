#!/usr/bin/env bash
# A real Slurm cluster on this one machine, for the `slurm` test label and for trying the
# SPANK plugin by hand: munged, one slurmctld, and NODES slurmd daemons (n1..nK) that all
# listen on 127.0.0.1 with a port each, every node declaring 8 CPUs and 4 fake GPUs.
#
#   scripts/slurm-cluster.sh start  DIR [--nodes K] [--spank PATH] [--spank-args "k=v ..."]
#                                        [--site-config PARTRAIN_TOML]
#                                        [--plugstack-include GLOB] [--slurm-include FILE]
#   scripts/slurm-cluster.sh status DIR
#   scripts/slurm-cluster.sh stop   DIR
#   scripts/slurm-cluster.sh env    DIR     # prints `export SLURM_CONF=...` for eval
#   scripts/slurm-cluster.sh logs   DIR     # the tail of every daemon's log
#   scripts/slurm-cluster.sh freeze DIR NODE  # the node hangs: SIGSTOP to all its processes
#   scripts/slurm-cluster.sh kill-node DIR NODE  # the node is gone: SIGKILL to all of them
#
# A node's processes are its slurmd, its step daemons (the slurmstepd processes holding its
# log file open: their environment and command line do not name the node) and everything
# those started: the job's tasks and their children. `freeze` is a crash as the network
# sees it (no FIN, no reply: peers find out by timeouts, as after a power loss); `kill-node`
# then removes the processes; `start` brings the node back (ReturnToService=1).
#
# All state (configs, spool, logs, pid files, fake devices) lives under DIR. `start` is
# idempotent: on a running cluster it only restarts daemons that are gone (a node a test
# killed, say). `stop` kills only the daemons whose pid files are under DIR, and munged only
# if this script started it. Needs root (slurmd runs jobs as their user), not systemd.
# Every client command needs SLURM_CONF=DIR/slurm.conf.
#
# Environment: PARTRAIN_SLURM_PORT (slurmctld port, default 16817; node K listens on
# PORT+K), PARTRAIN_SLURM_TIMEOUT (seconds to wait for the cluster, default 60).
# Facts this relies on (Debian 12, Slurm 22.05): slurmd -N with Port= per node and %n in
# SlurmdSpoolDir/SlurmdPidFile runs several nodes on one host; SlurmdParameters=
# config_overrides lets a small machine declare more CPUs; gres File= must name character
# devices (regular files are rejected), so fake GPUs are `mknod c 1 3` (/dev/null's numbers).
set -euo pipefail

usage() {
  sed -n '6,14p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

die() { echo "slurm-cluster: $*" >&2; exit 1; }
repo=$(cd "$(dirname "$0")/.." && pwd)

[ $# -ge 2 ] || usage
action=$1
dir=$2
shift 2
target=""
if [ "$action" = freeze ] || [ "$action" = kill-node ]; then
  [ $# -ge 1 ] || usage
  target=$1
  shift
fi
nodes=3
spank=""
spank_args=""
site_config=""
plugstack_include=""  # an `include GLOB` line in plugstack.conf (an installed package's snippets)
slurm_include=""      # one more `Include FILE` in slurm.conf (an admin's copy of a snippet)
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --spank) spank=$2; shift 2 ;;
    --spank-args) spank_args=$2; shift 2 ;;
    --site-config) site_config=$2; shift 2 ;;
    --plugstack-include) plugstack_include=$2; shift 2 ;;
    --slurm-include) slurm_include=$2; shift 2 ;;
    *) die "unknown argument '$1' (see the usage at the top of $0)" ;;
  esac
done
[[ $nodes =~ ^[1-9][0-9]*$ ]] || die "--nodes needs a positive number, got '$nodes'"

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)   # the daemons chdir to /: every path must be absolute
conf=$dir/slurm.conf
export SLURM_CONF=$conf
port=${PARTRAIN_SLURM_PORT:-16817}
timeout=${PARTRAIN_SLURM_TIMEOUT:-60}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

node_names() { seq -f 'n%g' 1 "$nodes"; }

# The nodes of an existing cluster come from its config, so status/stop need no --nodes.
configured_nodes() {
  [ -f "$conf" ] && sed -n 's/^NodeName=\([^ ]*\) .*/\1/p' "$conf"
}

write_config() {
  mkdir -p "$dir"/{log,run,spool,ctld-state,dev,partrain-state}
  chmod 1777 "$dir/partrain-state"
  for i in 0 1 2 3; do
    [ -c "$dir/dev/gpu$i" ] || { rm -f "$dir/dev/gpu$i"; mknod "$dir/dev/gpu$i" c 1 3; }
  done
  local host
  host=$(hostname -s)
  {
    echo "# Written by scripts/slurm-cluster.sh; regenerated on every start."
    echo "ClusterName=partrain-test"
    echo "SlurmctldHost=$host(127.0.0.1)"
    echo "SlurmctldPort=$port"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    # Requeued jobs wait for their credentials to expire: 5 s is the minimum (default 120).
    echo "AuthInfo=cred_expire=5"
    echo "StateSaveLocation=$dir/ctld-state"
    echo "SlurmctldPidFile=$dir/run/slurmctld.pid"
    echo "SlurmctldLogFile=$dir/log/slurmctld.log"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "SlurmdPidFile=$dir/run/slurmd-%n.pid"
    echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
    echo "SlurmdParameters=config_overrides"
    echo "PlugStackConfig=$dir/plugstack.conf"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "MpiDefault=none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "GresTypes=gpu"
    # Fast failure detection and requeue for tests.
    echo "JobRequeue=1"
    echo "ReturnToService=1"
    echo "SlurmdTimeout=3"
    echo "MessageTimeout=3"
    echo "SchedulerParameters=sched_interval=2,bf_interval=2"
    # What the project ships for admins (RequeueExit=75), so the tests run against it.
    echo "Include $repo/etc/slurm.conf.d/partrain.conf"
    [ -z "$slurm_include" ] || echo "Include $slurm_include"
    echo "MinJobAge=600"
    echo "KillWait=2"
    echo "InactiveLimit=0"
    local i=1 name
    for name in $(node_names); do
      echo "NodeName=$name NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + i))" \
           "CPUs=8 Gres=gpu:4 State=UNKNOWN"
      i=$((i + 1))
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } >"$conf.new"
  mv "$conf.new" "$conf"
  {
    echo "AutoDetect=off"
    echo "Name=gpu File=$dir/dev/gpu[0-3]"
  } >"$dir/gres.conf"
  if [ -n "$spank" ]; then
    [ -f "$spank" ] || die "--spank $spank: no such file (build the spank_partrain target first)"
    spank=$(cd "$(dirname "$spank")" && pwd)/$(basename "$spank")
    if [ -n "$site_config" ]; then
      # The plugin reads state_root, nvlink_domain, ... from partrain.toml itself.
      echo "required $spank site_config=$(realpath "$site_config") $spank_args" >"$dir/plugstack.conf"
    else
      echo "required $spank state_root=$dir/partrain-state $spank_args" >"$dir/plugstack.conf"
    fi
  else
    : >"$dir/plugstack.conf"
  fi
  [ -z "$plugstack_include" ] || echo "include $plugstack_include" >>"$dir/plugstack.conf"
}

munge_works() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  if munge_works; then return 0; fi
  id munge >/dev/null 2>&1 ||
    die "no 'munge' user: install the munge package (scripts/install-deps.sh)"
  install -d -o munge -g munge -m 0755 /run/munge
  if [ ! -f /etc/munge/munge.key ]; then
    install -d -o munge -g munge -m 0700 /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  runuser -u munge -- /usr/sbin/munged
  local t=0
  until munge_works; do
    sleep 0.2; t=$((t + 1))
    [ $t -lt 50 ] || die "munged did not start; see /var/log/munge/munged.log"
  done
  cp /run/munge/munged.pid "$dir/run/munged.pid"
}

wait_for() {  # wait_for SECONDS WHAT COMMAND...
  local limit=$1 what=$2 t=0
  shift 2
  until "$@" >/dev/null 2>&1; do
    sleep 0.5; t=$((t + 1))
    if [ $t -ge $((limit * 2)) ]; then
      echo "slurm-cluster: timed out after ${limit}s waiting for $what" >&2
      dump_logs
      return 1
    fi
  done
}

ctld_up() { scontrol ping | grep -q 'is UP'; }

nodes_idle() {
  local out
  out=$(sinfo -h -N -o '%N %t') || return 1
  # Every configured node is idle (or already running a job); none down, drained, unknown.
  [ "$(echo "$out" | grep -cE ' (idle|mix|alloc)$')" -eq "$(configured_nodes | wc -l)" ]
}

dump_logs() {
  local f
  for f in "$dir"/log/*.log; do
    [ -f "$f" ] || continue
    echo "===== $f (last 40 lines) =====" >&2
    tail -n 40 "$f" >&2
  done
  sinfo -N -l >&2 2>/dev/null || true
}

start() {
  [ "$(id -u)" -eq 0 ] || die "must run as root (slurmd starts jobs as their user)"
  for b in slurmctld slurmd scontrol sinfo munge; do
    command -v $b >/dev/null || die "$b not found: run scripts/install-deps.sh"
  done
  # A running cluster keeps its config; only daemons that are gone (e.g. a node a test
  # killed) are started again.
  if pid_alive "$dir/run/slurmctld.pid"; then
    nodes=$(configured_nodes | wc -l)
  else
    write_config
    start_munge
    setsid /usr/sbin/slurmctld -D -f "$conf" </dev/null >>"$dir/log/slurmctld.stdout" 2>&1 &
    echo $! >"$dir/run/slurmctld.pid"
  fi
  wait_for "$timeout" "slurmctld to answer 'scontrol ping'" ctld_up
  local name
  for name in $(node_names); do
    pid_alive "$dir/run/slurmd-$name.pid" && continue
    mkdir -p "$dir/spool/$name"
    # slurmd writes its own pid file (SlurmdPidFile=.../slurmd-%n.pid) after daemonizing.
    /usr/sbin/slurmd -f "$conf" -N "$name" </dev/null >>"$dir/log/slurmd-$name.stdout" 2>&1
  done
  wait_for "$timeout" "all nodes to be idle" nodes_idle
  echo "slurm-cluster: up in $dir ($nodes nodes); export SLURM_CONF=$conf"
}

stop_pids() {  # stop_pids PIDFILE...: TERM all at once, wait up to 10 s, then KILL
  local f pids=() t=0 pid
  for f in "$@"; do
    if pid_alive "$f"; then
      pid=$(cat "$f"); pids+=("$pid"); kill "$pid" 2>/dev/null || true
    fi
  done
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && [ $t -lt 100 ]; do sleep 0.1; t=$((t + 1)); done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -f "$@"
}

stop() {
  local name ids t=0
  # Cancel what still runs, and give it time to end, so that no step daemon or task
  # outlives its slurmd (killing slurmd alone leaves them running).
  if pid_alive "$dir/run/slurmctld.pid"; then
    ids=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    if [ -n "${ids// /}" ]; then
      # shellcheck disable=SC2086
      scancel $ids >/dev/null 2>&1 || true
      while [ -n "$(squeue -h -t running,completing -o %i 2>/dev/null)" ] && [ $t -lt 40 ]; do
        sleep 0.25; t=$((t + 1))
      done
    fi
  fi
  local files=()
  for name in $(configured_nodes); do files+=("$dir/run/slurmd-$name.pid"); done
  stop_pids "${files[@]}" "$dir/run/slurmctld.pid"
  # What no slurmd will clean up any more: a node a test froze and did not kill, say.
  for name in $(configured_nodes); do signal_node KILL "$name" >/dev/null; done
  stop_pids "$dir/run/munged.pid"
  echo "slurm-cluster: stopped $dir"
}

status() {
  [ -f "$conf" ] || { echo "slurm-cluster: no cluster in $dir"; return 3; }
  local rc=0 name
  if pid_alive "$dir/run/slurmctld.pid"; then
    echo "slurmctld: running (pid $(cat "$dir/run/slurmctld.pid"))"
  else
    echo "slurmctld: stopped"; rc=3
  fi
  for name in $(configured_nodes); do
    if pid_alive "$dir/run/slurmd-$name.pid"; then
      echo "slurmd $name: running (pid $(cat "$dir/run/slurmd-$name.pid"))"
    else
      echo "slurmd $name: stopped"; rc=3
    fi
  done
  [ $rc -ne 0 ] || sinfo -N -o '%N %t %G' 2>/dev/null || true
  return $rc
}

# node_pids NODE: the node's processes (see the top), one per line.
node_pids() {
  local name=$1 log=$dir/log/slurmd-$1.log roots=() p fd
  pid_alive "$dir/run/slurmd-$name.pid" && roots+=("$(cat "$dir/run/slurmd-$name.pid")")
  for p in $(ps -e -o pid=,comm= | awk '$2 == "slurmstepd" {print $1}'); do
    for fd in /proc/"$p"/fd/*; do
      if [ "$(readlink "$fd" 2>/dev/null)" = "$log" ]; then roots+=("$p"); break; fi
    done
  done
  [ ${#roots[@]} -gt 0 ] || return 0
  ps -e -o pid=,ppid= | awk -v roots="${roots[*]}" '
    BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1 }
    { parent[$1] = $2 }
    END {
      do { grew = 0
        for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; grew = 1 }
      } while (grew)
      for (p in keep) print p
    }'
}

# signal_node SIGNAL NODE: until a pass finds no process it has not signalled yet (a
# process may fork while the first pass runs).
signal_node() {
  local sig=$1 name=$2 done_pids=" " p more=1 n=0
  grep -q "^NodeName=$name " "$conf" 2>/dev/null || die "no node '$name' in $conf"
  while [ $more -eq 1 ]; do
    more=0
    for p in $(node_pids "$name"); do
      case $done_pids in *" $p "*) continue ;; esac
      kill -s "$sig" "$p" 2>/dev/null || true
      done_pids+="$p "; more=1; n=$((n + 1))
    done
  done
  echo "slurm-cluster: $sig sent to $n processes of node $name:$done_pids"
}

case $action in
  start) start ;;
  freeze) signal_node STOP "$target" ;;
  kill-node) signal_node KILL "$target"; rm -f "$dir/run/slurmd-$target.pid" ;;
  stop) stop ;;
  status) status ;;
  env) echo "export SLURM_CONF=$conf" ;;
  logs) dump_logs ;;
  *) usage ;;
esac
