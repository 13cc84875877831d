#!/bin/bash
# Context parallel on 4 CPU ranks against one rank, side by side in one run: the same GPT-2
# style model, global batch and long sequence through partraind as one rank (dp1) and as
# cp4 with each shipped context plugin (ring, allgather), one thread per rank. Prints per
# layout: tokens/s (median step after warm-up, best of BENCH_REPEATS alternating runs),
# the ratio to one rank, rank 0's peak MiB of activations and in all (memory.rank0.json)
# and the ratio of activations to one rank's, and the median cp_comm_ms / cp_exposed_ms of
# a step (metrics.jsonl: the K/V transfers from start to the end of their wait, and the
# part rank 0 waited for). Not a test: nothing gates CI.
#
#   bench/cp/cp_vs_one.sh [BUILD_DIR]      BENCH_SEQ (default 4096), BENCH_STEPS (6)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../common.sh"
BENCH_STEPS=${BENCH_STEPS:-6}
bench_two_ranks_setup "$here" "${1:-}"
warmup=2
seq=${BENCH_SEQ:-4096}
layers=2 hidden=128 heads=4 batch=1

# run_one NAME NPROC LAYOUT: one run; prints "tok/s activations_mib total_mib cp_comm cp_exposed".
run_one() {
  local name=$1 n=$2 layout=$3
  rm -rf "$work/run-$name"
  "$build/bin/partraind" --standalone --nproc "$n" --partrain "$layout" "$work/$name.toml" \
      >/dev/null 2>"$work/$name.err" || { cat "$work/$name.err" >&2; exit 1; }
  "$python" - "$work/run-$name" "$tokens" "$warmup" <<'PY'
import json, statistics, sys
run, tokens, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(l) for l in open(run + "/metrics.jsonl")][warmup:]
med = lambda k: statistics.median(r.get(k, 0.0) for r in rows)
mem = json.load(open(run + "/memory.rank0.json"))
print(f"{tokens / (med('step_ms') / 1e3):.1f} {mem['activations'] / 2**20:.1f} {mem['total'] / 2**20:.1f} "
      f"{med('cp_comm_ms'):.1f} {med('cp_exposed_ms'):.1f}")
PY
}

tokens=$((batch * seq))
bench_gpt2_job "$work/one.toml" bench-cp "$work/run-one" "$work/tokens.bin" \
  $layers $hidden $heads $seq $((steps + warmup)) $batch $batch
for name in ring allgather; do
  sed "s|run-one|run-$name|" "$work/one.toml" > "$work/$name.toml"
done
declare -A best=()
for ((r = 0; r < repeats; r++)); do
  for spec in "one 1 dp1" "ring 4 cp4" "allgather 4 cp4,cpimpl=allgather"; do
    read -r name n layout <<<"$spec"
    line=$(run_one "$name" "$n" "$layout")
    prev=${best[$name]:-0}
    if "$python" -c "import sys; sys.exit(0 if float('${line%% *}') > float('${prev%% *}') else 1)"; then
      best[$name]=$line
    fi
  done
done
echo "seq $seq, $layers layers, d=$hidden, micro-batch $batch, $(getconf _NPROCESSORS_ONLN) cores for the 4 ranks, one thread each"
printf "%-22s %10s %8s %16s %10s %9s %12s %15s\n" layout tok/s vs_one activations_MiB vs_one total_MiB \
  cp_comm_ms cp_exposed_ms
read -r one_tok one_act _ _ _ <<<"${best[one]}"
for spec in "one one_rank" "ring cp4" "allgather cp4,cpimpl=allgather"; do
  read -r name label <<<"$spec"
  read -r tok act total comm exposed <<<"${best[$name]}"
  printf "%-22s %10s %8s %16s %10s %9s %12s %15s\n" "$label" "$tok" \
    "$("$python" -c "print(f'{$tok / $one_tok:.2f}')")" "$act" \
    "$("$python" -c "print(f'{$act / $one_act:.3f}')")" "$total" "$comm" "$exposed"
done
