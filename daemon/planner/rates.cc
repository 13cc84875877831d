// Measured device rates and the constants fitted to them (see rates.h).
#include "planner/rates.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "planner/gemm.h"

namespace partrain::planner {
namespace {

using json = nlohmann::json;

double number(const json& o, const char* key) {
  const auto it = o.find(key);
  return it != o.end() && it->is_number() ? it->get<double>() : 0.0;
}

// Sum of squared log errors of the GEMM model over the points, with the ceiling that
// minimizes it for this k_half (closed form over the compute-bound points).
double gemm_fit(const MeasuredRates& r, HardwareProfile hw, double k_half, double* ceiling) {
  hw.gemm_k_half = k_half;
  hw.matmul_efficiency = 1;
  hw.sustained_clock = 1;
  hw.kernel_overhead = 0;
  double sum = 0;
  int n = 0;
  for (const MeasuredRates::Gemm& g : r.gemm) {
    const double at_one = gemm_rate({g.m, g.n, g.k}, hw, 2);
    const double bytes_bound = 2 * 2 * g.m * g.n * g.k / (2 * (g.m * g.k + g.k * g.n + g.m * g.n)) *
                               hw.memory_bandwidth;  // FLOP/s if memory bound (2-byte elements)
    if (at_one >= bytes_bound * 0.999) continue;  // memory bound: says nothing of the ceiling
    sum += std::log(g.flops_per_s / at_one);
    ++n;
  }
  *ceiling = n > 0 ? std::clamp(std::exp(sum / n), 0.05, 1.0) : 1.0;
  hw.matmul_efficiency = *ceiling;
  double err = 0;
  for (const MeasuredRates::Gemm& g : r.gemm) {
    const double e = std::log(g.flops_per_s / gemm_rate({g.m, g.n, g.k}, hw, 2));
    err += e * e;
  }
  return err;
}

// The fused-attention curve's shape over one backend's points: sum of squared log errors
// with the best ceiling for this shape.
double attention_fit(const std::vector<const MeasuredRates::Attention*>& pts, const HardwareProfile& hw,
                     double seq_half, double hd_half, double* ceiling) {
  HardwareProfile h = hw;
  h.attention_seq_half = seq_half;
  h.attention_head_dim_half = hd_half;
  h.attention_efficiency = h.attention_efficiency_fa2 = 1;
  h.sustained_clock = 1;
  double sum = 0;
  for (const auto* p : pts) sum += std::log(p->flops_per_s / fused_attention_rate(h, false, p->seq, p->head_dim));
  *ceiling = std::clamp(std::exp(sum / static_cast<double>(pts.size())), 0.01, 1.0);
  double err = 0;
  for (const auto* p : pts) {
    const double e = std::log(p->flops_per_s / (*ceiling * fused_attention_rate(h, false, p->seq, p->head_dim)));
    err += e * e;
  }
  return err;
}

}  // namespace

Result<MeasuredRates> parse_rates(std::string_view text, const std::string& path) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const std::exception& e) {
    return Status::invalid("partrain: " + path + ": not a gpu_rates.py file: " + e.what());
  }
  if (!root.is_object() || root.value("schema", std::string()) != "partrain-gpu-rates/1") {
    return Status::invalid("partrain: " + path + ": not a gpu_rates.py file (schema partrain-gpu-rates/1)");
  }
  MeasuredRates r;
  if (root.contains("device") && root["device"].is_object()) r.device = root["device"].value("name", std::string());
  for (const json& g : root.value("gemm", json::array())) {
    if (!g.is_object()) continue;
    const MeasuredRates::Gemm e{number(g, "m"), number(g, "n"), number(g, "k"), number(g, "tflops") * 1e12};
    if (e.m > 0 && e.n > 0 && e.k > 0 && e.flops_per_s > 0) r.gemm.push_back(e);
  }
  for (const json& a : root.value("attention", json::array())) {
    if (!a.is_object()) continue;
    MeasuredRates::Attention e{a.value("backend", std::string()), number(a, "head_dim"), number(a, "seq"),
                               number(a, "total_tflops") * 1e12};
    if (!e.backend.empty() && e.head_dim > 0 && e.seq > 0 && e.flops_per_s > 0) r.attention.push_back(e);
  }
  for (const json& p : root.value("pointwise", json::array())) {
    if (!p.is_object()) continue;
    const MeasuredRates::Pointwise e{number(p, "bytes_per_operand"), number(p, "add_bytes_per_s")};
    if (e.bytes_per_operand > 0 && e.bytes_per_s > 0) r.pointwise.push_back(e);
  }
  return r;
}

void apply_rates(const MeasuredRates& r, HardwareProfile* hw) {
  if (!r.gemm.empty()) {
    double best_err = 1e300, best_k = hw->gemm_k_half, best_c = hw->matmul_efficiency;
    for (double k = 0; k <= 4096; k += 8) {
      double c = 1;
      const double err = gemm_fit(r, *hw, k, &c);
      if (err < best_err) best_err = err, best_k = k, best_c = c;
    }
    hw->gemm_k_half = best_k;
    hw->matmul_efficiency = best_c;
  }
  std::map<std::string, std::vector<const MeasuredRates::Attention*>> by_backend;
  for (const MeasuredRates::Attention& a : r.attention) by_backend[a.backend].push_back(&a);
  // The curve's shape from the device's best kernel (cuDNN), else flash; each backend's
  // ceiling under that shape.
  const char* shape_from = by_backend.count("cudnn") ? "cudnn" : by_backend.count("flash") ? "flash" : nullptr;
  if (shape_from != nullptr) {
    const auto& pts = by_backend[shape_from];
    double best_err = 1e300, best_s = hw->attention_seq_half, best_h = hw->attention_head_dim_half;
    for (double s = 0; s <= 8192; s += 64) {
      for (double h = 0; h <= 512; h += 8) {
        double c = 1;
        const double err = attention_fit(pts, *hw, s, h, &c);
        if (err < best_err) best_err = err, best_s = s, best_h = h;
      }
    }
    hw->attention_seq_half = best_s;
    hw->attention_head_dim_half = best_h;
    double c = 1;
    if (by_backend.count("cudnn")) {
      attention_fit(by_backend["cudnn"], *hw, best_s, best_h, &c);
      hw->attention_efficiency = c;
    }
    if (by_backend.count("flash")) {
      attention_fit(by_backend["flash"], *hw, best_s, best_h, &c);
      hw->attention_efficiency_fa2 = c;
      if (!by_backend.count("cudnn")) hw->attention_efficiency = std::max(hw->attention_efficiency, c);
    }
  }
  double best_bw = 0;
  for (const MeasuredRates::Pointwise& p : r.pointwise) {
    if (p.bytes_per_operand >= 64.0 * (1 << 20)) best_bw = std::max(best_bw, p.bytes_per_s);
  }
  if (best_bw > 0) hw->elementwise_efficiency = std::min(1.0, best_bw / hw->memory_bandwidth);
  hw->rates_measured = true;
}

}  // namespace partrain::planner
