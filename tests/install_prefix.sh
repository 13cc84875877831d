#!/bin/sh
# The out-of-tree plugin tests' one install of partrain (CTest fixture install.prefix, run
# once before them): installs BUILD_DIR into a fresh DIR, with the prefix DIR/prefix under
# DESTDIR DIR/root, so files whose destination is absolute (the site config and hardware
# profiles under the configured sysconfdir) land under DIR too, never in the real /etc.
# The tests read it and never write into it (tests/out_of_tree.sh).
#   install_prefix.sh CMAKE BUILD_DIR DIR
set -eu
cmake=$1 build=$2 dir=$3
rm -rf "$dir"
mkdir -p "$dir"
DESTDIR="$dir/root" "$cmake" --install "$build" --prefix "$dir/prefix" > "$dir/install.log"
test -x "$dir/root$dir/prefix/bin/partrain"
