#!/usr/bin/env bash
# `partrain export` takes what the run trained: for a job file, its run's newest committed
# checkpoint (the same tensors as `run --save` of the same run, compared in torch), and the
# line it prints names that step; a job that committed nothing is refused (exit 2, naming
# --initial) instead of writing untrained weights; --initial asks for those by name;
# `ckpt export RUN --job JOB` writes the same bytes as `export JOB`; config.json's bos/eos
# token ids lie in the vocabulary (issue 31, items 7 and 10).
#   export_test.sh PARTRAIN SOURCE_DIR SITE_CONFIG PYTHON
set -euo pipefail
partrain=$1 src=$2 python=$4
export PARTRAIN_SITE_CONFIG=$3 OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$python" -c 'import torch' 2>/dev/null || { echo "SKIP: $python has no torch"; exit 77; }
job=$src/etc/examples/tiny.toml

PARTRAIN_RUN_DIR=$work/run "$partrain" run "$job" --steps 3 --save "$work/saved.safetensors" >/dev/null 2>&1 \
  || fail "run exited $?"
PARTRAIN_RUN_DIR=$work/run "$partrain" export "$job" -o "$work/ckpt.safetensors" >"$work/o" 2>"$work/e" \
  || fail "export: $(cat "$work/e")"
grep -q "step 3" "$work/o" || fail "export does not say which step it wrote: $(cat "$work/o")"
PARTRAIN_RUN_DIR=$work/run "$partrain" export "$job" --hf "$work/hf" >"$work/o" 2>"$work/e" \
  || fail "export --hf: $(cat "$work/e")"
grep -q "step 3" "$work/o" || fail "export --hf does not say which step it wrote: $(cat "$work/o")"
PARTRAIN_RUN_DIR=$work/run "$partrain" export "$job" --initial -o "$work/initial.safetensors" >"$work/o" 2>&1 \
  || fail "export --initial: $(cat "$work/o")"
grep -q "untrained" "$work/o" || fail "export --initial does not say so: $(cat "$work/o")"
"$partrain" ckpt export "$work/run" --job "$job" -o "$work/ckpt2.safetensors" >/dev/null || fail "ckpt export"
cmp -s "$work/ckpt.safetensors" "$work/ckpt2.safetensors" || fail "ckpt export and export wrote different files"

# The trained weights, not the initial ones: every tensor of the export (file and folder)
# equals the run's --save output, and the --initial export differs.
"$python" - "$src/tests/engine/reference" "$work" <<'PY' || fail "exported weights"
import os, sys
sys.path.insert(0, sys.argv[1])
import torch, safetensors_min
w = sys.argv[2]
saved, _ = safetensors_min.load(os.path.join(w, "saved.safetensors"))
for name in ("ckpt.safetensors", os.path.join("hf", "model.safetensors")):
    got, _ = safetensors_min.load(os.path.join(w, name))
    assert set(got) == set(saved), (name, sorted(set(got) ^ set(saved)))
    for k in saved:
        assert torch.equal(got[k], saved[k]), (name, k)
init, _ = safetensors_min.load(os.path.join(w, "initial.safetensors"))
assert any(not torch.equal(init[k], saved[k]) for k in saved), "--initial equals the trained weights"
print("exported = trained:", len(saved), "tensors")
PY

# Nothing committed: refused, nothing written.
set +e
PARTRAIN_RUN_DIR=$work/fresh "$partrain" export "$job" --hf "$work/hf-fresh" >"$work/o" 2>"$work/e"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "export of a run with no checkpoint exited $rc, not 2: $(cat "$work/o" "$work/e")"
[ "$(wc -l <"$work/e")" -eq 1 ] && grep -q -- "--initial" "$work/e" && grep -q "no committed checkpoint" "$work/e" \
  || fail "no checkpoint: $(cat "$work/e")"
[ ! -e "$work/hf-fresh" ] || fail "export of a run with no checkpoint wrote $work/hf-fresh"
# A step that was not committed, and two choices of weights at once: usage errors.
set +e
PARTRAIN_RUN_DIR=$work/run "$partrain" export "$job" --step 2 -o "$work/x.safetensors" 2>"$work/e"; rc1=$?
PARTRAIN_RUN_DIR=$work/run "$partrain" export "$job" --initial --step 3 -o "$work/x.safetensors" 2>"$work/e2"; rc2=$?
set -e
[ "$rc1" -eq 2 ] && grep -q "no committed checkpoint of step 2" "$work/e" || fail "--step 2: rc $rc1: $(cat "$work/e")"
[ "$rc2" -eq 2 ] && grep -q "give one" "$work/e2" || fail "--initial --step: rc $rc2: $(cat "$work/e2")"

# config.json's bos_token_id/eos_token_id are valid for the vocabulary: written as null for
# a byte-level model without a tokenizer (so transformers does not default to GPT-2's
# 50256), the tokenizer's <|endoftext|> with --tokenizer, and a tokenizer whose ids do not
# fit the model is refused.
"$python" "$src/tests/cli/make_tokenizer.py" "$work/tok.json"
sed -e 's/^vocab_size = 256 .*/vocab_size = 257/' -e "s|\"data/|\"$src/etc/examples/data/|g" "$job" >"$work/v257.toml"
"$partrain" export "$work/v257.toml" --initial --hf "$work/hf257" --tokenizer "$work/tok.json" >/dev/null 2>"$work/e" \
  || fail "export --tokenizer: $(cat "$work/e")"
set +e
PARTRAIN_RUN_DIR=$work/run "$partrain" export "$job" --hf "$work/hf256" --tokenizer "$work/tok.json" >/dev/null 2>"$work/e"; rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q -- "--tokenizer $work/tok.json: its special token id 256 is outside" "$work/e" \
  || fail "a tokenizer that does not fit: rc $rc: $(cat "$work/e")"
[ ! -e "$work/hf256/config.json" ] || fail "a tokenizer that does not fit still wrote config.json"
"$python" - "$work" <<'PY' || fail "config.json token ids"
import json, os, sys
w = sys.argv[1]
for folder, want in (("hf", None), ("hf257", 256)):
    cfg = json.load(open(os.path.join(w, folder, "config.json")))
    for key in ("bos_token_id", "eos_token_id"):
        assert key in cfg, (folder, key, "absent: transformers would take its class default")
        v = cfg[key]
        assert v is None or 0 <= v < cfg["vocab_size"], (folder, key, v, cfg["vocab_size"])
        assert v == want, (folder, key, v, want)
print("config.json token ids: null without a tokenizer, 256 with it, within the vocabulary")
PY
echo "ok"
