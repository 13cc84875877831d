#!/usr/bin/env bash
# Requeue after a node crash: the shipped etc/examples/train.sbatch (--requeue, dp2 on two
# of the cluster's three nodes) trains; mid-run one node crashes (every process of it
# frozen at once: no FIN and no reply reach anyone, as after a power loss; then killed).
# Slurm requeues the job (same id, SLURM_RESTART_COUNT=1) onto the survivor and the spare
# node; it resumes from the newest committed checkpoint, finishes, and its final metrics
# equal an uninterrupted standalone run's. Prints how long detection, requeue and the
# restarted run took.
#   requeue_test.sh CLUSTER_DIR PARTRAIN PARTRAIND SITE_CONFIG peer|coordinator
# peer: the second node crashes; the surviving coordinator's agent must find the peer lost
# within the heartbeat bound and exit 75 (its log is in the job output, which the first
# node writes). coordinator: the first node crashes: the coordinator with rank 0 and the
# store, and the batch host. The job output then loses what the survivor says (it went
# through the frozen batch host), so only Slurm's side and the numbers are checked.
set -uo pipefail
source "$(dirname "$0")/common.sh"
train_setup "$2" "$3" "$4"
case ${5:-} in
  peer) victim_index=1 ;;
  coordinator) victim_index=0 ;;
  *) echo "usage: $0 CLUSTER_DIR PARTRAIN PARTRAIND SITE_CONFIG peer|coordinator" >&2; exit 2 ;;
esac
steps=80         # about 3 s per run on an idle 2-core machine
crash_after=20   # steps logged before the crash
# Heartbeats every 1 s. Short, for the survivor must find the loss before slurmctld does
# (it marked the frozen node down 5 s after the crash in one run, with SlurmdTimeout=3):
# once the job is requeued, the survivor is killed (KillWait=2) and could not report.
export PARTRAIN_HEARTBEAT_TIMEOUT=2
cluster=$repo/scripts/slurm-cluster.sh
out=$(mktemp -d /tmp/partrain-requeue.XXXXXX)
chmod 755 "$out"
id=""
victim=""
# Whatever happens, the crashed node comes back (later tests need all three nodes).
cleanup() {
  [ -n "$id" ] && scancel "$id" 2>/dev/null
  if [ -n "$victim" ]; then
    bash "$cluster" kill-node "$dir" "$victim" >/dev/null
    bash "$cluster" start "$dir" >/dev/null || echo "could not restart node $victim" >&2
  fi
  rm -rf "$out"
}
trap cleanup EXIT

# until_true SECONDS WHAT COMMAND...: polls every 0.1 s.
until_true() {
  local limit=$1 what=$2 t=0
  shift 2
  until "$@"; do
    sleep 0.1; t=$((t + 1))
    [ $t -lt $((limit * 10)) ] || fail "no $what within ${limit}s"
  done
}
logged_steps() { [ -f "$out/run/metrics.jsonl" ] && wc -l <"$out/run/metrics.jsonl" || echo 0; }
crash_point_reached() { [ "$(logged_steps)" -ge $crash_after ]; }
peer_lost_logged() { grep -q 'peer node 1 lost: no heartbeat' "$out/job.out"; }
job_done() { [ "$(job_field "$id" JobState)" = COMPLETED ]; }
job_not_running() { [ "$(job_field "$id" JobState)" != RUNNING ]; }

# The attempt's part of the job output (train.sbatch starts each with a marker line).
attempt_part() {
  sed -n "/^partrain: job $id attempt $1 /,/^partrain: job $id attempt $(($1 + 1)) /p" "$out/job.out"
}

# first_logged_step ATTEMPT: the first step the attempt trained, from its step lines.
first_logged_step() {
  attempt_part "$1" | sed -n 's/^step *\([0-9]*\)\/.*/\1/p' | head -n 1
}

begin=$(now_ms)
reference_run "$out/ref" $steps
echo "standalone dp2 reference: $steps steps in $(since "$begin") s"

id=$(PARTRAIN_CHECKPOINT_EVERY=10 submit_train "$out/run" $steps "$out/job.out")
until_true 60 "$crash_after logged steps" crash_point_reached
read -r -a nodes <<<"$(scontrol show hostnames "$(job_field "$id" NodeList)" | tr '\n' ' ')"
[ ${#nodes[@]} -eq 2 ] || fail "job $id runs on ${nodes[*]}, not on two nodes"
victim=${nodes[$victim_index]}
survivor=${nodes[$((1 - victim_index))]}
bash "$cluster" freeze "$dir" "$victim" || fail "could not freeze $victim"
crash=$(now_ms)
echo "crashed node $victim ($5) of job $id on ${nodes[*]} after $(logged_steps) logged steps"

# The node stays frozen until the loss is seen (by the survivor, or by Slurm when the
# survivor's words cannot reach the output), so that no closed socket gives it away.
if [ $victim_index -eq 1 ]; then
  until_true 15 "'peer node 1 lost' from the surviving agent" peer_lost_logged
else
  until_true 30 "Slurm to take job $id off the crashed node" job_not_running
fi
cp "$out/run/metrics.jsonl" "$out/before-crash.jsonl"   # the steps of attempt 0 alone
bash "$cluster" kill-node "$dir" "$victim" >/dev/null
until_true 90 "completion of the requeued job $id" job_done
part0=$(attempt_part 0)
part1=$(attempt_part 1)

# The survivor's own view: the lost peer, and its exit 75.
if [ $victim_index -eq 1 ]; then
  lost=$(grep -m1 "node=$survivor | peer node 1 lost" <<<"$part0") ||
    fail "the agent on $survivor did not report the lost peer: $part0"
  grep -q "node=$survivor | exit 75: retryable" <<<"$part0" ||
    fail "the agent on $survivor did not exit 75: $part0"
  grep -q "srun: error: $survivor: task 0: Exited with exit code 75" <<<"$part0" ||
    fail "srun did not see the surviving agent exit 75"
  echo "attempt 0: $lost"
fi

# Slurm's side: the same job, restarted once, on the survivor and the spare node.
[ "$(job_field "$id" Restarts)" = 1 ] || fail "job $id Restarts=$(job_field "$id" Restarts), not 1"
[ "$(job_field "$id" ExitCode)" = 0:0 ] || fail "job $id ended with $(job_field "$id" ExitCode)"
marker=$(head -n 1 <<<"$part1")
[ -n "$marker" ] || fail "no attempt 1 in the job output: $(cat "$out/job.out")"
renodes=$(scontrol show hostnames "${marker##* on }" | tr '\n' ' ')
case " $renodes" in *" $victim "*) fail "the requeued job ran on the crashed node: $marker" ;; esac
echo "attempt 1: $marker (SLURM_RESTART_COUNT=1)"
for n in $renodes; do
  grep -q "node=$n | exit 0: done" <<<"$part1" || fail "the agent on $n did not finish attempt 1"
done

# Correct numbers before the crash, and after it.
/usr/bin/python3 "$(dirname "$0")/compare_metrics.py" "$out/ref/metrics.jsonl" \
  "$out/before-crash.jsonl" || fail "the steps before the crash differ from the reference"
/usr/bin/python3 "$(dirname "$0")/compare_metrics.py" "$out/ref/metrics.jsonl" \
  "$out/run/metrics.jsonl" --last $steps || fail "the requeued run's metrics differ from the reference"

first=$(first_logged_step 1)
echo "the restarted run's first step: $first (the crash came after step $(wc -l <"$out/before-crash.jsonl"))"
# Resume: train.sbatch checkpoints every 10 steps here (PARTRAIN_CHECKPOINT_EVERY), and the
# crash came after step 20, so the restarted run starts right after a committed checkpoint
# (10, 20, ...: whichever was the newest committed when the node froze), not at step 1.
[ -n "$first" ] || fail "attempt 1 printed no step line"
resumed=$((first - 1))
[ $resumed -ge 10 ] && [ $((resumed % 10)) -eq 0 ] &&
  [ $resumed -le "$(wc -l <"$out/before-crash.jsonl")" ] ||
  fail "the requeued job started at step $first, not right after a checkpoint saved before the crash"
grep -q "resuming at step $((first - 1))" <<<"$part1" || fail "attempt 1 did not log its resume point"

start1=$(log_ms "$(grep -m1 ' INFO  agent ' <<<"$part1")")
end1=$(log_ms "$(grep "node=$survivor | exit 0: done" <<<"$part1")")
if [ $victim_index -eq 0 ]; then
  echo "times: requeue $(span "$crash" "$start1") s (crash to the restarted agents' start)," \
       "restarted run $(span "$start1" "$end1") s ($((steps - first + 1)) steps), crash to" \
       "done $(span "$crash" "$end1") s"
  echo PASS
  exit 0
fi

# Detection is bounded: a peer is lost once its counter has not moved for the timeout, as
# seen by a check every interval (timeout / 2), and its last beat may be seen one interval
# late: at most timeout + 2 intervals = 2 x timeout after the crash, plus 1 s of slack.
detect_ms=$(( $(log_ms "$lost") - crash ))
[ $detect_ms -le $(( PARTRAIN_HEARTBEAT_TIMEOUT * 2000 + 1000 )) ] ||
  fail "the lost peer was found $(span 0 $detect_ms) s after the crash, past the bound"

# How long each part took, from the agents' log times (ms) and the crash time.
echo "times: detection $(span "$crash" "$(log_ms "$lost")") s (heartbeat timeout" \
     "${PARTRAIN_HEARTBEAT_TIMEOUT} s), requeue $(span "$(log_ms "$lost")" "$start1") s" \
     "(loss found to the restarted agents' start), restarted run $(span "$start1" "$end1") s" \
     "($((steps - first + 1)) steps), crash to done $(span "$crash" "$end1") s"
echo PASS
