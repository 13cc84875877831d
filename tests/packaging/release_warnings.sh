#!/usr/bin/env bash
# A Release packaging build (-O3, -DPARTRAIN_WERROR=ON) compiles without warnings, proven
# without a Release tree: sources where GCC 12 at -O3 warns -Wrestrict inside libstdc++
# (cmake/PartrainWarnings.cmake) are compiled with this tree's own command line, its
# configuration's flags swapped for the Release ones plus what partrain adds in Release, and
# -Werror. Each source stands for one kind of site: a 1-char literal assigned to a string
# (pipeline/schedule.cc) and prepended to a temporary one (layout/hostlist.cc, layout/spec.cc).
#   release_warnings.sh BUILD_DIR CONFIG_FLAGS RELEASE_FLAGS [PARTRAIN_RELEASE_FLAGS...]
set -uo pipefail
build=$1 config_flags=$2 release_flags=$3
shift 3
extra=("$@")
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -f "$build/compile_commands.json" ] || { echo "SKIP: no $build/compile_commands.json"; exit 77; }
work=$(mktemp -d /tmp/partrain-release-warnings.XXXXXX)
trap 'rm -rf "$work"' EXIT
for src in daemon/pipeline/schedule.cc daemon/layout/hostlist.cc daemon/layout/spec.cc; do
  # The tree's command for the source (the first target compiling it), its output moved to $work.
  cmd=$(/usr/bin/python3 - "$build/compile_commands.json" "$src" "$config_flags" "$release_flags" "$work/o.o" <<'PY'
import json, shlex, sys
db, src, config_flags, release_flags, out = sys.argv[1:]
for e in json.load(open(db)):
    if e["file"].endswith("/" + src):
        args = shlex.split(e["command"])
        flags = config_flags.split()
        i = next((k for k in range(len(args)) if args[k:k + len(flags)] == flags), None)
        if flags and i is None:
            sys.exit(f"{src}: the configuration's flags {config_flags!r} are not in its command")
        if i is None:  # no configuration flags: add the Release ones before the source
            i = args.index("-c")
        args[i:i + len(flags)] = release_flags.split()
        args[args.index("-o") + 1] = out
        print(shlex.join(["cd", e["directory"]]) + " && " + shlex.join(args))
        sys.exit(0)
sys.exit(f"{src} is not in the compile database")
PY
  ) || fail "no command line for $src"
  if ! bash -c "$cmd ${extra[*]} -Werror" >"$work/log.txt" 2>&1; then
    grep -E "warning|error" "$work/log.txt" | head -n 5
    fail "$src does not compile with the Release flags ($release_flags ${extra[*]}) and -Werror: a Release packaging build with -DPARTRAIN_WERROR=ON would stop here"
  fi
  echo "$src: Release flags ($release_flags ${extra[*]}) with -Werror: no warning"
done
echo PASS
