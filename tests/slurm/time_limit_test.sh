#!/usr/bin/env bash
# Save before the time limit, and resume by job identity: the shipped train.sbatch with a
# one-minute --time and no end in sight (PARTRAIN_STEPS=100000) is stopped at its limit:
# the --signal USR1 warning (Slurm may send it up to a minute early), or the limit's
# SIGTERM within KillWait; its workers save at the next step boundary. After the warning
# the agents exit 75, which RequeueExit=75 requeues whatever --no-requeue says (the
# sbatch script's design: a requeued job goes on from its save); the test cancels it as
# soon as Slurm has requeued it, so the first job ends with that save. The same script
# submitted again (a new job id, the same run folder) resumes from that step and trains 20
# more; its metrics equal an uninterrupted run's step for step (loss, lr: the schedule's
# length stays the first start's), and metrics.jsonl keeps the first job's lines, then a
# restart marker.
#   time_limit_test.sh CLUSTER_DIR PARTRAIN PARTRAIND SITE_CONFIG
set -uo pipefail
source "$(dirname "$0")/common.sh"
train_setup "$2" "$3" "$4"
more=20
out=$(mktemp -d /tmp/partrain-timelimit.XXXXXX)
chmod 755 "$out"
ref_pid=""
ids=()
cleanup() {
  [ -n "$ref_pid" ] && kill -9 -- "-$ref_pid" 2>/dev/null
  for id in "${ids[@]}"; do scancel "$id" 2>/dev/null; done
  rm -rf "$out"
}
trap cleanup EXIT
step_lines() { [ -f "$1" ] && grep -c '"step":' "$1" || echo 0; }

# The uninterrupted reference, alongside (both are deterministic): the same 100000-step
# schedule, stopped once it passed the steps the test needs.
setsid env PARTRAIN_RUN_DIR="$out/ref" "$partrain" run "$examples/tiny.toml" --partrain=dp2 --nproc 2 \
  --steps 100000 >"$out/ref.log" 2>&1 &
ref_pid=$!

begin=$(now_ms)
# --signal=USR1@5 over the script's @120 (a one-minute job would be warned at once): Slurm
# may send it up to a minute early, or the limit's SIGTERM may come first; either saves.
id=$(PARTRAIN_CHECKPOINT_EVERY=0 submit_train "$out/run" 100000 "$out/job1.out" --time=1 --no-requeue \
     --signal=USR1@5)
ids+=("$id")
t=0
requeued=""
while case $(job_field "$id" JobState) in PENDING | CONFIGURING | RUNNING | COMPLETING | "") true ;; *) false ;; esac; do
  # Requeued after its save (exit 75): cancel it before (or while) it starts again.
  if [ -z "$requeued" ] && [ "$(job_field "$id" Restarts)" != 0 ] && [ -n "$(job_field "$id" Restarts)" ]; then
    requeued=$(job_field "$id" JobState)
    scancel "$id"
  fi
  sleep 1; t=$((t + 1))
  [ $t -lt 200 ] || fail "job $id still $(job_field "$id" JobState) after 200 s"
done
state=$(job_field "$id" JobState)
echo "job $id: $state after $(since "$begin") s ($(job_field "$id" RunTime) of a $(job_field "$id" TimeLimit) limit)${requeued:+; requeued after its save and cancelled while $requeued}"
case $state in TIMEOUT | FAILED) ;; CANCELLED) [ -n "$requeued" ] || fail "job $id was cancelled, not by this test" ;;
  *) fail "job $id ended $state, not by its time limit" ;; esac
saved=$(sed -n 's/.*checkpoint of step \([0-9]*\) committed.*/\1/p' "$out/job1.out" | tail -n 1)
[ -n "$saved" ] || fail "job $id committed no checkpoint before it died: $(grep -v '^step ' "$out/job1.out" | tail -n 20)"
grep -q -E "(USR1|TERM) received" "$out/job1.out" || fail "no agent logged the time limit's signal"
lines=$(step_lines "$out/run/metrics.jsonl")
if [ -z "$requeued" ] || ! grep -q '"event":"restart"' "$out/run/metrics.jsonl"; then
  [ "$lines" = "$saved" ] || fail "metrics.jsonl holds $lines steps, the stop checkpoint is of step $saved"
fi
cp "$out/run/metrics.jsonl" "$out/first.jsonl"
echo "the time limit stopped it at step $saved: $(grep -m1 -o -E '(USR1|TERM) received[^|]*' "$out/job1.out")"

# The same script again: a new job, the same run folder.
steps=$((saved + more))
id2=$(PARTRAIN_CHECKPOINT_EVERY=0 submit_train "$out/run" $steps "$out/job2.out" --no-requeue)
ids+=("$id2")
wait_job "$id2" 120
[ "$id2" != "$id" ] || fail "the resubmission got the same job id"
grep -q "resuming at step $saved" "$out/job2.out" || fail "job $id2 did not resume at step $saved: $(grep -v '^step ' "$out/job2.out")"

# The reference has got that far by now (or soon).
t=0
until [ "$(step_lines "$out/ref/metrics.jsonl")" -ge $steps ]; do
  sleep 0.5; t=$((t + 1))
  [ $t -lt 240 ] || fail "the reference run did not reach step $steps"
done
kill -9 -- "-$ref_pid" 2>/dev/null
ref_pid=""
head -n "$steps" "$out/ref/metrics.jsonl" >"$out/ref.jsonl"

# metrics.jsonl: the first job's lines untouched, a restart marker, the new steps.
first=$(wc -l <"$out/first.jsonl")
head -n "$first" "$out/run/metrics.jsonl" | cmp -s - "$out/first.jsonl" || fail "the first job's lines changed"
sed -n "$((first + 1))p" "$out/run/metrics.jsonl" | grep -q "\"event\":\"restart\",\"resumed_at_step\":$saved," ||
  fail "no restart marker after the first job's lines: $(sed -n "$((first + 1))p" "$out/run/metrics.jsonl")"
[ "$(tail -n +$((first + 2)) "$out/run/metrics.jsonl" | grep -c '"step":')" = $more ] ||
  fail "the resubmitted job did not append steps $((saved + 1))..$steps"
/usr/bin/python3 "$(dirname "$0")/compare_metrics.py" "$out/ref.jsonl" "$out/run/metrics.jsonl" --last $steps ||
  fail "the resumed run's metrics differ from the uninterrupted run's"
echo PASS
