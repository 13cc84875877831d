#!/usr/bin/env bash
# `partrain data encode` holds a bounded amount of its input, whatever the input (issue 31,
# item 20): peak resident memory (the child's ru_maxrss, read by Python's getrusage) stays
# under a fixed bound for a 24 MiB text with no line break, a 4 MiB text under a
# SentencePiece model, 64 MiB through --bytes, and a .jsonl line longer than
# --max-line-bytes is refused in one line naming the file, the line and the option, having
# read no more of it than the limit. The text is generated here; the token count of --bytes is its size.
#   encode_memory_test.sh PATH/TO/partrain SCRATCH_DIR
set -euo pipefail
partrain=$1
dir=$2
rm -rf "$dir" && mkdir -p "$dir"
fail() { echo "FAIL: $*" >&2; exit 1; }

# The inputs, and a byte-level tokenizer.json (256 bytes, no merges: one token per byte).
/usr/bin/python3 "$(dirname "$0")/../cli/make_tokenizer.py" "$dir/tokenizer.json"
python3 - "$dir" <<'EOF'
import random, sys
d = sys.argv[1]
rng = random.Random(31)
words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 9)))
         for _ in range(5000)]
block = " ".join(rng.choice(words) for _ in range(200000)).encode()  # ~1 MiB, no '\n'
def write(name, mib, sep=b""):
    with open(f"{d}/{name}", "wb") as f:
        for i in range(mib):
            f.write(block[: 1 << 20] + sep)
write("one_line.txt", 24)
write("lines.txt", 4, b"\n")
write("bytes.txt", 64)
with open(f"{d}/huge_line.jsonl", "wb") as f:
    f.write(b'{"text": "short"}\n{"text": "')
    for i in range(40):
        f.write(block[: 1 << 20])
    f.write(b'"}\n')
EOF

# Runs partrain with the arguments; prints "EXIT PEAK_MIB" and leaves stderr in $dir/err.
peak() {
  python3 - "$partrain" "$@" 2>"$dir/err" <<'EOF'
import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
EOF
}

printf 'tiny\n' >"$dir/tiny.txt"
read -r rc base < <(peak data encode --tokenizer "$dir/tokenizer.json" "$dir/tiny.txt" -o "$dir/tiny.bin" --threads 2)
[ "$rc" = 0 ] || fail "tiny encode: exit $rc: $(cat "$dir/err")"
limit=$((base + 64))  # the binary's own pages, plus 64 MiB
echo "baseline ${base} MiB; bound ${limit} MiB"

read -r rc mib < <(peak data encode --tokenizer "$dir/tokenizer.json" "$dir/one_line.txt" -o "$dir/one_line.bin" --threads 2)
echo "24 MiB with no line break: exit $rc, peak ${mib} MiB"
[ "$rc" = 0 ] || fail "one-line encode: exit $rc: $(cat "$dir/err")"
[ "$mib" -le "$limit" ] || fail "one-line encode peaked at ${mib} MiB, over ${limit} MiB"
# One token per byte, after the separator.
tokens=$("$partrain" data inspect "$dir/one_line.bin" | awk '/^  tokens/ {print $2}')
size=$(stat -c %s "$dir/one_line.txt")
[ "$tokens" = $((size + 1)) ] || fail "one-line tokens $tokens for $size bytes"

if command -v spm_train >/dev/null; then
  head -c 200000 "$dir/lines.txt" | tr ' ' '\n' >"$dir/spm_lines.txt"
  spm_train --input="$dir/spm_lines.txt" --model_prefix="$dir/spm" --vocab_size=300 \
    --model_type=bpe --minloglevel=2 >/dev/null 2>&1 || fail "spm_train"
  read -r rc mib < <(peak data encode --tokenizer "$dir/spm.model" "$dir/lines.txt" -o "$dir/spm.bin" --threads 2)
  echo "4 MiB under SentencePiece: exit $rc, peak ${mib} MiB"
  [ "$rc" = 0 ] || fail "SentencePiece encode: exit $rc: $(cat "$dir/err")"
  [ "$mib" -le "$limit" ] || fail "SentencePiece encode peaked at ${mib} MiB, over ${limit} MiB"
else
  echo "spm_train not installed: the SentencePiece case is not run"
fi

read -r rc mib < <(peak data encode --bytes "$dir/bytes.txt" -o "$dir/bytes.bin" --val-output "$dir/val.bin")
echo "64 MiB through --bytes: exit $rc, peak ${mib} MiB"
[ "$rc" = 0 ] || fail "--bytes encode: exit $rc: $(cat "$dir/err")"
[ "$mib" -le "$limit" ] || fail "--bytes encode peaked at ${mib} MiB, over ${limit} MiB"
size=$(stat -c %s "$dir/bytes.txt")
held=$((size / 10))
"$partrain" data inspect "$dir/bytes.bin" | grep -q "tokens  $((size - held))$" || fail "--bytes train count"
"$partrain" data inspect "$dir/val.bin" | grep -q "tokens  $held$" || fail "--bytes val count"
cmp <(tail -c $((held * 2)) "$dir/val.bin" | od -An -v -t u2 | tr -s ' \n' ' ') \
    <(tail -c "$held" "$dir/bytes.txt" | od -An -v -t u1 | tr -s ' \n' ' ') || fail "--bytes val tokens"

read -r rc mib < <(peak data encode --tokenizer "$dir/tokenizer.json" "$dir/huge_line.jsonl" -o "$dir/huge.bin" --threads 2)
echo "a 40 MiB .jsonl line: exit $rc, peak ${mib} MiB: $(cat "$dir/err")"
[ "$rc" = 2 ] || fail "a 40 MiB .jsonl line: exit $rc, expected 2"
[ "$(wc -l <"$dir/err")" = 1 ] || fail "not one line: $(cat "$dir/err")"
grep -q "huge_line.jsonl:2: a line longer than 33554432 bytes; raise --max-line-bytes" "$dir/err" ||
  fail "message: $(cat "$dir/err")"
# Reading up to the limit holds the line read so far, at most twice while its buffer grows.
[ "$mib" -le $((base + 96)) ] || fail "the refused line peaked at ${mib} MiB, over $((base + 96)) MiB"
[ ! -e "$dir/huge.bin" ] || fail "a refused encode left $dir/huge.bin"
# The option raises the limit: a 1000-byte line is refused under 999, and read under 1000.
printf '{"text": "%0988d"}\n' 0 >"$dir/kb.jsonl"
"$partrain" data encode --tokenizer "$dir/tokenizer.json" "$dir/kb.jsonl" -o "$dir/kb.bin" \
  --max-line-bytes 999 2>/dev/null && fail "--max-line-bytes 999 read a 1000-byte line"
"$partrain" data encode --tokenizer "$dir/tokenizer.json" "$dir/kb.jsonl" -o "$dir/kb.bin" \
  --max-line-bytes 1000 >/dev/null || fail "--max-line-bytes 1000 refused a 1000-byte line"
rm -rf "$dir"
echo PASS
