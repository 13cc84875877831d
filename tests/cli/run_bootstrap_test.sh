#!/usr/bin/env bash
# `partrain run` on one rank and with --nproc start from one bootstrap:
#  - the agent's job check (config/supported.h check_job) refuses a bad job in the same words
#    on one rank as with --nproc (here mb=3, which does not split global_batch 16);
#  - a one-rank run is the worker's own training (it writes the worker's memory.rank0.json);
#  - --hardware-dir reaches the MFU accounting of both as an argument (one rank: this process;
#    --nproc: the agent), with PARTRAIN_HARDWARE_DIR unset.
#   run_bootstrap_test.sh PARTRAIN SOURCE_DIR SITE_CONFIG
set -euo pipefail
source "$(dirname "$0")/../shell_test_env.sh"
unset PARTRAIN_HARDWARE_DIR
cd "$work"
job=$src/etc/examples/tiny.toml

for n in 0 1; do
  extra=()
  [ "$n" -gt 0 ] && extra=(--nproc "$n")
  rc=0
  PARTRAIN_RUN_DIR=$work/bad$n "$partrain" run "$job" --steps 1 --partrain=mb=3 "${extra[@]}" >/dev/null 2>"bad$n.txt" || rc=$?
  [ "$rc" -eq 2 ] || fail "mb=3 ${extra[*]:-on one rank}: exit $rc, not 2: $(cat "bad$n.txt")"
  grep -q "does not split into mb=3" "bad$n.txt" || fail "mb=3 ${extra[*]:-on one rank}: $(cat "bad$n.txt")"
done
cmp -s bad0.txt bad1.txt || fail "one rank and --nproc 1 refuse mb=3 in other words: $(cat bad0.txt) / $(cat bad1.txt)"

mkdir hw
cp "$src/etc/hardware/cpu.toml" hw/mycpu.toml
rc=0
"$partrain" run "$job" --steps 1 --hardware mycpu >nohw.txt 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -q "no such profile" nohw.txt || fail "--hardware mycpu without --hardware-dir: exit $rc: $(tail -2 nohw.txt)"
for n in 0 1; do
  extra=()
  [ "$n" -gt 0 ] && extra=(--nproc "$n")
  PARTRAIN_RUN_DIR=$work/run$n "$partrain" run "$job" --steps 2 --hardware mycpu --hardware-dir "$work/hw" \
    "${extra[@]}" >"run$n.txt" 2>&1 || fail "run ${extra[*]:-on one rank}: $(tail -3 "run$n.txt")"
  grep -qE '^step +2/2 .*\| MFU ' "run$n.txt" || fail "run ${extra[*]:-on one rank} printed no MFU: $(grep '^step' "run$n.txt")"
  [ -s "$work/run$n/memory.rank0.json" ] || fail "run ${extra[*]:-on one rank} wrote no memory.rank0.json: $(ls "$work/run$n")"
done
echo "ok"
