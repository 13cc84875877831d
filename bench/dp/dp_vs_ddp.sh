#!/bin/bash
# Data parallel on 2 CPU ranks: partrain (partraind, dp plugin over Gloo) vs PyTorch DDP
# (gloo backend), side by side: the same GPT-2 style model, global batch and sequence
# length, one thread per rank. Prints tokens/s of each, their ratio, and the share of the
# step spent in exposed communication (partrain: exposed_ms / step_ms from metrics.jsonl;
# DDP: 1 - t(no_sync) / t(sync)). Medians after warm-up. Not a test: nothing gates CI.
#
#   bench/dp/dp_vs_ddp.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../common.sh"
bench_two_ranks_setup "$here" "${1:-}"

printf "%-6s %6s %14s %12s %7s %16s %14s\n" config ranks partrain_tok/s ddp_tok/s ratio partrain_exposed ddp_exposed
for cfg in "tiny 2 128 4 64" "small 4 256 4 128"; do
  read -r name layers hidden heads seq <<<"$cfg"
  batch=8  # per rank; global batch = 16
  bench_gpt2_job "$work/$name.toml" "bench-dp-$name" "$work/run-$name" "$work/tokens.bin" \
    "$layers" "$hidden" "$heads" "$seq" $((steps + warmup)) $((batch * nproc)) $batch
  "$build/bin/partraind" --standalone --nproc $nproc --partrain dp$nproc "$work/$name.toml" \
      >/dev/null 2>"$work/$name.err" || { cat "$work/$name.err"; exit 1; }
  read -r ours ours_share < <("$python" - "$work/run-$name/metrics.jsonl" $((batch * nproc * seq)) $warmup <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][int(sys.argv[3]):]
ms = sorted(r["step_ms"] for r in rows)
share = sorted(r["exposed_share"] for r in rows)
print(f"{int(sys.argv[2]) / (ms[len(ms) // 2] / 1e3):.1f} {share[len(share) // 2]:.3f}")
PY
)
  read -r _ theirs _ theirs_share < <("$python" "$here/ddp_peer.py" --layers "$layers" --hidden "$hidden" \
      --heads "$heads" --seq "$seq" --batch $batch --vocab 256 --steps "$steps" --warmup $warmup --nproc $nproc)
  ratio=$("$python" -c "print(f'{$ours / $theirs:.2f}')")
  printf "%-6s %6s %14s %12s %7s %16s %14s\n" "$name" $nproc "$ours" "$theirs" "$ratio" "$ours_share" "$theirs_share"
done
