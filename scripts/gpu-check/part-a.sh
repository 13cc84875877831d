#!/usr/bin/env bash
# Part A of the prepared GPU check: partrain as an admin installs it, on one GPU.
# (scripts/gpu-check.sh --part a runs it; scripts/gpu-check/prepare-a.sh packs what it needs
# into out/gpu-carry/, which travels with the tree.)
#
#   bash scripts/gpu-check/part-a.sh RESULTS_DIR
#
# Stages, each one function below, each bounded by what is left of the part's time
# (GPU_CHECK_A_DEADLINE, seconds since the epoch; default 210 s from the start):
#   unpack      the partrain and partrain-cuda packages and their Debian dependencies, with
#               dpkg-deb -x (or Python where dpkg is missing) into a prefix, never into /
#   libraries   the machine's CUDA runtime, cuBLAS, cuDNN and NCCL (the CUDA toolkit's folders,
#               then the nvidia-* wheels of the python3 that holds PyTorch); `ldd` of every
#               installed binary into the log; a missing library fails the stage by name
#               (an older libstdc++ there takes the carried one from fallback/)
#   references  one rank of the installed `partrain run`: GPT-2 tiny in fp32 and bf16, the MoE
#               example in fp32 and bf16, LLaMA tiny in fp32 (for the HF stage), and GPT-2
#               tiny fp32 on one CPU rank
#   layouts     dp2, tp2, dp2 x zero3, pp2 1f1b, pp2 zbh1, ep2 (MoE), cp2, tp2 x pp2, each in
#               fp32 and bf16, 2 to 4 workers sharing the GPU, against one GPU rank of the
#               same precision over 10 steps
#   checkpoint  a checkpoint written by GPU ranks at step 5, resumed on CPU ranks to step 10
#   hf          `partrain export --hf` of the GPT-2 and LLaMA runs, loaded by Hugging Face
#               transformers, logits against partrain's on the same prompt
#   gpu-tests   the carried gpu-labelled test binaries (tests/comm, tests/runtime, ...)
# Tolerances (relative, per step, on the loss):
#   fp32 1e-5      as the CPU layout tests: the layouts reorder fp32 sums, nothing more
#   bf16 1e-2      bf16 keeps 8 significant bits (unit roundoff 2^-8 = 3.9e-3); a layout moves
#                  where activations and partial sums are rounded to bf16 (tp's partial sums,
#                  the staged transport's fp32 reductions, pp's stage boundaries), so 10 steps
#                  may differ by a few roundoffs; 1e-2 is also the bf16 loss tolerance of
#                  tests/gpu/model_test.cc and gpu_runtime_test.cc. A broken strategy shows in
#                  its fp32 case at 1e-5; the bf16 cases catch broken bf16 plumbing (a bf16
#                  buffer read as fp32 is off by orders of magnitude).
#   GPU vs CPU 1e-4  fp32 on both (cuBLAS without TF32), different kernels and sum orders:
#                  the one-GPU-rank against one CPU rank, and the steps after the checkpoint
#                  resumed on CPU ranks.
# Results: RESULTS_DIR/part-a.log (every command, its time, and the output of what did not
# pass), part-a.json and part-a-summary.txt (one line per case: pass, fail, refused (this
# version refuses the case on GPU ranks, with its reason) or skipped). Exit 0 unless a case
# failed.
#
# Here, without a GPU (scripts/gpu-check.sh --try):
#   GPU_CHECK_DEVICE=cpu          every case on CPU ranks instead
#   GPU_CHECK_EMULATED=FILE.so    --device cuda on the emulated GPU module (PARTRAIN_CUDA_MODULE)
# GPU_CHECK_WORK (default /tmp/partrain-gpu-check-a) holds the prefix and the runs;
# GPU_CHECK_PAR runs that many cases at once (default 3 with 8 cores or more, else 1);
# GPU_CHECK_CASE_TIMEOUT bounds each run (default 90 s).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=$(mkdir -p "${1:?usage: part-a.sh RESULTS_DIR}" && realpath "$1")
src=$PWD
here=$src/scripts/gpu-check
carry=$src/out/gpu-carry
work=${GPU_CHECK_WORK:-${TMPDIR:-/tmp}/partrain-gpu-check-a}
device=${GPU_CHECK_DEVICE:-cuda}
emulated=${GPU_CHECK_EMULATED:-}
[ -n "$emulated" ] && { device=cuda; emulated=$(realpath "$emulated"); }
start=$(date +%s)
deadline=${GPU_CHECK_A_DEADLINE:-$((start + 210))}
steps=10
par=${GPU_CHECK_PAR:-$([ "$(nproc)" -ge 8 ] && echo 3 || echo 1)}
omp=$([ "$(nproc)" -ge 8 ] && echo 2 || echo 1)  # OpenMP threads of a CPU rank
case_limit=${GPU_CHECK_CASE_TIMEOUT:-90}         # seconds for one run
log=$OUT/part-a.log
record=$work/results.jsonl
prefix=$work/prefix
tests=$work/tests
site=$work/site.toml
libs=""          # LD_LIBRARY_PATH of partrain's processes (never PyTorch's)
module=""        # PARTRAIN_CUDA_MODULE

left() { echo $((deadline - $(date +%s))); }
say() { echo "[part A $(($(date +%s) - start))s] $*" | tee -a "$log"; }
note() {  # STAGE CASE STATUS DETAIL [SECONDS]
  python3 "$here/results.py" note --record "$record" --stage "$1" --case "$2" --status "$3" \
    --detail "$4" ${5:+--seconds "$5"} >>"$log"
}
# A budget for one command: SECONDS, or what is left if less (at least 1).
budget() { local l; l=$(left); [ "$l" -lt "$1" ] && echo $((l > 1 ? l : 1)) || echo "$1"; }
python_with_torch() {
  local p
  for p in python3 /opt/torch/.venv/bin/python3 /usr/bin/python3; do
    command -v "$p" >/dev/null && "$p" -c 'import torch' 2>/dev/null && { echo "$p"; return; }
  done
  echo python3
}

# ---- unpack: the packages into $prefix, the test binaries into $tests.
unpack_deb() {  # DEB DIR
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
  else
    python3 - "$1" "$2" <<'EOF'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
blob = open(deb, "rb").read()
assert blob[:8] == b"!<arch>\n", deb + ": not a Debian package"
at = 8
while at < len(blob):
    name, size = blob[at:at + 16].decode().strip().rstrip("/"), int(blob[at + 48:at + 58])
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(blob[at + 60:at + 60 + size]), mode="r:*").extractall(dest)
    at += 60 + size + (size & 1)
EOF
  fi
}

stage_unpack() {
  [ -f "$carry/MANIFEST" ] || { note unpack carry fail "no out/gpu-carry: run scripts/gpu-check.sh --prepare where partrain builds, and carry out/gpu-carry"; return 1; }
  rm -rf "$work" && mkdir -p "$work/runs" "$work/jobs" "$work/state" "$tests" "$work/fallback"
  local f n=0
  for f in "$carry"/debs/*.deb "$carry"/deps/*.deb; do
    unpack_deb "$f" "$prefix" || { note unpack "$(basename "$f")" fail "cannot unpack"; return 1; }
    n=$((n + 1))
  done
  for f in "$carry"/fallback/*.deb; do unpack_deb "$f" "$work/fallback"; done
  python3 - "$carry/tests.tar.xz" "$work" <<'EOF' ||
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    try:
        t.extractall(sys.argv[2], filter="data")
    except TypeError:  # Python before 3.11.4
        t.extractall(sys.argv[2])
EOF
    { note unpack tests fail "cannot unpack tests.tar.xz"; return 1; }
  sed 's/^/  carried: /' "$carry/MANIFEST" >>"$log"
  note unpack packages pass "$n packages into $prefix, $(ls "$tests" | wc -l) test binaries"
}

# ---- libraries: the machine's CUDA libraries, the carried ones, and what ldd says.
cuda_dirs() {  # every folder that may hold CUDA's libraries, toolkit first
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib; do
    [ -d "$d" ] && echo "$d"
  done
  "$(python_with_torch)" - <<'EOF' 2>/dev/null
import os
try:
    import nvidia
except ImportError:
    raise SystemExit
for root in nvidia.__path__:
    for d, _, files in os.walk(root):
        if os.path.basename(d) == "lib" and any(".so" in f for f in files):
            print(d)
EOF
}

find_lib() {  # SONAME: the first folder of cuda_dirs holding it
  local d
  for d in $cuda_search; do [ -e "$d/$1" ] && { echo "$d"; return 0; }; done
  return 1
}

stage_libraries() {
  local carried dirs="" lib d missing=""
  # Every folder of the prefix with a shared library, but partrain's own (plugins, module).
  carried=$(find "$prefix" -name '*.so*' ! -path '*/partrain/*' -printf '%h\n' | sort -u | tr '\n' ':')
  cuda_search=$(cuda_dirs | tr '\n' ' ')
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9 libnvrtc.so.13; do
    if d=$(find_lib "$lib"); then
      say "  $lib: $d"
      case ":$dirs:" in *":$d:"*) ;; *) dirs="$dirs:$d" ;; esac
    else
      say "  $lib: not found in $cuda_search"
    fi
  done
  libs="${carried%:}$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The GPUs the agent binds workers to: named, so that its count never depends on finding
  # NVML in this machine's driver folder (the emulated GPU is GPU 0 of a node with one).
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    gpus=$CUDA_VISIBLE_DEVICES
  elif [ -n "$emulated" ]; then
    gpus=0
  elif [ "$device" = cuda ] && command -v nvidia-smi >/dev/null; then
    gpus=$(nvidia-smi -L 2>/dev/null | awk '/^GPU/ {printf "%s%d", sep, n++; sep = ","}')
  fi
  say "  CUDA_VISIBLE_DEVICES for partrain: ${gpus-unset}"
  module=${emulated:-$(find "$prefix" -name libpartrain_cuda.so | head -n 1)}
  missing=$(installed_ldd)
  if grep -qE 'GLIBCXX_|CXXABI_' <<<"$missing"; then  # the system's C++ runtime is older
    libs="$(find "$work/fallback" -name 'libstdc++.so.6' -printf '%h'):$libs"
    say "  the system's libstdc++ is older than Debian 12's: using the carried one"
    missing=$(installed_ldd)
  fi
  if [ -n "$missing" ]; then
    note libraries ldd fail "missing: $(tr '\n' ' ' <<<"$missing")"
  else
    note libraries ldd pass "every installed binary's libraries found (module: ${module#"$work/"})"
  fi
}

installed_ldd() {  # ldd of every installed ELF into the log; prints what is missing
  local f out
  for f in $(find "$prefix" "$tests" -type f \( -perm -u+x -o -name '*.so*' \)) ${emulated:+"$emulated"}; do
    [ "$(head -c 4 "$f" | tail -c 3)" = ELF ] || continue
    out=$(LD_LIBRARY_PATH=$libs ldd "$f" 2>&1)
    { echo "ldd ${f#"$work/"}"; sed 's/^/    /' <<<"$out"; } >>"$work/ldd.log"
    grep -E 'not found' <<<"$out" | sed -E "s|^\s*||; s|$| (${f##*/})|"
  done | sort -u
}

# The site config naming the prefix's plugins, and $work/bin/with-env: runs a command with
# the carried and CUDA libraries, the site config and the GPU module, which only partrain's
# processes get (never PyTorch's); $work/bin/partrain is the installed partrain through it.
write_site() {
  printf '[paths]\nplugin_dir = "%s"\nstate_root = "%s"\n' \
    "$(dirname "$(find "$prefix" -name dp.so | head -n 1)")" "$work/state" >"$site"
  mkdir -p "$work/bin"
  {
    echo '#!/bin/sh'
    echo "export LD_LIBRARY_PATH='$libs' PARTRAIN_SITE_CONFIG='$site'"
    echo "export PARTRAIN_HARDWARE_DIR='$prefix/etc/partrain/hardware' OMP_NUM_THREADS=$omp"
    # Several GPU workers on the one GPU (a test option: the staged transport between them).
    echo "export PARTRAIN_SHARE_GPUS=1"
    [ -n "$module" ] && echo "export PARTRAIN_CUDA_MODULE='$module'"
    [ -n "${gpus+set}" ] && echo "export CUDA_VISIBLE_DEVICES='$gpus'"
    echo 'exec "$@"'
  } >"$work/bin/with-env"
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$work/bin/with-env" "$prefix/usr/bin/partrain" >"$work/bin/partrain"
  chmod 755 "$work/bin/with-env" "$work/bin/partrain"
}

# A copy of an installed example job with absolute data paths, the precision, and the
# learning-rate schedule fixed at $steps steps, 2 of warm-up (so a 5-step run resumed to 10
# follows it, and 10 steps visibly train).
make_job() {  # NAME EXAMPLE PRECISION
  local examples=$prefix/usr/share/partrain/examples
  sed -e "s|\"data/|\"$examples/data/|g" -e "s|^\[job\]$|[job]\nprecision = \"$3\"|" \
    -e "s|^\[training\]$|[training]\ndecay_steps = $steps|" -e "s|^warmup_steps = .*|warmup_steps = 2|" \
    "$examples/$2" >"$work/jobs/$1.toml"
  echo "$work/jobs/$1.toml"
}

# Runs the installed partrain as run NAME (its run folder $work/runs/NAME, or $run_dir);
# NAME.out, .err and .rc ("EXIT SECONDS") beside it.
run_partrain() {  # NAME TIMEOUT ARGS...
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s.%N)
  echo "\$ partrain $*" >"$work/runs/$name.cmd"
  PARTRAIN_RUN_DIR=${run_dir:-$work/runs/$name} timeout -k 5 "$limit" "$work/bin/partrain" "$@" >"$work/runs/$name.out" \
    2>"$work/runs/$name.err"
  rc=$?
  echo "$rc $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')" >"$work/runs/$name.rc"
  return $rc
}

# Why run NAME stopped, in one line: the CLI's "partrain: ..." line, else the first ERROR's
# message, else the last line.
reason() {  # NAME
  local err=$work/runs/$1.err
  grep -m 1 '^partrain: ' "$err" || grep -m 1 ' ERROR ' "$err" | sed 's/^[^|]*| //' | grep . || tail -n 1 "$err"
}

# pass | refused: REASON | fail: REASON, from a finished run_partrain. Exit 2 before any step,
# naming the device, is this version refusing the case (by the workers, after they started,
# where the CLI and the agent let it through: DESIGN.md wants that decided before).
outcome() {  # NAME
  local rc secs err=$work/runs/$1.err why
  read -r rc secs <"$work/runs/$1.rc"
  why=$(reason "$1")
  if [ "$rc" = 0 ]; then
    echo pass
  elif [ "$rc" = 2 ] && [ ! -s "$work/runs/$1/metrics.jsonl" ] && grep -qiE 'device|cuda|gpu|cpu.* ranks' <<<"$why"; then
    grep -q ' started: pid ' "$err" && why="$why (refused by the workers after they started)"
    echo "refused: $why"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "fail: timed out after ${secs%.*} s"
  else
    echo "fail: exit $rc: $why"
  fi
}

# The log lines of run NAME: its command, exit and time, and its output unless it passed.
log_run() {  # NAME
  local rc secs
  read -r rc secs <"$work/runs/$1.rc"
  { cat "$work/runs/$1.cmd"; echo "  exit $rc in $secs s"
    if [ "$rc" != 0 ]; then tail -n 40 "$work/runs/$1.err" | sed 's/^/  | /'; fi; } >"$work/runs/$1.log"
}

seconds_of() { awk '{print $2}' "$work/runs/$1.rc"; }

# One run of the installed product compared with a reference run; one record.
case_run() {  # STAGE CASE REF TOL NAME ARGS...
  local stage=$1 case=$2 ref=$3 tol=$4 name=$5 res
  shift 5
  run_partrain "$name" "$(budget "$case_limit")" "$@"
  log_run "$name"
  res=$(outcome "$name")
  if [ "$res" = pass ] && [ -n "$ref" ]; then
    python3 "$here/results.py" compare --record "$record" --stage "$stage" --case "$case" \
      --ref "$work/runs/$ref" --got "$work/runs/$name" --steps "$steps" --tol "$tol" \
      --seconds "$(seconds_of "$name")" >>"$work/runs/$name.log"
  elif [ "$res" = pass ]; then
    note "$stage" "$case" pass "trained $steps steps" "$(seconds_of "$name")" 2>/dev/null
  else
    note "$stage" "$case" "${res%%:*}" "${res#*: }" "$(seconds_of "$name")"
  fi
}

# Runs "$@" in the background, at most $par at a time.
spawn() {
  while [ "$(jobs -rp | wc -l)" -ge "$par" ]; do wait -n; done
  "$@" &
}
gather() {  # NAME...: wait for every spawned run, then their log lines in order
  wait
  local n
  for n in "$@"; do [ -f "$work/runs/$n.log" ] && cat "$work/runs/$n.log" >>"$log"; done
}

# The device arguments of N workers: one GPU rank each, sharing this machine's one GPU.
devices() {  # NPROC
  if [ "$1" -gt 1 ]; then echo "--device $device --nproc $1"; else echo "--device $device"; fi
}

stage_references() {
  local dev
  job_gpt2_fp32=$(make_job gpt2-fp32 tiny.toml fp32)
  job_gpt2_bf16=$(make_job gpt2-bf16 tiny.toml bf16)
  job_moe_fp32=$(make_job moe-fp32 moe-tiny.toml fp32)
  job_moe_bf16=$(make_job moe-bf16 moe-tiny.toml bf16)
  job_llama_fp32=$(make_job llama-fp32 llama-tiny.toml fp32)
  dev=$(devices 1)
  # shellcheck disable=SC2086
  {
    spawn case_run references "one gpt2 fp32" "" 0 ref-gpt2-fp32 run "$job_gpt2_fp32" $dev --steps $steps \
      --save "$work/runs/gpt2-fp32.safetensors"
    spawn case_run references "one gpt2 fp32 cpu" "" 0 ref-gpt2-fp32-cpu run "$job_gpt2_fp32" --device cpu --steps $steps
    spawn case_run references "one gpt2 bf16" "" 0 ref-gpt2-bf16 run "$job_gpt2_bf16" $dev --steps $steps
    spawn case_run references "one moe fp32" "" 0 ref-moe-fp32 run "$job_moe_fp32" $dev --steps $steps
    spawn case_run references "one moe bf16" "" 0 ref-moe-bf16 run "$job_moe_bf16" $dev --steps $steps
    spawn case_run references "one llama fp32" "" 0 ref-llama-fp32 run "$job_llama_fp32" $dev --steps 5 \
      --save "$work/runs/llama-fp32.safetensors"
  }
  gather ref-gpt2-fp32 ref-gpt2-fp32-cpu ref-gpt2-bf16 ref-moe-fp32 ref-moe-bf16 ref-llama-fp32
  # One GPU rank against one CPU rank (fp32), and bf16 against fp32 on the GPU.
  python3 "$here/results.py" compare --record "$record" --stage references --case "$device vs cpu fp32" \
    --ref "$work/runs/ref-gpt2-fp32-cpu" --got "$work/runs/ref-gpt2-fp32" --steps $steps --tol 1e-4 >>"$log"
  python3 "$here/results.py" compare --record "$record" --stage references --case "bf16 vs fp32" \
    --ref "$work/runs/ref-gpt2-fp32" --got "$work/runs/ref-gpt2-bf16" --steps $steps --tol 1e-2 >>"$log"
}

# name | spec | workers | model (gpt2 or moe)
layouts() {
  cat <<'EOF'
dp2 dp2 2 gpt2
tp2 tp2 2 gpt2
dp2xzero3 dp2,zero3 2 gpt2
pp2-1f1b pp2,sched=1f1b 2 gpt2
pp2-zbh1 pp2,sched=zbh1 2 gpt2
ep2 dp2,ep2 2 moe
cp2 cp2 2 gpt2
tp2xpp2 tp2,pp2 4 gpt2
EOF
}

stage_layouts() {
  local name spec n model prec tol job names=""
  while read -r name spec n model; do
    for prec in fp32 bf16; do
      [ "$(left)" -gt 10 ] || { note layouts "$name $prec" skipped "out of time"; continue; }
      tol=$([ $prec = fp32 ] && echo 1e-5 || echo 1e-2)
      job=$work/jobs/$model-$prec.toml
      # shellcheck disable=SC2046
      spawn case_run layouts "$name $prec" "ref-$model-$prec" "$tol" "$name-$prec" run "$job" \
        --partrain="$spec" $(devices "$n") --steps $steps
      names="$names $name-$prec"
    done
  done < <(layouts)
  # shellcheck disable=SC2086
  gather $names
}

# A checkpoint written by GPU ranks (the largest fp32 layout that passed) at step 5, resumed on
# CPU ranks of the same layout to step 10: against one GPU rank, 1e-5 to step 5, 1e-4 after.
stage_checkpoint() {
  local name spec n layout="" nproc=1 args
  for name in tp2xpp2 pp2-1f1b tp2 dp2; do
    grep -q "\"case\": \"$name fp32\", .*\"status\": \"pass\"" "$record" || continue
    read -r _ spec n _ < <(layouts | grep "^$name ")
    layout=$spec nproc=$n
    break
  done
  args=(--steps 5)
  [ -n "$layout" ] && args+=(--partrain="$layout")
  run_partrain ckpt-gpu "$(budget "$case_limit")" run "$job_gpt2_fp32" "${args[@]}" $(devices "$nproc")
  log_run ckpt-gpu
  cat "$work/runs/ckpt-gpu.log" >>"$log"
  [ "$(outcome ckpt-gpu)" = pass ] || { note checkpoint "${layout:-one rank}" fail "written on $device: $(outcome ckpt-gpu)"; return; }
  args=(--steps $steps --device cpu)
  [ -n "$layout" ] && args+=(--partrain="$layout" --nproc "$nproc")
  run_dir=$work/runs/ckpt-gpu run_partrain ckpt-cpu "$(budget "$case_limit")" run "$job_gpt2_fp32" "${args[@]}"
  log_run ckpt-cpu
  cat "$work/runs/ckpt-cpu.log" >>"$log"
  if [ "$(outcome ckpt-cpu)" != pass ]; then
    note checkpoint "${layout:-one rank} $device->cpu" fail "resumed on CPU ranks: $(outcome ckpt-cpu)"
    return
  fi
  python3 "$here/results.py" compare --record "$record" --stage checkpoint --case "${layout:-one rank} $device->cpu" \
    --ref "$work/runs/ref-gpt2-fp32" --got "$work/runs/ckpt-gpu" --steps $steps --tol 1e-5 --tol-after 5:1e-4 \
    --resumed-at 5 --seconds "$(seconds_of ckpt-cpu)" >>"$log"
}

# `partrain export --hf` of the one-rank GPT-2 and LLaMA runs; transformers' logits against
# partrain's (partrain_hf_logits, the engine's decoder on CPU) on one prompt, 1e-3 in fp32.
stage_hf() {
  local arch job py ids rc fallback=()
  py=$(python_with_torch)
  [ "$device" = cuda ] && [ -z "$emulated" ] || fallback=(--allow-reference "$src/tests/engine/reference")
  ids=$(python3 -c 'print(",".join(str(b) for b in b"The quick brown fox jumps over the lazy dog; partrain exports, transformers reads."[:64]))')
  for arch in gpt2 llama; do
    job=$work/jobs/$arch-fp32.toml
    if [ ! -f "$work/runs/$arch-fp32.safetensors" ]; then
      note hf "$arch" fail "no trained weights (the one-rank $arch fp32 run failed)"
      continue
    fi
    run_partrain "export-$arch" "$(budget 30)" export "$job" --from "$work/runs/$arch-fp32.safetensors" \
      --hf "$work/hf-$arch"
    log_run "export-$arch"
    cat "$work/runs/export-$arch.log" >>"$log"
    [ "$(outcome "export-$arch")" = pass ] || { note hf "$arch" fail "export: $(outcome "export-$arch")"; continue; }
    echo "\$ partrain_hf_logits hf-$arch" >>"$log"
    timeout "$(budget 30)" "$work/bin/with-env" "$tests/partrain_hf_logits" "$work/hf-$arch" "$ids" \
      "$work/hf-$arch-logits.safetensors" >>"$log" 2>&1 || { note hf "$arch" fail "partrain_hf_logits: exit $?"; continue; }
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 timeout "$(budget 60)" "$py" "$here/hf_logits.py" \
      --record "$record" --case "$arch" --hf "$work/hf-$arch" --logits "$work/hf-$arch-logits.safetensors" \
      --ids "$ids" --tol 1e-3 --device "$device" "${fallback[@]}" >>"$log" 2>&1
    rc=$?  # a failure it recorded itself, or one it could not record (a crash, the time limit)
    [ $rc = 0 ] || grep -q "\"case\": \"$arch\", .*\"stage\": \"hf\"" "$record" ||
      note hf "$arch" fail "hf_logits.py: exit $rc (see part-a.log)"
  done
}

# The carried gpu-labelled GoogleTest binaries, against the installed programs.
stage_gpu_tests() {
  local t rc secs t0 out
  for t in "$tests"/*; do
    [ "${t##*/}" = partrain_hf_logits ] && continue
    [ "$(left)" -gt 10 ] || { note gpu-tests "${t##*/}" skipped "out of time"; continue; }
    out=$work/${t##*/}.log
    t0=$(date +%s)
    PARTRAIN_TEST_PARTRAIND=$prefix/usr/bin/partraind PARTRAIN_TEST_CLI=$prefix/usr/bin/partrain \
      PARTRAIN_TEST_SITE_CONFIG=$site PARTRAIN_TEST_SOURCE_DIR=$src \
      timeout -k 5 "$(budget 90)" "$work/bin/with-env" "$t" >"$out" 2>&1
    rc=$? secs=$(($(date +%s) - t0))
    { echo "\$ ${t##*/}: exit $rc in $secs s"; grep -E '^\[ *(OK|FAILED|SKIPPED) *\]|largest relative|Failure' "$out" | head -n 60 | sed 's/^/  | /'; } >>"$log"
    local counts="$(grep -cE '^\[       OK \]' "$out") ok, $(grep -cE '^\[  SKIPPED \]' "$out") skipped, $(grep -cE '^\[  FAILED  \] [A-Z]' "$out") failed"
    case $rc in
      0) note gpu-tests "${t##*/}" pass "$counts" "$secs" ;;
      77) note gpu-tests "${t##*/}" skipped "no CUDA device ($(tail -n 1 "$out"))" "$secs" ;;
      *) note gpu-tests "${t##*/}" fail "exit $rc: $counts: $(grep -m 3 -E '^\[  FAILED  \] [A-Z]' "$out" | tr '\n' ' ')" "$secs" ;;
    esac
  done
}

# Processes of the installed binaries still alive (a run cut by its timeout), by PID.
end_leftovers() {
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case $exe in "$prefix"/*) kill -9 "${p#/proc/}" 2>/dev/null && say "ended leftover ${exe##*/} (pid ${p#/proc/})" ;; esac
  done
}

main() {
  : >"$log"
  say "device $device${emulated:+ (emulated: $emulated)}, $par at a time, $(( deadline - start )) s, work $work"
  local s
  for s in unpack libraries references layouts checkpoint hf gpu_tests; do
    if [ "$(left)" -le 5 ]; then note "${s//_/-}" all skipped "out of time"; continue; fi
    say "stage $s ($(left) s left)"
    "stage_$s" || { say "stage $s failed: stopping"; break; }
    [ "$s" = libraries ] && write_site
    end_leftovers
  done
  cat "$work/ldd.log" >>"$log" 2>/dev/null
  python3 "$here/results.py" summary --record "$record" --txt "$OUT/part-a-summary.txt" --json "$OUT/part-a.json" \
    --header "part A: partrain as installed, on $device${emulated:+ (emulated)}, $(($(date +%s) - start)) s" >/dev/null
  local rc=$?
  cat "$OUT/part-a-summary.txt"
  return $rc
}

main
