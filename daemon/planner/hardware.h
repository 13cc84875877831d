// A hardware profile: what one device (GPU, or CPU rank) and its links can do, read from
// a TOML file in etc/hardware/ (installed as <sysconfdir>/partrain/hardware/NAME.toml).
// The planner's memory verdict and its step-time prediction come from these numbers
// alone; every key is described in partrain-plan(1) and in the shipped files.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace partrain::planner {

// What the engine stores in which precision on this device (engine/backend.h: the CPU
// backend keeps everything fp32; CUDA keeps bf16 weights and activations with fp32
// gradients and an fp32 master copy inside the optimizer).
struct Precision {
  int param_bytes = 2;       // bytes per stored weight. Default: 2 (bf16)
  int grad_bytes = 4;        // bytes per gradient element. Default: 4 (fp32 accumulation)
  int act_bytes = 2;         // bytes per activation element. Default: 2 (bf16)
  bool master_weights = true;  // an fp32 master copy in the optimizer. Default: true
  // Adam state bytes per parameter: two fp32 moments plus the master copy when kept.
  int optimizer_bytes() const { return 8 + (master_weights ? 4 : 0); }
};

struct HardwareProfile {
  std::string name;            // [device] name, e.g. "H100-SXM". Required
  std::string path;            // the file it came from
  std::string kind = "cuda";   // [device] kind: "cuda" or "cpu" (sets the precision). Default: cuda
  double peak_bf16 = 0;        // [compute] peak dense bf16 FLOP/s per device. Required for cuda
  double peak_fp32 = 0;        // [compute] peak dense fp32 FLOP/s per device. Required
  double matmul_efficiency = 1;  // [compute] fraction of peak a training GEMM reaches. Default: 1
  // [compute] fraction of peak the attention kernel (Q K^T, softmax, A V and their
  // backward) reaches; 0 in the file = matmul_efficiency. Default: matmul_efficiency
  double attention_efficiency = 0;
  double memory_bytes = 0;     // [memory] bytes per device (HBM, or RAM for cpu). Required
  double memory_bandwidth = 0;   // [memory] bytes/s. Required
  double reserved_bytes = 0;   // [memory] taken before training (CUDA context, NCCL). Default: 0
  double fragmentation = 0.1;  // [memory] margin for allocator fragmentation, a fraction. Default: 0.1
  int gpus_per_node = 0;       // [node] devices per node (CPU: ranks). Required
  double intra_bandwidth = 0;  // [links] intra-node (NVLink) bytes/s per device per direction. Required
  double intra_latency = 0;    // [links] seconds per intra-node message. Default: 0
  double inter_bandwidth = 0;  // [links] inter-node bytes/s per device (its NIC). Required
  double inter_latency = 0;    // [links] seconds per inter-node message. Default: 0
  double inter_switch_bandwidth = 0;  // [links] across leaf switches; 0 = inter_bandwidth. Default: 0

  // The peak the planner counts with: bf16 on GPUs, fp32 on CPU ranks.
  double peak() const { return kind == "cpu" ? peak_fp32 : peak_bf16; }
  Precision precision() const;
};

// Parses profile text; `path` names it in messages.
Result<HardwareProfile> parse_hardware(std::string_view text, const std::string& path);

// `name_or_path`: a file (contains '/' or ends in .toml) or a profile name looked up as
// DIR/NAME.toml in `dir`, else $PARTRAIN_HARDWARE_DIR, else the installed
// <sysconfdir>/partrain/hardware. An unknown name lists the profiles that exist.
Result<HardwareProfile> load_hardware(const std::string& name_or_path, const std::string& dir = "");

// The compiled-in profile folder.
std::string default_hardware_dir();

}  // namespace partrain::planner
