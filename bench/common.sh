# Shared by the bench/ scripts (source it): the synthetic data and the job file every
# CPU benchmark trains, so partrain and its peers see the same model and tokens.

# bench_random_tokens PYTHON PATH: 400k random byte tokens as a raw uint16 shard
# (speed does not depend on the text).
bench_random_tokens() {
  "$1" - "$2" <<'PY'
import sys, random
random.seed(0)
with open(sys.argv[1], "wb") as f:
    f.write(bytes(b for _ in range(400000) for b in (random.randrange(256), 0)))
PY
}

# bench_gpt2_job PATH NAME RUN_DIR TOKENS LAYERS HIDDEN HEADS SEQ STEPS GLOBAL_BATCH MICRO_BATCH
# writes the job file of a GPT-2 style model over byte tokens.
bench_gpt2_job() {
  cat >"$1" <<TOML
[job]
name = "$2"
run_dir = "$3"
[model]
arch = "gpt2"
vocab_size = 256
seq_len = $8
layers = $5
hidden = $6
heads = $7
[data]
train_files = ["$4"]
format = "raw-u16"
[training]
steps = $9
global_batch = ${10}
micro_batch = ${11}
lr = 1e-3
warmup_steps = 2
TOML
}
