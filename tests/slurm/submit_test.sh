#!/usr/bin/env bash
# At submit time, through the real sbatch/salloc/srun: --partrain is listed in --help,
# and a bad spec is refused with one "partrain:" line naming the item and the fix, with
# no job created (Slurm's job id counter does not move).
set -uo pipefail
source "$(dirname "$0")/common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# --help lists the option with its [partrain] help.
for cmd in sbatch salloc srun; do
  $cmd --help >help.txt 2>&1
  grep -q -- '--partrain=SPEC' help.txt || fail "$cmd --help does not list --partrain=SPEC"
  grep -q -- '\[partrain\]' help.txt || fail "$cmd --help lacks the [partrain] help text"
done
echo "ok: sbatch, salloc and srun --help list --partrain=SPEC"

# refused WHAT EXPECTED-TEXT COMMAND...: exits non-zero, prints exactly one line with
# "partrain: " containing EXPECTED-TEXT, and creates no job.
refused() {
  local what=$1 expected=$2
  shift 2
  local before after rc
  before=$(next_job_id)
  "$@" >out.txt 2>err.txt </dev/null
  rc=$?
  after=$(next_job_id)
  [ $rc -ne 0 ] || fail "$what: accepted (rc 0): $(cat out.txt err.txt)"
  [ "$before" = "$after" ] || fail "$what: a job was created (next job id $before -> $after)"
  [ "$(grep -c 'partrain: ' err.txt)" -eq 1 ] ||
    fail "$what: expected one 'partrain: ' line, got: $(cat err.txt)"
  grep -q -F -- "$expected" err.txt || fail "$what: message lacks '$expected': $(cat err.txt)"
  echo "ok: $what refused: $(grep 'partrain: ' err.txt)"
}

refused "sbatch bad item" "'tpx' in --partrain: tp needs a positive whole number, e.g. tp4" \
  sbatch --partrain=tpx --wrap true
refused "sbatch unknown item" "'tq4' in --partrain: unknown item" \
  sbatch -N 2 --partrain=tp2,tq4 --wrap true
refused "sbatch tp beyond the NVLink domain" "tp8 is larger than the NVLink domain of 4 GPUs" \
  sbatch -N 2 --gpus-per-node=4 --partrain=tp8 --wrap true
refused "sbatch world not a multiple of tp x pp" "world size 8 is not a multiple of tp2 x pp3" \
  sbatch -N 2 --gpus-per-node=4 --partrain=tp2,pp3 --wrap true

cat >directives.sbatch <<'SCRIPT'
#!/bin/bash
#SBATCH -N 2
#SBATCH --gpus-per-node=4
#SBATCH --partrain=tp2,dp3
srun true
SCRIPT
refused "#SBATCH directives" "tp2 x pp1 x dp3 = 6 ranks, but the job has 8" sbatch directives.sbatch
refused "salloc bad item" "'zero7' in --partrain" salloc --partrain=tp2,zero7 true
refused "srun bad item" "'pp0' in --partrain" srun --partrain=pp0 true
refused "srun tp beyond the NVLink domain" "tp8 is larger than the NVLink domain" \
  srun -N 2 --ntasks-per-node=4 --gpus-per-node=4 --partrain=tp8 true

# An unknown plugstack.conf argument is a load error with a message (a client-side copy
# of the config, so the daemons are not touched).
sed 's/$/ bogus_key=1/' "$dir/plugstack.conf" >bad-plugstack.conf
sed "s|^PlugStackConfig=.*|PlugStackConfig=$work/bad-plugstack.conf|" "$SLURM_CONF" >bad-slurm.conf
SLURM_CONF=$work/bad-slurm.conf refused "unknown plugstack argument" \
  "plugstack.conf argument 'bogus_key=1': unknown key; known keys: site_config=/ABS/PATH" \
  sbatch --wrap true

# The settings come from the site's partrain.toml (the cluster's plugstack line names only
# that file): a key of the wrong type there is a load error naming the file and the line.
printf '[paths]\nstate_root = "%s"\n\n[topology]\nnvlink_domain = "four"\n' "$dir/partrain-state" >bad-site.toml
sed "s|site_config=[^ ]*|site_config=$work/bad-site.toml|" "$dir/plugstack.conf" >bad-site-plugstack.conf
sed "s|^PlugStackConfig=.*|PlugStackConfig=$work/bad-site-plugstack.conf|" "$SLURM_CONF" >bad-site-slurm.conf
SLURM_CONF=$work/bad-site-slurm.conf refused "a bad partrain.toml key" \
  "bad-site.toml:5: [topology] key 'nvlink_domain' must be an integer from 0 to 65536" \
  sbatch --wrap true

# The shipped example job passes the submit check (held and cancelled: partraind, which it
# runs, is not part of this test).
id=$(sbatch --parsable --hold -o /dev/null "$repo/etc/examples/train.sbatch") ||
  fail "etc/examples/train.sbatch was refused at submit"
scancel "$id"
echo "ok: etc/examples/train.sbatch (dp2 on 2 nodes, --requeue) accepted as job $id"

# The example job's shape is known at submit: 2 nodes x 1 task (Slurm's default), so 2 CPU
# ranks, which tp3 cannot split.
refused "tp3 on etc/examples/train.sbatch (2 nodes x 1 task)" \
  "world size 2 is not a multiple of tp3 x pp1 = 3; use a multiple of 3 ranks or smaller tp/pp (the job has 2 nodes x 1 task" \
  sbatch --partrain=tp3 "$repo/etc/examples/train.sbatch"

# A good spec goes through and creates a job.
before=$(next_job_id)
id=$(sbatch --parsable -N 2 --gpus-per-node=4 --partrain=tp2,pp2 --wrap true) ||
  fail "a valid --partrain=tp2,pp2 job was refused"
[ "$(next_job_id)" != "$before" ] || fail "no job id was used by a valid submission"
wait_job "$id" 60
echo "ok: sbatch --partrain=tp2,pp2 accepted as job $id"
echo PASS
