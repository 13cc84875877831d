#!/usr/bin/env bash
# One 2-node x 4-(fake)GPU job with --partrain=tp2,pp2: every task of every step records
# its PARTRAIN_* environment, which check_rank_env.py compares with `partrain layout
# --json` for the same allocation (block and cyclic task distribution, one agent per
# node, and a per-step `srun --partrain` override); a helper step of another size runs.
set -uo pipefail
source "$(dirname "$0")/common.sh"
partrain=$2
out=$(mktemp -d /tmp/partrain-rank-env.XXXXXX)
trap 'rm -rf "$out"' EXIT
chmod 755 "$out"

# record.sh STEP: the task's environment, as the file STEP.PROCID next to the script.
cat >"$out/record.sh" <<'SCRIPT'
#!/bin/bash
keys='PARTRAIN_[A-Z_]*|SLURM_JOB_ID|SLURM_PROCID|SLURM_LOCALID|SLURM_NODEID|SLURMD_NODENAME'
keys+='|SLURM_STEP_NODELIST'
{
  env | grep -E "^($keys)="
  # The secret as the task sees it (the job epilog removes it when the job ends).
  [ -n "${PARTRAIN_JOB_SECRET_FILE:-}" ] && echo "SECRET_MODE=$(stat -c %a "$PARTRAIN_JOB_SECRET_FILE")"
} >"$(dirname "$0")/$1.$SLURM_PROCID"
SCRIPT
cat >"$out/job.sbatch" <<SCRIPT
#!/bin/bash
srun --ntasks-per-node=4 bash $out/record.sh block || exit 1
srun --ntasks-per-node=4 -m cyclic bash $out/record.sh cyclic || exit 1
srun -n 2 --ntasks-per-node=1 bash $out/record.sh agent || exit 1
srun --ntasks-per-node=4 --partrain=tp4 bash $out/record.sh override || exit 1
srun -N 1 -n 3 bash -c '[ -z "\$PARTRAIN_RANK" ] && echo helper ran' 2>$out/helper.err || exit 1
SCRIPT

begin=$(now_ms)
id=$(sbatch --parsable -N 2 --ntasks-per-node=4 --gpus-per-node=4 --partrain=tp2,pp2 \
  -o "$out/job.out" "$out/job.sbatch") || fail "sbatch refused the job"
wait_job "$id" 90
echo "job $id with 5 steps ran in $(since "$begin") s"
cat "$out/job.out"
/usr/bin/python3 "$(dirname "$0")/check_rank_env.py" "$partrain" "$out" ||
  fail "PARTRAIN_* environment does not match partrain layout"

# A step whose size cannot hold the job's layout still runs: the problem is reported on its
# stderr, PARTRAIN_* stay unset, and no node is drained (a failing task_init would drain).
[ "$(grep -c 'helper ran' "$out/job.out")" -eq 3 ] || fail "the 3-task helper step did not run"
grep -q 'partrain: step .*world size 3 is not a multiple of tp2 x pp2.*PARTRAIN_\* not set' \
  "$out/helper.err" || fail "the helper step's problem was not reported: $(cat "$out/helper.err")"
drained=$(sinfo -h -N -o '%N %t' | grep -E 'drain|down|fail' || true)
[ -z "$drained" ] || fail "nodes drained or down after the job: $drained"
echo "ok: a 3-task helper step ran without PARTRAIN_*, reported: $(cat "$out/helper.err")"
echo PASS
