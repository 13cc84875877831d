#!/usr/bin/env bash
# Decided once, before spawn: a data plugin whose constructor faults (the ctor_segv fixture,
# named by PARTRAIN_DATA_PLUGIN) is refused by the agent, in one line, before any worker
# starts: `partrain run --nproc 2` exits 2 with the refusal once (each rank used to probe it
# and refuse it in a line of its own) and no rank logs anything.
#   refused_before_spawn_test.sh PARTRAIN SOURCE_DIR BUILD_PLUGINDIR FIXTURE_DIR
set -euo pipefail
partrain=$1 src=$2 plugins=$3 fixtures=$4
export OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$work"
mkdir plugins
cp "$plugins"/*.so "$fixtures/ctor_segv.so" plugins/
printf '[paths]\nplugin_dir = "%s/plugins"\n' "$work" >site.toml

rc=0
PARTRAIN_SITE_CONFIG=$work/site.toml PARTRAIN_DATA_PLUGIN=ctor_segv PARTRAIN_RUN_DIR=$work/run \
  "$partrain" run "$src/etc/examples/tiny.toml" --partrain=dp2 --nproc 2 --steps 1 >out.txt 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "exit $rc, not 2: $(cat out.txt)"
refusals=$(grep -c "ctor_segv.so: refused: loading it killed the process with signal 11" out.txt || true)
[ "$refusals" -eq 1 ] || fail "$refusals refusal lines, not 1 (from the agent): $(cat out.txt)"
grep -q "ERROR agent .*ctor_segv.so: refused" out.txt || fail "the refusal is not the agent's: $(cat out.txt)"
! grep -q " rank=[0-9]" out.txt || fail "a worker started: $(grep ' rank=' out.txt)"
echo "ok"
