// Measured device rates: the JSON bench/planner/gpu_rates.py writes on one GPU (bf16 GEMM
// TFLOP/s by shape, fused attention forward and backward by head dim and sequence length,
// pointwise bytes/s by size), and the profile constants the time model takes from them.
//
// A profile that names such a file ([compute] measured_rates) gets, when the file is
// present:
//   matmul_efficiency, gemm_k_half: the GEMM model of gemm.h (ceiling x wave quantization x
//     K / (K + k_half), or memory bound) fitted to every measured GEMM, least squares on
//     log(rate): gemm_k_half by a search over 0..4096, the ceiling in closed form for each
//     (the mean log ratio over the compute-bound points);
//   attention_efficiency (the "cudnn" backend), attention_efficiency_fa2 ("flash"),
//     attention_seq_half and attention_head_dim_half: the fused-attention curve of
//     block_time.h, e x T / (T + seq_half) x g(hd), fitted the same way to the measured
//     forward+backward rates;
//   elementwise_efficiency: the best measured pointwise add (read 2, write 1) at 64 MiB or
//     more per operand, over the profile's memory bandwidth.
// What the file lacks (a backend that failed, a section skipped) keeps the profile's value.
//
// Worked example: GEMMs measured at 8192 x 8192 x K run at 600 TFLOP/s for K = 8192 and 517
// for K = 1024 on a 989 TFLOP/s, 132-SM device (64 x 32 tiles: 16 waves, 0.97 used):
// K/(K+h) ratios 600/517 = (8192/(8192+h)) / (1024/(1024+h)) give h = 192, and the ceiling
// 600 / (989 x 0.97 x 8192/8384) = 0.64.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "planner/hardware.h"

namespace partrain::planner {

struct MeasuredRates {
  std::string device;  // as the driver names it
  struct Gemm {
    double m = 0, n = 0, k = 0, flops_per_s = 0;
  };
  struct Attention {
    std::string backend;  // "cudnn" or "flash"
    double head_dim = 0, seq = 0;
    double flops_per_s = 0;  // forward + backward, causal FLOPs (3.5 x 2 b h T^2 hd)
  };
  struct Pointwise {
    double bytes_per_operand = 0, bytes_per_s = 0;  // out-of-place add: 3 x bytes moved
  };
  std::vector<Gemm> gemm;
  std::vector<Attention> attention;
  std::vector<Pointwise> pointwise;
};

// Parses gpu_rates.py's JSON; `path` names it in messages. Entries with a non-positive
// rate are skipped.
Result<MeasuredRates> parse_rates(std::string_view json, const std::string& path);

// Replaces the constants listed above in `hw` with the ones fitted to `rates`.
void apply_rates(const MeasuredRates& rates, HardwareProfile* hw);

}  // namespace partrain::planner
