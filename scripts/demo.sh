#!/usr/bin/env bash
# Installs what is missing, builds partrain, and runs the shipped example on its
# embedded default: CPU ranks, standalone agent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"
./build/daemon/cli/partrain layout --partrain=tp4,pp2 --nodes 8 --gpus-per-node 8
