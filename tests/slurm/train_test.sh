#!/usr/bin/env bash
# End to end without failures: the shipped etc/examples/train.sbatch (srun
# --ntasks-per-node=1 partraind tiny.toml, --partrain=dp2) trains on one CPU rank on each
# of two Slurm nodes. The agents find the coordinator through Slurm's NodeAddr (the node
# names n1..n3 are in no DNS), rendezvous, heartbeat and train; the final metrics equal a
# standalone `partrain run ... --partrain=dp2 --nproc 2` run's, step by step.
#   train_test.sh CLUSTER_DIR PARTRAIN PARTRAIND SITE_CONFIG
set -uo pipefail
source "$(dirname "$0")/common.sh"
train_setup "$2" "$3" "$4"
steps=60
out=$(mktemp -d /tmp/partrain-train.XXXXXX)
trap 'rm -rf "$out"' EXIT
chmod 755 "$out"

begin=$(now_ms)
reference_run "$out/ref" $steps
echo "standalone dp2 reference: $steps steps in $(since "$begin") s"

begin=$(now_ms)
id=$(submit_train "$out/slurm" $steps "$out/job.out")
wait_job "$id" 90
echo "job $id: $steps steps on $(job_field "$id" NodeList) in $(since "$begin") s"
[ "$(job_field "$id" ExitCode)" = 0:0 ] || fail "job $id exit code $(job_field "$id" ExitCode)"
grep -v '^step ' "$out/job.out"

# Both agents resolved the coordinator's node name through Slurm, and both finished.
nodes=$(scontrol show hostnames "$(job_field "$id" NodeList)" | tr '\n' ' ')
for n in $nodes; do
  grep -q "node=$n | coordinator node [a-z0-9]* is at 127.0.0.1 (Slurm NodeAddr)" "$out/job.out" ||
    fail "the agent on $n did not resolve the coordinator through Slurm's NodeAddr"
  grep -q "node=$n | exit 0: done" "$out/job.out" || fail "the agent on $n did not finish"
done
# The job's secret was removed by the plugin's job epilog (COMPLETED comes after every
# node's epilog); its state directory stays.
state_dir=$1/partrain-state/slurm-$id
[ -d "$state_dir" ] || fail "job $id has no state directory $state_dir"
[ -e "$state_dir/job.secret" ] && fail "job $id ended but its secret $state_dir/job.secret is still there"
/usr/bin/python3 "$(dirname "$0")/compare_metrics.py" "$out/ref/metrics.jsonl" \
  "$out/slurm/metrics.jsonl" --last $steps || fail "the Slurm run's metrics differ from the standalone run's"
echo PASS
