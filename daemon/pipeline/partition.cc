// See partition.h. Linear partition by dynamic programming over the blocks (the embedding
// and head ride on the first and last block), O(stages * L^2): L is at most a few hundred.
#include "pipeline/partition.h"

#include <algorithm>
#include <cstdio>
#include <limits>

namespace partrain::pipeline {

Result<std::vector<PieceCost>> piece_costs(const engine::ModelOptions& m) {
  if (m.ffn_hidden <= 0 || m.kv_heads <= 0 || m.heads <= 0 || m.layers < 1 || m.hidden < 1) {
    return Status::invalid("partrain: the model needs layers, hidden, heads, kv_heads and "
                           "ffn_hidden resolved (engine::resolved) for the stage partition");
  }
  const double C = m.hidden, T = m.seq_len, V = m.vocab_size, F = m.ffn_hidden;
  const double ckv = C * m.kv_heads / m.heads;
  const double attention = 4 * C * C + 4 * C * ckv + 4 * T * C;
  const double mlp = (m.arch == engine::Arch::kGpt2 ? 4.0 : 6.0) * C * F;
  std::vector<PieceCost> out;
  out.push_back({"embedding", 2 * C});
  for (int l = 0; l < m.layers; ++l) {
    const bool moe = engine::is_moe_layer(m, l);
    const double ffn = moe ? 2 * C * m.moe_experts + m.moe_top_k * mlp : mlp;
    out.push_back({"block " + std::to_string(l), attention + ffn});
  }
  out.push_back({"head", 2 * C * V});
  return out;
}

Result<std::vector<StagePart>> partition_stages(const std::vector<PieceCost>& pieces, int k,
                                                const std::vector<int>& layers_per_stage) {
  const int L = static_cast<int>(pieces.size()) - 2;
  if (k < 1 || L < k) {
    return Status::invalid("partrain: " + std::to_string(std::max(L, 0)) +
                           " transformer blocks cannot fill " + std::to_string(k) +
                           " pipeline stages (each needs at least one); lower pp or the "
                           "virtual stages, or add layers");
  }
  // w[i]: block i with the embedding on the first and the head on the last.
  std::vector<double> prefix(L + 1, 0.0);
  for (int i = 0; i < L; ++i) {
    double w = pieces[i + 1].flops;
    if (i == 0) w += pieces.front().flops;
    if (i == L - 1) w += pieces.back().flops;
    prefix[i + 1] = prefix[i] + w;
  }
  auto sum = [&](int a, int b) { return prefix[b] - prefix[a]; };
  auto part = [&](int stage, int first, int end) {
    return StagePart{stage, first, end, first == 0, end == L, sum(first, end)};
  };
  if (!layers_per_stage.empty()) {  // the job's own split
    std::vector<StagePart> parts;
    int first = 0;
    for (int n : layers_per_stage) {
      if (n < 1 || first + n > L || static_cast<int>(parts.size()) == k) break;
      parts.push_back(part(static_cast<int>(parts.size()), first, first + n));
      first += n;
    }
    if (static_cast<int>(parts.size()) != k || first != L || static_cast<int>(layers_per_stage.size()) != k) {
      return Status::invalid("partrain: stage_layers must give " + std::to_string(k) +
                             " counts of at least 1 that sum to the " + std::to_string(L) + " layers");
    }
    return parts;
  }
  // best[j][i]: the smallest possible largest stage for blocks i..L-1 in j stages.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(k + 1, std::vector<double>(L + 1, inf));
  best[0][L] = 0;
  for (int j = 1; j <= k; ++j) {
    for (int i = L - j; i >= 0; --i) {
      for (int e = i + 1; e <= L - (j - 1); ++e) {
        best[j][i] = std::min(best[j][i], std::max(sum(i, e), best[j - 1][e]));
      }
    }
  }
  const double bound = best[k][0];
  // Earlier stages take as many blocks as fit under the bound, leaving a feasible rest.
  const double slack = 1e-9 * std::max(bound, 1.0);
  std::vector<StagePart> parts;
  int i = 0;
  for (int j = k; j >= 1; --j) {
    int end = i + 1;
    for (int e = L - (j - 1); e > i; --e) {
      if (sum(i, e) <= bound + slack && best[j - 1][e] <= bound + slack) {
        end = e;
        break;
      }
    }
    parts.push_back(part(k - j, i, end));
    i = end;
  }
  return parts;
}

std::string describe_partition(const std::vector<StagePart>& parts, int pp) {
  double total = 0, largest = 0;
  for (const StagePart& p : parts) {
    total += p.flops;
    largest = std::max(largest, p.flops);
  }
  std::string out;
  char buf[160];
  for (const StagePart& p : parts) {
    std::string what = p.embedding ? "embedding + " : "";
    what += p.end_block - p.first_block == 1
                ? "block " + std::to_string(p.first_block)
                : "blocks " + std::to_string(p.first_block) + "-" + std::to_string(p.end_block - 1);
    if (p.head) what += " + head";
    std::snprintf(buf, sizeof buf, "stage %d (rank %d, chunk %d): %s, %.4g MFLOP/token (%.1f%%)\n",
                  p.stage, p.stage % pp, p.stage / pp, what.c_str(), p.flops / 1e6,
                  total > 0 ? 100.0 * p.flops / total : 0.0);
    out += buf;
  }
  const double mean = parts.empty() ? 0 : total / static_cast<double>(parts.size());
  std::snprintf(buf, sizeof buf, "imbalance: largest stage %.3fx the mean\n",
                mean > 0 ? largest / mean : 1.0);
  out += buf;
  return out;
}

}  // namespace partrain::pipeline
