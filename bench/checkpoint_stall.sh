#!/usr/bin/env bash
# The training stall a checkpoint costs, asynchronous saves next to synchronous ones
# ([checkpoint] async = true / false), on one rank and on dp2, same model and steps.
#
#   bench/checkpoint_stall.sh [PARTRAIN_BINARY]    # default build/bin/partrain
#
# Prints, per layout, the mean stall of the periodic saves (metrics.jsonl save_stall_ms, plus
# the save_wait_ms of the step after an asynchronous save on CPU ranks; the final save is
# waited for in both modes and left out), the write rate and the ratio async / sync, and the
# wall time the saves added over a run without periodic saves (what a save really costs:
# the stall plus any slowing of the steps while the background write runs beside them). BENCH_LAYERS / BENCH_HIDDEN size the model (default
# 4 x 512: 12.7 M parameters, 152 MiB of weights and Adam moments per checkpoint).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
partrain=${1:-$here/../build/bin/partrain}
layers=${BENCH_LAYERS:-4}
hidden=${BENCH_HIDDEN:-512}
work=$(mktemp -d /tmp/partrain_ckpt_bench_XXXXXX)
trap 'rm -rf "$work"' EXIT
bench_random_tokens /usr/bin/python3 "$work/tokens.bin"
# The build tree's site config (its plugin_dir has the dp plugin), next to the binary.
export OMP_NUM_THREADS=1 PARTRAIN_SITE_CONFIG=${PARTRAIN_SITE_CONFIG:-$(dirname "$partrain")/../etc/partrain.toml}

# save_cost RUN_DIR: over the saves before the last step, the mean stall per save (the step
# waiting in the save, save_stall_ms, plus the next step's update waiting for an asynchronous
# save's background copy, save_wait_ms) and write rate, their count, and the wall time from
# the end of the first step to the end of the last (every periodic save inside it).
save_cost() {
  /usr/bin/python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
saves = [r for r in rows[:-1] if "save_stall_ms" in r]
waits = sum(r.get("save_wait_ms", 0) for r in rows[1:])
rates = [r["save_mb_s"] for r in saves if r.get("save_mb_s", 0) > 0]
stall = (sum(r["save_stall_ms"] for r in saves) + waits) / max(1, len(saves))
print("%.1f %.0f %d %.2f" % (stall, sum(rates) / max(1, len(rates)), len(saves), rows[-1]["time"] - rows[0]["time"]))
PY
}

printf "%-8s %-6s %14s %12s %8s %10s\n" layout mode "stall ms/save" "write MB/s" saves "steps s"
for layout in ${BENCH_LAYOUTS:-one dp2}; do
  declare -A stall=() wall=()
  # none: no periodic save (the same steps' wall time without checkpoints, for the cost).
  for mode in true false none; do
    run="$work/run-$layout-$mode"
    bench_gpt2_job "$work/job.toml" bench "$run" "$work/tokens.bin" "$layers" "$hidden" 8 128 13 8 4
    if [ "$mode" = none ]; then
      printf '[checkpoint]\nevery = 0\n' >> "$work/job.toml"
    else
      printf '[checkpoint]\nevery = 3\nasync = %s\n' "$mode" >> "$work/job.toml"
    fi
    if [ "$layout" = one ]; then
      "$partrain" run "$work/job.toml" >/dev/null 2>&1
    else
      "$partrain" run "$work/job.toml" --partrain=dp2 --nproc 2 >/dev/null 2>&1
    fi
    read -r ms rate n secs < <(save_cost "$run")
    stall[$mode]=$ms
    wall[$mode]=$secs
    name=$mode
    [ "$mode" = true ] && name=async
    [ "$mode" = false ] && name=sync
    [ "$mode" = none ] && { ms=-; rate=-; }
    printf "%-8s %-6s %14s %12s %8s %10s\n" "$layout" "$name" "$ms" "$rate" "$n" "$secs"
  done
  /usr/bin/python3 -c "print('%-8s async/sync stall: %.3f' % ('$layout', ${stall[true]} / ${stall[false]}))"
  # What a save costs in wall time, waits and slower steps beside the write included.
  /usr/bin/python3 -c "
a, s, n = ${wall[true]}, ${wall[false]}, ${wall[none]}
print('%-8s wall cost of the saves over none: async %.2f s, sync %.2f s (async/sync %.3f)' % ('$layout', a - n, s - n, (a - n) / (s - n) if s > n else float('nan')))"
done
