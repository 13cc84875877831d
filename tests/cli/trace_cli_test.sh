#!/bin/bash
# `partrain run --trace` on 2 data-parallel ranks and `partrain trace merge`: one trace file
# per rank holding only the traced steps, each with its forward/backward per micro-batch,
# the optimizer and the gradient all-reduces inside the step, and a checkpoint's I/O; a merged file with both ranks;
# and the usage errors (exit 2).
#   trace_cli_test.sh PARTRAIN_BINARY SOURCE_DIR SITE_CONFIG
set -euo pipefail
bin=$1
src=$2
export PARTRAIN_SITE_CONFIG=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
job=$src/etc/examples/tiny.toml
fail() { echo "FAIL: $*"; exit 1; }

PARTRAIN_RUN_DIR=$work/run PARTRAIN_CHECKPOINT_EVERY=2 \
  "$bin" run "$job" --steps 4 --partrain=dp2 --nproc 2 --trace 2-3 \
  >"$work/out.txt" 2>"$work/err.txt" || { cat "$work/err.txt"; fail "run exited $?"; }
[ -f "$work/run/trace/rank-0.json" ] && [ -f "$work/run/trace/rank-1.json" ] || fail "no per-rank traces"
"$bin" trace merge "$work/run/trace" -o "$work/merged.json" >"$work/merge.txt" || fail "merge exited $?"
grep -q "from 2 ranks" "$work/merge.txt" || fail "merge summary: $(cat "$work/merge.txt")"

# tiny.toml: global batch 16, micro-batch 8, so on dp2 each rank runs one micro-batch a step.
/usr/bin/python3 - "$work/merged.json" <<'PY' || fail "trace contents"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in events if e["ph"] == "X"]
for rank in (0, 1):
    mine = [e for e in spans if e["pid"] == rank]
    assert {e["args"]["step"] for e in mine} == {2, 3}, ("only steps 2 and 3 are traced", rank)
    for step in (2, 3):
        s = [e for e in mine if e["args"]["step"] == step]
        names = [e["name"] for e in s if e["cat"] == "compute"]
        for n in ("data", "forward", "backward", "optimizer"):
            assert names.count(n) == 1, (rank, step, n, names)
        io = [e["name"] for e in s if e["cat"] == "io"]
        if step == 2:  # checkpoints every 2 steps: step 2's save is on the I/O lane
            assert "checkpoint copy to host" in io, (rank, step, io)
        comm = [e for e in s if e["cat"] == "comm"]
        assert any(e["name"] == "all_reduce" for e in comm), (rank, step, "no all_reduce")
        fwd = next(e for e in s if e["name"] == "forward")
        opt = next(e for e in s if e["name"] == "optimizer")
        assert fwd["ts"] <= opt["ts"], "forward before the optimizer"
        for e in comm:  # each gradient collective runs after forward began, before the step ends
            assert fwd["ts"] <= e["ts"] <= opt["ts"] + opt["dur"], (rank, step, e)
ranks = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
assert ranks == {0, 1}, ranks
print("trace ok:", len(spans), "spans")
PY

# Usage errors name the fix and exit 2; nothing is written.
set +e
"$bin" run "$job" --steps 1 --trace 0 2>"$work/e1.txt"; rc1=$?
echo '{"not":"a trace"}' >"$work/bogus.json"
"$bin" trace merge "$work/bogus.json" -o "$work/x.json" 2>"$work/e2.txt"; rc2=$?
"$bin" trace merge "$work/run/trace/rank-0.json" "$work/run/trace/rank-0.json" -o "$work/x.json" 2>"$work/e3.txt"; rc3=$?
set -e
[ $rc1 = 2 ] && grep -q "e.g. --trace 5-7" "$work/e1.txt" || fail "--trace 0: rc $rc1 $(cat "$work/e1.txt")"
[ $rc2 = 2 ] && grep -q 'no "traceEvents" array' "$work/e2.txt" || fail "bogus trace: rc $rc2 $(cat "$work/e2.txt")"
[ $rc3 = 2 ] && grep -q "both hold rank 0" "$work/e3.txt" || fail "same rank twice: rc $rc3 $(cat "$work/e3.txt")"
echo "trace_cli_test: ok"
