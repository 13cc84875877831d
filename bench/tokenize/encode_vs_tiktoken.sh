#!/usr/bin/env bash
# Encode throughput (MB/s) of `partrain data encode --tokenizer` against OpenAI's tiktoken
# (Rust core as WASM) and js-tiktoken under node, same corpus, same thread count, same run.
#
#   bench/tokenize/encode_vs_tiktoken.sh [PARTRAIN] [THREADS] [MEGABYTES]
#     defaults: build/bin/partrain, 2, 20
# The corpus is tests/tokenize/make_corpus.py's (licenses, C headers, many scripts,
# whitespace runs); vocabularies come from the npm packages (tests/tokenize/reference.mjs).
# partrain's time (its own report) includes reading and parsing the corpus and writing the
# shard, not loading the vocabulary; the peers' excludes reading, parsing and loading. BENCH_REPEATS (default 3) alternating runs, best kept.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
partrain=${1:-$root/build/bin/partrain}
threads=${2:-2}
mb=${3:-20}
repeats=${BENCH_REPEATS:-3}
npm_dir=${PARTRAIN_NPM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/partrain/npm}
[ -d "$npm_dir/node_modules/tiktoken" ] || { echo "run scripts/install-deps.sh first (npm packages)"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$root/tests/tokenize/make_corpus.py" "$work" "$mb" >/dev/null
cp "$root/tests/tokenize/reference.mjs" "$root/bench/tokenize/tiktoken_peer.mjs" "$npm_dir/"
node "$npm_dir/reference.mjs" files "$work/vocab"
bytes=$(python3 -c "import json,sys; print(sum(len(json.loads(l)['text'].encode()) for l in open(sys.argv[1]) if l.strip()))" "$work/corpus.jsonl")

ours() {  # MB/s of text bytes, as partrain reports it (after loading the vocabulary)
  "$partrain" data encode --tokenizer "$work/vocab/$1.tiktoken" "$work/corpus.jsonl" \
      -o "$work/out.bin" --uint32 --threads "$threads" |
    sed -n 's/.*(\([0-9.]*\) MiB\/s.*/\1/p' | awk '{printf "%.2f\n", $1 * 1.048576}'
}
best() { sort -g | tail -1; }

printf "corpus %.1f MB, %s threads, best of %s\n" "$(python3 -c "print($bytes/1e6)")" "$threads" "$repeats"
printf "%-8s %14s %14s %14s %10s %10s\n" encoding "partrain MB/s" "tiktoken MB/s" "js-tiktoken" "vs tiktoken" "vs js"
for enc in r50k cl100k o200k; do
  name=${enc}_base
  p=() t=() j=()
  for _ in $(seq "$repeats"); do
    p+=("$(ours $enc)")
    t+=("$(node "$npm_dir/tiktoken_peer.mjs" tiktoken $name "$work/corpus.jsonl" "$threads" | cut -d' ' -f1)")
    j+=("$(node "$npm_dir/tiktoken_peer.mjs" js-tiktoken $name "$work/corpus.jsonl" "$threads" | cut -d' ' -f1)")
  done
  bp=$(printf '%s\n' "${p[@]}" | best) bt=$(printf '%s\n' "${t[@]}" | best) bj=$(printf '%s\n' "${j[@]}" | best)
  printf "%-8s %14s %14s %14s %9.2fx %9.2fx\n" $enc "$bp" "$bt" "$bj" \
    "$(python3 -c "print($bp/$bt)")" "$(python3 -c "print($bp/$bj)")"
done
