#!/usr/bin/env bash
# A [[data.sources]] mixture trains the same on one rank and on dp2 (the losses of every
# step within 1e-5 relative, as every layout of one global batch), and a run stopped at
# step 3 and resumed from its checkpoint ends on exactly the losses of one straight run.
#   mixture_run_test.sh PARTRAIN SOURCE_DIR SITE_CONFIG
set -euo pipefail
source "$(dirname "$0")/../../shell_test_env.sh"
data=$src/etc/examples/data
cat >"$work/mix.toml" <<TOML
[job]
name = "mix"
[model]
arch = "gpt2"
vocab_size = 256
seq_len = 32
layers = 2
hidden = 64
heads = 4
[[data.sources]]
name = "train"
files = ["$data/licenses_train.bin"]
weight = 3
[[data.sources]]
name = "val"
files = ["$data/licenses_val.bin"]
weight = 1
[training]
steps = 6
decay_steps = 6   # the half run of --steps 3 keeps the 6-step schedule
global_batch = 8
micro_batch = 4
lr = 1e-3
warmup_steps = 2
[checkpoint]
every = 3
TOML
# The loss of every step line (a resumed run's restart marker has none).
losses() { python3 -c "import json,sys; print(' '.join(repr(r['loss']) for r in map(json.loads, filter(str.strip, open(sys.argv[1]))) if 'loss' in r))" "$1/metrics.jsonl"; }

PARTRAIN_RUN_DIR="$work/one" "$partrain" run "$work/mix.toml" >"$work/log" 2>&1 || fail "one rank: $(tail -3 "$work/log")"
PARTRAIN_RUN_DIR="$work/dp2" "$partrain" run "$work/mix.toml" --partrain=dp2 --nproc 2 >"$work/log" 2>&1 \
  || fail "dp2: $(tail -3 "$work/log")"
PARTRAIN_RUN_DIR="$work/resumed" "$partrain" run "$work/mix.toml" --steps 3 >"$work/log" 2>&1 || fail "first half"
PARTRAIN_RUN_DIR="$work/resumed" "$partrain" run "$work/mix.toml" >"$work/log" 2>&1 || fail "resume: $(tail -3 "$work/log")"
python3 - "$(losses "$work/one")" "$(losses "$work/dp2")" "$(losses "$work/resumed")" <<'PY' || exit 1
import sys
one, dp2, resumed = ([float(x) for x in a.split()] for a in sys.argv[1:4])
assert len(one) == 6 and len(dp2) == 6, (one, dp2)
for s, (a, b) in enumerate(zip(one, dp2), 1):
    assert abs(a - b) <= 1e-5 * abs(a), f"step {s}: one rank {a}, dp2 {b}"
assert resumed[-3:] == one[-3:], f"resumed {resumed[-3:]} != straight {one[-3:]}"
print("PASS one rank = dp2 over 6 steps:", one)
print("PASS stop at 3 + resume = straight run:", resumed[-3:])
PY
echo "2 passed, 0 failed"
