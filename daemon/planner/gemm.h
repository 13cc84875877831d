// How long one GEMM takes on a device, from its shape: the model of NVIDIA's "Matrix
// Multiplication Background User's Guide" (2023), sections 2-3. The output C = A B
// (A is M x K, B is K x N) is cut into 128 x 256 tiles (cuBLAS's large-GEMM tile, either
// orientation, whichever needs fewer); the tiles run in waves over the device's SMs, so a
// last partial wave leaves SMs idle (wave quantization); each tile's K loop pays a fixed
// prologue and epilogue; and a GEMM that moves more bytes than its FLOPs can hide is
// bound by memory bandwidth instead:
//
//   tiles  = batch x min(ceil(M/128) ceil(N/256), ceil(M/256) ceil(N/128))
//   waves  = ceil(tiles / SMs),  wave = tiles / (waves SMs)        (1 without SMs)
//   rate   = peak x sustained_clock x matmul_efficiency x wave x K / (K + gemm_k_half)
//   t      = max(2 M N K batch / rate, e (M K + K N + M N) batch / memory_bandwidth)
//            + kernel_overhead                                   (e: bytes per element)
//
// matmul_efficiency and gemm_k_half are a benchmark's (gpu_rates.py, fitted by rates.h, or
// cited); sustained_clock is what a training load holds of the benchmark's clock.
//
// Worked example, a profile with 312e12 peak, sustained_clock 1, matmul_efficiency 0.78,
// gemm_k_half 195, 108 SMs, 2.039e12 B/s, 2 us per kernel: M = N = K = 4096 makes
// 32 x 16 = 512 tiles, 5 waves over 108 SMs (540 slots, 0.948 used), rate 312e12 x 0.78 x
// 0.948 x 4096/4291 = 220.3e12 FLOP/s, so 1.374e11 FLOPs take 0.624 ms (the 100.7 MB it
// moves would take 0.049 ms), 0.626 ms with the kernel's overhead.
#pragma once

#include "planner/hardware.h"

namespace partrain::planner {

struct GemmShape {
  double m = 0, n = 0, k = 0;  // C [m x n] = A [m x k] B [k x n]
  double batch = 1;            // independent GEMMs of this shape in one launch
};

// Seconds for one launch of `g` with operands of `element_bytes` bytes each.
double gemm_seconds(const GemmShape& g, const HardwareProfile& hw, double element_bytes);

// The FLOP/s `g` runs at (2 m n k batch over gemm_seconds).
double gemm_rate(const GemmShape& g, const HardwareProfile& hw, double element_bytes);

// Seconds for a forward GEMM [m x k] x [k x n] and the two backward ones it implies:
// the input gradient [m x n] x [n x k] and the weight gradient [k x m] x [m x n].
struct GemmTimes {
  double forward = 0, backward = 0;
};
GemmTimes linear_seconds(double m, double n, double k, const HardwareProfile& hw,
                         double element_bytes);

// The FLOP/s of a fused attention kernel, forward and backward together, on the causal
// FLOPs it executes, for sequences of `seq` keys and heads of `head_dim`:
//   peak x sustained_clock x e x seq / (seq + attention_seq_half) x g(head_dim),
//   g(hd) = (hd / (hd + attention_head_dim_half)) / (128 / (128 + attention_head_dim_half)),
// e = attention_efficiency (the device's best kernel) or attention_efficiency_fa2.
double fused_attention_rate(const HardwareProfile& hw, bool fa2, double seq, double head_dim);

}  // namespace partrain::planner
