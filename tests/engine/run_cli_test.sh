#!/bin/bash
# `partrain run` and `partrain export` end to end on the shipped example: step lines,
# metrics.jsonl with one line per step and every documented key, a falling loss, --save /
# --init / export round trip, and the documented usage errors (exit code 2).
#   run_cli_test.sh PARTRAIN_BINARY SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
job=$src/etc/examples/tiny.toml
fail() { echo "FAIL: $*"; exit 1; }

PARTRAIN_RUN_DIR=$work/run "$bin" run "$job" --steps 8 --save "$work/w.safetensors" \
  >"$work/out.txt" 2>"$work/err.txt" || { cat "$work/err.txt"; fail "run exited $?"; }
[ "$(grep -c '^step ' "$work/out.txt")" = 8 ] || fail "expected 8 step lines"
m=$work/run/metrics.jsonl
[ "$(wc -l <"$m")" = 8 ] || fail "expected 8 metrics lines"
# The copy of a step's line kept across its save is gone once the line is written.
[ ! -e "$m.pending" ] || fail "a clean run left $m.pending"
for key in step loss lr grad_norm tokens step_ms fwd_ms bwd_ms opt_ms; do
  grep -q "\"$key\":" "$m" || fail "metrics.jsonl lacks $key"
done
grep -q "peak memory: weights" "$work/err.txt" || fail "no peak memory line"
first=$(head -1 "$m" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
last=$(tail -1 "$m" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.3) }' || fail "loss did not fall: $first -> $last"

# Throughput and memory per step. tiny.toml (L=2, C=128, T=64, V=256, tied head): forward
# FLOPs per token 2 x (12 C^2 L + V C) + 4 T C L = 917504; MFU counts 3 x forward = 2752512,
# against the cpu profile's peak_fp32. Weights: 437760 fp32 parameters = 1.670 MiB.
PARTRAIN_RUN_DIR=$work/mfu "$bin" run "$job" --steps 2 --hardware "$src/etc/hardware/cpu.toml" \
  >"$work/mfu.txt" 2>&1 || { cat "$work/mfu.txt"; fail "run --hardware exited $?"; }
grep -q "| MFU " "$work/mfu.txt" || fail "no MFU in the step line"
peak=$(sed -n 's/^peak_fp32_flops *= *\([0-9.e+]*\).*/\1/p' "$src/etc/hardware/cpu.toml")
/usr/bin/python3 - "$work/mfu/metrics.jsonl" "$peak" <<'PY' || fail "throughput fields"
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    assert m["tokens_per_s"] > 0 and m["tokens_per_s_per_rank"] == m["tokens_per_s"], m
    want = m["tokens_per_s"] * 2752512 / float(sys.argv[2])
    assert abs(m["mfu"] - want) <= 0.01 * want + 1e-4, (m["mfu"], want)
    assert m["peak_mib"]["weights"] == 1.670 and m["peak_mib"]["optimizer"] == 3.340, m["peak_mib"]
PY
set +e
"$bin" run "$job" --steps 1 --hardware no-such-gpu 2>"$work/e3.txt"; rc3=$?
set -e
[ $rc3 = 2 ] && grep -q -- "--hardware no-such-gpu" "$work/e3.txt" || fail "--hardware no-such-gpu: rc $rc3"

# Export of the saved weights, and a run starting from them: its first loss is the
# saved model's loss, below the fresh model's.
"$bin" export "$job" --from "$work/w.safetensors" -o "$work/e.safetensors" >/dev/null
PARTRAIN_RUN_DIR=$work/run2 "$bin" run "$job" --steps 1 --init "$work/e.safetensors" >/dev/null 2>&1
again=$(sed 's/.*"loss":\([0-9.e+-]*\).*/\1/' "$work/run2/metrics.jsonl")
awk -v a="$first" -v b="$again" 'BEGIN { exit !(b < a - 0.3) }' || fail "--init did not load: $again"

# Usage errors: exit 2 with a message naming the fix.
set +e
"$bin" run "$job" --partrain tp2 2>"$work/e1.txt"; rc1=$?
"$bin" run "$job" --init "$work/missing.safetensors" 2>/dev/null; rc2=$?
set -e
[ $rc1 = 2 ] && grep -q -- "--nproc" "$work/e1.txt" || fail "--partrain tp2: rc $rc1"
[ $rc2 = 2 ] || fail "--init of a missing file: rc $rc2"
echo "ok"
