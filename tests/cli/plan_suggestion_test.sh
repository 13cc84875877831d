#!/usr/bin/env bash
# A refusal's suggestion works when taken: `partrain plan --partrain=tp2,pp2` of a job with
# one micro-batch per step suggests mb=K, and the same command with ,mb=K plans.
#   plan_suggestion_test.sh PARTRAIN SOURCE_DIR SITE_CONFIG
set -euo pipefail
source "$(dirname "$0")/../shell_test_env.sh"
sed -e 's/^global_batch = 16 /global_batch = 8 /' -e "s|\"data/|\"$src/etc/examples/data/|g" \
  "$src/etc/examples/tiny.toml" >"$work/one_micro.toml"
grep -q '^global_batch = 8 ' "$work/one_micro.toml" || fail "could not set global_batch = 8"
plan() {
  "$partrain" plan "$work/one_micro.toml" --nodes 1 --gpus-per-node 4 --hardware H100-SXM \
    --hardware-dir "$src/etc/hardware" --partrain="$1"
}
set +e
plan tp2,pp2 >"$work/o" 2>"$work/e"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "tp2,pp2 with one micro-batch: exit $rc, not 2: $(cat "$work/e")"
mb=$(sed -n 's/.*set mb=\([0-9][0-9]*\).*/\1/p' "$work/e")
[ -n "$mb" ] || fail "no mb= suggestion: $(cat "$work/e")"
plan "tp2,pp2,mb=$mb" >"$work/o" 2>"$work/e" || fail "the suggested mb=$mb fails: $(cat "$work/e")"
grep -q "MFU" "$work/o" || fail "no plan printed for mb=$mb: $(cat "$work/o")"
echo "ok: suggested mb=$mb plans"
