#!/bin/sh
# Repairs one -dbgsym .ddeb as CMake 3.25's CPack writes it (cmake/PartrainInstall.cmake runs
# this after cpack, for each .ddeb): its md5sums names each file by CPack's staging path
# (/.../_CPack_Packages/.../usr/lib/debug/...) instead of the path in the package, it has no
# copyright or changelog, and its .debug files are executable. Rebuilt as Debian's own
# dbgsym packages are: md5sums relative to the root, usr/share/doc/PKG-dbgsym a symlink to
# PKG's documentation (the package depends on PKG of the same version), .debug files 0644.
#   debian-ddeb-fix.sh FILE.ddeb
set -eu
ddeb=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/partrain-ddeb.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
dpkg-deb -R "$ddeb" "$tmp/p"
pkg=$(sed -n 's/^Package: //p' "$tmp/p/DEBIAN/control")
main=${pkg%-dbgsym}
grep -q "^Depends: .*$main (= " "$tmp/p/DEBIAN/control" || { echo "$ddeb: $pkg does not depend on $main (=)" >&2; exit 1; }
cd "$tmp/p"
find usr/lib/debug -type f -exec chmod 0644 {} +
mkdir -p usr/share/doc
[ -e "usr/share/doc/$pkg" ] || ln -s "$main" "usr/share/doc/$pkg"
find . -path ./DEBIAN -prune -o -type f -printf '%P\n' | LC_ALL=C sort | xargs -r md5sum >DEBIAN/md5sums
chmod 0644 DEBIAN/md5sums
cd - >/dev/null
dpkg-deb --root-owner-group -Zgzip -b "$tmp/p" "$ddeb" >/dev/null
