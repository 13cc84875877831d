// search_layouts, why_it_loses and why_it_wins (see plan.h).
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

SearchResult search_layouts(const config::JobConfig& job, const Cluster& cluster, const HardwareProfile& hw,
                            const SearchOptions& options) {
  SearchResult out;
  const int world = cluster.world();
  const int experts = job.model.moe_experts;
  const std::vector<engine::Recompute> modes =
      options.vary_job ? std::vector<engine::Recompute>{engine::Recompute::kNone, engine::Recompute::kSelective,
                                                        engine::Recompute::kFull}
                       : std::vector<engine::Recompute>{job.model.recompute};
  for (int tp : divisors(cluster.gpus_per_node, cluster.gpus_per_node)) {
    for (int pp : divisors(job.model.layers, job.model.layers)) {
      if (world % (tp * pp) != 0) continue;
      const int dp = world / (tp * pp);
      const int64_t per_dp = job.training.global_batch / dp;
      if (per_dp < 1 || job.training.global_batch % dp != 0) continue;
      const std::vector<int> micros = options.vary_job ? divisors(static_cast<int>(per_dp), 64)
                                                       : std::vector<int>{job.training.micro_batch};
      for (int ep : experts > 0 ? divisors(dp, experts) : std::vector<int>{1}) {
        if (experts > 0 && experts % ep != 0) continue;
        for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
          for (int v : pp > 1 ? std::vector<int>{1, 2} : std::vector<int>{1}) {
            for (int micro : micros) {
              // Recompute and sp change memory and time, not the bytes moved: map once.
              std::optional<Plan> mapped;
              for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
                for (engine::Recompute r : modes) {
                  config::JobConfig candidate = job;
                  ParallelSpec& s = candidate.parallelism;
                  s = ParallelSpec{};
                  s.tp = tp, s.pp = pp, s.dp = dp, s.ep = ep, s.zero = zero;
                  s.sp = sp == 1;
                  s.sched = v > 1 ? "interleaved" : "1f1b";
                  s.virtual_stages = v;
                  candidate.training.micro_batch = micro;
                  candidate.model.recompute = r;
                  ++out.considered;
                  Result<Plan> plan = make_plan(candidate, cluster, hw, mapped ? &*mapped : nullptr);
                  if (!plan) {
                    const std::string spec = s.to_string();
                    if (out.invalid.size() < 1000 && (out.invalid.empty() || out.invalid.back().first != spec)) {
                      out.invalid.emplace_back(spec, plan.status().message());
                    }
                    continue;
                  }
                  if (!mapped) mapped = *plan;
                  (plan->fits && plan->runnable.is_ok() ? out.fits : out.rejected).push_back(std::move(plan).value());
                }
              }
            }
          }
        }
      }
    }
  }
  // Fastest first; among equals, the one with more memory to spare.
  auto faster = [](const Plan& a, const Plan& b) {
    if (a.time.tokens_per_s != b.time.tokens_per_s) return a.time.tokens_per_s > b.time.tokens_per_s;
    return a.memory.total() < b.memory.total();
  };
  std::stable_sort(out.fits.begin(), out.fits.end(), faster);
  std::stable_sort(out.rejected.begin(), out.rejected.end(), faster);
  return out;
}

std::vector<Plan> search_plans(const config::JobConfig& job, const Cluster& cluster,
                               const HardwareProfile& hw, int* considered) {
  SearchResult r = search_layouts(job, cluster, hw);
  if (considered != nullptr) *considered = r.considered;
  return std::move(r.fits);
}

std::string describe(const Plan& p) {
  return p.spec.to_string() + " recompute=" + recompute_name(p.model.recompute) +
         " micro_batch=" + std::to_string(p.layout.micro_batch);
}

namespace {

// The parts of the step `w` saves over `next`, largest first.
std::vector<std::pair<const char*, double>> savings(const Plan& w, const Plan& next) {
  std::vector<std::pair<const char*, double>> gains = {
      {"compute", next.time.compute - w.time.compute},
      {"pipeline bubble", next.time.bubble - w.time.bubble},
      {"tensor-parallel communication", next.time.tp - w.time.tp},
      {"context-parallel ring passes", next.time.cp - w.time.cp},
      {"expert all-to-alls", next.time.ep - w.time.ep},
      {"pipeline sends", next.time.pp - w.time.pp},
      {"exposed DP reduction and ZeRO gathers", next.time.dp_exposed - w.time.dp_exposed},
      {"optimizer", next.time.optimizer - w.time.optimizer},
  };
  std::sort(gains.begin(), gains.end(), [](auto& a, auto& b) { return a.second > b.second; });
  return gains;
}

}  // namespace

std::string why_it_loses(const Plan& loser, const Plan& winner) {
  char buf[160];
  if (!loser.fits) {
    std::snprintf(buf, sizeof buf, "needs %.1f GiB per device of %.1f", loser.memory.total() / (1 << 30),
                  loser.capacity / (1 << 30));
    return buf;
  }
  if (!loser.runnable.is_ok()) return "this version does not run it: " + loser.runnable.message();
  const double slower = winner.time.tokens_per_s / loser.time.tokens_per_s - 1;
  if (slower <= 1e-9) return "as fast; needs more memory";
  std::snprintf(buf, sizeof buf, "%.1f%% slower:", 100 * slower);
  std::string out = buf;
  int shown = 0;
  for (const auto& [what, lost] : savings(winner, loser)) {
    if (lost <= 0 || shown == 2) break;
    out += std::string(shown++ ? "," : "") + " " + seconds(lost) + " more " + what;
  }
  return out;
}

std::string why_it_wins(const Plan& w, const Plan* next) {
  const double spare = (w.capacity - w.memory.total()) / (1 << 30);
  char head[160];
  std::snprintf(head, sizeof head, "fits with %.1f GiB to spare", spare);
  if (next == nullptr) return head;
  // The parts of the step where the winner saves the most time over the next one.
  const std::vector<std::pair<const char*, double>> gains = savings(w, *next);
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
