// search_plans and why_it_wins (see plan.h).
#include "planner/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>

namespace partrain::planner {
namespace {

std::vector<int> divisors(int n, int at_most) {
  std::vector<int> out;
  for (int d = 1; d <= std::min(n, at_most); ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

const char* recompute_name(engine::Recompute r) {
  return r == engine::Recompute::kNone ? "none"
         : r == engine::Recompute::kSelective ? "selective" : "full";
}

std::string seconds(double s) {
  char buf[32];
  if (s >= 1) {
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  } else if (s >= 1e-3) {
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  }
  return buf;
}

}  // namespace

std::vector<Plan> search_plans(const config::JobConfig& job, const Cluster& cluster,
                               const HardwareProfile& hw, int* considered) {
  std::vector<Plan> fits;
  int tried = 0;
  const int world = cluster.world();
  const int experts = job.model.moe_experts;
  for (int tp : divisors(cluster.gpus_per_node, cluster.gpus_per_node)) {
    for (int pp : divisors(job.model.layers, job.model.layers)) {
      if (world % (tp * pp) != 0) continue;
      const int dp = world / (tp * pp);
      const int64_t per_dp = job.training.global_batch / dp;
      if (per_dp < 1 || job.training.global_batch % dp != 0) continue;
      for (int ep : experts > 0 ? divisors(dp, experts) : std::vector<int>{1}) {
        if (experts > 0 && experts % ep != 0) continue;
        for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
          for (int v : pp > 1 ? std::vector<int>{1, 2} : std::vector<int>{1}) {
            for (int micro : divisors(static_cast<int>(per_dp), 64)) {
              // Recompute and sp change memory and time, not the bytes moved: map once.
              std::optional<Plan> mapped;
              for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
                for (engine::Recompute r : {engine::Recompute::kNone, engine::Recompute::kSelective,
                                            engine::Recompute::kFull}) {
                  config::JobConfig candidate = job;
                  ParallelSpec& s = candidate.parallelism;
                  s = ParallelSpec{};
                  s.tp = tp, s.pp = pp, s.dp = dp, s.ep = ep, s.zero = zero;
                  s.sp = sp == 1;
                  s.sched = v > 1 ? "interleaved" : "1f1b";
                  s.virtual_stages = v;
                  candidate.training.micro_batch = micro;
                  candidate.model.recompute = r;
                  ++tried;
                  Result<Plan> plan = make_plan(candidate, cluster, hw, mapped ? &*mapped : nullptr);
                  if (!plan) continue;
                  if (!mapped) mapped = *plan;
                  if (plan->fits && plan->runnable.is_ok()) fits.push_back(std::move(plan).value());
                }
              }
            }
          }
        }
      }
    }
  }
  // Fastest first; among equals, the one with more memory to spare.
  std::stable_sort(fits.begin(), fits.end(), [](const Plan& a, const Plan& b) {
    if (a.time.tokens_per_s != b.time.tokens_per_s) return a.time.tokens_per_s > b.time.tokens_per_s;
    return a.memory.total() < b.memory.total();
  });
  if (considered != nullptr) *considered = tried;
  return fits;
}

std::string describe(const Plan& p) {
  return p.spec.to_string() + " recompute=" + recompute_name(p.model.recompute) +
         " micro_batch=" + std::to_string(p.layout.micro_batch);
}

std::string why_it_wins(const Plan& w, const Plan* next) {
  const double spare = (w.capacity - w.memory.total()) / (1 << 30);
  char head[160];
  std::snprintf(head, sizeof head, "fits with %.1f GiB to spare", spare);
  if (next == nullptr) return head;
  // The parts of the step where the winner saves the most time over the next one.
  const std::pair<const char*, double> parts[] = {
      {"compute", next->time.compute - w.time.compute},
      {"pipeline bubble", next->time.bubble - w.time.bubble},
      {"tensor-parallel all-reduces", next->time.tp - w.time.tp},
      {"context-parallel ring passes", next->time.cp - w.time.cp},
      {"expert all-to-alls", next->time.ep - w.time.ep},
      {"pipeline sends", next->time.pp - w.time.pp},
      {"exposed DP all-reduce", next->time.dp_exposed - w.time.dp_exposed},
      {"optimizer", next->time.optimizer - w.time.optimizer},
  };
  std::vector<std::pair<const char*, double>> gains(std::begin(parts), std::end(parts));
  std::sort(gains.begin(), gains.end(), [](auto& a, auto& b) { return a.second > b.second; });
  const double faster = w.time.tokens_per_s / next->time.tokens_per_s - 1;
  std::string out = head;
  char buf[96];
  if (faster <= 1e-9) {
    const double less = (next->memory.total() - w.memory.total()) / (1 << 30);
    std::snprintf(buf, sizeof buf, "; as fast as the next and needs %.2f GiB less per device", less);
    return out + buf;
  }
  std::snprintf(buf, sizeof buf, "; %.2f%% faster than the next: ", 100 * faster);
  out += buf;
  int shown = 0;
  for (const auto& [what, saved] : gains) {
    if (saved <= 0 || shown == 2) break;
    out += std::string(shown++ ? ", " : "") + seconds(saved) + " less " + what;
  }
  const auto& [worst, lost] = gains.back();
  if (lost < 0) out += " (for " + seconds(-lost) + " more " + worst + ")";
  return out;
}

}  // namespace partrain::planner
