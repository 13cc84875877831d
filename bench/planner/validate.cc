// `partrain plan` against published large-scale runs (published_runs.h).
//
//   planner_validate [--hardware-dir DIR]            the table: predicted vs published
//   planner_validate --fit [--hardware-dir DIR]      fit the profiles' kernel constants on every row
//   planner_validate --fit-half [--hardware-dir DIR] fit on half of the rows, predict the other half
//   planner_validate --explain [--hardware-dir DIR]  the table with each row's step time by part
//
// The fitted constants are the ones the shipped profiles mark "fitted": matmul_efficiency,
// gemm_k_half, elementwise_efficiency and (H100, the only device whose rows run
// FlashAttention) attention_efficiency, one set per device family (A100-80GB and A100-40GB
// are one chip). The fit minimizes the largest |log(predicted / published)| by
// coordinate descent from the shipped values. The halves alternate within each source, so
// both span every paper.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench/planner/published_runs.h"

#ifndef PARTRAIN_SOURCE_DIR
#define PARTRAIN_SOURCE_DIR "."
#endif

namespace partrain::bench {
namespace {

using planner::HardwareProfile;

std::string family(const std::string& profile) { return profile.rfind("A100", 0) == 0 ? "A100" : "H100"; }

// One fitted constant of a device family.
struct Knob {
  std::string family;
  double HardwareProfile::*field;
  const char* name;
  double lo, hi;
};

std::vector<Knob> knobs() {
  std::vector<Knob> k;
  for (const char* f : {"A100", "H100"}) {
    k.push_back({f, &HardwareProfile::matmul_efficiency, "matmul_efficiency", 0.3, 0.9});
    k.push_back({f, &HardwareProfile::gemm_k_half, "gemm_k_half", 0, 4096});
    k.push_back({f, &HardwareProfile::elementwise_efficiency, "elementwise_efficiency", 0.2, 1});
  }
  return k;
}

struct Row {
  const PublishedRun* run;
  HardwareProfile hw;
  Prediction first;
};

using Values = std::map<std::string, double>;  // "family.name" -> value

HardwareProfile apply(HardwareProfile hw, const Values& v) {
  for (const Knob& k : knobs()) {
    if (family(hw.name) != k.family) continue;
    const auto it = v.find(k.family + "." + k.name);
    if (it != v.end()) hw.*(k.field) = it->second;
  }
  return hw;
}

double error_of(const Row& r, const Values& v) {
  return retime(*r.run, r.first, apply(r.hw, v)).error;
}

// The largest |log(1 + error)| over `rows`, plus a small share of the mean square.
double loss(const std::vector<const Row*>& rows, const Values& v) {
  double worst = 0, sum = 0;
  for (const Row* r : rows) {
    const double e = std::log(1 + error_of(*r, v));
    worst = std::max(worst, std::fabs(e));
    sum += e * e;
  }
  return worst + 0.01 * sum / static_cast<double>(rows.size());
}

Values fit(const std::vector<const Row*>& rows, Values v) {
  // Coordinate descent: each constant in turn to the best of a ladder of multiples of its
  // value (a fixed step from the bounds' span when it is 0), the ladder narrowing when no
  // constant moves.
  double best = loss(rows, v);
  double spread = 0.5;
  for (int round = 0; round < 80 && spread > 1e-3; ++round) {
    bool moved = false;
    for (const Knob& k : knobs()) {
      const std::string key = k.family + "." + k.name;
      const double old = v[key];
      double chosen = old;
      for (double f : {-1.0, -0.6, -0.3, -0.1, 0.1, 0.3, 0.6, 1.0}) {
        const double base = old != 0 ? old : (k.hi - k.lo) * 0.05;
        const double trial = std::min(k.hi, std::max(k.lo, old + f * spread * base));
        v[key] = trial;
        const double l = loss(rows, v);
        if (l < best - 1e-12) {
          best = l;
          chosen = trial;
          moved = true;
        }
      }
      v[key] = chosen;
    }
    if (!moved) spread /= 2;
  }
  return v;
}

Values shipped(const std::vector<Row>& rows) {
  Values v;
  for (const Row& r : rows) {
    for (const Knob& k : knobs()) {
      if (family(r.hw.name) == k.family) v[k.family + "." + k.name] = r.hw.*(k.field);
    }
  }
  return v;
}

void print_table(const std::vector<const Row*>& rows, const Values& v, const char* title) {
  std::printf("%s\n", title);
  std::printf("%-26s %-11s %-10s %-44s %9s %9s %7s %7s %7s\n", "run", "source", "profile", "layout",
              "published", "predicted", "error", "pub MFU", "MFU");
  double worst = 0, sum = 0;
  for (const Row* r : rows) {
    const Prediction p = retime(*r->run, r->first, apply(r->hw, v));
    std::printf("%-26s %-11s %-10s %-44s %9.1f %9.1f %+6.1f%% %6.1f%% %6.1f%%\n", r->run->name.c_str(),
                r->run->source.c_str(), r->run->profile.c_str(), r->run->spec.c_str(),
                r->run->published_tflops, p.tflops, 100 * p.error, 100 * p.published_mfu, 100 * p.mfu);
    worst = std::max(worst, std::fabs(p.error));
    sum += p.error * p.error;
  }
  std::printf("%zu rows: largest |error| %.1f%%, rms %.1f%% (TFLOP/s per GPU as each source counts "
              "them; MFU in the planner's count, 6 N + 12 L T C per token over the profile's peak)\n\n",
              rows.size(), 100 * worst, 100 * std::sqrt(sum / static_cast<double>(rows.size())));
}

void print_parts(const std::vector<const Row*>& rows, const Values& v) {
  std::printf("%-26s %9s %8s %7s %7s %7s %7s %8s %8s %7s  (seconds per step)\n", "run", "step", "compute",
              "tp", "cp", "pp", "bubble", "dp", "dp shown", "optim");
  for (const Row* r : rows) {
    const planner::StepTime t = retime(*r->run, r->first, apply(r->hw, v)).plan.time;
    std::printf("%-26s %9.3f %8.3f %7.3f %7.3f %7.3f %7.3f %8.3f %8.3f %7.3f\n", r->run->name.c_str(),
                t.total, t.compute, t.tp, t.cp, t.pp, t.bubble, t.dp, t.dp_exposed, t.optimizer);
  }
  std::printf("\n%-26s %8s %8s %8s %8s %8s %8s  (ms per micro-batch of one block, and of the head)\n", "run",
              "forward", "backward", "recomp", "tp", "cp", "head");
  for (const Row* r : rows) {
    const planner::Plan& p = r->first.plan;
    const HardwareProfile hw = apply(r->hw, v);
    const planner::BlockCost b = planner::block_cost(p.model, p.layout, false, p.runtime, p.spans, p.precision, hw);
    std::printf("%-26s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", r->run->name.c_str(), 1e3 * b.forward,
                1e3 * b.backward, 1e3 * b.recompute, 1e3 * b.tp, 1e3 * b.cp,
                1e3 * planner::head_seconds(p.model, p.layout, p.precision, hw));
  }
  std::printf("\n");
}

void print_values(const Values& v) {
  for (const auto& [key, value] : v) std::printf("  %-32s %.4g\n", key.c_str(), value);
  std::printf("\n");
}

int run(int argc, char** argv) {
  std::string dir = std::string(PARTRAIN_SOURCE_DIR) + "/etc/hardware";
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
    } else {
      std::fprintf(stderr, "usage: planner_validate [--fit | --fit-half | --explain] [--hardware-dir DIR]\n");
      return 2;
    }
  }
  std::vector<Row> rows;
  for (const PublishedRun& run : published_runs()) {
    Result<HardwareProfile> hw = profile_of(run, dir);
    if (!hw) {
      std::fprintf(stderr, "%s\n", hw.status().message().c_str());
      return 2;
    }
    Result<Prediction> p = predict(run, *hw);
    if (!p) {
      std::fprintf(stderr, "%s: %s\n", run.name.c_str(), p.status().message().c_str());
      return 1;
    }
    rows.push_back({&run, *hw, std::move(p).value()});
  }
  std::vector<const Row*> all, a, b, excluded;
  std::map<std::string, int> seen;
  for (const Row& r : rows) {
    if (!r.run->excluded.empty()) {
      excluded.push_back(&r);
      continue;
    }
    all.push_back(&r);
    (seen[r.run->source]++ % 2 == 0 ? a : b).push_back(&r);
  }
  const Values start = shipped(rows);
  if (half) {
    for (int side = 0; side < 2; ++side) {
      const std::vector<const Row*>& train = side == 0 ? a : b;
      const std::vector<const Row*>& held = side == 0 ? b : a;
      const Values v = fit(train, start);
      std::printf("== fitted on half %c (%zu rows), constants:\n", side == 0 ? 'A' : 'B', train.size());
      print_values(v);
      print_table(train, v, side == 0 ? "half A (fitted on)" : "half B (fitted on)");
      print_table(held, v, side == 0 ? "half B (predicted)" : "half A (predicted)");
    }
    return 0;
  }
  if (do_fit) {
    const Values v = fit(all, start);
    std::printf("constants fitted on all %zu rows:\n", all.size());
    print_values(v);
    print_table(all, v, "with the fitted constants");
    return 0;
  }
  print_table(all, start, "`partrain plan` against published runs (shipped profiles)");
  if (explain) print_parts(all, start);
  print_table(excluded, start, "shown, not asserted:");
  for (const Row* r : excluded) std::printf("  %s: %s\n\n", r->run->name.c_str(), r->run->excluded.c_str());
  for (const Source& s : sources()) {
    std::printf("[%s] %s\n  framework: %s\n  assumed: %s\n\n", s.key.c_str(), s.citation.c_str(),
                s.framework.c_str(), s.assumptions.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace partrain::bench

int main(int argc, char** argv) { return partrain::bench::run(argc, argv); }
