#!/usr/bin/env bash
# Installs what is missing, builds partrain, and runs the shipped example on its
# embedded default: CPU ranks, standalone agent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"
./build/bin/partrain layout --partrain=tp2,pp2 --nodes 2 --gpus-per-node 4
# Two CPU ranks, data parallel, under a standalone agent. The build writes a site config
# (build/etc/partrain.toml) naming its own plugin folder; an installed partrain reads
# /etc/partrain/partrain.toml instead.
PARTRAIN_SITE_CONFIG=$PWD/build/etc/partrain.toml \
  ./build/bin/partrain run etc/examples/tiny.toml --partrain=dp2 --nproc 2
