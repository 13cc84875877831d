#!/usr/bin/env bash
# Rendezvous time against rank count, partrain's store and PyTorch's TCPStore side by side
# (see README.md).
#   bench/rendezvous/run.sh [BUILD_DIR] [N...]     default: build, 1024 4096 16384
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
shift || true
scales=("$@")
[ ${#scales[@]} -gt 0 ] || scales=(1024 4096 16384)
"$build/bench/rendezvous/rendezvous_bench" "${scales[@]}"
/usr/bin/python3 "$here/tcpstore_peer.py" "${scales[@]}" || true
