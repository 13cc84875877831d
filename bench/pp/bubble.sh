#!/bin/bash
# The measured pipeline bubble per schedule against the formula and the simulator: a GPT-2
# style model of 8 blocks (d=256, seq 64, a byte vocabulary, so the embedding and head add
# little and the stages are nearly uniform: the partition gives every stage the same
# blocks), m = 8 micro-batches of one sequence, through partraind --standalone as pp4 and
# pp2 with gpipe, 1f1b, interleaved:2 and zbh1. Prints per layout: the formula
# (p-1)/(m+p-1) (divided by v: (p-1)/(v m+p-1) for interleaved; (p-1)/(3m+p-1) for ZB-H1
# with F = b = W), the simulator's bubble (`partrain schedule`, F=1, B=2, W=1), the measured bubble_share of metrics.jsonl (median step after 3
# warm-up steps: 1 - sum of the ranks' compute time / (pp x the makespan of the step's
# action lists, first action start to last action end over all ranks)), rank 0's exposed
# point-to-point wait per step, tokens/s, and rank 0's peak activation MiB. One thread per
# rank; with more ranks than cores the ranks share cores, which stretches every
# concurrent compute action (see README.md). Not a test.
#
#   bench/pp/bubble.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../common.sh"
bench_two_ranks_setup "$here" "${1:-}"
m=8
steps=${BENCH_STEPS:-8}

printf "%-22s %8s %10s %9s %12s %9s %16s\n" layout formula simulated measured pp_exposed_ms tok/s activations_MiB
for pp in 4 2; do
  for sched in gpipe 1f1b interleaved:2 zbh1; do
    v=1  # the formula's divisor of m: v for interleaved, 3 for ZB-H1's F, b, W units
    [[ $sched == interleaved:* ]] && v=${sched#interleaved:}
    [[ $sched == zbh1 ]] && v=3
    layout="pp$pp,sched=$sched"
    name="pp$pp-${sched/:/}"
    bench_gpt2_job "$work/$name.toml" "bench-pp" "$work/run-$name" "$work/tokens.bin" \
      8 256 4 64 $((steps + warmup)) $m 1
    simulated=$("$build/bin/partrain" schedule --pp "$pp" --mb $m --sched "$sched" \
      --site-config "$PARTRAIN_SITE_CONFIG" | sed -n 's/.*bubble fraction \([0-9.]*\).*/\1/p')
    "$build/bin/partraind" --standalone --nproc "$pp" --partrain "$layout" "$work/$name.toml" \
      >/dev/null 2>"$work/$name.err" || { cat "$work/$name.err" >&2; exit 1; }
    "$python" - "$work/run-$name" $warmup "$pp" $m "$v" "$simulated" "$layout" <<'PY'
import json, sys
run, warmup, p, m, v, simulated, layout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), sys.argv[7]
rows = [json.loads(l) for l in open(run + "/metrics.jsonl")][warmup:]
med = lambda k: sorted(r[k] for r in rows)[len(rows) // 2]
mem = json.load(open(run + "/memory.rank0.json"))
formula = (p - 1) / (v * m + p - 1)
print(f"{layout:22s} {formula:8.4f} {simulated:10.4f} {med('bubble_share'):9.4f} "
      f"{med('pp_exposed_ms'):12.1f} {med('tokens_per_s'):9.1f} {mem['activations'] / 2**20:16.2f}")
PY
  done
done
