#!/bin/bash
# Data parallel on GPUs: partrain (`partrain run --partrain=dpN --nproc N --device cuda`, the
# dp plugin over NCCL on the CUDA backend, bf16) vs PyTorch DDP with the nccl backend
# (ddp_gpu_peer.py, bf16 autocast), side by side: the same GPT-2 style model, global batch
# and sequence length, one GPU per rank. Prints tokens/s of each, the ratio (> 1: partrain
# faster) and the median share of a step in exposed communication (partrain: exposed_ms /
# step_ms from metrics.jsonl; DDP: 1 - t(no_sync) / t(sync)). Not a test: nothing gates CI.
#
#   bench/dp/dp_gpu_vs_ddp.sh [BUILD_DIR]     # BENCH_GPUS (2, or 1 on one GPU), BENCH_STEPS (10)
#
# Needs a CUDA build with NCCL (cmake -DPARTRAIN_CUDA=ON; partraind, partrain-worker, the
# dp plugin built), BENCH_GPUS GPUs, and a PyTorch with CUDA (PARTRAIN_TORCH_PYTHON, default
# the first of python3 and /usr/bin/python3 that has one). Refuses, exit 2 with one line,
# when any is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
steps=${BENCH_STEPS:-10}
warmup=3
refuse() { echo "dp_gpu_vs_ddp.sh: $*" >&2; exit 2; }

# What the run needs, checked before anything starts.
[ -x "$build/bin/partrain" ] && [ -x "$build/bin/partrain-worker" ] ||
  refuse "no partrain build in $build; build it first (cmake --build $build)"
ls "$build"/daemon/comm/libpartrain_comm_nccl.* >/dev/null 2>&1 ||
  refuse "$build has no NCCL communicator: configure with -DPARTRAIN_CUDA=ON where the CUDA toolkit has NCCL"
# The peer's Python: PARTRAIN_TORCH_PYTHON, else the first of python3 on PATH and
# /usr/bin/python3 whose PyTorch has CUDA and NCCL and sees a GPU.
cuda_torch() { "$1" -c 'import torch, torch.distributed as d, sys; sys.exit(0 if torch.cuda.is_available() and d.is_nccl_available() else 1)' 2>/dev/null; }
python=${PARTRAIN_TORCH_PYTHON:-}
if [ -z "$python" ]; then
  for p in "$(command -v python3 || true)" /usr/bin/python3; do
    if [ -n "$p" ] && cuda_torch "$p"; then python=$p; break; fi
  done
fi
[ -n "$python" ] && cuda_torch "$python" ||
  refuse "no PyTorch with CUDA and NCCL that sees a GPU (${python:-python3, /usr/bin/python3}); set PARTRAIN_TORCH_PYTHON to one"
gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())')
nproc=${BENCH_GPUS:-$((gpus < 2 ? gpus : 2))}
[ "$gpus" -ge "$nproc" ] || refuse "needs $nproc GPUs (BENCH_GPUS), this machine has $gpus"
[ "$nproc" -ge 2 ] || echo "dp_gpu_vs_ddp.sh: one GPU: dp1 against DDP on one rank (no gradient all-reduce on either side)" >&2

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
  "$build/bin/partrain" run "$work/$name.toml" --partrain="dp$nproc" --nproc "$nproc" --device cuda \
      >/dev/null 2>"$work/$name.err" || { tail -5 "$work/$name.err"; exit 1; }
  read -r ours ours_share < <(bench_step_stats "$python" "$work/run-$name" $((batch * nproc * seq)) $warmup)
  read -r _ theirs _ theirs_share < <("$python" "$here/ddp_gpu_peer.py" --layers "$layers" --hidden "$hidden" \
      --heads "$heads" --seq "$seq" --batch "$batch" --vocab 256 --steps "$steps" --warmup $warmup --nproc "$nproc")
  ratio=$("$python" -c "print(f'{$ours / $theirs:.2f}')")
  printf "%-8s %5s %14s %12s %7s %16s %14s\n" "$name" "$nproc" "$ours" "$theirs" "$ratio" "$ours_share" "$theirs_share"
done
