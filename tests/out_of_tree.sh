# Sourced by the out-of-tree plugin tests (tests/plugin, tests/pipeline), with $cmake,
# $installed (the install of the CTest fixture install.prefix, tests/install_prefix.sh),
# $src (the plugin sources) and $work set: builds $src in a fresh $work against the
# installed partrain with find_package(partrain), and makes an empty plugin folder
# $work/plugins with a site config $work/site.toml naming it.
# Sets $prefix, the installed partrain, and $plugindir, its plugin folder
# (<libdir>/partrain/plugins: lib/ or, for prefix /usr on Debian, lib/<multiarch>/).
rm -rf "$work"
mkdir -p "$work"
prefix="$installed/root$installed/prefix"
if [ ! -x "$prefix/bin/partrain" ]; then
  echo "no partrain installed under $installed: run the test through ctest, whose fixture install.prefix installs it" >&2
  exit 1
fi
plugindir=$(dirname "$(find "$prefix" -path '*/partrain/plugins/dp.so' | head -n 1)")
"$cmake" -S "$src" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" > "$work/configure.log"
"$cmake" --build "$work/build" > "$work/build.log"
mkdir -p "$work/plugins"
chmod 755 "$work/plugins"
printf '[paths]\nplugin_dir = "%s"\n' "$work/plugins" > "$work/site.toml"
