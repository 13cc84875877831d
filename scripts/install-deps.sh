#!/usr/bin/env bash
# Installs, from Debian 12's archive only, everything partrain builds, tests and
# benchmarks against. Idempotent: packages already present are skipped, so a second
# run costs one dpkg query. Run as root (CI and the README's first command do).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libtomlplusplus-dev librocksdb-dev libboost-dev libgloo-dev libopenblas-dev
  libslurm-dev libcli11-dev libfmt-dev libgtest-dev libgmock-dev
  libhwloc-dev
  nlohmann-json3-dev  # the JSON parser of safetensors headers, traces and metrics
  clang libclang-rt-dev  # libFuzzer + sanitizers for the fuzz targets (-DPARTRAIN_FUZZ=ON)
  libssl-dev  # libcrypto: HMAC-SHA256 for the authenticated rendezvous
  # tokenizers: PCRE2 (pre-tokenizer patterns), SentencePiece (library, spm_train/spm_encode)
  libpcre2-dev libsentencepiece-dev sentencepiece
  file        # CPack's dpkg-shlibdeps step (tests/packaging); dpkg-dev comes with build-essential
  lintian     # Debian's package checker, run on the packages by tests/packaging
  # the independent reference for tests and the peer for benchmarks
  python3-torch python3-numpy
  # a real local Slurm cluster for the `slurm` test label
  slurmctld slurmd slurm-client munge
)

# node + npm run the reference tokenizers (tests/tokenize) and the tiktoken peer (bench/tokenize);
# a machine with a node of its own (e.g. NodeSource's, which bundles npm) keeps it.
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)

# The npm packages those use, into a cache folder (never the source tree).
install_npm_packages() {
  local dir=${PARTRAIN_NPM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/partrain/npm}
  [ -d "$dir/node_modules/js-tiktoken" ] && [ -d "$dir/node_modules/llama3-tokenizer-js" ] \
    && [ -d "$dir/node_modules/tiktoken" ] && return 0
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
    js-tiktoken@1.0.21 llama3-tokenizer-js@1.2.0 tiktoken@1.0.22 >/dev/null \
    && echo "install-deps: npm packages in $dir" \
    || echo "install-deps: npm packages not installed (registry unreachable?); tests/tokenize will skip"
}
trap install_npm_packages EXIT

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
