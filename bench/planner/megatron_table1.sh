#!/usr/bin/env bash
# `partrain plan` against a published large-scale result: Narayanan et al., "Efficient
# Large-Scale Language Model Training on GPU Clusters Using Megatron-LM" (SC'21,
# arXiv:2104.04473), Table 1: GPT models (V 51200, T 2048) from 1.7B to 1T parameters on
# A100-80GB (Selene: 8 GPUs per node, NVSwitch, 8x200 Gb/s InfiniBand), with full
# activation recomputation. The paper's teraFLOP/s count the recomputed forward pass
# (their Eq. 3), which the planner prints as "with recompute" (hardware FLOP/s).
#
#   bench/planner/megatron_table1.sh [PARTRAIN_BINARY]    # default build/daemon/cli/partrain
#
# Prints per row the predicted and published teraFLOP/s per GPU and the error. The paper
# gives no micro-batch size per row; micro_batch 1 and the 1F1B schedule are assumed (the
# interleaved schedule they use for some rows would shrink the predicted bubble).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-$root/build/daemon/cli/partrain}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# billions heads hidden layers tp pp gpus batch published-TFLOP/s-per-GPU
rows="1.7 24 2304 24 1 1 32 512 137
3.6 32 3072 30 2 1 64 512 138
7.5 32 4096 36 4 1 128 512 142
18.4 48 6144 40 8 1 256 1024 135
39.1 64 8192 48 8 2 512 1536 138
76.1 80 10240 60 8 4 1024 1792 140
145.6 96 12288 80 8 8 1536 2304 148
310.1 128 16384 96 8 16 1920 2160 155
529.6 128 20480 105 8 35 2520 2520 163
1008 160 25600 128 8 64 3072 3072 163"

printf '%-8s %-12s %6s %10s %10s %7s\n' model layout gpus predicted published error
while read -r b heads hidden layers tp pp gpus batch published; do
  job=$work/gpt_$b.toml
  cat > "$job" <<TOML
[model]
arch = "gpt2"
vocab_size = 51200
seq_len = 2048
layers = $layers
hidden = $hidden
heads = $heads
recompute = "full"
[data]
train_files = ["$root/etc/examples/data/licenses_train.bin"]
[training]
steps = 1
global_batch = $batch
micro_batch = 1
TOML
  dp=$((gpus / (tp * pp)))
  json=$("$bin" plan "$job" --partrain="tp$tp,pp$pp,dp$dp" --nodes $((gpus / 8)) --gpus-per-node 8 \
         --hardware A100-80GB --hardware-dir "$root/etc/hardware" --json)
  /usr/bin/python3 - "$b" "tp$tp,pp$pp" "$gpus" "$published" "$json" <<'PY'
import json, sys
b, layout, gpus, published, text = sys.argv[1:]
t = json.loads(text)["time"]
pred = t["hardware_flops_per_gpu"] / 1e12
pub = float(published)
print(f"{b + 'B':<8} {layout:<12} {gpus:>6} {pred:>10.1f} {pub:>10.1f} {100 * (pred - pub) / pub:>+6.1f}%")
PY
done <<< "$rows"
