#!/usr/bin/env bash
# `partrain import hf DIR -o OUT --train-files SHARD`: the fine-tune command it prints works
# as printed, from where it was typed. [data] paths are read from the job file's folder, so
# job.toml stores a shard outside OUT as an absolute path and one inside OUT relative to
# it (the folder can then move).
#   import_test.sh PARTRAIN SOURCE_DIR SITE_CONFIG
set -euo pipefail
source "$(dirname "$0")/../shell_test_env.sh"
cd "$work"
mkdir data
cp "$src/etc/examples/data/licenses_train.bin" data/train.bin
"$partrain" export "$src/etc/examples/tiny.toml" --initial --hf hf >/dev/null || fail "export --initial --hf"

# A shard named relative to here, outside OUT.
"$partrain" import hf hf -o out --train-files data/train.bin >o.txt || fail "import hf"
cmd=$(sed -n 's/^fine-tune: //p' o.txt)
[ -n "$cmd" ] || fail "import printed no fine-tune command: $(cat o.txt)"
grep -q "train_files = \[\"$work/data/train.bin\"\]" out/job.toml \
  || fail "train_files is not the shard's absolute path: $(grep train_files out/job.toml)"
[ "${cmd%% *}" = partrain ] || fail "the printed command is not a partrain command: $cmd"
# shellcheck disable=SC2086  # the printed command's words, as a shell splits them
PARTRAIN_RUN_DIR=$work/run1 "$partrain" ${cmd#partrain } --steps 1 >run.txt 2>&1 \
  || fail "the printed command failed: $cmd: $(tail -3 run.txt)"
grep -qE '^step +1/1 ' run.txt || fail "the printed command trained no step: $(tail -3 run.txt)"
(cd / && PARTRAIN_RUN_DIR=$work/run2 "$partrain" run "$work/out/job.toml" --steps 1 >/dev/null 2>&1) \
  || fail "the job does not run from another folder"

# A shard inside OUT: stored relative to OUT, so the folder moves with its data.
mkdir -p out2 && cp data/train.bin out2/shard.bin
"$partrain" import hf hf -o out2 --train-files ./out2/shard.bin >/dev/null || fail "import hf (inside)"
grep -q 'train_files = \["shard.bin"\]' out2/job.toml || fail "inside OUT: $(grep train_files out2/job.toml)"
mv out2 moved
PARTRAIN_RUN_DIR=$work/run3 "$partrain" run moved/job.toml --steps 1 --init moved/model.safetensors >/dev/null 2>&1 \
  || fail "a moved OUT folder does not find its shard"
echo "ok"
