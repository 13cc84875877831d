# Shared by the slurm-label test scripts: the cluster's environment, polling, and a
# failure report that shows the daemons' logs.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=$1
export SLURM_CONF=$dir/slurm.conf

if [ -f "$dir/skip" ]; then
  echo "SKIP: $(cat "$dir/skip")"
  exit 77
fi

fail() {
  echo "FAIL: $*" >&2
  bash "$repo/scripts/slurm-cluster.sh" logs "$dir" || true
  exit 1
}

# wait_job ID SECONDS: until the job leaves the queue; fails unless it COMPLETED.
wait_job() {
  local id=$1 limit=$2 t=0 state
  while :; do
    state=$(scontrol show job "$id" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    case $state in
      COMPLETED) return 0 ;;
      FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
        scontrol show job "$id" >&2
        fail "job $id ended $state" ;;
    esac
    t=$((t + 1))
    if [ $t -gt $((limit * 4)) ]; then
      scontrol show job "$id" >&2
      fail "job $id still $state after ${limit}s"
    fi
    sleep 0.25
  done
}

next_job_id() { scontrol show config | sed -n 's/^NEXT_JOB_ID *= *//p'; }

# Milliseconds since the epoch, and seconds since a start taken with it (no bc needed).
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
since() { local d=$(( $(now_ms) - $1 )); printf '%d.%03d' $((d / 1000)) $((d % 1000)); }

# job_field ID KEY: one KEY=VALUE field of `scontrol show job`.
job_field() { scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }

# log_ms LINE: the time of a partrain log line (2026-12-01T07:49:11.039Z ...) in ms.
log_ms() { echo $(( $(date -d "${1%% *}" +%s%N) / 1000000 )); }
# seconds between two ms times, as S.mmm
span() { local d=$(( $2 - $1 )); printf '%d.%03d' $((d / 1000)) $((d % 1000)); }

# The training jobs: the shipped etc/examples/train.sbatch (tiny.toml, --partrain=dp2 on
# two nodes, --requeue) run from the build tree. train_setup PARTRAIN PARTRAIND SITE_CONFIG
# sets the environment sbatch hands to the job (it exports the submitter's: partraind on
# PATH, the build's site config) and to the reference run.
train_setup() {
  export PATH=$(cd "$(dirname "$2")" && pwd):$PATH PARTRAIN_SITE_CONFIG=$(realpath "$3") OMP_NUM_THREADS=1
  partrain=$(realpath "$1")
  examples=$repo/etc/examples
}

# reference_run RUN_DIR STEPS: the same training on one machine, without Slurm.
reference_run() {
  PARTRAIN_RUN_DIR=$1 "$partrain" run "$examples/tiny.toml" --partrain=dp2 --nproc 2 \
    --steps "$2" >"$1.log" 2>&1 || { cat "$1.log" >&2; fail "the standalone reference run failed"; }
}

# submit_train RUN_DIR STEPS OUTPUT [SBATCH OPTIONS...]: the job id.
submit_train() {
  local run=$1 steps=$2 output=$3
  shift 3
  PARTRAIN_RUN_DIR=$run PARTRAIN_STEPS=$steps sbatch --parsable --chdir="$examples" \
    -o "$output" "$@" "$examples/train.sbatch" || fail "sbatch refused etc/examples/train.sbatch"
}
