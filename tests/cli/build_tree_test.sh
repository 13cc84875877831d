#!/usr/bin/env bash
# From a build tree, with only the build's site config (as scripts/demo.sh and the README
# use it): `partrain plan --hardware H100-SXM` finds the source tree's profiles without
# --hardware-dir, and `partrain run` prints the MFU (the cpu profile). PARTRAIN_HARDWARE_DIR
# is unset so the site config's [paths] hardware_dir is what is tested.
#   build_tree_test.sh PARTRAIN SOURCE_DIR SITE_CONFIG
set -euo pipefail
source "$(dirname "$0")/../shell_test_env.sh"
unset PARTRAIN_HARDWARE_DIR
cd "$work"

"$partrain" plan "$src/etc/examples/tiny.toml" --partrain=tp2 --nodes 1 --gpus-per-node 2 --hardware H100-SXM \
  >o.txt 2>e.txt || fail "plan --hardware H100-SXM without --hardware-dir: $(cat e.txt)"
grep -q "MFU" o.txt || fail "plan printed no MFU: $(cat o.txt)"
PARTRAIN_RUN_DIR=$work/run "$partrain" run "$src/etc/examples/tiny.toml" --steps 2 >run.txt 2>&1 \
  || fail "run: $(tail -3 run.txt)"
grep -qE '^step +2/2 .*\| MFU ' run.txt || fail "run printed no MFU: $(grep '^step' run.txt)"
echo "ok"
