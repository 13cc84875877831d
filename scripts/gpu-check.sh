#!/usr/bin/env bash
# The one prepared GPU check: what runs on a lent GPU machine (one H200, 16 cores, the CUDA
# toolkit, CMake, ninja and PyTorch's wheels; no Debian packages, no network), in one call.
#
#   here:   bash scripts/gpu-check.sh --prepare [--part a|b|all]
#           builds and packs what travels (out/gpu-carry for part A, out/gpu-deps for part B)
#           and prints the device tool's carry list and command
#   there:  bash scripts/gpu-check.sh [--part a|b|all] RESULTS_DIR       (default: all)
#   here, as far as a machine without a GPU goes (part A from the unpacked packages):
#           bash scripts/gpu-check.sh --try cpu|emu RESULTS_DIR
#           cpu: every case on CPU ranks; emu: --device cuda on the emulated GPU module
#           (GPU_CHECK_EMULATED=FILE, default the one --prepare built beside the packages)
#
# Part A (scripts/gpu-check/part-a.sh): partrain as an admin installs it (the Debian packages
#   and their dependencies, unpacked into a prefix), every layout on the one GPU against one
#   GPU rank, a GPU checkpoint resumed on CPU ranks, `export --hf` read by transformers, and
#   the carried gpu-labelled tests.
# Part B (scripts/gpu-check/part-b.sh): the CUDA kernels and engine built there, their
#   gpu-labelled tests, and the benchmark ladder (the previous path, each fast path, all of
#   them, a CUDA graph; GPT-2 124M and a LLaMA of its size, per-phase tables) beside the
#   torch.compile peer (bench/gpu/torch_peer.py) timed in the same run.
# Last: the planner's rates (bench/planner/gpu_rates.py), time-boxed.
#
# Time: BUDGET seconds in all (default 450). With --part all, part B's build runs in the
# background (nice, JOBS=12) while part A runs (until A_BUDGET, default 190 s), then part B's
# tests and benchmark until BUDGET - RATES_BUDGET, then the rates (RATES_BUDGET, default 55 s:
# --budget 45 plus PyTorch's start).
# RESULTS_DIR ends with at most 8 files (the device tool's limit): summary.txt (every part's
# lines), part-a.json, part-a.log, part-b-bench.json, part-b.tar.gz (part B's logs), rates.json.
set -uo pipefail
cd "$(dirname "$0")/.."
here=scripts/gpu-check
part=all prepare="" try=""
while [ $# -gt 0 ]; do
  case $1 in
    --prepare) prepare=1 ;;
    --part) part=${2:?--part a|b|all}; shift ;;
    --part=*) part=${1#--part=} ;;
    --try) try=${2:?--try cpu|emu}; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-check: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) results=$1 ;;
  esac
  shift
done
case $part in a|b|all) ;; *) echo "gpu-check: --part a, b or all, not $part" >&2; exit 2 ;; esac
BUDGET=${BUDGET:-450} A_BUDGET=${A_BUDGET:-190} RATES_BUDGET=${RATES_BUDGET:-55}

prepare_all() {
  if [ "$part" != b ]; then bash "$here/prepare-a.sh" || exit 1; fi
  if [ "$part" != a ]; then bash "$here/part-b.sh" --prepare || exit 1; fi
  local carry='"out/gpu-carry"'
  [ "$part" = a ] && carry='"out/gpu-carry"'
  [ "$part" = b ] && carry='"out/gpu-deps"'
  [ "$part" = all ] && carry='"out/gpu-carry", "out/gpu-deps"'
  echo
  echo "The device tool's run, from this tree (timeout leaves a minute over BUDGET=$BUDGET s):"
  echo "  command:   bash scripts/gpu-check.sh --part $part \"\$OUT\""
  echo "  carry:     [$carry]"
  echo "  timeout_s: $((BUDGET + 60))"
}

# The planner's measurement: bench/planner/gpu_rates.py with PyTorch, time-boxed.
rates() {
  local py=python3 device=${1:-cuda}
  command -v "$py" >/dev/null && "$py" -c 'import torch' 2>/dev/null || py=/usr/bin/python3
  timeout -k 5 "$RATES_BUDGET" "$py" bench/planner/gpu_rates.py --out "$results/rates.json" \
    --budget $((RATES_BUDGET - 10)) --device "$device" >"$results/rates.log" 2>&1
  local rc=$?
  echo "rates: bench/planner/gpu_rates.py exit $rc ($([ -s "$results/rates.json" ] && echo "rates.json written" || echo "no rates.json"))" |
    tee -a "$results/summary.txt"
  tail -n 3 "$results/rates.log" >>"$results/summary.txt"
  rm -f "$results/rates.log"
}

# Part B's files folded into two, so that RESULTS_DIR keeps at most 8.
fold_b() {
  [ -d "$results/b" ] || return 0
  cat "$results/b/summary.txt" >>"$results/summary.txt" 2>/dev/null
  [ -f "$results/b/bench.json" ] && cp "$results/b/bench.json" "$results/part-b-bench.json"
  tar -C "$results" -czf "$results/part-b.tar.gz" b && rm -rf "$results/b"
}

fold_a() {
  cat "$results/part-a-summary.txt" >>"$results/summary.txt" 2>/dev/null
  rm -f "$results/part-a-summary.txt"
}

check_there() {
  local start a_rc=0 b_pid=""
  start=$(date +%s)
  mkdir -p "$results" && results=$(realpath "$results")
  {
    echo "gpu-check --part $part: $(head -n 1 out/gpu-carry/MANIFEST 2>/dev/null || echo "no part A carry")"
    echo "machine: $( (nvidia-smi -L 2>/dev/null || echo "no nvidia-smi") | head -n 2 | tr '\n' ' '), $(nproc) cores, $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), $(ldd --version 2>/dev/null | head -n 1)"
  } >"$results/summary.txt"
  if [ "$part" = all ]; then
    mkdir -p "$results/b"
    GPU_CHECK_DEADLINE=$((start + BUDGET - RATES_BUDGET)) JOBS=${JOBS:-12} \
      nice -n 10 bash "$here/part-b.sh" "$results/b" build >/dev/null 2>&1 &
    b_pid=$!
  fi
  if [ "$part" != b ]; then
    GPU_CHECK_A_DEADLINE=$((start + A_BUDGET)) bash "$here/part-a.sh" "$results" || a_rc=1
    fold_a
  fi
  if [ "$part" != a ]; then
    [ -n "$b_pid" ] && wait "$b_pid"
    mkdir -p "$results/b"
    GPU_CHECK_DEADLINE=$((start + BUDGET - RATES_BUDGET)) bash "$here/part-b.sh" "$results/b" \
      "$([ -n "$b_pid" ] && echo run || echo all)"
    fold_b
  fi
  [ "$part" = all ] && rates cuda
  echo "total: $(($(date +%s) - start)) s" | tee -a "$results/summary.txt"
  return $a_rc
}

# Runs "$@" with every build folder of this tree hidden (an empty tmpfs over each, in a mount
# namespace of its own), so that an installed binary that would fall back to a build tree
# fails here as it would on the GPU machine; unhidden where no namespace can be made.
without_build_trees() {
  local dirs
  dirs=$(find "$PWD" -maxdepth 1 -type d -name 'build*' | tr '\n' ' ')
  if [ -n "$dirs" ] && unshare --mount --propagation private true 2>/dev/null; then
    unshare --mount --propagation private bash -c \
      'for d in $0; do mount -t tmpfs none "$d" || exit 1; done; exec "$@"' "$dirs" "$@"
  else
    echo "gpu-check --try: the build folders stay visible (no mount namespace here)" >&2
    "$@"
  fi
}

# Part A here: the packages from out/gpu-carry on CPU ranks or the emulated GPU.
try_here() {
  mkdir -p "$results" && results=$(realpath "$results")
  : >"$results/summary.txt"
  export GPU_CHECK_A_DEADLINE=$(($(date +%s) + A_BUDGET))
  case $try in
    cpu) GPU_CHECK_DEVICE=cpu without_build_trees bash "$here/part-a.sh" "$results" ;;
    emu)
      # The module of the build the packages came from (prepare-a.sh builds it there).
      local emu=${GPU_CHECK_EMULATED:-${GPU_CHECK_BUILD:-build-gpu-carry}/lib/libpartrain_gpu_emu.so}
      [ -f "$emu" ] || { echo "gpu-check --try emu: no $emu (run --prepare, or set GPU_CHECK_EMULATED)"; exit 2; }
      # A copy outside the build tree, which is hidden from the run.
      mkdir -p "${TMPDIR:-/tmp}/partrain-gpu-emu" && cp "$emu" "${TMPDIR:-/tmp}/partrain-gpu-emu/"
      GPU_CHECK_EMULATED=${TMPDIR:-/tmp}/partrain-gpu-emu/libpartrain_gpu_emu.so \
        without_build_trees bash "$here/part-a.sh" "$results" ;;
    *) echo "gpu-check: --try cpu or emu, not $try" >&2; exit 2 ;;
  esac
  local rc=$?
  fold_a
  rates cpu
  return $rc
}

if [ -n "$prepare" ]; then
  prepare_all
elif [ -z "${results:-}" ]; then
  echo "gpu-check: RESULTS_DIR missing (see --help)" >&2
  exit 2
elif [ -n "$try" ]; then
  try_here
else
  check_there
fi
