#!/usr/bin/env bash
# Part A's preparation, on a Debian 12 build machine (scripts/gpu-check.sh --prepare runs it):
# packs what the GPU machine needs to check partrain as an admin installs it, into
# out/gpu-carry/ (ignored; about 20 MB):
#   debs/          partrain and partrain-cuda, built by CPack from a normal build (CUDA
#                  architectures 80-virtual;90, never -march=native)
#   deps/          their Debian runtime dependencies (`apt-get download`): every package that
#                  owns a library the installed binaries load, but the C and C++ runtimes
#   fallback/      libstdc++6 and libgcc-s1, used there only if the system's are too old
#   tests.tar.xz   the gpu-labelled test binaries the GPU-only tree of part B cannot build
#                  (tests/comm, tests/runtime, ...) and partrain_hf_logits, stripped
#   MANIFEST       what was packed, from which commit and build
#
#   bash scripts/gpu-check/prepare-a.sh            (GPU_CHECK_BUILD=DIR: the build folder,
#                                                   default build-gpu-carry; JOBS=N, default 2)
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${GPU_CHECK_BUILD:-build-gpu-carry}
carry=out/gpu-carry
stage=${TMPDIR:-/tmp}/partrain-gpu-prepare
say() { echo "gpu-check --prepare (part A): $*"; }
die() { say "$*"; exit 1; }

# A build configured as the packages are (prefix /usr), for the GPU architectures we ship.
configure() {
  export PATH=/usr/local/cuda/bin:$PATH
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
    -DCMAKE_CUDA_ARCHITECTURES="80-virtual;90" -DPARTRAIN_NATIVE=OFF "${launcher[@]}" >"$stage/configure.log" 2>&1 ||
    { tail -20 "$stage/configure.log"; die "cmake failed (log: $stage/configure.log)"; }
  local cache=$build/CMakeCache.txt
  grep -q '^CMAKE_INSTALL_PREFIX:PATH=/usr$' "$cache" || die "$build is not configured for prefix /usr"
  grep -q -- 'arch=compute_90,code=\[compute_90,sm_90\]' "$build/build.ninja" &&
    grep -q -- 'arch=compute_80,code=\[compute_80\]' "$build/build.ninja" ||
    die "$build does not compile CUDA for 80-virtual;90"
  grep -q -- '-march=native' "$build/build.ninja" && die "$build compiles with -march=native (PARTRAIN_NATIVE)"
  [ "$(ninja -C "$build" -t targets all 2>/dev/null | grep -c '^partrain_cuda:')" -gt 0 ] ||
    die "$build has no CUDA module (no CUDA toolkit found by cmake?)"
}

# The gpu-labelled GoogleTest binaries outside tests/gpu (part B builds those), by target name.
gpu_test_targets() {
  grep -rhoE 'partrain_add_gtest\(\s*[A-Za-z0-9_]+\s+gpu\b' tests --include=CMakeLists.txt |
    sed -E 's/partrain_add_gtest\(\s*//; s/\s+gpu$//' | sort -u
}

build_targets() {
  local tests
  tests=$(gpu_test_targets | tr '\n' ' ')
  # The emulated GPU module of the same build, for `gpu-check.sh --try emu` (not carried).
  [ "$(ninja -C "$build" -t targets all 2>/dev/null | grep -c '^partrain_gpu_emu:')" -gt 0 ] &&
    tests="$tests partrain_gpu_emu"
  say "building (JOBS=${JOBS:-2}): the packaged programs, plugins and modules, and $tests partrain_hf_logits"
  # shellcheck disable=SC2086
  cmake --build "$build" -j "${JOBS:-2}" --target partrain partraind partrain-worker partrain_plugins \
    partrain_cuda spank_partrain partrain_hf_logits $tests >"$stage/build.log" 2>&1 ||
    { tail -30 "$stage/build.log"; die "build failed (log: $stage/build.log)"; }
}

packages() {
  rm -rf "$stage/pkgs"
  (cd "$build" && cpack -G DEB -B "$stage/pkgs") >"$stage/cpack.log" 2>&1 ||
    { tail -20 "$stage/cpack.log"; die "cpack failed (log: $stage/cpack.log)"; }
  mkdir -p "$carry/debs"
  cp "$stage"/pkgs/partrain_*.deb "$stage"/pkgs/partrain-cuda_*.deb "$carry/debs/" ||
    die "cpack made no partrain or partrain-cuda package: $(ls "$stage/pkgs")"
  say "packages: $(cd "$carry/debs" && ls | tr '\n' ' ')"
}

# The carried test binaries, stripped, and where they sit under $stage/tests.
test_binaries() {
  rm -rf "$stage/tests" && mkdir -p "$stage/tests"
  local name path
  for name in $(gpu_test_targets) partrain_hf_logits; do
    path=$(find "$build/tests" -type f -name "$name" -perm -u+x | head -n 1)
    [ -n "$path" ] || die "no $name under $build/tests"
    objcopy --strip-debug "$path" "$stage/tests/$name"
  done
  tar -C "$stage" -cJf "$carry/tests.tar.xz" tests
}

# Every ELF file the GPU machine will run: the packages' and the test binaries.
elves() {
  find "$stage/root" "$stage/tests" -type f -exec sh -c 'file -b "$1" | grep -q "^ELF" && echo "$1"' _ {} \;
}

# The Debian packages owning the libraries those load (ldd's closure), but the C/C++ runtimes
# and CUDA's (the GPU machine brings its own); libstdc++6 and libgcc-s1 go to fallback/.
dependencies() {
  rm -rf "$stage/root" && mkdir -p "$stage/root"
  local f lib pkg
  for f in "$carry"/debs/*.deb; do dpkg-deb -x "$f" "$stage/root"; done
  : >"$stage/deps.txt"
  for f in $(elves); do ldd "$f"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    while read -r lib; do
      pkg=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(realpath "$lib")" 2>/dev/null) || continue  # CUDA's
      echo "${pkg%%:*}" >>"$stage/deps.txt"
    done
  ldd $(elves) 2>/dev/null | grep -q "not found" && die "a carried binary has a library missing here: $(ldd $(elves) | grep 'not found' | sort -u)"
  local deps
  deps=$(sort -u "$stage/deps.txt" | grep -vxE 'libc6|libgcc-s1|libstdc\+\+6' | tr '\n' ' ')
  rm -rf "$carry/deps" "$carry/fallback" && mkdir -p "$carry/deps" "$carry/fallback"
  # shellcheck disable=SC2086
  (cd "$carry/deps" && apt-get -q -o APT::Sandbox::User=root download $deps) >"$stage/download.log" 2>&1 ||
    { tail -5 "$stage/download.log"; die "apt-get download failed (run apt-get update?)"; }
  (cd "$carry/fallback" && apt-get -q -o APT::Sandbox::User=root download libstdc++6 libgcc-s1) \
    >>"$stage/download.log" 2>&1 || die "apt-get download libstdc++6 libgcc-s1 failed"
  say "runtime dependencies: $deps"
}

# Installed binaries must not fall back to this build tree (issue 31 item 4): name any that
# still carry its path.
build_tree_paths() {
  local f hits="" tree
  tree=$(realpath "$build")
  for f in $(find "$stage/root" -type f); do
    [ "$(strings "$f" | grep -cF "$tree")" -gt 0 ] && hits="$hits ${f#"$stage/root"}"
  done
  if [ -n "$hits" ]; then
    say "WARNING: installed files carrying the build tree's path $(realpath "$build"):$hits"
  else
    say "no installed file carries the build tree's path"
  fi
}

manifest() {
  {
    echo "commit: $(git describe --always --dirty 2>/dev/null || echo unknown)"
    echo "made: $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -n 1)"
    echo "build: $(realpath "$build") ($(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt"), CUDA $(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt"))"
    echo "tests: $(tar -tJf "$carry/tests.tar.xz" | grep -v '/$' | tr '\n' ' ')"
    (cd "$carry" && find . -type f ! -name MANIFEST -printf '%P %s\n' | sort)
  } >"$carry/MANIFEST"
}

# The tree that travels: tracked and untracked-not-ignored files, plus what is carried.
size_check() {
  local tree carried total
  tree=$( (git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null) |
          awk '{s += $1} END {print s + 0}')
  carried=$(du -sb "$carry" | cut -f1)
  [ -d out/gpu-deps ] && carried=$((carried + $(du -sb out/gpu-deps | cut -f1)))
  total=$((tree + carried))
  say "travels: tree $((tree / 1048576)) MiB + carried $((carried / 1048576)) MiB = $((total / 1048576)) MiB (limit 64)"
  [ "$total" -lt $((60 * 1048576)) ] || die "over 60 MiB: too close to the device tool's 64 MiB limit"
}

mkdir -p "$stage" && rm -rf "$carry" && mkdir -p "$carry"
[ -f "$build/CMakeCache.txt" ] || say "configuring $build"
configure
build_targets
packages
test_binaries
dependencies
build_tree_paths
manifest
size_check
say "out/gpu-carry ready"
