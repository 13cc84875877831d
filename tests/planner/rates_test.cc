// Measured rates (planner/rates.h): gpu_rates.py's JSON parsed, the profile constants fitted
// to it against hand arithmetic (rates.h's worked example), and a profile that names such a
// file reading it when it is there.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "planner/gemm.h"
#include "planner/hardware.h"
#include "planner/rates.h"

namespace partrain::planner {
namespace {

namespace fs = std::filesystem;

// An H100-like device: 989 TFLOP/s, 132 SMs, 4.8 TB/s.
HardwareProfile hopper() {
  HardwareProfile h;
  h.name = "hopper";
  h.peak_bf16 = 989e12;
  h.peak_fp32 = 67e12;
  h.sm_count = 132;
  h.memory_bandwidth = 4.8e12;
  h.memory_bytes = 141e9;
  h.attention_efficiency = h.attention_efficiency_fa2 = 0.1;
  return h;
}

// rates.h's worked example (8192 x 8192 x K at 600 and 517 TFLOP/s), a fused-attention
// curve of ceiling 0.6 and seq_half 1024 at head dim 128 (0.3, 0.48 and 0.5647 of peak at
// 1k, 4k and 16k), flash at half of it, and a pointwise add at 4.3 TB/s.
const char* kRates = R"({"schema": "partrain-gpu-rates/1", "device": {"name": "NVIDIA H200"},
  "gemm": [{"m": 8192, "n": 8192, "k": 8192, "tflops": 600.0},
           {"m": 8192, "n": 8192, "k": 1024, "tflops": 517.1}],
  "attention": [{"backend": "cudnn", "head_dim": 128, "seq": 1024, "total_tflops": 296.7},
                {"backend": "cudnn", "head_dim": 128, "seq": 4096, "total_tflops": 474.72},
                {"backend": "cudnn", "head_dim": 128, "seq": 16384, "total_tflops": 558.49},
                {"backend": "flash", "head_dim": 128, "seq": 1024, "total_tflops": 148.35},
                {"backend": "flash", "head_dim": 128, "seq": 16384, "total_tflops": 279.24},
                {"backend": "flash", "head_dim": 64, "seq": 0, "total_tflops": 100}],
  "pointwise": [{"bytes_per_operand": 1048576, "add_bytes_per_s": 1.0e12},
                {"bytes_per_operand": 1073741824, "add_bytes_per_s": 4.3e12}],
  "errors": [{"what": "attention cudnn hd64 T1024", "error": "not supported"}]})";

TEST(PlannerRates, ConstantsFittedToAMeasurement) {
  Result<MeasuredRates> r = parse_rates(kRates, "h200.json");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->device, "NVIDIA H200");
  EXPECT_EQ(r->gemm.size(), 2u);
  EXPECT_EQ(r->attention.size(), 5u);  // the row without a sequence length is skipped
  HardwareProfile h = hopper();
  apply_rates(*r, &h);
  EXPECT_TRUE(h.rates_measured);
  // 64 x 32 tiles in 16 waves over 132 SMs (0.9697 used); K ratios give k_half 192.
  EXPECT_NEAR(h.gemm_k_half, 192, 8);
  EXPECT_NEAR(h.matmul_efficiency, 600 / (989 * 0.9697 * 8192 / 8384.0), 0.005);
  EXPECT_NEAR(h.attention_seq_half, 1024, 64);
  EXPECT_NEAR(h.attention_efficiency, 0.6, 0.01);
  EXPECT_NEAR(h.attention_efficiency_fa2, 0.3, 0.01);
  // Only operands of 64 MiB or more count: 4.3 of 4.8 TB/s.
  EXPECT_NEAR(h.elementwise_efficiency, 4.3 / 4.8, 1e-9);
  // The fitted curve gives the measured points back, at the benchmark's clock.
  EXPECT_NEAR(gemm_rate({8192, 8192, 1024}, h, 2) / 1e12, 517.1, 3);
  EXPECT_NEAR(fused_attention_rate(h, false, 4096, 128) / 1e12, 474.7, 5);
}

TEST(PlannerRates, NotAMeasurementIsRefusedByName) {
  Result<MeasuredRates> bad = parse_rates("{\"gemm\": []}", "x.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("x.json"), std::string::npos);
  EXPECT_FALSE(parse_rates("{not json", "y.json").is_ok());
}

TEST(PlannerRates, AProfileReadsItsMeasurementWhenItIsThere) {
  const fs::path dir = fs::temp_directory_path() / ("partrain_rates_" + std::to_string(::getpid()));
  fs::create_directories(dir / "measured");
  std::ofstream(dir / "dev.toml") << "[device]\nname = \"dev\"\n[compute]\npeak_bf16_flops = 989e12\n"
                                     "peak_fp32_flops = 67e12\nsm_count = 132\nmatmul_efficiency = 0.5\n"
                                     "measured_rates = \"measured/dev.json\"\n[memory]\nbytes = 1e11\n"
                                     "bandwidth = 4.8e12\n[node]\ngpus_per_node = 8\n[links]\n"
                                     "intra_node_bandwidth = 3e11\ninter_node_bandwidth = 5e10\n";
  Result<HardwareProfile> without = load_hardware((dir / "dev.toml").string());
  ASSERT_TRUE(without.is_ok()) << without.status().message();
  EXPECT_FALSE(without->rates_measured);
  EXPECT_DOUBLE_EQ(without->matmul_efficiency, 0.5);
  std::ofstream(dir / "measured/dev.json") << kRates;
  Result<HardwareProfile> with = load_hardware((dir / "dev.toml").string());
  ASSERT_TRUE(with.is_ok()) << with.status().message();
  EXPECT_TRUE(with->rates_measured);
  EXPECT_NEAR(with->gemm_k_half, 192, 8);
  std::ofstream(dir / "measured/dev.json") << "garbage";
  Result<HardwareProfile> broken = load_hardware((dir / "dev.toml").string());
  ASSERT_FALSE(broken.is_ok());
  EXPECT_NE(broken.status().message().find("dev.json"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace partrain::planner
