#!/bin/bash
# ZeRO vs plain data parallel on 2 CPU ranks, side by side in one run: the same GPT-2 style
# model, global batch and sequence length through partraind with the dp plugin and with
# zero1, zero2, zero3 (one thread per rank). Prints tokens/s of each, the ratio to dp,
# the median share of a step spent in exposed communication (exposed_ms / step_ms from
# metrics.jsonl: the time a rank waited in the plugin for gradients or parameters), and
# rank 0's peak MiB of weights, gradients and optimizer state. Median step after warm-up,
# best of BENCH_REPEATS alternating runs per layout (a shared machine disturbs some).
# Not a test: nothing gates CI.
#
#   bench/zero/zero_vs_dp.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../common.sh"
bench_two_ranks_setup "$here" "${1:-}"

# run_one NAME LAYOUT: one run; prints "tok/s exposed_share weights_mib grads_mib opt_mib".
run_one() {
  local name=$1 layout=$2 spec=dp$nproc
  [ "$layout" != dp ] && spec="dp$nproc,$layout"
  rm -rf "$work/run-$name"
  "$build/bin/partraind" --standalone --nproc $nproc --partrain "$spec" "$work/$name.toml" \
      >/dev/null 2>"$work/$name.err" || { cat "$work/$name.err" >&2; exit 1; }
  bench_step_stats "$python" "$work/run-$name" "$tokens" $warmup weights grads optimizer
}

printf "%-6s %-6s %10s %8s %8s %10s %9s %10s\n" config layout tok/s vs_dp exposed weights_MiB grads_MiB optim_MiB
for cfg in "tiny 2 128 4 64" "small 4 256 4 128"; do
  read -r name layers hidden heads seq <<<"$cfg"
  batch=8  # per rank; global batch = 16
  tokens=$((batch * nproc * seq))
  bench_gpt2_job "$work/$name.toml" "bench-zero-$name" "$work/run-$name" "$work/tokens.bin" \
    "$layers" "$hidden" "$heads" "$seq" $((steps + warmup)) $((batch * nproc)) $batch
  declare -A best=()
  for ((r = 0; r < repeats; r++)); do
    for layout in dp zero1 zero2 zero3; do
      line=$(run_one "$name" "$layout")
      prev=${best[$layout]:-0}
      if "$python" -c "import sys; sys.exit(0 if float('${line%% *}') > float('${prev%% *}') else 1)"; then
        best[$layout]=$line
      fi
    done
  done
  dp_tok=${best[dp]%% *}
  for layout in dp zero1 zero2 zero3; do
    read -r tok share w g o <<<"${best[$layout]}"
    ratio=$("$python" -c "print(f'{$tok / $dp_tok:.2f}')")
    printf "%-6s %-6s %10s %8s %8s %10s %9s %10s\n" "$name" "$layout" "$tok" "$ratio" "$share" "$w" "$g" "$o"
  done
  unset best
done
