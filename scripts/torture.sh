#!/usr/bin/env bash
# The checkpoint-lifecycle torture (tests/store/torture_test.cc) for longer than CI runs it:
# randomized trials of fault x damage x layout until SECONDS have passed, each checked for
# a committed step lost, a verifying checkpoint deleted and a resume that is not
# bit-identical; prints every trial and the totals.
#
#   bash scripts/torture.sh [SECONDS] [SEED] [BUILD_DIR]
#
# SECONDS defaults to 3600, SEED to the current time (printed, so a failure reproduces),
# BUILD_DIR to build. Needs root for the ENOSPC trials (a small tmpfs); without it they
# run as fault-free trials.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-3600}
seed=${2:-$(date +%s)}
build=${3:-build}
cmake --build "$build" --target torture_test >/dev/null
echo "torture: ${seconds} s, seed ${seed}"
PARTRAIN_TORTURE_SECONDS=$seconds PARTRAIN_TORTURE_SEED=$seed \
  "$build/tests/store/torture_test" --gtest_filter='Torture.*'
