#!/usr/bin/env bash
# The Debian packages as an admin installs them: built by CPack from this build tree (no
# rebuild), each package's metadata checked (computed Depends, conffiles, stripped binaries
# with their symbols in -dbgsym packages), then partrain, partrain-spank and partrain-dev
# unpacked into a clean root and run from there with every CUDA library of this machine
# hidden (a mount namespace lays an empty folder over each): `partrain --help`, `partrain
# plan`, a CPU dp2 job through the installed partraind and worker, and the plugstack.conf
# snippet's plugin path, which must name the file the package installed.
#   package_test.sh BUILD_DIR SOURCE_DIR
# Skips (77) where the tree is not configured for prefix /usr (the packages' prefix).
set -uo pipefail
build=$(realpath "$1")
src=$(realpath "$2")
fail() { echo "FAIL: $*" >&2; exit 1; }
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
if [ "$prefix" != /usr ]; then
  echo "SKIP: $build is configured for prefix $prefix; packages need -DCMAKE_INSTALL_PREFIX=/usr"
  exit 77
fi
for tool in cpack dpkg-deb dpkg-shlibdeps objcopy; do
  command -v $tool >/dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done
work=$(mktemp -d /tmp/partrain-packages.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

# ---- Build the packages.
begin=$(date +%s)
(cd "$build" && cpack -G DEB -B "$work/out" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack"; }
echo "cpack: $(( $(date +%s) - begin )) s"
deb() { ls "$work"/out/"$1"_*.deb 2>/dev/null | head -n 1; }
for p in partrain partrain-spank partrain-dev; do [ -n "$(deb $p)" ] || fail "no $p package: $(ls "$work/out")"; done
field() { dpkg-deb -f "$1" "$2"; }
printf '%-16s %12s %12s  %s\n' package "deb (KiB)" "installed" Depends
for f in "$work"/out/*.deb "$work"/out/*.ddeb; do
  [ -f "$f" ] || continue
  printf '%-16s %12s %10s KiB  %s\n' "$(field "$f" Package)" "$(( $(stat -c %s "$f") / 1024 ))" \
    "$(field "$f" Installed-Size)" "$(field "$f" Depends)"
done

# Depends computed from what the binaries link: hwloc, OpenSSL's libcrypto, OpenMP, RocksDB
# as a shared library (its compression libraries are its own package's Depends, not
# ours), OpenBLAS, Gloo; nothing unused (spdlog).
cli_depends=$(field "$(deb partrain)" Depends)
for lib in libhwloc15 libssl3 libgomp1 librocksdb7.8 libopenblas0 libgloo0; do
  grep -q "$lib" <<<"$cli_depends" || fail "partrain does not depend on $lib: $cli_depends"
done
grep -q spdlog <<<"$cli_depends" && fail "partrain depends on spdlog, which it does not use: $cli_depends"
grep -q "partrain (= " <<<"$(field "$(deb partrain-dev)" Depends)" || fail "partrain-dev does not depend on partrain"
# /etc files are conffiles (an upgrade keeps the admin's partrain.toml).
dpkg-deb -I "$(deb partrain)" conffiles | grep -qx /etc/partrain/partrain.toml ||
  fail "/etc/partrain/partrain.toml is not a conffile"
dpkg-deb -I "$(deb partrain-spank)" conffiles | grep -qx /etc/slurm/plugstack.conf.d/partrain.conf ||
  fail "the plugstack.conf snippet is not a conffile"

# ---- A clean root: the packages unpacked, nothing else of partrain.
root=$work/root
for p in partrain partrain-spank partrain-dev; do dpkg-deb -x "$(deb $p)" "$root"; done
elves=$(find "$root" -type f -exec sh -c 'file -b "$1" | grep -q "^ELF" && echo "$1"' _ {} \;)
for f in $elves; do
  file -b "$f" | grep -q "not stripped" && fail "$f is not stripped"
  readelf -d "$f" | grep -E -i 'NEEDED.*(cuda|cublas|nccl)' && fail "$f needs a CUDA library"
done
[ -n "$(ls "$work"/out/partrain-dbgsym_*.ddeb 2>/dev/null)" ] || fail "no partrain-dbgsym package"
[ -n "$(find "$root" -path '*/slurm-wlm/spank_partrain.so')" ] || fail "no spank_partrain.so in the root"
# The plugstack line names the plugin the package installed.
line=$(grep '^required ' "$root/etc/slurm/plugstack.conf.d/partrain.conf") || fail "no plugstack line"
plugin=$(awk '{print $2}' <<<"$line")
[ -f "$root$plugin" ] || fail "the plugstack line names $plugin, which the package does not install"
echo "plugstack: $line (resolves in the package)"

# Every CUDA library of this machine hidden: an empty folder over each folder holding one,
# an empty file over each one elsewhere.
# (The build tree's GPU module too: the binaries fall back to it when none is installed.)
cuda_libs=$( (ldconfig -p | grep -E -o '/[^ ]*lib(cuda|cudart|cublas|cublasLt|nccl|nvrtc|cudnn)[^ /]*\.so[^ ]*' ;
             find / -xdev \( -path /proc -o -path "$work" \) -prune -o \
               \( -name 'libcuda.so*' -o -name 'libcudart.so*' -o -name 'libcublas*.so*' -o -name 'libnccl*.so*' \
                  -o -name 'libnvrtc*.so*' -o -name 'libcudnn*.so*' -o -name 'libpartrain_cuda.so' \) -print \
             2>/dev/null) | sort -u)
hide=$work/hide.sh
{
  echo 'set -e'
  hidden=""
  for d in $(for f in $cuda_libs; do dirname "$(realpath "$f")"; done | sort -u); do
    case $d in
      /usr/lib/x86_64-linux-gnu | /lib/x86_64-linux-gnu | /usr/lib | /lib) ;;  # not the system folders
      *) # a folder inside one already hidden is gone with it (sorted: parents come first)
         skip=""; for h in $hidden; do case $d in "$h"/*) skip=1 ;; esac; done
         [ -n "$skip" ] || { echo "mount -t tmpfs none '$d'"; hidden="$hidden $d"; } ;;
    esac
  done
  for f in $cuda_libs; do
    case $(dirname "$(realpath "$f")") in
      /usr/lib/x86_64-linux-gnu | /lib/x86_64-linux-gnu | /usr/lib | /lib) echo "mount --bind /dev/null '$(realpath "$f")'" ;;
    esac
  done
} >"$hide"
in_clean_root() {
  unshare --mount --propagation private sh -c ". '$hide' && exec \"\$@\"" sh "$@"
}
in_clean_root true 2>/dev/null || { echo "SKIP: no mount namespace here (unshare needs root)"; exit 77; }
in_clean_root /usr/bin/python3 -c 'import ctypes
for n in ("libcudart.so.13", "libcudart.so.12", "libcublas.so.13", "libnccl.so.2", "libcuda.so.1"):
    try:
        ctypes.CDLL(n)
    except OSError:
        continue
    raise SystemExit(n + " still loads in the clean root")' || fail "a CUDA library is still visible"

bin=$root/usr/bin
printf '[paths]\nplugin_dir = "%s"\nstate_root = "%s"\n' "$(dirname "$(find "$root" -name dp.so | head -n 1)")" \
  "$work/state" >"$work/site.toml"
export PARTRAIN_SITE_CONFIG=$work/site.toml OMP_NUM_THREADS=1
in_clean_root "$bin/partrain" --help >"$work/help.txt" 2>&1 || { cat "$work/help.txt"; fail "partrain --help"; }
grep -q "plan" "$work/help.txt" || fail "partrain --help lists no plan: $(cat "$work/help.txt")"
examples=$root/usr/share/partrain/examples
in_clean_root "$bin/partrain" plan "$examples/tiny.toml" --partrain=dp2 --nodes 1 --gpus-per-node 2 \
  --hardware cpu --hardware-dir "$root/etc/partrain/hardware" >"$work/plan.txt" 2>&1 ||
  { cat "$work/plan.txt"; fail "partrain plan"; }
PARTRAIN_RUN_DIR=$work/run in_clean_root "$bin/partrain" run "$examples/tiny.toml" --partrain=dp2 --nproc 2 \
  --steps 3 >"$work/run.txt" 2>&1 || { cat "$work/run.txt"; fail "a CPU dp2 job from the installed files"; }
[ "$(grep -c '"step":' "$work/run/metrics.jsonl")" = 3 ] || fail "the dp2 job did not train 3 steps"
grep -q "($root/usr/libexec/partrain/partrain-worker)" "$work/run.txt" ||
  fail "the job did not run the installed worker: $(grep started "$work/run.txt" | head -n 2)"
# And a GPU job says what to install, in one line, exit 2.
in_clean_root "$bin/partrain" run "$examples/tiny.toml" --device cuda --steps 1 >"$work/cuda.txt" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "install the partrain-cuda package" "$work/cuda.txt" ||
  fail "--device cuda without the GPU package: rc $rc: $(cat "$work/cuda.txt")"
echo "clean root without CUDA: partrain --help, plan, a dp2 job (3 steps) and the cuda refusal: ok"
echo PASS
