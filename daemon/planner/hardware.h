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
  // [compute] the share of peak the best-shaped GEMM reaches in a benchmark (a measured
  // maximum: gpu_rates.py, or the MAMF of ml-engineering's table). Default: 1
  double matmul_efficiency = 1;
  // [compute] a GEMM's inner dimension K at which its rate is half the ceiling: the rate
  // scales by K / (K + gemm_k_half) (each output tile's prologue and epilogue against its
  // K loop). Default: 0 (no K dependence)
  double gemm_k_half = 0;
  // [compute] streaming multiprocessors: GEMMs run in waves of 128 x 256 output tiles over
  // them (wave quantization); 0 = no wave model (CPU ranks). Default: 0
  double sm_count = 0;
  // [compute] seconds every kernel costs beyond its work (launch, ramp, tail). Default: 0
  double kernel_overhead = 0;
  // [compute] share of the memory bandwidth elementwise kernels (norms, activations,
  // residual adds, softmax over materialized scores) reach. Default: 1
  double elementwise_efficiency = 1;
  // [compute] share of peak the device's best fused attention kernel (cuDNN SDPA or
  // FlashAttention-3 on Hopper, FlashAttention-2 on Ampere) reaches, forward and backward
  // together, on the causal FLOPs it executes, at long sequences and head dim 128; 0 in
  // the file = matmul_efficiency. Default: matmul_efficiency
  double attention_efficiency = 0;
  // [compute] the same for a FlashAttention-2 class kernel (torch SDPA's flash backend);
  // 0 in the file = attention_efficiency. Default: attention_efficiency
  double attention_efficiency_fa2 = 0;
  // [compute] the sequence length at which a fused attention kernel runs at half its
  // ceiling: the rate scales by T / (T + attention_seq_half) (each query tile's start-up
  // and its causal diagonal tile against the T keys it sweeps). Default: 0
  double attention_seq_half = 0;
  // [compute] the head dimension at which it runs at half its ceiling: the rate scales by
  // hd / (hd + attention_head_dim_half), normalized to 1 at head dim 128. Default: 0
  double attention_head_dim_half = 0;
  // [compute] the share of the boost clock the tensor cores hold under a sustained
  // training load (power and thermal limits): every compute rate above, measured in short
  // benchmarks, is scaled by it; memory-bound kernels are not. The one calibrated constant:
  // bench/planner/fit_half.sh fits it on the calibration half of the published runs.
  // Default: 1
  double sustained_clock = 1;
  // [compute] share of the SMs the collective kernels (NCCL's channels) occupy while they
  // overlap compute; compute slows by it for as long as they run. Default: 0
  double comm_sm_share = 0;
  // [compute] a gpu_rates.py measurement (bench/planner/gpu_rates.py) of this device, a
  // path relative to the profile's folder. When the file is present, matmul_efficiency and
  // gemm_k_half come from its GEMMs, the attention constants from its SDPA runs and
  // elementwise_efficiency from its pointwise runs, replacing the values written here.
  // Default: "" (none)
  std::string measured_rates;
  bool rates_measured = false;  // set when measured_rates was found and applied
  double memory_bytes = 0;     // [memory] bytes per device (HBM, or RAM for cpu). Required
  double memory_bandwidth = 0;   // [memory] bytes/s. Required
  double reserved_bytes = 0;   // [memory] taken before training (CUDA context, NCCL). Default: 0
  double fragmentation = 0.1;  // [memory] margin for allocator fragmentation, a fraction. Default: 0.1
  int gpus_per_node = 0;       // [node] devices per node (CPU: ranks). Required
  // [links] bus bandwidth of a ring collective inside a node, bytes/s per device (NCCL's
  // NVLink links x per-link bandwidth). Required
  double intra_bandwidth = 0;
  double intra_latency = 0;    // [links] seconds per ring step inside a node. Default: 0
  // [links] bytes/s per device to other nodes: the node's NIC bandwidth over its devices
  // (one 400 Gb/s NIC per GPU: 48e9). Required
  double inter_bandwidth = 0;
  double inter_latency = 0;    // [links] seconds per ring step across nodes. Default: 0
  double inter_switch_bandwidth = 0;  // [links] across leaf switches; 0 = inter_bandwidth. Default: 0
  double collective_latency = 0;  // [links] seconds every collective costs once. Default: 0

  // The peak the planner counts with: bf16 on GPUs, fp32 on CPU ranks.
  double peak() const { return kind == "cpu" ? peak_fp32 : peak_bf16; }
  Precision precision() const;
};

// Parses profile text; `path` names it in messages.
Result<HardwareProfile> parse_hardware(std::string_view text, const std::string& path);

// `name_or_path`: a file (contains '/' or ends in .toml) or a profile name looked up as
// DIR/NAME.toml in `dir`, else $PARTRAIN_HARDWARE_DIR, else the site config's [paths]
// hardware_dir (a build tree's names the source tree's etc/hardware), else the installed
// <sysconfdir>/partrain/hardware. An unknown name lists the profiles that exist.
Result<HardwareProfile> load_hardware(const std::string& name_or_path, const std::string& dir = "");

// The compiled-in profile folder.
std::string default_hardware_dir();

}  // namespace partrain::planner
