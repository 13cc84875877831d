# Shared by the bench/ scripts (source it): the synthetic data and the job file every
# CPU benchmark trains, so partrain and its peers see the same model and tokens.

# bench_two_ranks_setup HERE [BUILD_DIR]: what every 2-CPU-rank benchmark starts with. Sets
# build (default HERE/../../build), python, steps (BENCH_STEPS, 10), repeats
# (BENCH_REPEATS, 2), warmup (3), nproc (2) and work (a temporary folder removed on exit),
# one thread per rank, the build tree's site config, and writes $work/tokens.bin.
bench_two_ranks_setup() {
  build=${2:-$1/../../build}
  python=${PARTRAIN_TORCH_PYTHON:-/usr/bin/python3}
  steps=${BENCH_STEPS:-10}
  repeats=${BENCH_REPEATS:-2}
  warmup=3
  nproc=2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
  export PARTRAIN_SITE_CONFIG=$build/etc/partrain.toml
  bench_random_tokens "$python" "$work/tokens.bin"
}

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

# bench_step_stats PYTHON RUN_DIR TOKENS WARMUP KEY...: one line from a finished run:
# tokens/s of the median step after WARMUP (TOKENS per step), the median exposed_share of
# metrics.jsonl, and rank 0's peak MiB of each memory category KEY (memory.rank0.json).
bench_step_stats() {
  "$1" - "${@:2}" <<'PY'
import json, sys
run, tokens, warmup, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
rows = [json.loads(l) for l in open(run + "/metrics.jsonl")][warmup:]
ms = sorted(r["step_ms"] for r in rows)
share = sorted(r["exposed_share"] for r in rows)
mem = json.load(open(run + "/memory.rank0.json"))
print(" ".join([f"{tokens / (ms[len(ms) // 2] / 1e3):.1f}", f"{share[len(share) // 2]:.3f}"] +
               [f"{mem[k] / 2**20:.2f}" for k in keys]))
PY
}
