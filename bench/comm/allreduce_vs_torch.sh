#!/bin/bash
# Gloo all-reduce on loopback: partrain's communicator (partrain_allreduce_bench) vs
# torch.distributed with the gloo backend (gloo_peer.py), side by side: WORLD processes
# (BENCH_WORLD, default 2), float32 sums of 1 MiB and 64 MiB. Prints the mean time of each,
# the bus bandwidth (nccl-tests' definition: bytes x 2(n-1)/n per second) and the ratio
# torch ms / partrain ms (> 1: partrain faster); then partrain's probe, the 1 MiB
# all-reduce before and after 20 reduce-scatters (a ratio near 1: no slowdown).
# BENCH_REPEATS (default 3) alternating runs per side, the fastest kept. Not a test.
#
#   bench/comm/allreduce_vs_torch.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
python=${PARTRAIN_TORCH_PYTHON:-/usr/bin/python3}
world=${BENCH_WORLD:-2}
repeats=${BENCH_REPEATS:-3}
bench=$build/bench/comm/partrain_allreduce_bench
[ -x "$bench" ] || { echo "allreduce_vs_torch.sh: no $bench; build it: cmake --build $build --target partrain_allreduce_bench" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1

for ((i = 0; i < repeats; i++)); do
  "$bench" "$world" >>"$work/ours" 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
  "$python" "$here/gloo_peer.py" "$world" >>"$work/theirs" 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
done
"$python" - "$work/ours" "$work/theirs" <<'PY'
import sys
def best(path):
    out, probe = {}, None
    for line in open(path):
        f = line.split()
        if f[0] == "all_reduce":
            key = (int(f[1]), int(f[2]))
            out[key] = min(out.get(key, float("inf")), float(f[3]))
        elif f[0] == "probe":
            before, after = float(f[1]), float(f[2])
            probe = (before, after) if probe is None or after / before < probe[1] / probe[0] else probe
    return out, probe
ours, probe = best(sys.argv[1])
theirs, _ = best(sys.argv[2])
print(f"{'size':>8} {'world':>5} {'partrain_ms':>12} {'torch_ms':>10} {'partrain_busbw':>15} {'torch_busbw':>12} {'ratio':>6}")
for (nbytes, world), ms in sorted(ours.items()):
    peer = theirs[(nbytes, world)]
    bus = lambda t: nbytes * 2 * (world - 1) / world / (t / 1e3) / 1e9
    print(f"{nbytes / 2**20:>6.0f}Mi {world:>5} {ms:>12.3f} {peer:>10.3f} {bus(ms):>11.3f} GB/s {bus(peer):>8.3f} GB/s {peer / ms:>6.2f}")
print(f"partrain 1 MiB all_reduce before 20 reduce_scatters {probe[0]:.3f} ms, after {probe[1]:.3f} ms "
      f"(ratio {probe[1] / probe[0]:.2f})")
PY
