# Sourced by the out-of-tree plugin tests (tests/plugin, tests/pipeline), with $cmake,
# $build (partrain's build), $src (the plugin sources) and $work set: installs partrain
# into a fresh $work, builds $src against it with find_package(partrain), and makes an
# empty plugin folder $work/plugins with a site config $work/site.toml naming it.
# Sets $prefix, the installed partrain, and $plugindir, its plugin folder
# (<libdir>/partrain/plugins: lib/ or, for prefix /usr on Debian, lib/<multiarch>/). DESTDIR: files whose destination is absolute (the
# site config and hardware profiles under the configured sysconfdir) land under $work
# too, never in the real /usr/local/etc.
rm -rf "$work"
mkdir -p "$work"
DESTDIR="$work/root" "$cmake" --install "$build" --prefix "$work/prefix" > "$work/install.log"
prefix="$work/root$work/prefix"
plugindir=$(dirname "$(find "$prefix" -path '*/partrain/plugins/dp.so' | head -n 1)")
"$cmake" -S "$src" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" > "$work/configure.log"
"$cmake" --build "$work/build" > "$work/build.log"
mkdir -p "$work/plugins"
chmod 755 "$work/plugins"
printf '[paths]\nplugin_dir = "%s"\n' "$work/plugins" > "$work/site.toml"
