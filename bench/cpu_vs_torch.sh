#!/bin/bash
# partrain vs PyTorch on CPU, side by side: the same GPT-2 style model, batch, sequence
# length and thread count, in the same environment (this machine sets OPENBLAS_CORETYPE
# or similar; both sides inherit whatever is set). Prints tokens/s of each and the ratio
# partrain / PyTorch (> 1: partrain is faster). Median step time after warm-up.
#
#   bench/cpu_vs_torch.sh [PARTRAIN_BINARY] [THREADS]
#
# Configs: tiny (2 layers, d=128, 4 heads, seq 64) and small (4 layers, d=256, 4 heads,
# seq 128), batch 8, byte vocabulary (256). Each side runs BENCH_REPEATS times (default
# 3), alternating, and the best run of each counts: on a shared machine that is the run
# least disturbed by others. Not a test: nothing here gates CI.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
bin=${1:-$here/../build/bin/partrain}
threads=${2:-$(nproc)}
python=${PARTRAIN_TORCH_PYTHON:-/usr/bin/python3}
steps=${BENCH_STEPS:-10}
repeats=${BENCH_REPEATS:-3}
warmup=3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads

bench_random_tokens "$python" "$work/tokens.bin"

median_tok_s() {  # metrics.jsonl, tokens per step, warm-up steps -> median tokens/s
  "$python" - "$1" "$2" "$3" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][int(sys.argv[3]):]
ms = sorted(r["step_ms"] for r in rows)
print(f"{int(sys.argv[2]) / (ms[len(ms) // 2] / 1e3):.1f}")
PY
}

printf "%-6s %8s %12s %12s %8s\n" config threads partrain_tok/s torch_tok/s ratio
for cfg in "tiny 2 128 4 64" "small 4 256 4 128"; do
  read -r name layers hidden heads seq <<<"$cfg"
  batch=8
  bench_gpt2_job "$work/$name.toml" "bench-$name" "$work/run-$name" "$work/tokens.bin" \
    "$layers" "$hidden" "$heads" "$seq" $((steps + warmup)) $batch $batch
  ours=0 theirs=0
  for _ in $(seq "$repeats"); do
    "$bin" run "$work/$name.toml" >/dev/null 2>"$work/$name.err" || { cat "$work/$name.err"; exit 1; }
    o=$(median_tok_s "$work/run-$name/metrics.jsonl" $((batch * seq)) $warmup)
    t=$("$python" "$here/torch_peer.py" --layers "$layers" --hidden "$hidden" --heads "$heads" \
        --seq "$seq" --batch $batch --vocab 256 --steps "$steps" --warmup $warmup \
        --threads "$threads" | awk '{print $2}')
    ours=$("$python" -c "print(max($ours, $o))")
    theirs=$("$python" -c "print(max($theirs, $t))")
  done
  ratio=$("$python" -c "print(f'{$ours / $theirs:.2f}')")
  printf "%-6s %8s %12s %12s %8s\n" "$name" "$threads" "$ours" "$theirs" "$ratio"
done
