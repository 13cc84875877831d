#!/usr/bin/env bash
# The Debian packages as an admin installs them: built by CPack from this build tree (no
# rebuild), each package's metadata checked (computed Depends, conffiles, stripped binaries
# with their symbols in -dbgsym packages), then partrain, partrain-spank and partrain-dev
# unpacked into a clean root and run from there with every CUDA library of this machine
# hidden (a mount namespace lays an empty folder over each): `partrain --help`, `partrain
# plan`, a CPU dp2 job through the installed partraind and worker, and the plugstack.conf
# snippet's plugin path, which must name the file the package installed. Then dpkg installs,
# removes and purges them in a root of their own, and a real Slurm (scripts/slurm-cluster.sh)
# must start and run srun after each: a package must never stop Slurm on an admin's host.
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

# lintian (Debian's package checker): no errors in any package, the -dbgsym .ddebs included.
# Its warnings are printed.
command -v lintian >/dev/null || fail "lintian is not installed (scripts/install-deps.sh installs it)"
lintian --no-tag-display-limit "$work"/out/*.deb $(ls "$work"/out/*.ddeb 2>/dev/null) >"$work/lintian.txt" 2>&1
grep -E '^W: ' "$work/lintian.txt" | sed 's/^/lintian: /'
grep -E '^E: ' "$work/lintian.txt" && fail "lintian reports errors in the packages (above)"
echo "lintian: no errors ($(grep -c '^W: ' "$work/lintian.txt") warnings)"

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
# Nothing under /etc/slurm but the plugstack snippet: a purge deletes a package's /etc files,
# and slurm.conf must never include one (the RequeueExit example is in /usr/share).
dpkg-deb -c "$(deb partrain-spank)" | grep -q '/etc/slurm/slurm.conf.d' &&
  fail "partrain-spank installs a file into /etc/slurm/slurm.conf.d, which a purge would delete"
# Slurm loads only plugins of its own major.minor: partrain-spank depends on that Slurm.
slurm_hex=$(sed -n 's/^#define SLURM_VERSION_NUMBER 0x\([0-9a-fA-F]*\).*/\1/p' /usr/include/slurm/slurm_version.h)
slurm_mm=$(printf '%d.%02d' $(( 0x$slurm_hex >> 16 )) $(( (0x$slurm_hex >> 8) & 255 )))
spank_depends=$(field "$(deb partrain-spank)" Depends)
grep -q "slurm-wlm-basic-plugins (>= $slurm_mm)" <<<"$spank_depends" && grep -q "slurm-wlm-basic-plugins (<< " <<<"$spank_depends" ||
  fail "partrain-spank does not depend on Slurm $slurm_mm (slurm-wlm-basic-plugins): $spank_depends"

# ---- A clean root: the packages unpacked, nothing else of partrain.
root=$work/root
for p in partrain partrain-spank partrain-dev; do dpkg-deb -x "$(deb $p)" "$root"; done
elves=$(find "$root" -type f -exec sh -c 'file -b "$1" | grep -q "^ELF" && echo "$1"' _ {} \;)
for f in $elves; do
  file -b "$f" | grep -q "not stripped" && fail "$f is not stripped"
  readelf -d "$f" | grep -E -i 'NEEDED.*(cuda|cublas|nccl)' && fail "$f needs a CUDA library"
done
# Debug information where the build has any (-g): each .ddeb holds, for every installed ELF
# file, a .debug file of its build id with DWARF in it, and its md5sums match its files.
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt")
case $build_type in
  RelWithDebInfo | Debug)
    [ -n "$(ls "$work"/out/partrain-dbgsym_*.ddeb 2>/dev/null)" ] || fail "no partrain-dbgsym package"
    for d in "$work"/out/*.ddeb; do
      dbg=$work/dbgsym/$(basename "$d")
      mkdir -p "$dbg" && dpkg-deb -x "$d" "$dbg" && dpkg-deb -e "$d" "$dbg/DEBIAN" || fail "cannot unpack $d"
      # md5sums names exactly the package's files, by their paths in it, and matches them.
      [ "$(cd "$dbg" && find . -path ./DEBIAN -prune -o -type f -printf '%P\n' | LC_ALL=C sort)" = \
        "$(awk '{print $2}' "$dbg/DEBIAN/md5sums" | LC_ALL=C sort)" ] ||
        fail "$(basename "$d"): md5sums does not list its files by their paths: $(head -n 2 "$dbg/DEBIAN/md5sums")"
      (cd "$dbg" && md5sum --quiet -c DEBIAN/md5sums) >"$work/md5.txt" 2>&1 || fail "$(basename "$d"): md5sums: $(head -n 3 "$work/md5.txt")"
    done
    for f in $elves; do
      id=$(readelf -n "$f" | sed -n 's/.*Build ID: \([0-9a-f]*\).*/\1/p')
      debug=$(ls "$work"/dbgsym/*/usr/lib/debug/.build-id/"${id:0:2}/${id:2}.debug" 2>/dev/null | head -n 1)
      [ -n "$debug" ] || fail "${f#"$root"} (build id $id) has no .debug file in the -dbgsym packages"
      sections=$(readelf -S "$debug" 2>/dev/null)
      grep -q '\.debug_info' <<<"$sections" || fail "$debug (for ${f#"$root"}) holds no debug information"
      # Compiled for the amd64 baseline (-march=x86-64), never for the build machine's CPU:
      # a package runs on every node, and -march=native code SIGILLs on an older one. GCC
      # records each compile unit's switches in its DW_AT_producer (-grecord-gcc-switches,
      # its default), -march=native expanded to the CPU it found (-march=znver3 -mavx2 ...).
      readelf --debug-dump=info --dwarf-depth=1 "$debug" 2>/dev/null |
        sed -n -e 's/.*DW_AT_producer *: ([^)]*): //p' -e 's/.*DW_AT_producer *: //p' >"$work/producers.txt"
      grep '^GNU C' "$work/producers.txt" >>"$work/gnu-producers.txt"
      bad=$(grep '^GNU C' "$work/producers.txt" |
        grep -o -E -e '-march=[^ ]+' -e '-m(avx|fma|f16c|bmi|sse3|ssse3|sse4|popcnt|lzcnt|movbe|aes|pclmul)[^ ]*' |
        grep -v -x -e '-march=x86-64' | sort -u | head -n 4 | tr '\n' ' ')
      [ -z "$bad" ] || fail "${f#"$root"} holds code compiled for one CPU, not the amd64 baseline (DW_AT_producer: ${bad}...): a package must run on every node; build it with -DPARTRAIN_NATIVE=OFF"
    done
    # The check saw the CPU kernels, where -march=native used to be (-O3 -fno-math-errno).
    grep -q -- ' -O3 .*-fno-math-errno' "$work/gnu-producers.txt" ||
      fail "no compile unit of the CPU kernels (-O3 -fno-math-errno) in the -dbgsym packages' DW_AT_producer"
    echo "dbgsym: $(ls "$work"/out/*.ddeb | wc -l) packages, DWARF for all $(wc -w <<<"$elves") ELF files, md5sums match," \
      "$(wc -l <"$work/gnu-producers.txt") GCC compile units all -march=x86-64" ;;
  *) [ -z "$(ls "$work"/out/*.ddeb 2>/dev/null)" ] || fail "a $build_type build (no -g) made -dbgsym packages: $(ls "$work"/out/*.ddeb)" ;;
esac
# No installed binary or library carries a path of this build or source tree: an installed
# program looks only where it was installed (relative to itself), never in a build tree.
leaks=""
for f in $elves; do
  hits=$(strings -a "$f" | grep -F -e "$build" -e "$src" | sort -u | head -n 3 | tr '\n' ' ')
  [ -n "$hits" ] && leaks="$leaks
  ${f#"$root"}: $hits"
done
echo "installed ELF files checked for build-tree paths: $(wc -w <<<"$elves")"
[ -n "$(find "$root" -path '*/slurm-wlm/spank_partrain.so')" ] || fail "no spank_partrain.so in the root"
# The plugstack line names the plugin the package installed.
line=$(grep '^optional ' "$root/etc/slurm/plugstack.conf.d/partrain.conf") || fail "no optional plugstack line"
plugin=$(awk '{print $2}' <<<"$line")
[ -f "$root$plugin" ] || fail "the plugstack line names $plugin, which the package does not install"
echo "plugstack: $line (resolves in the package)"

# Every CUDA library of this machine hidden: an empty folder over each folder holding one,
# an empty file over each one elsewhere.
cuda_libs=$( (ldconfig -p | grep -E -o '/[^ ]*lib(cuda|cudart|cublas|cublasLt|nccl|nvrtc|cudnn)[^ /]*\.so[^ ]*' ;
             find / -xdev \( -path /proc -o -path "$work" \) -prune -o \
               \( -name 'libcuda.so*' -o -name 'libcudart.so*' -o -name 'libcublas*.so*' -o -name 'libnccl*.so*' \
                  -o -name 'libnvrtc*.so*' -o -name 'libcudnn*.so*' \) -print \
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
# On this build host, with its CUDA libraries and the build tree's own GPU module in place,
# the installed partrain without partrain-cuda still says what to install, naming the module
# under its own prefix: it never falls back to the build tree (or to /usr of this host).
build_module=$(find "$build" -maxdepth 4 -path "$build/lib/*" -name libpartrain_cuda.so -print -quit)
"$bin/partrain" run "$examples/tiny.toml" --device cuda --steps 1 >"$work/cuda-host.txt" 2>&1
rc=$?
module=$(dirname "$(dirname "$(find "$root" -name dp.so | head -n 1)")")  # <libdir>/partrain
[ $rc = 2 ] && grep -q "install the partrain-cuda package" "$work/cuda-host.txt" &&
  grep -qF "($module/libpartrain_cuda.so is absent)" "$work/cuda-host.txt" ||
  leaks="$leaks
  on the build host (its GPU module: ${build_module:-none built}), --device cuda without partrain-cuda: rc $rc: $(head -c 600 "$work/cuda-host.txt")"
[ -z "$leaks" ] || fail "the installed files fall back to this build tree ($build, source $src):$leaks"
echo "installed files name no build-tree path; --device cuda on the build host (its GPU module: ${build_module:-none built}): exit 2, install partrain-cuda: ok"

# ---- As an admin installs, removes and purges them with dpkg: into a root of their own, with
# a copy of this host's package database (so Depends are checked for real) and maintainer
# scripts run with DPKG_ROOT. After each step Slurm must still work on the host: a real
# one-node cluster reads the root's plugstack snippets and the admin's slurm.conf Include.
inst=$work/inst
mkdir -p "$inst/var/lib/dpkg/info" "$inst/var/lib/dpkg/updates" "$inst/var/lib/dpkg/triggers"
: >"$inst/var/lib/dpkg/available"
dpkg_root() { dpkg --root="$inst" --force-script-chrootless --force-not-root --log=/dev/null "$@"; }
# A Slurm of another major.minor installed: partrain-spank is refused.
awk -v v=99.99.1-1 '/^Package: /{p=($2=="slurm-wlm-basic-plugins")} p&&/^Version: /{$0="Version: " v} {print}' \
  /var/lib/dpkg/status >"$inst/var/lib/dpkg/status"
dpkg_root -i "$(deb partrain-spank)" >"$work/dpkg-mismatch.txt" 2>&1 &&
  fail "partrain-spank installed beside Slurm 99.99, whose slurmd cannot load it"
grep -q "slurm-wlm-basic-plugins" "$work/dpkg-mismatch.txt" ||
  fail "the refusal does not name slurm-wlm-basic-plugins: $(cat "$work/dpkg-mismatch.txt")"
dpkg_root --purge partrain-spank >/dev/null 2>&1
cp /var/lib/dpkg/status "$inst/var/lib/dpkg/status"
dpkg_root -i "$(deb partrain)" "$(deb partrain-spank)" >"$work/dpkg-install.txt" 2>&1 ||
  { cat "$work/dpkg-install.txt"; fail "dpkg -i partrain partrain-spank"; }
[ "$(stat -c %a "$inst/var/lib/partrain")" = 1777 ] || fail "postinst did not make $inst/var/lib/partrain 1777"
snippet=$inst/etc/slurm/plugstack.conf.d/partrain.conf
example=$inst/usr/share/partrain/slurm.conf.d/partrain.conf
[ -f "$snippet" ] && [ -f "$example" ] || fail "installed: no $snippet or $example"
# The admin follows spank_partrain(8): a copy of the RequeueExit example, included by slurm.conf.
mkdir -p "$inst/etc/slurm/slurm.conf.d"
cp "$example" "$inst/etc/slurm/slurm.conf.d/partrain.conf"
dpkg_root -r partrain-spank >"$work/dpkg-remove.txt" 2>&1 || { cat "$work/dpkg-remove.txt"; fail "dpkg -r partrain-spank"; }
[ -f "$snippet" ] || fail "remove deleted the plugstack conffile (dpkg keeps conffiles until purge)"
plugin=$(awk '/^(optional|required) /{print $2}' "$snippet")
slurm_dir=$work/slurm
cluster() { PARTRAIN_SLURM_PORT=${PARTRAIN_PACKAGE_SLURM_PORT:-16917} bash "$src/scripts/slurm-cluster.sh" "$@"; }
if [ -e "$plugin" ]; then
  echo "note: $plugin is installed on this host, so removal cannot be shown with Slurm here"
elif ! command -v slurmd >/dev/null || ! command -v srun >/dev/null; then
  echo "note: no slurmd/srun here: Slurm after remove and purge not tried"
else
  trap 'cluster stop "$slurm_dir" >/dev/null 2>&1; rm -rf "$work"' EXIT
  cluster start "$slurm_dir" --nodes 1 --plugstack-include "$inst/etc/slurm/plugstack.conf.d/*.conf" \
    --slurm-include "$inst/etc/slurm/slurm.conf.d/partrain.conf" >"$work/cluster.txt" 2>&1 ||
    { cat "$work/cluster.txt"; cluster logs "$slurm_dir"; fail "slurmd does not start after apt-get remove partrain-spank"; }
  SLURM_CONF=$slurm_dir/slurm.conf timeout 60 srun -N1 true >"$work/srun.txt" 2>&1 ||
    { cat "$work/srun.txt"; fail "srun fails after apt-get remove partrain-spank"; }
  # A job whose nodes all crashed at its end left its secret (no epilog removed it).
  mkdir -p "$inst/var/lib/partrain/slurm-7" && (umask 077 && echo 00 >"$inst/var/lib/partrain/slurm-7/job.secret")
  dpkg_root --purge partrain-spank partrain >"$work/dpkg-purge.txt" 2>&1 ||
    { cat "$work/dpkg-purge.txt"; fail "dpkg --purge"; }
  [ -e "$snippet" ] && fail "purge left the plugstack conffile"
  [ -e "$inst/var/lib/partrain/slurm-7/job.secret" ] && fail "purge left a job secret in /var/lib/partrain"
  [ -f "$inst/etc/slurm/slurm.conf.d/partrain.conf" ] || fail "purge deleted the admin's slurm.conf.d/partrain.conf"
  SLURM_CONF=$slurm_dir/slurm.conf timeout 60 srun -N1 true >"$work/srun.txt" 2>&1 ||
    { cat "$work/srun.txt"; fail "srun fails after dpkg --purge partrain-spank partrain"; }
  echo "dpkg: Slurm $slurm_mm dependency enforced; after remove and purge slurmd starts and srun runs: ok"
fi
echo PASS
