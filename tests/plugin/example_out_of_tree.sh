#!/bin/sh
# Against the partrain installed once for the out-of-tree tests (tests/install_prefix.sh),
# builds plugins/example out of tree (find_package(partrain)), installs the .so into a
# plugin directory of its own and checks that the installed `partrain plugins` lists it as a
# data plugin.
#   example_out_of_tree.sh CMAKE INSTALLED EXAMPLE_SRC WORK_DIR
set -eu
cmake=$1 installed=$2 src=$3 work=$4
. "$(dirname "$0")/../out_of_tree.sh"
test -f "$prefix/include/partrain/plugin_sdk.h"
install -m 0755 "$work/build/example.so" "$work/plugins/example.so"
out=$("$prefix/bin/partrain" plugins --site-config "$work/site.toml")
echo "$out"
echo "$out" | grep -E "^example +data +0\.1\.0 +$work/plugins/example\.so$"
# The installed dp plugin landed under the prefix too.
test -f "$plugindir/dp.so"
# Use it in a run: the installed partraind and worker, two ranks, the example as data plugin.
run_out=$(PARTRAIN_DATA_PLUGIN=example PARTRAIN_RUN_DIR="$work/run" OMP_NUM_THREADS=1 \
  "$prefix/bin/partraind" --standalone --nproc 2 --partrain dp2 --steps 3 \
  --site-config "$work/site.toml" "$prefix/share/partrain/examples/tiny.toml" 2>&1)
echo "$run_out"
echo "$run_out" | grep -q "data plugin example 0.1.0 from $work/plugins/example.so"
test "$(wc -l < "$work/run/metrics.jsonl")" -eq 3
