#!/usr/bin/env bash
# The training stall a checkpoint costs, asynchronous saves next to synchronous ones
# ([checkpoint] async = true / false), on one rank and on dp2, same model and steps.
#
#   bench/checkpoint_stall.sh [PARTRAIN_BINARY]    # default build/bin/partrain
#
# Prints, per layout, the mean save_stall_ms of the periodic saves (metrics.jsonl; the
# final save is waited for in both modes and left out), the checkpoint size and the write
# rate, and the ratio async / sync. BENCH_LAYERS / BENCH_HIDDEN size the model (default
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

# mean_stall RUN_DIR: mean save_stall_ms and save_mb_s over the saves before the last step.
mean_stall() {
  /usr/bin/python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
saves = [r for r in rows[:-1] if "save_stall_ms" in r]
rates = [r["save_mb_s"] for r in saves if r["save_mb_s"] > 0]
print("%.1f %.0f %d" % (sum(r["save_stall_ms"] for r in saves) / len(saves),
                        sum(rates) / max(1, len(rates)), len(saves)))
PY
}

printf "%-8s %-6s %14s %12s %8s\n" layout mode "stall ms/save" "write MB/s" saves
for layout in ${BENCH_LAYOUTS:-one dp2}; do
  declare -A stall=()
  for mode in true false; do
    run="$work/run-$layout-$mode"
    bench_gpt2_job "$work/job.toml" bench "$run" "$work/tokens.bin" "$layers" "$hidden" 8 128 13 8 4
    printf '[checkpoint]\nevery = 3\nasync = %s\n' "$mode" >> "$work/job.toml"
    if [ "$layout" = one ]; then
      "$partrain" run "$work/job.toml" >/dev/null 2>&1
    else
      "$partrain" run "$work/job.toml" --partrain=dp2 --nproc 2 >/dev/null 2>&1
    fi
    read -r ms rate n < <(mean_stall "$run")
    stall[$mode]=$ms
    printf "%-8s %-6s %14s %12s %8s\n" "$layout" "$([ $mode = true ] && echo async || echo sync)" "$ms" "$rate" "$n"
  done
  /usr/bin/python3 -c "print('%-8s async/sync stall: %.3f' % ('$layout', ${stall[true]} / ${stall[false]}))"
done
