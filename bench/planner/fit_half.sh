#!/usr/bin/env bash
# The shipped profiles' fitted kernel constants (matmul_efficiency, gemm_k_half,
# elementwise_efficiency) refitted on half of the published runs (alternating within each
# source), then the other half predicted with them, both ways round; with --all, the fit on
# every run that the profiles carry.
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
