#include "engine/model/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/philox.h"

namespace partrain::engine::model {

int32_t sample_token(std::span<const float> logits, const SamplingOptions& o, uint64_t index) {
  const int V = static_cast<int>(logits.size());
  if (o.temperature <= 0.0f)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  // Most probable first, ties to the lower id (a stable order of the logits).
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const int keep_k = o.top_k > 0 ? std::min(o.top_k, V) : V;
  const double mx = logits[ids[0]];
  std::vector<double> p(static_cast<size_t>(keep_k));
  double total = 0;
  for (int i = 0; i < V; ++i) {  // the normaliser is over all ids, as softmax then top-k
    const double e = std::exp((static_cast<double>(logits[ids[i]]) - mx) / o.temperature);
    if (i < keep_k) p[i] = e;
    total += e;
  }
  int keep = keep_k;
  double mass = 0;
  for (int i = 0; i < keep_k; ++i) {
    mass += p[i] / total;
    if (o.top_p < 1.0f && mass >= o.top_p) {
      keep = i + 1;
      break;
    }
  }
  double kept = 0;
  for (int i = 0; i < keep; ++i) kept += p[i];
  const double u = philox_uniform(philox_key(o.seed, 0x67656e /* "gen" */), index) * kept;
  double cum = 0;
  for (int i = 0; i < keep; ++i) {
    cum += p[i];
    if (u < cum) return ids[i];
  }
  return ids[keep - 1];
}

}  // namespace partrain::engine::model
