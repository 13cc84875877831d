// What the GPU benchmark's modes share: the run's arguments and its one-line JSON report.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace partrain::bench {

struct BenchArgs {
  std::string mode = "layers";    // layers (KernelGpt2) | model (engine::model::Model + AdamW)
  std::string arch = "gpt2";      // gpt2 | llama (llama: model mode only)
  std::string paths = "all";      // PARTRAIN_CUDA_PATHS: all | none | lt,epilogue,norm,vec,adamw,cudnn
  std::string attention;          // layers: cudnn|gemm|flash (default cudnn); model: auto|cudnn|gemm|flash
  bool overwrite = true, device_optimizer = true, graph = false, phases = false;
  int batch = 16, seq = 1024, steps = 10, warmup = 3;
  std::string label;
};

// The result of one run; `error` non-empty when it failed (the numbers are then absent).
struct BenchResult {
  double seconds = 0;              // wall time of `steps` steps
  int64_t flops_params = 0;        // N in 6N + 12 L C T
  int layers = 0, channels = 0;
  float loss_first = 0, loss_last = 0;
  bool graph = false;              // whether the steps replayed a CUDA graph
  std::string graph_error;         // why a requested graph was not used
  std::string attention_used;      // the attention kernels that ran (layers mode)
  std::string error;
  std::vector<std::pair<std::string, double>> phases;  // ms per phase of one step
  std::vector<std::pair<std::string, int64_t>> extra;  // e.g. peak bytes per category
};

// One JSON line for the run (and one for its phases when measured) on stdout.
void report(const BenchArgs& a, const BenchResult& r);

BenchResult run_layers(const BenchArgs& a, const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets);
#ifdef PARTRAIN_BENCH_MODEL
BenchResult run_model(const BenchArgs& a, const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets);
#endif

}  // namespace partrain::bench
