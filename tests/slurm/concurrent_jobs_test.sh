#!/usr/bin/env bash
# Two jobs on the same two nodes at once, next to a torchrun-style listener on port 29500
# (torchrun's default, and where partrain's old fixed port range began): each job's
# coordinator binds a free port and publishes it in the job's state directory, so neither
# collides with the other or with the listener. Both finish, each equal to a standalone run.
#   concurrent_jobs_test.sh CLUSTER_DIR PARTRAIN PARTRAIND SITE_CONFIG
set -uo pipefail
source "$(dirname "$0")/common.sh"
train_setup "$2" "$3" "$4"
steps=30
out=$(mktemp -d /tmp/partrain-concurrent.XXXXXX)
chmod 755 "$out"
squatter=""
cleanup() {
  [ -n "$squatter" ] && kill "$squatter" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT

/usr/bin/python3 -c 'import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 29500)); s.listen(1); time.sleep(600)' &
squatter=$!
reference_run "$out/ref" $steps
a=$(submit_train "$out/a" $steps "$out/a.out" -w n1,n2)
b=$(submit_train "$out/b" $steps "$out/b.out" -w n1,n2)
wait_job "$a" 90
wait_job "$b" 90
# Both ran at once (each one's run overlaps the other's), on the same nodes.
start_a=$(date -d "$(job_field "$a" StartTime)" +%s) end_a=$(date -d "$(job_field "$a" EndTime)" +%s)
start_b=$(date -d "$(job_field "$b" StartTime)" +%s)
[ "$start_b" -le "$end_a" ] && [ "$start_a" -le "$(date -d "$(job_field "$b" EndTime)" +%s)" ] ||
  fail "jobs $a and $b did not run at the same time"
for j in a b; do
  port=$(sed -n 's/.*rendezvous store at [^ ]*:\([0-9]*\), published in .*/\1/p' "$out/$j.out" | head -n 1)
  [ -n "$port" ] || fail "job $j: no published rendezvous port: $(grep -v '^step ' "$out/$j.out")"
  [ "$port" != 29500 ] || fail "job $j listened on 29500"
  echo "job $j: rendezvous port $port"
  /usr/bin/python3 "$(dirname "$0")/compare_metrics.py" "$out/ref/metrics.jsonl" "$out/$j/metrics.jsonl" \
    --last $steps || fail "job $j's metrics differ from the standalone run's"
done
echo PASS
