// Which GPU each local worker gets. The agent never creates a CUDA context (it links no CUDA
// at all): it reads the node's GPUs from what the job was given, and hands worker i the i-th
// of them as its CUDA_VISIBLE_DEVICES, so every worker sees exactly one device, cuda:0.
//
//   - CUDA_VISIBLE_DEVICES, when set (Slurm's --gpus / --gres, or the user): its entries as
//     written (indexes, GPU-... UUIDs, MIG-... ids). Set but empty, or Slurm's "NoDevFiles":
//     no GPU.
//   - else every GPU the NVIDIA driver knows, as indexes 0..n-1: counted by NVML (the
//     driver's libnvidia-ml.so.1, opened with dlopen: no CUDA context, nothing linked), or,
//     where NVML cannot be loaded, the folders of /proc/driver/nvidia/gpus (one per GPU);
//     neither means no driver, hence no GPU.
//
// A [job] device = "cuda" job with fewer GPUs than local workers is refused before any
// worker starts (NCCL cannot run two ranks of one communicator on one device), unless
// PARTRAIN_SHARE_GPUS=1 asks to share them (a test option, off by default: worker i gets GPU
// i mod n, and groups whose members share a GPU stage their tensors through host memory,
// worker/transports.h). CPU jobs are bound as before: a GPU each when CUDA_VISIBLE_DEVICES
// lists enough, else left as they are.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace partrain::agent {

inline constexpr const char* kDriverGpuDir = "/proc/driver/nvidia/gpus";
inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

struct NodeGpus {
  std::vector<std::string> ids;  // CUDA_VISIBLE_DEVICES entries, one per GPU
  std::string source;            // where they came from, for messages
};

// `cuda_visible_devices` is the agent's CUDA_VISIBLE_DEVICES (null when unset); "" as
// `nvml_library` skips NVML (tests).
NodeGpus node_gpus(const char* cuda_visible_devices, const std::string& driver_dir = kDriverGpuDir,
                   const std::string& nvml_library = kNvmlLibrary);

// CUDA_VISIBLE_DEVICES of each of `nlocal` local workers ("" = leave the worker's as it is).
// invalid, with the fix, for device "cuda" when the node has fewer GPUs than workers and
// `share` is false; with `share`, worker i gets GPU i mod n (still invalid with none).
Result<std::vector<std::string>> gpus_per_worker(const NodeGpus& gpus, int nlocal, const std::string& device,
                                                 bool share = false);

// PARTRAIN_SHARE_GPUS=1 in the environment (anything else, or unset: no).
bool share_gpus_from_env();

}  // namespace partrain::agent
