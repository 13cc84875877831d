#!/usr/bin/env bash
# RequeueExit=75 (etc/slurm.conf.d/partrain.conf, included by the test cluster): a batch
# job that exits 75 is requeued and runs again; the shipped train.sbatch (--requeue) on a
# job file with a configuration error ends with exit 2, fails, and is not requeued; a layout
# the SPANK plugin refuses in the tasks is named by every agent.
#   requeue_exit_test.sh CLUSTER_DIR PARTRAIN PARTRAIND SITE_CONFIG
set -uo pipefail
source "$(dirname "$0")/common.sh"
train_setup "$2" "$3" "$4"
out=$(mktemp -d /tmp/partrain-requeue-exit.XXXXXX)
trap 'rm -rf "$out"' EXIT
chmod 755 "$out"

# wait_gone ID SECONDS: until the job has left the running and pending states.
wait_gone() {
  local t=0
  while :; do
    case $(job_field "$1" JobState) in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) return 0 ;;
    esac
    t=$((t + 1))
    [ $t -lt $(($2 * 4)) ] || fail "job $1 still $(job_field "$1" JobState) after ${2}s"
    sleep 0.25
  done
}

# The control: exit 75 is requeued (so the check below can fail), once.
begin=$(now_ms)
id=$(sbatch --parsable --requeue -o "$out/retry.out" \
  --wrap 'echo "attempt ${SLURM_RESTART_COUNT:-0}"; [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] || exit 75') ||
  fail "sbatch refused the control job"
wait_gone "$id" 60
[ "$(job_field "$id" JobState)" = COMPLETED ] && [ "$(job_field "$id" Restarts)" = 1 ] ||
  fail "a job exiting 75 was not requeued once: $(scontrol show job "$id")"
echo "ok: job $id exited 75, was requeued (Restarts=1) and completed in $(since "$begin") s"

# A configuration error: a job file with a misspelt key, in train.sbatch's job file's place.
mkdir "$out/job"
sed 's/^steps = 100/stepz = 100/' "$examples/tiny.toml" >"$out/job/tiny.toml"
grep -q '^stepz' "$out/job/tiny.toml" || fail "could not make the bad job file"
ln -s "$examples/data" "$out/job/data"
cp "$examples/train.sbatch" "$out/job/"
begin=$(now_ms)
id=$(sbatch --parsable --chdir="$out/job" -o "$out/bad.out" "$out/job/train.sbatch") ||
  fail "sbatch refused train.sbatch"
wait_gone "$id" 60
# A requeue would put it back to PENDING at once; give the scheduler two cycles to be sure.
sleep 4
cat "$out/bad.out"
[ "$(job_field "$id" JobState)" = FAILED ] || fail "job $id is $(job_field "$id" JobState), not FAILED"
[ "$(job_field "$id" ExitCode)" = 2:0 ] || fail "job $id exit code $(job_field "$id" ExitCode), not 2:0"
[ "$(job_field "$id" Restarts)" = 0 ] || fail "job $id was requeued: Restarts=$(job_field "$id" Restarts)"
[ "$(job_field "$id" Requeue)" = 1 ] || fail "job $id was not a --requeue job"
grep -q "stepz" "$out/bad.out" || fail "the agents did not name the bad key"
[ "$(grep -c 'exit 2: configuration error' "$out/bad.out")" -eq 2 ] ||
  fail "not both agents exited 2 on the configuration error"
echo "ok: job $id (--requeue) with a bad job file ended FAILED with exit 2, not requeued," \
     "in $(since "$begin") s"

# A layout the tasks refuse (--exclusive hides the task count at submit; the step has 2):
# every agent names the plugin's reason, not a PARTRAIN_* variable it misses, and exits 2.
id=$(sbatch --parsable -N 2 --exclusive --partrain=dp3 --chdir="$examples" -o "$out/layout.out" \
  --wrap "srun --ntasks-per-node=1 partraind tiny.toml") || fail "sbatch refused the dp3 job at submit"
wait_gone "$id" 60
cat "$out/layout.out"
[ "$(grep -c 'the partrain SPANK plugin gave this task no ranks: step [0-9.]*: tp1 x pp1 x dp3 = 3 ranks, but the job has 2' \
     "$out/layout.out")" -eq 2 ] || fail "not both agents named the refused layout"
grep -q "is not set" "$out/layout.out" && fail "an agent named a missing variable instead of the reason"
echo "ok: job $id: a layout refused in the tasks is named by every agent"
echo PASS
