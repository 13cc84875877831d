#!/usr/bin/env bash
# Installs, from Debian 12's archive only, everything partrain builds, tests and
# benchmarks against. Idempotent: packages already present are skipped, so a second
# run costs one dpkg query. Run as root (CI and the README's first command do).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libtomlplusplus-dev librocksdb-dev libboost-dev libgloo-dev libopenblas-dev
  libslurm-dev libcli11-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
  libhwloc-dev
  nlohmann-json3-dev  # the JSON parser of safetensors headers, traces and metrics
  clang libclang-rt-dev  # libFuzzer + sanitizers for the fuzz targets (-DPARTRAIN_FUZZ=ON)
  libssl-dev  # libcrypto: HMAC-SHA256 for the authenticated rendezvous
  # the independent reference for tests and the peer for benchmarks
  python3-torch python3-numpy
  # a real local Slurm cluster for the `slurm` test label
  slurmctld slurmd slurm-client munge
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
