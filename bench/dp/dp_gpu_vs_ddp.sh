#!/bin/bash
# Data parallel on GPUs: partrain (`partrain run --partrain=dpN --nproc N --device cuda`, the
# dp plugin over NCCL on the CUDA backend, bf16) vs PyTorch DDP with the nccl backend
# (ddp_gpu_peer.py, bf16 autocast), side by side: the same GPT-2 style model, global batch
# and sequence length, one GPU per rank. Prints tokens/s of each, the ratio (> 1: partrain
# faster) and the median share of a step in exposed communication (partrain: exposed_ms /
# step_ms from metrics.jsonl; DDP: 1 - t(no_sync) / t(sync)). Not a test: nothing gates CI.
#
#   bench/dp/dp_gpu_vs_ddp.sh [BUILD_DIR]     # BENCH_GPUS (2), BENCH_STEPS (10)
#
# Needs a CUDA build with NCCL (cmake -DPARTRAIN_CUDA=ON; partraind, partrain-worker, the
# dp plugin built), BENCH_GPUS GPUs, and a PyTorch with CUDA (PARTRAIN_TORCH_PYTHON, default
# /usr/bin/python3). Refuses, exit 2 with one line, when any is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
python=${PARTRAIN_TORCH_PYTHON:-/usr/bin/python3}
nproc=${BENCH_GPUS:-2}
steps=${BENCH_STEPS:-10}
warmup=3
refuse() { echo "dp_gpu_vs_ddp.sh: $*" >&2; exit 2; }

# What the run needs, checked before anything starts.
[ -x "$build/daemon/cli/partrain" ] && [ -x "$build/bin/partrain-worker" ] ||
  refuse "no partrain build in $build; build it first (cmake --build $build)"
ls "$build"/daemon/comm/libpartrain_comm_nccl.* >/dev/null 2>&1 ||
  refuse "$build has no NCCL communicator: configure with -DPARTRAIN_CUDA=ON where the CUDA toolkit has NCCL"
if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
  IFS=, read -r -a ids <<<"$CUDA_VISIBLE_DEVICES"; gpus=${#ids[@]}
else
  gpus=$({ find /proc/driver/nvidia/gpus -mindepth 1 -maxdepth 1 -type d 2>/dev/null || true; } | wc -l)
fi
[ "$gpus" -ge "$nproc" ] || refuse "needs $nproc GPUs (BENCH_GPUS), this machine has $gpus"
"$python" -c 'import torch, torch.distributed as d, sys; sys.exit(0 if torch.cuda.is_available() and d.is_nccl_available() else 1)' 2>/dev/null ||
  refuse "$python has no PyTorch with CUDA and NCCL; set PARTRAIN_TORCH_PYTHON to one that has"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PARTRAIN_SITE_CONFIG=$build/etc/partrain.toml
. "$here/../common.sh"
# 8M random tokens (a raw uint16 shard): enough windows at seq 1024.
"$python" - "$work/tokens.bin" <<'PY'
import os, sys
n = 8 << 20
out = bytearray(2 * n)
out[0::2] = os.urandom(n)
open(sys.argv[1], "wb").write(out)
PY

printf "%-8s %5s %14s %12s %7s %16s %14s\n" config gpus partrain_tok/s ddp_tok/s ratio partrain_exposed ddp_exposed
# name layers hidden heads seq micro-batch (per GPU; global batch = micro-batch x GPUs);
# byte vocabulary (256), as every bench/ model: d12-768 is GPT-2 small without its 50k head.
for cfg in "d6-512 6 512 8 512 16" "d12-768 12 768 12 1024 8"; do
  read -r name layers hidden heads seq batch <<<"$cfg"
  bench_gpt2_job "$work/$name.toml" "bench-dpgpu-$name" "$work/run-$name" "$work/tokens.bin" \
    "$layers" "$hidden" "$heads" "$seq" $((steps + warmup)) $((batch * nproc)) "$batch"
  "$build/daemon/cli/partrain" run "$work/$name.toml" --partrain="dp$nproc" --nproc "$nproc" --device cuda \
      >/dev/null 2>"$work/$name.err" || { tail -5 "$work/$name.err"; exit 1; }
  read -r ours ours_share < <(bench_step_stats "$python" "$work/run-$name" $((batch * nproc * seq)) $warmup)
  read -r _ theirs _ theirs_share < <("$python" "$here/ddp_gpu_peer.py" --layers "$layers" --hidden "$hidden" \
      --heads "$heads" --seq "$seq" --batch "$batch" --vocab 256 --steps "$steps" --warmup $warmup --nproc "$nproc")
  ratio=$("$python" -c "print(f'{$ours / $theirs:.2f}')")
  printf "%-8s %5s %14s %12s %7s %16s %14s\n" "$name" "$nproc" "$ours" "$theirs" "$ratio" "$ours_share" "$theirs_share"
done
