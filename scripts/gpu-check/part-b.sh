#!/usr/bin/env bash
# Part B of the prepared GPU check (scripts/gpu-check.sh --part b runs it): one GPU at llm.c
# speed, for a machine with an NVIDIA GPU, the CUDA toolkit (nvcc), CMake, a C++ compiler and
# PyTorch's wheels (cuDNN comes from there), nothing else assumed (no Debian dev packages, no
# GoogleTest, no network). It
#   1. builds the GPU-only tree (-DPARTRAIN_GPU_ONLY=ON: CUDA kernels and backend, the CPU
#      reference kernels, tests/gpu, bench/gpu) for sm_90 only;
#   2. runs the gpu-labelled tests (every kernel and fast path against the CPU reference);
#   3. runs the PyTorch peer (bench/gpu/torch_peer.py: GPT-2 124M and a LLaMA of its size,
#      torch.compile, SDPA, B=16 T=1024 bf16), compiled in the background while 1-2 run and
#      timed alone;
#   4. runs the benchmark ladder, one process per configuration so one failure cannot void
#      the rest, most important first: every fast path on (with a per-phase table), the
#      previous path (baseline, with its table), the engine's model path for GPT-2 and LLaMA,
#      every path plus a CUDA graph, then each fast path alone on the baseline;
#   5. writes RESULTS_DIR/summary.txt: the build time, every test case's verdict, each run's
#      tokens/s, MFU, ms/step and losses beside the baseline's and the torch.compile peer's,
#      the per-phase tables (bench/gpu/summarize.py).
# RESULTS_DIR also gets env.txt, build.log, tests.log, bench.json (every run's JSON line,
# partrain's and the peer's), bench.log, peer.log.
#
#   bash scripts/gpu-check/part-b.sh RESULTS_DIR [build|run|all]   (default all; build alone
#        is what gpu-check.sh runs in the background during part A, run the rest after it)
#   bash scripts/gpu-check/part-b.sh --prepare     (here: fmt, nlohmann-json and cuDNN headers
#        into out/gpu-deps/include, an ignored path to carry along)
#   JOBS=16 BATCH=16 STEPS=10 bash scripts/gpu-check/part-b.sh /tmp/gpu-out
#
# Time: it stops itself at GPU_CHECK_DEADLINE (seconds since the epoch; default start + 285 s),
# skipping what no longer fits and saying so; about 4 minutes on an H200 with 16 cores.
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = "--prepare" ]; then
  src=${FMT_INCLUDE:-/usr/include/fmt}
  json=${JSON_INCLUDE:-/usr/include/nlohmann}
  cudnn=${CUDNN_INCLUDE:-/usr/local/cuda/include}
  [ -f "$src/format.h" ] || { echo "gpu-check --prepare: no fmt headers at $src (set FMT_INCLUDE)"; exit 1; }
  [ -f "$json/json.hpp" ] || { echo "gpu-check --prepare: no nlohmann-json headers at $json (set JSON_INCLUDE)"; exit 1; }
  rm -rf out/gpu-deps && mkdir -p out/gpu-deps/include
  cp -r "$src" out/gpu-deps/include/fmt && cp -r "$json" out/gpu-deps/include/nlohmann
  # cuDNN's headers, in case the machine's PyTorch wheel carries only the library.
  if ls "$cudnn"/cudnn*.h >/dev/null 2>&1; then cp "$cudnn"/cudnn*.h out/gpu-deps/include/; fi
  echo "gpu-check --prepare: out/gpu-deps/include/{fmt,nlohmann,cudnn*.h} ready; carry out/gpu-deps to the GPU machine"
  exit 0
fi
OUT=${1:-${OUT:-$PWD/out/gpu-check}}
stage=${2:-all}
JOBS=${JOBS:-16}
BATCH=${BATCH:-16}
STEPS=${STEPS:-10}
mkdir -p "$OUT" && OUT=$(realpath "$OUT")
start=$(date +%s)
deadline=${GPU_CHECK_DEADLINE:-$((start + 285))}
left() { local l=$((deadline - $(date +%s))); [ "$l" -gt 5 ] && echo "$l" || echo 5; }
summary="$OUT/summary.txt"
[ "$stage" = run ] || : >"$summary"
note() { echo "$*" | tee -a "$summary"; }

if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
# PyTorch's python (the peer), and the wheels' cuDNN and NVRTC for partrain's cuDNN path.
py=python3
$py -c 'import torch' 2>/dev/null || py=""
nv_dir=$([ -n "$py" ] && $py -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
cudnn_lib=$([ -n "$nv_dir" ] && find "$nv_dir" -name 'libcudnn.so.9' 2>/dev/null | head -n 1)
cudnn_inc=$([ -n "$nv_dir" ] && find "$nv_dir" -name 'cudnn_graph.h' 2>/dev/null | head -n 1)
# (cuDNN's runtime-compiled engines load NVRTC: the wheel's, else the toolkit's.)
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for lib in libcudnn.so.9 libnvrtc.so.13 libnvrtc-builtins.so.13.0; do
  d=$([ -n "$nv_dir" ] && find "$nv_dir" -name "$lib" 2>/dev/null | head -n 1)
  [ -n "$d" ] && export LD_LIBRARY_PATH="$(dirname "$d")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
[ -n "$cudnn_lib" ] && export PARTRAIN_CUDNN_LIBRARY=$cudnn_lib
export TORCHINDUCTOR_CACHE_DIR=${TMPDIR:-/tmp}/partrain-inductor

# The peer: built, compiled and warmed up in the background; timed when $OUT/peer.go appears.
peer_pid=""
start_peer() {
  [ -n "$py" ] || { note "peer: no python3 with torch; no torch.compile peer"; return; }
  rm -f "$OUT/peer.ready" "$OUT/peer.go"
  $py bench/gpu/torch_peer.py --batch "$BATCH" --steps "$STEPS" --out "$OUT/peer.json" \
    --ready-file "$OUT/peer.ready" --go-file "$OUT/peer.go" --wait 400 >"$OUT/peer.log" 2>&1 &
  peer_pid=$!
}
[ "$stage" = all ] && start_peer  # alone, the peer compiles while partrain builds

built=${TMPDIR:-/tmp}/partrain-gpu-check-b.tree
if [ "$stage" != run ]; then
  rm -f "$built"
  {
    nvidia-smi || true
    nvcc --version || true
    cmake --version || true
    c++ --version || true
    nproc
    echo "python: ${py:-none} $([ -n "$py" ] && $py -c 'import torch; print(torch.__version__)' 2>/dev/null)"
    echo "cuDNN library: ${cudnn_lib:-not found in the wheels}; headers: ${cudnn_inc:-carried or toolkit}"
  } >"$OUT/env.txt" 2>&1
  cudnn_args=()
  [ -n "$cudnn_inc" ] && cudnn_args+=(-DPARTRAIN_CUDNN_INCLUDE_DIR="$(dirname "$cudnn_inc")")
  [ -n "$cudnn_lib" ] && cudnn_args+=(-DPARTRAIN_CUDNN_WHEEL_DIR="$(dirname "$(dirname "$cudnn_lib")")")
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  configure_and_build() {  # $1 build dir, $2.. extra cmake args
    local dir=$1
    shift
    timeout "$(left)" cmake -S . -B "$dir" "${gen[@]+"${gen[@]}"}" -DPARTRAIN_GPU_ONLY=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCMAKE_BUILD_TYPE=Release "$@" >>"$OUT/build.log" 2>&1 &&
      timeout "$(left)" cmake --build "$dir" -j "$JOBS" >>"$OUT/build.log" 2>&1
  }
  build=build-gpu-check
  : >"$OUT/build.log"
  if configure_and_build "$build" "${cudnn_args[@]+"${cudnn_args[@]}"}"; then
    note "build: ok (full GPU-only tree, sm_90) in $(($(date +%s) - start)) s"
  else
    # The full tree needs fmt (system or PyTorch's copy); without it, or if that copy does
    # not compile, the kernels and their tests still build.
    note "build: full GPU-only tree FAILED (see build.log); retrying kernels-only"
    grep -m 5 -E "error|Error" "$OUT/build.log" >>"$summary"
    build=build-gpu-check-min
    if configure_and_build "$build" -DPARTRAIN_GPU_ONLY_MINIMAL=ON "${cudnn_args[@]+"${cudnn_args[@]}"}"; then
      note "build: ok (kernels only) in $(($(date +%s) - start)) s"
    else
      note "build: kernels-only FAILED too; tail of build.log:"
      tail -30 "$OUT/build.log" >>"$summary"
      [ -n "$peer_pid" ] && kill "$peer_pid" 2>/dev/null
      exit 1
    fi
  fi
  grep -E "cuDNN attention path" "$OUT/build.log" | tail -n 1 >>"$summary"
  echo "$build" >"$built"
fi
[ "$stage" = build ] && exit 0
[ -s "$built" ] || { note "no GPU-only tree built (the build stage failed or did not run)"; exit 1; }
build=$(cat "$built")
[ -z "$peer_pid" ] && start_peer

tests_budget=$(( $(left) > 100 ? 100 : $(left) ))
timeout "$tests_budget" ctest --test-dir "$build" -L gpu -V --timeout 90 >"$OUT/tests.log" 2>&1
note "tests: ctest exit $? after $(($(date +%s) - start)) s"
grep -E "tests passed|tests failed|\(Failed\)|Timeout" "$OUT/tests.log" | sort | uniq >>"$summary"
grep -A2 ": Failure" "$OUT/tests.log" | head -40 >>"$summary"

# The peer's timing, alone on the GPU.
: >"$OUT/bench.json"
if [ -n "$peer_pid" ]; then
  wait_ready=$(( $(left) > 150 ? $(left) - 90 : $(left) / 2 ))
  for _ in $(seq 1 $((wait_ready * 5))); do
    [ -e "$OUT/peer.ready" ] || ! kill -0 "$peer_pid" 2>/dev/null && break
    sleep 0.2
  done
  touch "$OUT/peer.go"
  for _ in $(seq 1 300); do kill -0 "$peer_pid" 2>/dev/null || break; sleep 0.2; done
  kill "$peer_pid" 2>/dev/null && note "peer: stopped (not done in time; see peer.log)"
  wait "$peer_pid" 2>/dev/null
  [ -f "$OUT/peer.json" ] && cat "$OUT/peer.json" >>"$OUT/bench.json"
  note "peer: done after $(($(date +%s) - start)) s"
fi

bench=$build/bench/gpu/partrain_gpu_bench
run() {  # label, then the benchmark's arguments
  local label=$1
  shift
  if [ "$(left)" -le 12 ]; then
    echo "{\"label\":\"$label\",\"error\":\"skipped: out of time\"}" >>"$OUT/bench.json"
    return
  fi
  local t=$(( $(left) > 70 ? 70 : $(left) - 2 ))
  timeout "$t" "$bench" --label "$label" --batch "$BATCH" --steps "$STEPS" "$@" >>"$OUT/bench.json" 2>>"$OUT/bench.log" ||
    echo "bench $label: exit $?" >>"$OUT/bench.log"
}
if [ -x "$bench" ]; then
  base=(--paths none --attention gemm --overwrite 0 --device-optimizer 0)
  run all --paths all --attention auto --phases 1
  run baseline "${base[@]}" --phases 1
  run model-gpt2 --mode model --arch gpt2 --paths all --attention auto --phases 1
  run model-llama --mode model --arch llama --paths all --attention auto --phases 1
  run all+graph --paths all --attention auto --graph 1
  run +lt --paths lt --attention gemm --overwrite 0 --device-optimizer 0
  run +epilogue --paths lt,epilogue --attention gemm --overwrite 1 --device-optimizer 0
  run +norm --paths norm --attention gemm --overwrite 0 --device-optimizer 0
  run +vec --paths vec --attention gemm --overwrite 0 --device-optimizer 0
  run +adamw --paths adamw --attention gemm --overwrite 0 --device-optimizer 1
  run +cudnn --paths cudnn --attention cudnn --overwrite 0 --device-optimizer 0
  run +overwrite --paths none --attention gemm --overwrite 1 --device-optimizer 0
  run model-gpt2-baseline --mode model --arch gpt2 --paths none --attention gemm
  run model-llama-baseline --mode model --arch llama --paths none --attention gemm
  note "bench: done after $(($(date +%s) - start)) s"
else
  note "bench: not built"
fi
${py:-python3} bench/gpu/summarize.py --bench "$OUT/bench.json" --tests "$OUT/tests.log" >>"$summary" 2>&1 ||
  cat "$OUT/bench.json" >>"$summary"
note "total: $(($(date +%s) - start)) s"
