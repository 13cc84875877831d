#!/usr/bin/env bash
# spank_partrain.so exports exactly what Slurm's plugin loader looks up (the linker
# version script hides the layout core and the C++ runtime pieces), and needs no heavy
# library: it is loaded into sbatch, srun and slurmstepd.
set -euo pipefail
so=$1
exported=$(nm -D --defined-only "$so" | awk '{print $3}' | sort)
echo "exported:"; echo "$exported" | sed 's/^/  /'
expected=$(printf '%s\n' plugin_name plugin_type plugin_version spank_plugin_version \
  slurm_spank_init slurm_spank_init_post_opt slurm_spank_local_user_init \
  slurm_spank_job_epilog slurm_spank_task_init | sort)
if [ "$exported" != "$expected" ]; then
  echo "FAIL: exported symbols differ from the SPANK interface:" >&2
  diff <(echo "$expected") <(echo "$exported") >&2 || true
  exit 1
fi
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "needs:"; echo "$needed" | sed 's/^/  /'
heavy=$(echo "$needed" |
  grep -E -i 'rocksdb|cuda|nccl|gloo|toml|openblas|boost|spdlog|fmt|slurm' || true)
if [ -n "$heavy" ]; then
  echo "FAIL: spank_partrain.so links libraries it must not load into Slurm: $heavy" >&2
  exit 1
fi
echo "PASS"
