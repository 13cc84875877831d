#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz, each for a bounded time, from its committed
# seed corpus (tests/fuzz/corpus/<target>/), and prints one line per target: executions,
# seconds, executions per second, corpus size. Exit 1 when any target found a crash, leak,
# timeout or sanitizer report (its reproducer is named; rerun it with the target binary).
#
#   bash scripts/fuzz.sh [BUILD_DIR] [SECONDS_PER_TARGET] [TARGET...]
#
# BUILD_DIR defaults to build-san, the sanitizer tree that the sanitized unit tests share
# (scripts/sanitize.sh); it is configured here when it is not yet, and fuzz_all is built.
# CI runs every target for a few seconds; run longer (e.g. 600) by hand or from cron: new
# inputs are kept in BUILD_DIR/fuzz-corpus/, never in the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-san}
seconds=${2:-30}
shift $(( $# > 2 ? 2 : $# )) || true
targets=("$@")

bash scripts/sanitize.sh --configure "$build"
cmake --build "$build" --target fuzz_all -j "$(nproc)" >/dev/null
# Every target tests/fuzz builds (one fuzz_*.cc each), and each must have its seed corpus:
# a target left without one would otherwise never run here or in CI.
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cd tests/fuzz && ls fuzz_*.cc | sed 's/\.cc$//' | sort)
fi
for t in "${targets[@]}"; do
  if [ ! -d "tests/fuzz/corpus/$t" ] || [ -z "$(ls -A "tests/fuzz/corpus/$t")" ]; then
    echo "fuzz.sh: $t has no seed corpus: add inputs to tests/fuzz/corpus/$t/" >&2
    exit 2
  fi
done

failed=0
printf '%-28s %12s %8s %10s %8s  %s\n' target executions seconds exec/s corpus result
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/$t"
  work="$build/fuzz-corpus/$t"
  artifacts="$build/fuzz-artifacts/$t/"
  mkdir -p "$work" "$artifacts"
  log="$build/fuzz-artifacts/$t.log"
  start=$(date +%s.%N)
  set +e
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$artifacts" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  size=$(ls "$work" | wc -l)
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    result="FAILED (exit $rc): $(ls "$artifacts" | head -1) -- see $log"
    failed=1
  fi
  rate=$(awk -v n="$runs" -v t="$took" 'BEGIN { printf "%.0f", (t > 0) ? n / t : 0 }')
  printf '%-28s %12s %8.0f %10s %8s  %s\n' "$t" "$runs" "$took" "$rate" "$size" "$result"
done
exit $failed
