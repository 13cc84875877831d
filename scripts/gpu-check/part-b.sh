#!/usr/bin/env bash
# Part B of the prepared GPU check (scripts/gpu-check.sh --part b runs it): the kernels, for a
# fresh machine with an NVIDIA GPU, the CUDA toolkit
# (nvcc), CMake and a C++ compiler, and nothing else assumed (no Debian dev packages, no
# GoogleTest, no network). It builds the GPU-only tree (-DPARTRAIN_GPU_ONLY=ON: CUDA
# kernels and backend, the CPU reference kernels, tests/gpu, bench/gpu) for sm_90 only,
# runs the gpu-labelled tests, then the GPT-2 124M benchmark, and writes to RESULTS_DIR:
#   env.txt      nvidia-smi, nvcc, cmake, compiler versions
#   build.log    configure + build output
#   tests.log    ctest -L gpu, verbose (every test's lines)
#   bench.json   one JSON line per benchmark mode (tokens/s, MFU, losses, peak memory)
#   bench.log    the benchmark's stderr
#   summary.txt  what passed, what failed, the numbers
# It stops itself before 5 minutes (stage budgets below), or at GPU_CHECK_DEADLINE (seconds
# since the epoch) where scripts/gpu-check.sh sets one.
#
#   bash scripts/gpu-check/part-b.sh RESULTS_DIR [build|run]   (default: both; build alone
#                                    is what gpu-check.sh runs in the background during part A)
#   JOBS=16 BATCH=16 STEPS=10 bash scripts/gpu-check/part-b.sh /tmp/gpu-out
#
# The engine (and so the CUDA backend, the model test and the benchmark's model mode) needs
# fmt's and nlohmann-json's headers. A bare GPU machine may lack them: run `bash
# scripts/gpu-check.sh --prepare` (or part-b.sh --prepare) first on a machine that has them (it copies /usr/include/fmt
# and /usr/include/nlohmann to out/gpu-deps/include, an ignored path) and carry out/gpu-deps
# along. Without fmt the check still builds and runs the kernels, their tests and the
# benchmark's kernel-level mode.
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = "--prepare" ]; then
  src=${FMT_INCLUDE:-/usr/include/fmt}
  json=${JSON_INCLUDE:-/usr/include/nlohmann}
  [ -f "$src/format.h" ] || { echo "gpu-check --prepare: no fmt headers at $src (set FMT_INCLUDE)"; exit 1; }
  [ -f "$json/json.hpp" ] || { echo "gpu-check --prepare: no nlohmann-json headers at $json (set JSON_INCLUDE)"; exit 1; }
  rm -rf out/gpu-deps && mkdir -p out/gpu-deps/include
  cp -r "$src" out/gpu-deps/include/fmt && cp -r "$json" out/gpu-deps/include/nlohmann
  echo "gpu-check --prepare: out/gpu-deps/include/{fmt,nlohmann} ready; carry out/gpu-deps to the GPU machine"
  exit 0
fi
OUT=${1:-${OUT:-$PWD/out/gpu-check}}
stage=${2:-all}
JOBS=${JOBS:-16}
BATCH=${BATCH:-16}
STEPS=${STEPS:-10}
mkdir -p "$OUT"
start=$(date +%s)
deadline=${GPU_CHECK_DEADLINE:-$((start + 285))}
left() { local l=$((deadline - $(date +%s))); [ "$l" -gt 5 ] && echo "$l" || echo 5; }
summary="$OUT/summary.txt"
[ "$stage" = run ] || : >"$summary"
note() { echo "$*" | tee -a "$summary"; }

if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
# Which tree the build stage made, for the run stage (they may be two calls).
built=${TMPDIR:-/tmp}/partrain-gpu-check-b.tree
if [ "$stage" != run ]; then
rm -f "$built"
{
  nvidia-smi || true
  nvcc --version || true
  cmake --version || true
  c++ --version || true
  nproc
} >"$OUT/env.txt" 2>&1

configure_and_build() {  # $1 build dir, $2.. extra cmake args
  local dir=$1
  shift
  timeout "$(left)" cmake -S . -B "$dir" -DPARTRAIN_GPU_ONLY=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_BUILD_TYPE=Release "$@" >>"$OUT/build.log" 2>&1 &&
    timeout "$(left)" cmake --build "$dir" -j "$JOBS" >>"$OUT/build.log" 2>&1
}

build=build-gpu-check
: >"$OUT/build.log"
if configure_and_build "$build"; then
  note "build: ok (full GPU-only tree) in $(($(date +%s) - start)) s"
else
  # The full tree needs fmt (system or PyTorch's copy); without it, or if that copy does
  # not compile, the kernels and their tests still build.
  note "build: full GPU-only tree FAILED (see build.log); retrying kernels-only"
  build=build-gpu-check-min
  if configure_and_build "$build" -DPARTRAIN_GPU_ONLY_MINIMAL=ON; then
    note "build: ok (kernels only) in $(($(date +%s) - start)) s"
  else
    note "build: kernels-only FAILED too; tail of build.log:"
    tail -30 "$OUT/build.log" >>"$summary"
    exit 1
  fi
fi
echo "$build" >"$built"
fi
[ "$stage" = build ] && exit 0
[ -s "$built" ] || { note "no GPU-only tree built (the build stage failed or did not run)"; exit 1; }
build=$(cat "$built")

tests_budget=$(( $(left) > 110 ? 110 : $(left) ))
timeout "$tests_budget" ctest --test-dir "$build" -L gpu -V --timeout 100 >"$OUT/tests.log" 2>&1
rc=$?
note "tests: ctest exit $rc after $(($(date +%s) - start)) s"
grep -E "tests passed|tests failed|\(Failed\)|\(Skipped\)|Not Run|Timeout|\[  FAILED  \]" "$OUT/tests.log" \
  | sort | uniq >>"$summary"
grep -A2 ": Failure" "$OUT/tests.log" | head -60 >>"$summary"

bench=$build/bench/gpu/partrain_gpu_bench
if [ -x "$bench" ]; then
  timeout "$(left)" "$bench" --mode both --batch "$BATCH" --steps "$STEPS" >"$OUT/bench.json" 2>"$OUT/bench.log"
  note "bench: exit $? after $(($(date +%s) - start)) s"
  # The flash-style attention path through the engine (memory-lean, not tensor-core).
  timeout "$(left)" "$bench" --mode model --attention flash --batch "$BATCH" --steps 3 --warmup 1 \
    >>"$OUT/bench.json" 2>>"$OUT/bench.log"
  note "bench (flash attention): exit $? after $(($(date +%s) - start)) s"
  cat "$OUT/bench.json" >>"$summary"
else
  note "bench: not built"
fi
note "total: $(($(date +%s) - start)) s"
