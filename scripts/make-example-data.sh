#!/usr/bin/env bash
# Rebuilds the shipped example corpus, etc/examples/data/licenses_{train,val}.bin: the
# license texts every Debian system carries in /usr/share/common-licenses, tokenized
# byte-level (vocab_size 256) into llm.c uint16 shards. The last 10% of each text goes
# to the validation shard. Superseded versions that repeat a newer text almost verbatim
# (GFDL-1.2, GPL-1, LGPL-2) and the symlinks (GPL, LGPL, GFDL) are left out, which keeps
# both files together under 400 KB.
#
#   scripts/make-example-data.sh            write the two shards
#   scripts/make-example-data.sh --check    rebuild into a temp folder and compare
#   PARTRAIN=path/to/partrain scripts/make-example-data.sh
# Exit 77 from --check: this machine's license texts differ from Debian 12's (test skip).
#
# The committed files were made from Debian 12's base-files; the byte sizes below are
# checked first so a different text cannot silently produce different shards.
set -euo pipefail
cd "$(dirname "$0")/.."

partrain=${PARTRAIN:-build/bin/partrain}
licenses=/usr/share/common-licenses
# name:bytes, in the order they are concatenated.
texts=(
  Apache-2.0:11358 Artistic:6111 BSD:1499 CC0-1.0:7048 GFDL-1.3:22955 GPL-2:18092
  GPL-3:35149 LGPL-2.1:26530 LGPL-3:7652 MPL-1.1:25755 MPL-2.0:16726
)

if [ ! -x "$partrain" ]; then
  echo "make-example-data: $partrain not found; build it first (cmake --build build --target partrain) or set PARTRAIN=" >&2
  exit 1
fi

files=()
for entry in "${texts[@]}"; do
  name=${entry%%:*}
  want=${entry##*:}
  path=$licenses/$name
  if [ ! -f "$path" ]; then
    echo "make-example-data: $path is missing (Debian's base-files package provides it)" >&2
    exit 1
  fi
  have=$(stat -c %s "$path")
  if [ "$have" != "$want" ]; then
    echo "make-example-data: $path has $have bytes, not the $want of Debian 12's copy; the shards would differ from the committed ones" >&2
    # --check (the test) skips on such a machine rather than fail: exit 77.
    [ "${1:-}" = "--check" ] && exit 77
    exit 1
  fi
  files+=("$path")
done

out=etc/examples/data
if [ "${1:-}" = "--check" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
"$partrain" data encode --bytes "${files[@]}" -o "$out/licenses_train.bin" \
  --val-output "$out/licenses_val.bin" --val-fraction 0.1

if [ "${1:-}" = "--check" ]; then
  for f in licenses_train.bin licenses_val.bin; do
    if ! cmp -s "$out/$f" "etc/examples/data/$f"; then
      echo "make-example-data: etc/examples/data/$f differs from a fresh build" >&2
      exit 1
    fi
  done
  echo "make-example-data: etc/examples/data matches a fresh build"
fi
