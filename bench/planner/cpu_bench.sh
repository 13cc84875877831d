#!/usr/bin/env bash
# `partrain plan` against `partrain run` on CPU ranks, side by side: the tiny example and a
# small one (tiny.toml widened to 384, 6 blocks, 128 tokens) on two ranks as dp2, tp2, pp2
# and dp2 with ZeRO-3, each planned with the cpu profile and then trained for STEPS steps;
# measured = the median step time of steps 3..STEPS (metrics.jsonl), next to the prediction
# and their ratio; and the ranks' own work (the prediction's compute, optimizer and
# collectives) against their CPU time per step, which other work on a shared machine does not
# inflate. Not a test: the machine's load is printed before and after (see partrain-plan(1),
# ACCURACY).
#
#   bench/planner/cpu_bench.sh [BUILD_DIR] [STEPS]     # default build/, 12
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
steps=${2:-12}
partrain=$(find "$build" -path '*/cli/partrain' -type f | head -n 1)
[[ -x $partrain ]] || { echo "cpu_bench.sh: no partrain in $build; build the partrain target" >&2; exit 2; }
site=$build/etc/partrain.toml
work=$(mktemp -d /tmp/partrain-cpu-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
export PARTRAIN_HARDWARE_DIR=$root/etc/hardware PARTRAIN_SITE_CONFIG=$site OMP_NUM_THREADS=1

sed "s|\"data/|\"$root/etc/examples/data/|" "$root/etc/examples/tiny.toml" >"$work/tiny.toml"
sed -e 's/^hidden = 128/hidden = 384/' -e 's/^layers = 2/layers = 6/' -e 's/^seq_len = 64/seq_len = 128/' \
  -e 's/^heads = 4/heads = 6/' -e 's/^name = "tiny"/name = "small"/' "$work/tiny.toml" >"$work/small.toml"

# run JOB LAYOUT STEPS RUN_DIR: trains; prints the CPU seconds of all its processes.
run() {
  PARTRAIN_RUN_DIR=$4 /usr/bin/time -f '%U %S' -o "$4.cpu" "$partrain" run "$work/$1.toml" --partrain=$2 \
    --nproc 2 --steps "$3" --resume never >"$4.log" 2>&1 || { echo "run $1 $2 failed: $(tail -3 "$4.log")" >&2; return 1; }
  awk '{print $1 + $2}' "$4.cpu"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
printf '%-6s %-10s | %10s %10s %6s | %10s %10s %6s\n' job layout "step ms" measured ratio "busy ms" "CPU ms" ratio
for job in tiny small; do
  n=$steps
  [[ $job == small ]] && n=$(( steps / 2 ))
  for layout in dp2 tp2 pp2 dp2,zero3; do
    plan=$("$partrain" plan "$work/$job.toml" --hardware cpu --gpus-per-node 2 --partrain=$layout --json 2>&1) ||
      { echo "plan $job $layout: $plan"; continue; }
    read -r predicted busy < <(python3 -c 'import json,sys; t = json.load(sys.stdin)["time"]
print("%.2f %.2f" % (1e3 * t["step"], 1e3 * (t["compute"] + t["optimizer"] + t["tp"] + t["dp"] + t["pp"])))' <<<"$plan")
    base=$work/run-$job-${layout/,/-}
    cpu_short=$(run "$job" "$layout" 2 "$base-short") || continue
    cpu_long=$(run "$job" "$layout" "$n" "$base") || continue
    measured=$(python3 - "$base/metrics.jsonl" <<'PY'
import json, statistics, sys
ms = [json.loads(l)["step_ms"] for l in open(sys.argv[1]) if '"step_ms"' in l]
print("%.2f" % statistics.median(ms[2:] or ms))
PY
)
    # CPU time per step and rank: the difference of an n-step and a 2-step run (start-up,
    # data and checkpoints cancel), over n - 2 steps and 2 ranks. Another process's work on
    # the machine does not inflate it; waiting for a peer (blocking) is not in it.
    cpu=$(python3 -c "print('%.2f' % (1e3 * ($cpu_long - $cpu_short) / ($n - 2) / 2))")
    printf '%-6s %-10s | %10s %10s %6s | %10s %10s %6s\n' "$job" "$layout" "$predicted" "$measured" \
      "$(python3 -c "print('%.2f' % ($predicted / $measured))")" "$busy" "$cpu" \
      "$(python3 -c "print('%.2f' % ($busy / $cpu))")"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "step ms: predicted step time against the median measured (wall clock, inflated by other work)."
echo "busy ms: predicted compute, optimizer and collectives (on loopback Gloo copies are CPU work;"
echo "the bubble is idle) against the CPU time per step and rank, which other work does not inflate."
