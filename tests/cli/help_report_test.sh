#!/usr/bin/env bash
# `partrain help [COMMAND...]` as `--help` prints it, and `partrain report` refusing runs of
# different models (the same model on two runs is compared as before).
#   help_report_test.sh PARTRAIN SOURCE_DIR SITE_CONFIG
set -euo pipefail
source "$(dirname "$0")/../shell_test_env.sh"

"$partrain" help >"$work/o" || fail "partrain help exited $?"
grep -q "generate" "$work/o" || fail "partrain help does not list generate"
"$partrain" help data encode >"$work/o" || fail "partrain help data encode exited $?"
"$partrain" data encode --help >"$work/want"
cmp -s "$work/o" "$work/want" || fail "help data encode differs from data encode --help"
set +e
"$partrain" help nosuch >"$work/o" 2>"$work/e"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "help nosuch exited $rc, not 2"
[ "$(wc -l <"$work/e")" -eq 1 ] && grep -q "'nosuch' is not a command of partrain" "$work/e" \
  || fail "help nosuch: $(cat "$work/e")"

sed -e 's/^hidden = 128/hidden = 64/' "$src/etc/examples/tiny.toml" >"$work/narrow.toml"
sed -i "s|\"data/|\"$src/etc/examples/data/|g" "$work/narrow.toml"
PARTRAIN_RUN_DIR="$work/a" "$partrain" run "$src/etc/examples/tiny.toml" --steps 2 >/dev/null 2>&1 || fail "run a"
PARTRAIN_RUN_DIR="$work/b" "$partrain" run "$src/etc/examples/tiny.toml" --steps 2 >/dev/null 2>&1 || fail "run b"
PARTRAIN_RUN_DIR="$work/c" "$partrain" run "$work/narrow.toml" --steps 2 >/dev/null 2>&1 || fail "run c"
"$partrain" report "$work/a" "$work/b" --svg "$work/r.svg" >"$work/o" 2>"$work/e" || fail "same model refused: $(cat "$work/e")"
grep -q "1 rank" "$work/o" || fail "report does not say '1 rank': $(cat "$work/o")"
# The example evaluates after its last step ([data] val_files): report shows that loss.
awk '$1 == "a" && $NF ~ /^[0-9]+\.[0-9]+$/ { found = 1 } END { exit !found }' "$work/o" || fail "report has no val loss for run a: $(cat "$work/o")"
set +e
"$partrain" report "$work/a" "$work/c" --svg "$work/r.svg" >"$work/o" 2>"$work/e"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "different models: exit $rc, not 2"
grep -q "trained different models (437.8K-parameter and 120.6K-parameter" "$work/e" \
  || fail "different models: $(cat "$work/e")"
echo "4 passed, 0 failed"
