#!/bin/sh
# Against the partrain installed once for the out-of-tree tests (tests/install_prefix.sh),
# builds plugins/data/onebit out of tree as an admin would (find_package(partrain), the SDK
# headers only), installs the .so into a plugin directory of its own, checks that the
# installed `partrain plugins` lists it as a data plugin, and trains dp2 with grad=onebit
# through the installed partraind: 4 steps, the last 2 compressed (dp_bytes below dp's).
#   onebit_out_of_tree.sh CMAKE INSTALLED ONEBIT_SRC WORK_DIR
set -eu
cmake=$1 installed=$2 src=$3 work=$4
. "$(dirname "$0")/../out_of_tree.sh"
install -m 0755 "$work/build/onebit.so" "$work/plugins/onebit.so"
out=$("$prefix/bin/partrain" plugins --site-config "$work/site.toml")
echo "$out"
echo "$out" | grep -E "^onebit +data +1\.0\.0 +$work/plugins/onebit\.so$"
sed 's|"data/|"'"$prefix"'/share/partrain/examples/data/|' "$prefix/share/partrain/examples/tiny.toml" > "$work/job.toml"
printf '\n[plugins.onebit]\nwarmup_steps = 2\n' >> "$work/job.toml"
run_out=$(PARTRAIN_RUN_DIR="$work/run" OMP_NUM_THREADS=1 \
  "$prefix/bin/partraind" --standalone --nproc 2 --partrain dp2,grad=onebit --steps 4 \
  --site-config "$work/site.toml" "$work/job.toml" 2>&1)
echo "$run_out"
echo "$run_out" | grep -q "data plugin onebit 1.0.0 from $work/plugins/onebit.so"
sed -n 's/.*"dp_bytes":\([0-9]*\).*/\1/p' "$work/run/metrics.jsonl" > "$work/bytes"
test "$(wc -l < "$work/bytes")" -eq 4
awk 'NR <= 2 && $1 != 1751040 { exit 1 } NR > 2 && $1 * 31 > 1751040 { exit 1 }' "$work/bytes"
