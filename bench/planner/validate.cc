// `partrain plan` against published runs (published_runs.h).
//
//   planner_validate [--hardware-dir DIR]             the table: predicted vs published, by half
//   planner_validate --explain [--hardware-dir DIR]   ... with each row's step time by part
//   planner_validate --fit [--hardware-dir DIR]       sustained_clock fitted on the calibration
//                                                     half (what the shipped profiles carry)
//   planner_validate --fit-half [--hardware-dir DIR]  fitted on each half, the other predicted
//   planner_validate --rates FILE [...]               the H100 rows with a gpu_rates.py
//                                                     measurement applied to their profile
//
// The calibration is calibrate.h's: one constant per device family, on the calibration half
// only; the held-out half (every other row of each source) is what CI asserts within 10%
// (tests/planner/accuracy_test.cc).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench/planner/calibrate.h"
#include "common/read_file.h"
#include "planner/rates.h"

#ifndef PARTRAIN_SOURCE_DIR
#define PARTRAIN_SOURCE_DIR "."
#endif

namespace partrain::bench {
namespace {

using Clocks = std::map<std::string, double>;  // family -> sustained_clock; empty: shipped

Prediction timed(const PlannedRun& r, const Clocks& clocks) {
  const auto it = clocks.find(device_family(r.run->profile));
  return it == clocks.end() ? r.first : with_clock(r, it->second);
}

const char* half_name(Half h) { return h == Half::kCalibration ? "calib" : "held"; }

double gib(double b) { return b / (1 << 30); }

void print_table(const std::vector<PlannedRun>& rows, const Clocks& clocks, const char* title,
                 const Half* only = nullptr) {
  std::printf("%s\n", title);
  std::printf("%-28s %-11s %-5s %-10s %-44s %9s %9s %7s %6s %13s\n", "run", "source", "half", "profile", "layout",
              "published", "predicted", "error", "MFU", "memory GiB");
  std::map<std::string, std::pair<int, double>> worst;  // source -> rows, largest |error|
  double all_worst = 0, sum = 0;
  int n = 0;
  for (const PlannedRun& r : rows) {
    if (only != nullptr && r.run->half != *only) continue;
    const Prediction p = timed(r, clocks);
    std::printf("%-28s %-11s %-5s %-10s %-44s %9.1f %9.1f %+6.1f%% %5.1f%% %6.1f/%-5.0f%s\n", r.run->name.c_str(),
                r.run->source.c_str(), half_name(r.run->half), r.run->profile.c_str(), r.run->spec.c_str(),
                r.run->published_tflops, p.tflops, 100 * p.error, 100 * p.mfu, gib(p.plan.memory.total()),
                gib(p.plan.capacity), p.plan.fits ? "" : " DOES NOT FIT");
    auto& w = worst[r.run->source];
    ++w.first;
    w.second = std::max(w.second, std::fabs(p.error));
    all_worst = std::max(all_worst, std::fabs(p.error));
    sum += p.error * p.error;
    ++n;
  }
  std::printf("%d rows: largest |error| %.1f%%, rms %.1f%% (TFLOP/s per GPU as each source counts them)\n", n,
              100 * all_worst, n ? 100 * std::sqrt(sum / n) : 0.0);
  for (const auto& [source, w] : worst) std::printf("  %-12s %3d rows, largest |error| %5.1f%%\n", source.c_str(), w.first, 100 * w.second);
  std::printf("\n");
}

void print_parts(const std::vector<PlannedRun>& rows) {
  std::printf("%-28s %9s %8s %7s %7s %7s %7s %8s %8s %7s  (seconds per step)\n", "run", "step", "compute", "tp",
              "cp", "pp", "bubble", "dp", "dp shown", "optim");
  for (const PlannedRun& r : rows) {
    const planner::StepTime& t = r.first.plan.time;
    std::printf("%-28s %9.3f %8.3f %7.3f %7.3f %7.3f %7.3f %8.3f %8.3f %7.3f\n", r.run->name.c_str(), t.total,
                t.compute, t.tp, t.cp, t.pp, t.bubble, t.dp, t.dp_exposed, t.optimizer);
  }
  std::printf("\n%-28s %8s %8s %8s %8s %8s %8s  (ms per micro-batch of one block, and of the head)\n", "run",
              "forward", "backward", "recomp", "tp", "cp", "head");
  for (const PlannedRun& r : rows) {
    const planner::Plan& p = r.first.plan;
    const planner::BlockCost b =
        planner::block_cost(p.model, p.layout, false, p.runtime, p.spans, p.precision, r.hw);
    std::printf("%-28s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", r.run->name.c_str(), 1e3 * b.forward,
                1e3 * b.backward, 1e3 * b.recompute, 1e3 * b.tp, 1e3 * b.cp,
                1e3 * planner::head_seconds(p.model, p.layout, p.runtime, p.precision, r.hw));
  }
  std::printf("\n");
}

void print_memory(const std::vector<PlannedRun>& rows) {
  std::printf("%-28s %5s %9s %8s %8s %8s %8s %8s %8s %8s %8s  (GiB, the stage needing most)\n", "run", "stage",
              "in flight", "weights", "grads", "optim", "acts", "work", "margin", "total", "capacity");
  for (const PlannedRun& r : rows) {
    const planner::MemoryBreakdown& m = r.first.plan.memory;
    std::printf("%-28s %5d %9.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", r.run->name.c_str(), m.stage,
                m.in_flight, gib(m.weights), gib(m.grads), gib(m.optimizer), gib(m.activations), gib(m.workspace),
                gib(m.margin + m.reserved + m.comm_buffers), gib(m.total()), gib(r.first.plan.capacity));
  }
  std::printf("\n");
}

void print_clocks(const Clocks& c) {
  for (const auto& [family, clock] : c) std::printf("  %-6s sustained_clock = %.3f\n", family.c_str(), clock);
  std::printf("\n");
}

int run(int argc, char** argv) {
  std::string dir = std::string(PARTRAIN_SOURCE_DIR) + "/etc/hardware", rates;
  bool do_fit = false, half = false, explain = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--fit")) {
      do_fit = true;
    } else if (!std::strcmp(argv[i], "--explain")) {
      explain = true;
    } else if (!std::strcmp(argv[i], "--fit-half")) {
      half = true;
    } else if (!std::strcmp(argv[i], "--hardware-dir") && i + 1 < argc) {
      dir = argv[++i];
    } else if (!std::strcmp(argv[i], "--rates") && i + 1 < argc) {
      rates = argv[++i];
    } else {
      std::fprintf(stderr, "usage: planner_validate [--fit | --fit-half | --explain] [--rates FILE] [--hardware-dir DIR]\n");
      return 2;
    }
  }
  Result<std::vector<PlannedRun>> planned = plan_published(dir);
  if (!planned) {
    std::fprintf(stderr, "%s\n", planned.status().message().c_str());
    return 1;
  }
  std::vector<PlannedRun>& rows = *planned;
  if (!rates.empty()) {
    Result<std::string> text = read_regular_file(rates, "gpu_rates.py file", size_t{4} << 20);
    if (!text) return std::fprintf(stderr, "%s\n", text.status().message().c_str()), 1;
    Result<planner::MeasuredRates> m = planner::parse_rates(*text, rates);
    if (!m) return std::fprintf(stderr, "%s\n", m.status().message().c_str()), 1;
    for (PlannedRun& r : rows) {
      if (device_family(r.run->profile) != "H100") continue;
      planner::apply_rates(*m, &r.hw);
      r.first = retime(*r.run, r.first, r.hw);
    }
    for (const PlannedRun& r : rows) {
      if (device_family(r.run->profile) != "H100") continue;
      const planner::HardwareProfile& h = r.hw;
      std::printf("H100 rows with %s (%s) applied: matmul_efficiency %.3f, gemm_k_half %.0f, attention %.3f "
                  "(fa2 %.3f), seq_half %.0f, head_dim_half %.0f, elementwise %.3f\n\n", rates.c_str(),
                  m->device.c_str(), h.matmul_efficiency, h.gemm_k_half, h.attention_efficiency,
                  h.attention_efficiency_fa2, h.attention_seq_half, h.attention_head_dim_half,
                  h.elementwise_efficiency);
      break;
    }
    do_fit = true;
  }
  if (half) {
    for (Half fit_on : {Half::kCalibration, Half::kHeldOut}) {
      const Half other = fit_on == Half::kCalibration ? Half::kHeldOut : Half::kCalibration;
      const Clocks c = fit_sustained_clock(rows, fit_on);
      std::printf("== fitted on the %s half:\n", half_name(fit_on));
      print_clocks(c);
      print_table(rows, c, "predicted half:", &other);
    }
    return 0;
  }
  if (do_fit) {
    const Clocks c = fit_sustained_clock(rows, Half::kCalibration);
    std::printf("sustained_clock fitted on the calibration half (the shipped profiles should carry these):\n");
    print_clocks(c);
    const Half held = Half::kHeldOut, calib = Half::kCalibration;
    print_table(rows, c, "held-out half (asserted in CI within 10%):", &held);
    print_table(rows, c, "calibration half:", &calib);
    return 0;
  }
  const Half held = Half::kHeldOut, calib = Half::kCalibration;
  print_table(rows, {}, "`partrain plan` against published runs, shipped profiles: held-out half", &held);
  print_table(rows, {}, "calibration half", &calib);
  if (explain) print_parts(rows);
  if (explain) print_memory(rows);
  for (const PublishedRun& r : published_runs()) {
    if (!r.excluded.empty()) std::printf("shown, not asserted: %s: %s\n\n", r.name.c_str(), r.excluded.c_str());
  }
  for (const Source& s : sources()) {
    std::printf("[%s] %s\n  framework: %s\n  assumed: %s\n\n", s.key.c_str(), s.citation.c_str(),
                s.framework.c_str(), s.assumptions.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace partrain::bench

int main(int argc, char** argv) { return partrain::bench::run(argc, argv); }
