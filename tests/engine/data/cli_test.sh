#!/usr/bin/env bash
# `partrain data encode` and `partrain data inspect` end to end: the byte-level tokenizer,
# the train/validation split, the shard layout (checked with od, not with partrain), and
# the one-line errors with exit code 2.
#   cli_test.sh PATH/TO/partrain
set -euo pipefail
partrain=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

printf 'abcdefghij' >"$dir/a.txt"   # 10 bytes: 9 train, 1 val
printf 'ABCDEFGHIJKLMNOPQRST' >"$dir/b.txt"  # 20 bytes: 18 train, 2 val
"$partrain" data encode --bytes "$dir/a.txt" "$dir/b.txt" -o "$dir/train.bin" \
  --val-output "$dir/val.bin" --val-fraction 0.1 >"$dir/out.txt"
grep -q "27 tokens" "$dir/out.txt" || fail "encode output: $(cat "$dir/out.txt")"

# Header: magic 20240520, version 1, count 27; then uint16 tokens = the bytes.
header=$(od -An -t d4 -N 12 "$dir/train.bin" | tr -s ' ')
[ "$header" = " 20240520 1 27" ] || fail "train header '$header'"
[ "$(stat -c %s "$dir/train.bin")" = $((1024 + 27 * 2)) ] || fail "train size"
tokens=$(od -An -t u2 -j 1024 "$dir/train.bin" | tr -s ' \n' ' ')
want=" 97 98 99 100 101 102 103 104 105 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 "
[ "$tokens" = "$want" ] || fail "train tokens '$tokens'"
tokens=$(od -An -t u2 -j 1024 "$dir/val.bin" | tr -s ' \n' ' ')
[ "$tokens" = " 106 83 84 " ] || fail "val tokens '$tokens'"

out=$("$partrain" data inspect "$dir/train.bin")
echo "$out" | grep -q "format  llmc (uint16 tokens)" || fail "inspect: $out"
echo "$out" | grep -q "tokens  27" || fail "inspect: $out"
echo "$out" | grep -q "range   \[65, 105\] (needs vocab_size >= 106)" || fail "inspect: $out"

"$partrain" data encode --bytes --uint32 "$dir/a.txt" -o "$dir/wide.bin" >/dev/null
"$partrain" data inspect "$dir/wide.bin" | grep -q "llmc (uint32 tokens)" || fail "uint32 shard"

# Bad input: one line on stderr naming the file, exit code 2.
set +e
err=$("$partrain" data inspect "$dir/a.txt" 2>&1 >/dev/null); rc=$?
set -e
[ "$rc" = 2 ] || fail "inspect of a text file: exit $rc"
[ "$(echo "$err" | wc -l)" = 1 ] || fail "more than one line: $err"
[ "$err" = "partrain: $dir/a.txt: no llm.c header (magic 20240520), so the format is unknown; set [data] format = \"raw-u16\" or \"raw-u32\" for headerless tokens" ] \
  || fail "message: $err"
set +e
err=$("$partrain" data encode "$dir/a.txt" -o "$dir/x.bin" 2>&1 >/dev/null); rc=$?
set -e
[ "$rc" = 2 ] || fail "encode without --bytes: exit $rc"
echo "$err" | grep -q -- "--bytes" || fail "message: $err"
echo "cli_test: ok"
