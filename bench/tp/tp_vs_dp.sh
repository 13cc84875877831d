#!/bin/bash
# Tensor parallel vs plain data parallel on 2 CPU ranks, side by side in one run: the same
# GPT-2 style model, global batch and sequence length through partraind as dp2 (dp plugin),
# tp2 (tp plugin, sequence parallel) and tp2,nosp (one thread per rank). Prints tokens/s of
# each, the ratio to dp2, the median share of a step spent in exposed communication
# (exposed_ms / step_ms from metrics.jsonl: for dp the time rank 0 waited for gradient
# buckets, for tp the regions' collectives, every one of which the next layer waits for),
# and rank 0's peak MiB of weights and activations. Median step after warm-up, best of
# BENCH_REPEATS alternating runs per layout (a shared machine disturbs some).
# Not a test: nothing gates CI.
#
#   bench/tp/tp_vs_dp.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../common.sh"
bench_two_ranks_setup "$here" "${1:-}"

# run_one NAME LAYOUT: one run; prints "tok/s exposed_share weights_mib activations_mib".
run_one() {
  local name=$1 layout=$2
  rm -rf "$work/run-$name"
  "$build/bin/partraind" --standalone --nproc $nproc --partrain "$layout" "$work/$name.toml" \
      >/dev/null 2>"$work/$name.err" || { cat "$work/$name.err" >&2; exit 1; }
  bench_step_stats "$python" "$work/run-$name" "$tokens" $warmup weights activations
}

layouts="dp2 tp2 tp2,nosp"
printf "%-6s %-9s %10s %8s %8s %12s %16s\n" config layout tok/s vs_dp2 exposed weights_MiB activations_MiB
for cfg in "tiny 2 128 4 64" "small 4 256 4 128"; do
  read -r name layers hidden heads seq <<<"$cfg"
  batch=8  # per forward: dp2 one micro-batch per rank, tp2 two on the one tp group
  tokens=$((batch * nproc * seq))
  bench_gpt2_job "$work/$name.toml" "bench-tp-$name" "$work/run-$name" "$work/tokens.bin" \
    "$layers" "$hidden" "$heads" "$seq" $((steps + warmup)) $((batch * nproc)) $batch
  declare -A best=()
  for ((r = 0; r < repeats; r++)); do
    for layout in $layouts; do
      line=$(run_one "$name" "$layout")
      prev=${best[$layout]:-0}
      if "$python" -c "import sys; sys.exit(0 if float('${line%% *}') > float('${prev%% *}') else 1)"; then
        best[$layout]=$line
      fi
    done
  done
  dp_tok=${best[dp2]%% *}
  for layout in $layouts; do
    read -r tok share w a <<<"${best[$layout]}"
    ratio=$("$python" -c "print(f'{$tok / $dp_tok:.2f}')")
    printf "%-6s %-9s %10s %8s %8s %12s %16s\n" "$name" "$layout" "$tok" "$ratio" "$share" "$w" "$a"
  done
  unset best
done
