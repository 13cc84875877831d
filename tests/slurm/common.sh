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
