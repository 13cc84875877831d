#!/usr/bin/env bash
# The GPU worker check (data parallel on the CUDA backend with NCCL), for a GPU machine that
# has the CUDA toolkit and a CUDA PyTorch but none of partrain's Debian dependencies
# (RocksDB, Gloo, hwloc, Boost, ...): the build is made here and carried there.
#
#   here:  cmake -S . -B build-cuda -DPARTRAIN_CUDA=ON -DCMAKE_BUILD_TYPE=Release
#          cmake --build build-cuda -j2 --target partrain partraind partrain-worker \
#              partrain_plugin_dp comm_nccl_test gpu_runtime_test
#          bash scripts/gpu-dp-check.sh --prepare build-cuda   # -> out/gpu-dp.tar.xz (ignored)
#   there: OUT=/tmp/o bash scripts/gpu-dp-check.sh                # with out/ carried
#          (through the device tool: command "bash scripts/gpu-dp-check.sh",
#           carry ["out/gpu-dp.tar.xz"]; not yet timed on a GPU, a few minutes expected)
#
# There it unpacks the build, finds the CUDA runtime, cuBLAS and NCCL of that machine, and
# runs, writing to $OUT (default out/gpu-dp-check): nccl.log (comm_nccl_test: collectives
# exact on one GPU, two where there are two, the late compute stream), runtime.log
# (gpu_runtime_test: the dp1 worker against `partrain run --device cuda`; dp2 on two GPUs
# where there are two), bench.log (bench/dp/dp_gpu_vs_ddp.sh), summary.txt. The carried
# libraries go only into partrain's own processes (LD_LIBRARY_PATH of a wrapper), never
# into PyTorch's. Stops itself before 9 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=out/gpu-dp
if [ "${1:-}" = "--prepare" ]; then
  build=${2:?usage: gpu-dp-check.sh --prepare BUILD_DIR}
  rm -rf "$bundle" && mkdir -p "$bundle"/{bin,lib,tests,plugins}
  for f in bin/partrain bin/partraind bin/partrain-worker tests/comm/comm_nccl_test \
           tests/runtime/gpu_runtime_test lib/partrain/plugins/dp.so daemon/comm/libpartrain_comm_nccl.a; do
    [ -f "$build/$f" ] || { echo "gpu-dp-check --prepare: $build/$f is missing; configure with -DPARTRAIN_CUDA=ON and build the targets above"; exit 1; }
  done
  objcopy --strip-debug "$build/bin/partrain" "$bundle/bin/partrain"
  objcopy --strip-debug "$build/bin/partraind" "$bundle/bin/partraind"
  objcopy --strip-debug "$build/bin/partrain-worker" "$bundle/bin/partrain-worker"
  objcopy --strip-debug "$build/tests/comm/comm_nccl_test" "$bundle/tests/comm_nccl_test"
  objcopy --strip-debug "$build/tests/runtime/gpu_runtime_test" "$bundle/tests/gpu_runtime_test"
  cp "$build/lib/partrain/plugins/dp.so" "$bundle/plugins/"
  # Every shared library they need but the C and C++ runtimes (the GPU machine's are as new
  # or newer, and its CUDA libraries need its own) and the CUDA ones, which the GPU machine
  # has in the versions its driver wants.
  ldd "$bundle"/bin/* "$bundle"/tests/* | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
      case "$name" in
        libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++*|libgcc_s*) ;;
        libcuda*|libcublas*|libnccl*|libnvidia*) ;;
        *) cp -L "$path" "$bundle/lib/$name" ;;
      esac
    done
  tar -C out -cJf out/gpu-dp.tar.xz gpu-dp && rm -rf "$bundle"
  echo "gpu-dp-check --prepare: out/gpu-dp.tar.xz ($(du -h out/gpu-dp.tar.xz | cut -f1)); carry out/ to the GPU machine"
  exit 0
fi

OUT=${OUT:-$PWD/out/gpu-dp-check}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
deadline=$(($(date +%s) + 530))
left() { local l=$((deadline - $(date +%s))); [ "$l" -gt 5 ] && echo "$l" || echo 5; }
[ -f out/gpu-dp.tar.xz ] || { note "no out/gpu-dp.tar.xz: run --prepare where partrain builds, and carry out/"; exit 2; }
rm -rf "$bundle" && tar -C out -xJf out/gpu-dp.tar.xz || { note "cannot unpack out/gpu-dp.tar.xz"; exit 1; }
root=$PWD/$bundle
# The machine's CUDA runtime, cuBLAS and NCCL (toolkit folders, then PyTorch's wheels).
cuda_dirs=""
for lib in libcudart.so.13 libcublasLt.so.13 libnccl.so.2; do
  found=$(find /usr/local/cuda/lib64 /usr/local/cuda/targets /usr/local /opt /usr/lib -name "$lib*" \
          -print -quit 2>/dev/null)
  [ -n "$found" ] || { note "no $lib on this machine"; exit 2; }
  cuda_dirs="$cuda_dirs:$(dirname "$found")"
done
libs="$root/lib$cuda_dirs"
# partrain's processes get the carried libraries through wrappers; everything else does not.
mkdir -p "$root/build/bin" "$root/build/etc" "$root/build/lib/partrain/plugins" \
  "$root/build/daemon/comm"
for f in partrain partraind partrain-worker; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$libs" "$root/bin/$f" >"$root/build/bin/$f"
  chmod 755 "$root/build/bin/$f"
done
cp "$root/plugins/dp.so" "$root/build/lib/partrain/plugins/"
chmod 755 "$root/build/lib/partrain/plugins" && chmod 644 "$root/build/lib/partrain/plugins/dp.so"
# The bench's "built with NCCL" check: --prepare refused a build without it.
touch "$root/build/daemon/comm/libpartrain_comm_nccl.a"
printf '[paths]\nplugin_dir = "%s"\n' "$root/build/lib/partrain/plugins" >"$root/build/etc/partrain.toml"
export PARTRAIN_WORKER=$root/build/bin/partrain-worker PARTRAIN_SITE_CONFIG=$root/build/etc/partrain.toml
export PARTRAIN_TEST_PARTRAIND=$root/build/bin/partraind PARTRAIN_TEST_CLI=$root/build/bin/partrain
export PARTRAIN_TEST_SITE_CONFIG=$PARTRAIN_SITE_CONFIG PARTRAIN_TEST_SOURCE_DIR=$PWD
{ nvidia-smi -L || true; echo "libraries: $libs"; } >"$OUT/env.txt" 2>&1

LD_LIBRARY_PATH=$libs timeout "$(left)" "$root/tests/comm_nccl_test" >"$OUT/nccl.log" 2>&1
note "comm_nccl_test: exit $? ($(grep -cE '^\[       OK' "$OUT/nccl.log") ok, $(grep -cE '^\[  SKIPPED' "$OUT/nccl.log") skipped, $(grep -cE '^\[  FAILED  \] [A-Z]' "$OUT/nccl.log") failed)"
LD_LIBRARY_PATH=$libs timeout "$(left)" "$root/tests/gpu_runtime_test" >"$OUT/runtime.log" 2>&1
note "gpu_runtime_test: exit $? ($(grep -cE '^\[       OK' "$OUT/runtime.log") ok, $(grep -cE '^\[  SKIPPED' "$OUT/runtime.log") skipped, $(grep -cE '^\[  FAILED  \] [A-Z]' "$OUT/runtime.log") failed)"
grep -E "largest relative" "$OUT/runtime.log" | tee -a "$summary"
BENCH_STEPS=${BENCH_STEPS:-10} timeout "$(left)" bash bench/dp/dp_gpu_vs_ddp.sh "$root/build" >"$OUT/bench.log" 2>&1
note "bench: exit $?"
cat "$OUT/bench.log" | tee -a "$summary"
