#!/bin/sh
# Against the partrain installed once for the out-of-tree tests (tests/install_prefix.sh),
# builds a context plugin ("pairwise", tests/plugin/context_pairwise) out of tree
# (find_package(partrain), the SDK headers only), installs the .so into a plugin directory
# of its own, checks that the installed `partrain plugins` lists it in the context family,
# and trains cp2 with cpimpl=pairwise through the installed partraind: its losses equal one
# rank's (1e-5).
#   context_out_of_tree.sh CMAKE INSTALLED PLUGIN_SRC WORK_DIR
set -eu
cmake=$1 installed=$2 src=$3 work=$4
. "$(dirname "$0")/../out_of_tree.sh"
test -f "$prefix/include/partrain/context_sdk.h"
# The shipped context plugins are installed with partrain.
test -f "$plugindir/ring.so"
test -f "$plugindir/allgather.so"
install -m 0755 "$work/build/pairwise.so" "$work/plugins/pairwise.so"
install -m 0755 "$plugindir/dp.so" "$work/plugins/dp.so"  # cp2's gradient group
out=$("$prefix/bin/partrain" plugins --site-config "$work/site.toml")
echo "$out"
echo "$out" | grep -E "^pairwise +context +0\.1\.0 +$work/plugins/pairwise\.so$"
# Train with it: cp2 against one rank, 4 steps.
job="$prefix/share/partrain/examples/tiny.toml"
PARTRAIN_RUN_DIR="$work/one" PARTRAIN_SITE_CONFIG="$work/site.toml" OMP_NUM_THREADS=1 \
  "$prefix/bin/partrain" run "$job" --steps 4 > "$work/one.log" 2>&1
run_out=$(PARTRAIN_RUN_DIR="$work/cp" OMP_NUM_THREADS=1 \
  "$prefix/bin/partraind" --standalone --nproc 2 --partrain cp2,cpimpl=pairwise --steps 4 \
  --site-config "$work/site.toml" "$job" 2>&1)
echo "$run_out"
echo "$run_out" | grep -q "context plugin pairwise 0.1.0 from $work/plugins/pairwise.so"
losses() { sed -n 's/.*"loss":\([-0-9.eE+]*\).*/\1/p' "$1"; }
losses "$work/one/metrics.jsonl" > "$work/one.losses"
losses "$work/cp/metrics.jsonl" > "$work/cp.losses"
test "$(wc -l < "$work/cp.losses")" -eq 4
paste "$work/one.losses" "$work/cp.losses" | awk '
  { d = $1 - $2; if (d < 0) d = -d; r = $1 < 0 ? -$1 : $1
    printf "step %d: one rank %s, cp2 pairwise %s\n", NR, $1, $2
    if (d > 1e-5 * r) bad = 1 }
  END { exit bad }'
