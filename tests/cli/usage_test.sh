#!/usr/bin/env bash
# What a user sees at the command line (issue 31, items 11 and 16): a mistyped command or
# option gets the nearest one; `partrain --help` does not call `run` one rank only;
# `partrain --version` is the project's version (top-level CMakeLists.txt); a
# missing shard given to `data inspect` names no job-file key; `data encode --help` says
# why --val-output goes with --bytes; the first asynchronous save reports no 0.0 MB/s;
# `data encode` runs as many threads as OMP_NUM_THREADS, --threads, or the CPUs of its
# affinity mask (taskset) say.
#   usage_test.sh PARTRAIN SOURCE_DIR SITE_CONFIG
set -euo pipefail
source "$(dirname "$0")/../shell_test_env.sh"
job=$src/etc/examples/tiny.toml

# refused EXPECTED COMMAND...: exit 2 and one line on stderr containing EXPECTED.
refused() {
  local expected=$1 rc
  shift
  set +e
  "$partrain" "$@" >"$work/o" 2>"$work/e"; rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "partrain $*: exit $rc, not 2: $(cat "$work/e")"
  [ "$(wc -l <"$work/e")" -eq 1 ] || fail "partrain $*: not one line: $(cat "$work/e")"
  grep -q -F -- "$expected" "$work/e" || fail "partrain $*: lacks '$expected': $(cat "$work/e")"
}
refused "did you mean 'run'?" rnu "$job"
refused "did you mean '--steps'?" run "$job" --stpes 3
refused "did you mean '--steps'?" run "$job" --stpes=3
refused "did you mean 'encode'?" data encdoe --bytes "$job" -o "$work/x.bin"
refused "did you mean '--hardware'?" plan "$job" --hardwre H100-SXM

"$partrain" --help >"$work/o"
grep -E '^ *run ' "$work/o" | grep -q -- "--nproc" || fail "partrain --help: run: $(grep -E '^ *run ' "$work/o")"
grep -E '^ *run ' "$work/o" | grep -q "one rank (" || fail "partrain --help: run: $(grep -E '^ *run ' "$work/o")"

# --version: the project version, written once, in the top-level CMakeLists.txt.
version=$(sed -n 's/^project(partrain VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
[ -n "$version" ] || fail "no 'project(partrain VERSION ...)' in $src/CMakeLists.txt"
[ "$("$partrain" --version)" = "partrain $version" ] || fail "partrain --version: $("$partrain" --version), not $version"

refused "cannot open token shard" data inspect "$work/missing.bin"
grep -q "train_files\|val_files" "$work/e" && fail "data inspect names a job-file key: $(cat "$work/e")"
"$partrain" data encode --help >"$work/o"
tr -s ' \n' ' ' <"$work/o" | grep -q -- "--val-output.*with --bytes only" || fail "data encode --help: --val-output"

# The first asynchronous save: its rate is not known yet, and no 0.0 MB/s is reported.
PARTRAIN_RUN_DIR=$work/run PARTRAIN_CHECKPOINT_EVERY=2 "$partrain" run "$job" --steps 4 >"$work/run.txt" 2>&1 \
  || fail "run: $(tail -3 "$work/run.txt")"
grep -qE '^step +2/4 .*checkpoint: .*writing in the background' "$work/run.txt" \
  || fail "step 2 line: $(grep -E '^step +2/' "$work/run.txt")"
grep -q '0\.0 MB/s' "$work/run.txt" && fail "a save reported 0.0 MB/s: $(grep 'MB/s' "$work/run.txt")"
grep -q '"save_mb_s":0\.0' "$work/run/metrics.jsonl" && fail "metrics.jsonl has save_mb_s 0.0"

# Threads: --threads, else OMP_NUM_THREADS, else the CPUs the process may use.
/usr/bin/python3 "$src/tests/cli/make_tokenizer.py" "$work/tok.json"
printf 'the quick brown fox jumps over the lazy dog\n%.0s' $(seq 200) >"$work/corpus.txt"
enc() { "$partrain" data encode --tokenizer "$work/tok.json" "$work/corpus.txt" -o "$work/c.bin" "$@"; }
OMP_NUM_THREADS=3 enc >"$work/o" || fail "encode"
grep -q "on 3 threads" "$work/o" || fail "OMP_NUM_THREADS=3: $(cat "$work/o")"
OMP_NUM_THREADS=3 enc --threads 2 >"$work/o" || fail "encode --threads 2"
grep -q "on 2 threads" "$work/o" || fail "--threads 2: $(cat "$work/o")"
(unset OMP_NUM_THREADS; taskset -c 0 "$partrain" data encode --tokenizer "$work/tok.json" "$work/corpus.txt" \
  -o "$work/c.bin") >"$work/o" || fail "encode under taskset"
grep -q "on 1 thread" "$work/o" || fail "taskset -c 0: $(cat "$work/o")"
echo "ok"
