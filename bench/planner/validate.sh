#!/usr/bin/env bash
# `partrain plan` against published large-scale runs: predicted vs published TFLOP/s per GPU
# and MFU for each run, with its source, the framework each source ran and what the table
# assumes where the paper is silent (bench/planner/published_runs.cc).
#
#   bench/planner/validate.sh [BUILD_DIR] [--explain]    # default build/
#
# --explain adds each run's step time by part and one block's micro-batch by kernel class.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
if [[ $# -gt 0 && $1 != --* ]]; then build=$1; shift; fi
exe=$build/bench/planner/planner_validate
[[ -x $exe ]] || { echo "validate.sh: $exe not built; run cmake --build $build --target planner_validate" >&2; exit 2; }
exec "$exe" --hardware-dir "$root/etc/hardware" "$@"
