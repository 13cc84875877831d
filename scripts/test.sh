#!/usr/bin/env bash
# Builds partrain with warnings as errors and runs the whole test suite (every label
# that this machine can run; gpu tests skip where there is no device).
#   bash scripts/test.sh            build in ./build and run ctest
#   BUILD_DIR=b JOBS=4 bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
# Prefix /usr: the Debian packages' (tests/packaging builds them from this tree).
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPARTRAIN_WERROR=ON -DCMAKE_INSTALL_PREFIX=/usr >/dev/null
begin=$(date +%s)
cmake --build "$build" -j "$jobs"
echo "test.sh: build $(( $(date +%s) - begin )) s"
# The JUnit file: each test's time and any skip's reason (scripts/ctest_report.py).
begin=$(date +%s)
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 600 --output-junit ctest-junit.xml
echo "test.sh: ctest $(( $(date +%s) - begin )) s"
