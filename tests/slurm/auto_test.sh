#!/usr/bin/env bash
# --partrain=auto through the real sbatch: at submit the plugin runs `partrain plan --auto`
# for the job file the script runs (tiny.toml) on the allocation (-N 2, one CPU rank per
# node) with the plugstack's hardware= profile, prints the choice and the runner-up, and
# the tasks get the chosen layout as if it had been typed: the job trains, and its workers
# load the chosen data plugin. And a job whose allocation does not show its devices per node
# is refused at submit, saying so.
#   auto_test.sh CLUSTER_DIR PARTRAIN PARTRAIND SITE_CONFIG
set -uo pipefail
source "$(dirname "$0")/common.sh"
train_setup "$2" "$3" "$4"
out=$(mktemp -d /tmp/partrain-auto.XXXXXX)
trap 'rm -rf "$out"' EXIT
chmod 755 "$out"

id=$(PARTRAIN_RUN_DIR=$out/run PARTRAIN_STEPS=3 sbatch --parsable --chdir="$examples" -o "$out/job.out" \
  -N 2 --ntasks-per-node=1 --partrain=auto "$examples/train.sbatch" 2>"$out/submit.err") ||
  fail "sbatch --partrain=auto refused: $(cat "$out/submit.err")"
cat "$out/submit.err"
spec=$(sed -n 's/^.*partrain: --partrain=auto chose --partrain=\([^:]*\): predicted.*$/\1/p' "$out/submit.err")
[ -n "$spec" ] || fail "sbatch printed no choice: $(cat "$out/submit.err")"
grep -q 'partrain: runner-up --partrain=' "$out/submit.err" || fail "sbatch printed no runner-up"
wait_job "$id" 90
[ "$(job_field "$id" ExitCode)" = 0:0 ] || fail "job $id exit code $(job_field "$id" ExitCode): $(cat "$out/job.out")"
# The chosen layout is what the workers ran: dp2 and its ZeRO stage's data plugin.
case $spec in
  *dp2,zero0*) plugin="data plugin dp " ;;
  *dp2,zero[123]*) plugin="data plugin zero$(echo "$spec" | sed 's/.*zero\([0-3]\).*/\1/') " ;;
  *) fail "chose $spec on 2 nodes x 1 rank: not a dp2 layout" ;;
esac
grep -q "$plugin" "$out/job.out" || fail "chose $spec, but the workers did not load '$plugin': $(cat "$out/job.out")"
echo "ok: sbatch --partrain=auto chose $spec and the job ran it"

# Without the devices per node, auto cannot plan: refused at submit with the fix.
before=$(next_job_id)
sbatch -N 2 --partrain=auto "$examples/train.sbatch" >/dev/null 2>"$out/refused.err" &&
  fail "sbatch --partrain=auto without the devices per node was accepted"
[ "$before" = "$(next_job_id)" ] || fail "a job was created"
grep -q 'partrain: --partrain=auto needs the GPUs per node' "$out/refused.err" ||
  fail "unexpected refusal: $(cat "$out/refused.err")"
echo "ok: refused at submit: $(cat "$out/refused.err")"
echo PASS
