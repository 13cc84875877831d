#!/bin/sh
# Against the partrain installed once for the out-of-tree tests (tests/install_prefix.sh),
# builds tests/pipeline/bad_schedules out of tree (find_package(partrain)), installs the
# two plugins and the shipped 1f1b into a plugin directory of its own, and checks with the
# installed `partrain`:
#   - `partrain plugins` lists them as family pipeline;
#   - `partrain schedule` refuses the deadlock and the missing backward (exit 2), each
#     with the violation named;
#   - the shipped 1f1b passes, with bubble (p-1)/(m+p-1) = 3/11 = 0.2727 for p=4, m=8,
#     at most p = 4 micro-batches in flight on rank 0, and an SVG written;
#   - at run time, `partrain run --partrain=pp2,sched=deadlock` (and nobackward) is refused
#     by the workers before any step (exit 2), with the same violation named.
#   bad_schedules_out_of_tree.sh CMAKE INSTALLED SRC WORK_DIR
set -eu
cmake=$1 installed=$2 src=$3 work=$4
. "$(dirname "$0")/../out_of_tree.sh"
test -f "$prefix/include/partrain/schedule_sdk.h"
install -m 0755 "$work/build/deadlock.so" "$work/plugins/deadlock.so"
install -m 0755 "$work/build/nobackward.so" "$work/plugins/nobackward.so"
install -m 0755 "$plugindir/1f1b.so" "$work/plugins/1f1b.so"
partrain="$prefix/bin/partrain"

out=$("$partrain" plugins --site-config "$work/site.toml")
echo "$out"
echo "$out" | grep -qE "^deadlock +pipeline +0\.1\.0 +$work/plugins/deadlock\.so$"
echo "$out" | grep -qE "^nobackward +pipeline +0\.1\.0 +$work/plugins/nobackward\.so$"

# refused CMD... EXPECTED: the command fails with exit code 2 and EXPECTED on stderr.
refused() {
  expected=$1
  shift
  rc=0
  "$partrain" "$@" --site-config "$work/site.toml" > "$work/out.txt" 2> "$work/err.txt" || rc=$?
  cat "$work/err.txt"
  test "$rc" -eq 2
  grep -qF -- "$expected" "$work/err.txt"
}
refused "partrain: schedule deadlock (pp=2, m=2, v=1): deadlock: rank 0 waits at action 2 (recv-grad mb0 chunk0 from rank 1) for rank 1's action 5 (send-grad mb0 chunk0 to rank 0); rank 1 waits at action 0 (recv-activation mb0 chunk0 from rank 0) for rank 0's action 3 (send-activation mb0 chunk0 to rank 1); no rank can proceed" \
  schedule --pp 2 --mb 2 --sched deadlock
refused "partrain: schedule nobackward (pp=2, m=4, v=1): rank 1: stage 1 (chunk 0) never backwards micro-batch 3 (no backward or backward-input)" \
  schedule --pp 2 --mb 4 --sched nobackward

good=$("$partrain" schedule --pp 4 --mb 8 --sched 1f1b --svg "$work/1f1b.svg" \
  --site-config "$work/site.toml")
echo "$good"
echo "$good" | grep -qF "bubble fraction 0.2727"
echo "$good" | grep -qE "^rank 0 .*peak in flight 4$"
grep -q "<svg" "$work/1f1b.svg"
# With a job file: the stage partition of the example model over pp=2.
job=$("$partrain" schedule --job "$prefix/share/partrain/examples/tiny.toml" --pp 2 \
  --mb 4 --site-config "$work/site.toml")
echo "$job"
echo "$job" | grep -qE "^stage 1 \(rank 1, chunk 0\): block 1 \+ head"

# At run time: the installed example trained as pp2 (m = 16 / 8 = 2 micro-batches) with a bad
# schedule is refused by every worker before any step, naming the checker's violation.
run_refused() {
  expected=$1
  shift
  rc=0
  PARTRAIN_SITE_CONFIG="$work/site.toml" PARTRAIN_RUN_DIR="$work/run" OMP_NUM_THREADS=1 \
    "$partrain" run "$prefix/share/partrain/examples/tiny.toml" --nproc 2 --steps 1 "$@" \
    > "$work/out.txt" 2> "$work/err.txt" || rc=$?
  cat "$work/err.txt"
  test "$rc" -eq 2
  grep -qF -- "$expected" "$work/err.txt"
  ! grep -q "step " "$work/out.txt"
}
run_refused "schedule deadlock (pp=2, m=2, v=1): deadlock: rank 0 waits at action 2 (recv-grad mb0 chunk0 from rank 1)" \
  --partrain=pp2,sched=deadlock
run_refused "schedule nobackward (pp=2, m=2, v=1): rank 1: stage 1 (chunk 0) never backwards micro-batch 1 (no backward or backward-input)" \
  --partrain=pp2,sched=nobackward
