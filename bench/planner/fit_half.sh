#!/usr/bin/env bash
# The profiles' one calibrated constant, sustained_clock per device family: fitted on each
# half of the published runs (every other row of each source) with the other half predicted;
# with --all, the calibration the shipped profiles carry (fitted on the calibration half,
# the held-out half shown as CI asserts it).
#
#   bench/planner/fit_half.sh [BUILD_DIR] [--all]    # default build/
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
if [[ $# -gt 0 && $1 != --* ]]; then build=$1; shift; fi
exe=$build/bench/planner/planner_validate
[[ -x $exe ]] || { echo "fit_half.sh: $exe not built; run cmake --build $build --target planner_validate" >&2; exit 2; }
mode=--fit-half
[[ ${1:-} == --all ]] && mode=--fit
exec "$exe" --hardware-dir "$root/etc/hardware" "$mode"
