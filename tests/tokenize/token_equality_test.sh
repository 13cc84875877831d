#!/usr/bin/env bash
# Token ids of `partrain data encode --tokenizer` against the reference implementations,
# byte for byte, on a few MB of varied text (make_corpus.py):
#   tiktoken, OpenAI's Rust encoder as wasm (r50k, cl100k, o200k, partrain reading
#   js-tiktoken's rank files), llama3-tokenizer-js (Llama 3 as a tiktoken file and as a
#   tokenizer.json), GPT-2's tokenizer.json (r50k's ranks as vocab + merges) against
#   tiktoken r50k, and SentencePiece models (BPE and unigram, trained here with spm_train)
#   against spm_encode.
# The npm packages are installed into PARTRAIN_NPM_DIR (default ~/.cache/partrain/npm;
# scripts/install-deps.sh fills it). Skips (exit 77) only when they cannot be installed.
#
#   token_equality_test.sh PARTRAIN SOURCE_DIR WORK_DIR
set -euo pipefail
partrain=$1 src=$2 work=$3
here=$src/tests/tokenize
npm_dir=${PARTRAIN_NPM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/partrain/npm}
rm -rf "$work" && mkdir -p "$work"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node and npm are not installed (scripts/install-deps.sh installs them)"; exit 77
fi
if [ ! -d "$npm_dir/node_modules/js-tiktoken" ] || [ ! -d "$npm_dir/node_modules/llama3-tokenizer-js" ] ||
   [ ! -d "$npm_dir/node_modules/tiktoken" ]; then
  mkdir -p "$npm_dir"
  if ! timeout 300 npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error \
        js-tiktoken@1.0.21 llama3-tokenizer-js@1.2.0 tiktoken@1.0.22 >"$work/npm.log" 2>&1; then
    echo "SKIP: npm could not install js-tiktoken, tiktoken and llama3-tokenizer-js (registry not reachable?):"
    tail -5 "$work/npm.log"; exit 77
  fi
fi
for tool in spm_train spm_encode; do
  command -v $tool >/dev/null || { echo "FAIL: $tool missing (apt install sentencepiece)"; exit 1; }
done
cp "$here/reference.mjs" "$npm_dir/reference.mjs"

python3 "$here/make_corpus.py" "$work" 3
node "$npm_dir/reference.mjs" files "$work/vocab"

passed=0 failed=0
# compare LABEL OURS.bin REF.u32: our shard's tokens (after the 1024-byte llm.c header)
# against the reference's uint32 ids.
compare() {
  local n
  n=$(( $(stat -c %s "$3") / 4 ))
  if tail -c +1025 "$2" | cmp -s - "$3"; then
    echo "PASS $1: $n ids equal"; passed=$((passed + 1))
  else
    echo "FAIL $1: ids differ from the reference's $n"
    python3 - "$2" "$3" <<'PY'
import array, sys
a = array.array("I"); a.frombytes(open(sys.argv[1], "rb").read()[1024:])
b = array.array("I"); b.frombytes(open(sys.argv[2], "rb").read())
i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
print(f"  first difference at id {i} (ours {len(a)} ids, reference {len(b)}):")
print("  ours", list(a[max(0, i - 3):i + 6]), "\n  ref ", list(b[max(0, i - 3):i + 6]))
PY
    failed=$((failed + 1))
  fi
}

for ref in r50k cl100k o200k llama3; do
  node "$npm_dir/reference.mjs" encode $ref "$work/corpus.jsonl" "$work/ref_$ref.u32"
done
node "$npm_dir/reference.mjs" encode cl100k "$work/big.jsonl" "$work/ref_big_cl100k.u32"
node "$npm_dir/reference.mjs" encode r50k "$work/big.jsonl" "$work/ref_big_r50k.u32"

ours() {  # ours NAME VOCAB INPUT [options]
  local name=$1 vocab=$2 input=$3; shift 3
  "$partrain" data encode --tokenizer "$work/vocab/$vocab" "$input" -o "$work/ours_$name.bin" --uint32 "$@" >/dev/null
}
for v in r50k cl100k o200k llama3; do
  ours $v $v.tiktoken "$work/corpus.jsonl"; compare "$v.tiktoken vs reference $v" "$work/ours_$v.bin" "$work/ref_$v.u32"
done
ours gpt2json gpt2.tokenizer.json "$work/corpus.jsonl"
compare "gpt2 tokenizer.json vs tiktoken r50k" "$work/ours_gpt2json.bin" "$work/ref_r50k.u32"
ours llama3json llama3.tokenizer.json "$work/corpus.jsonl"
compare "llama3 tokenizer.json vs llama3-tokenizer-js" "$work/ours_llama3json.bin" "$work/ref_llama3.u32"
ours big_cl100k cl100k.tiktoken "$work/big.txt" --threads 3
compare "one long .txt document (cut into chunks) cl100k" "$work/ours_big_cl100k.bin" "$work/ref_big_cl100k.u32"
ours big_r50k r50k.tiktoken "$work/big.txt" --threads 1
compare "one long .txt document (cut into chunks) r50k" "$work/ours_big_r50k.bin" "$work/ref_big_r50k.u32"

# SentencePiece: spm_encode encodes line by line; ours encodes each line as a document.
python3 - "$work/lines.txt" "$work/lines.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], encoding="utf-8") as f, open(sys.argv[2], "w", encoding="utf-8") as out:
    for line in f:
        out.write(json.dumps({"text": line.rstrip("\n")}, ensure_ascii=False) + "\n")
PY
for type in bpe unigram; do
  spm_train --input="$work/lines.txt" --model_prefix="$work/spm_$type" --vocab_size=3000 \
            --model_type=$type --character_coverage=0.9995 --input_sentence_size=20000 \
            --shuffle_input_sentence=true --minloglevel=2 >"$work/spm_train_$type.log" 2>&1
  spm_encode --model="$work/spm_$type.model" --output_format=id <"$work/lines.txt" >"$work/spm_$type.ids"
  python3 - "$work/spm_$type.ids" "$work/ref_spm_$type.u32" <<'PY'
import array, sys
ids = array.array("I")
for line in open(sys.argv[1]):
    ids.append(2)  # </s>, spm_train's default eos_id: the separator before every document
    ids.extend(int(t) for t in line.split())
open(sys.argv[2], "wb").write(ids.tobytes())
PY
  "$partrain" data encode --tokenizer "$work/spm_$type.model" "$work/lines.jsonl" \
      -o "$work/ours_spm_$type.bin" --uint32 >/dev/null
  compare "SentencePiece $type vs spm_encode" "$work/ours_spm_$type.bin" "$work/ref_spm_$type.u32"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
