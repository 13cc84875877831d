#!/usr/bin/env bash
# The sanitizer tree (cmake/PartrainSanitize.cmake): one clang build, every object under
# AddressSanitizer + UndefinedBehaviorSanitizer and libFuzzer's coverage, at -O1 with line
# tables (a report's file:line, at a fraction of -O0's run time and -g's compile time),
# asserts on, CUDA off, warnings as errors (clang's, beside scripts/test.sh's gcc). It builds
# both the unit tests and the fuzz targets, so the daemon's libraries are compiled once for
# both. Then the unit label runs in it (leaks and UB fail).
#
#   bash scripts/sanitize.sh [BUILD_DIR]              configure once, build, run ctest -L unit
#   bash scripts/sanitize.sh --configure [BUILD_DIR]  configure only (scripts/fuzz.sh)
#
# BUILD_DIR defaults to build-san. The unit label leaves out the tests labelled reference
# (torch, node, spm: they compare numbers, which scripts/test.sh does once in build/).
set -euo pipefail
cd "$(dirname "$0")/.."
configure_only=0
if [ "${1:-}" = --configure ]; then configure_only=1; shift; fi
build=${1:-build-san}
jobs=${JOBS:-$(nproc)}

if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
        -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-O1 -gline-tables-only" \
        -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" \
        -DPARTRAIN_FUZZ=ON -DPARTRAIN_SANITIZE=ON -DPARTRAIN_CUDA=OFF -DPARTRAIN_WERROR=ON >/dev/null
fi
[ "$configure_only" = 1 ] && exit 0
cmake --build "$build" --target partrain_unit_tests fuzz_all -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$build" -L unit --output-on-failure -j "$jobs" --timeout 600 --output-junit ctest-junit.xml
