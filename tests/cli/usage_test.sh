#!/usr/bin/env bash
# What a user sees at the command line (issue 31, items 11, 16 and 26): a mistyped command or
# option gets the nearest one; `partrain --help` does not call `run` one rank only;
# `partrain --version` is the project's version (top-level CMakeLists.txt); a
# missing shard given to `data inspect` names no job-file key; `data encode --help` says
# why --val-output goes with --bytes; the first asynchronous save reports no 0.0 MB/s;
# `data encode` runs as many threads as OMP_NUM_THREADS, --threads, or the CPUs of its
# affinity mask (taskset) say; plan takes --threads; a graceful stop's exit line is INFO;
# generate refuses a temperature that is not a number and a negative --step; a run folder
# too long for the files under it is refused before step 1.
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

# Item 16: plan takes --threads as the other standalone commands do.
refused "--threads" plan "$job" --hardware H100-SXM --gpus-per-node 2 --threads 0
"$partrain" plan "$job" --hardware H100-SXM --gpus-per-node 2 --threads 1 >"$work/o" || fail "plan --threads 1: $(cat "$work/o")"
"$partrain" plan --help | grep -q -- "--threads" || fail "plan --help has no --threads"

# Item 26: a run folder whose path leaves no room below PATH_MAX for the files written under
# it trained until its first save failed; it is refused before step 1.
# 4048 bytes: the old binary trained 3 steps, then could not create step 4's shard.
long=$work
while [ ${#long} -lt 3848 ]; do long=$long/$(printf 'd%.0s' $(seq 200)); done
long=$long/$(printf 'e%.0s' $(seq $((4047 - ${#long}))))
set +e
PARTRAIN_RUN_DIR=$long "$partrain" run "$job" --steps 4 >"$work/o" 2>"$work/e"; rc=$?
set -e
[ "$rc" = 2 ] || fail "a ${#long}-byte run folder: exit $rc: $(tail -2 "$work/e")"
[ "$(wc -l <"$work/e")" = 1 ] || fail "a long run folder: not one line: $(cat "$work/e")"
grep -q "the run folder (\[job\] run_dir, PARTRAIN_RUN_DIR) is ${#long} bytes long; .* over PATH_MAX (4096)" \
  "$work/e" || fail "a long run folder: $(cut -c 3990- "$work/e")"
grep -q "^step" "$work/o" && fail "a long run folder trained: $(cat "$work/o")"

# Item 11: a stop the ranks agreed on (SIGTERM, as scontrol requeue sends) is no failure:
# the agent's exit line is at INFO, never the WARN of a retryable failure.
PARTRAIN_RUN_DIR=$work/stop OMP_NUM_THREADS=1 "$partrain" run "$job" --nproc 2 --steps 100000 \
  >"$work/stop.out" 2>"$work/stop.err" &
pid=$!
for _ in $(seq 600); do
  [ "$(wc -l <"$work/stop/metrics.jsonl" 2>/dev/null || echo 0)" -ge 3 ] && break
  sleep 0.1
done
kill -TERM "$pid"
set +e
wait "$pid"; rc=$?
set -e
[ "$rc" = 75 ] || fail "a SIGTERM'd run: exit $rc: $(tail -3 "$work/stop.err")"
grep -E ' INFO +agent .*exit 75: stopped at a step boundary as asked' "$work/stop.err" >/dev/null ||
  fail "no INFO exit line: $(grep 'exit 75' "$work/stop.err")"
grep -q "exit 75: retryable" "$work/stop.err" && fail "a graceful stop said retryable: $(grep 'exit 75' "$work/stop.err")"

# Item 26: a temperature that is not a number, and a negative --step, were accepted (the
# stopped run's checkpoint is the model: the old binary generated from it).
"$partrain" generate "$work/stop" --job "$job" --prompt hi --max-tokens 2 >"$work/o" || fail "generate"
refused "--temperature nan is not a number" generate "$work/stop" --job "$job" --prompt hi --temperature nan
refused "--temperature inf is not a number" generate "$work/stop" --job "$job" --prompt hi --temperature inf
refused "--step -3: checkpoint steps are >= 0" generate "$work/stop" --job "$job" --prompt hi --step -3

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
tr -s ' \n' ' ' <"$work/o" | grep -q -- "cut by force past 1 MiB" || fail "data encode --help: huge documents"
tr -s ' \n' ' ' <"$work/o" | grep -q -- "--max-line-bytes" || fail "data encode --help: --max-line-bytes"

# The first asynchronous save: its rate is not known yet, and no 0.0 MB/s is reported.
PARTRAIN_RUN_DIR=$work/run PARTRAIN_CHECKPOINT_EVERY=2 "$partrain" run "$job" --steps 4 >"$work/run.txt" 2>&1 \
  || fail "run: $(tail -3 "$work/run.txt")"
grep -qE '^step +2/4 .*checkpoint: .*writing in the background' "$work/run.txt" \
  || fail "step 2 line: $(grep -E '^step +2/' "$work/run.txt")"
# (A rate of 0.0 itself, not one that ends in it such as 630.0.)
grep -qE '(^|[^0-9.])0\.0 MB/s' "$work/run.txt" && fail "a save reported 0.0 MB/s: $(grep 'MB/s' "$work/run.txt")"
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
