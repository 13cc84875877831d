#include "common/nearest.h"

#include <algorithm>

namespace partrain {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::string::npos;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    // Close in spelling (a typo), or one is the other with a prefix/suffix ("lr_max", "lr").
    const bool typo = d <= std::max<size_t>(2, word.size() / 3);
    const bool affix = c.size() >= 2 && word.size() >= 2 &&
                       (word.rfind(c, 0) == 0 || c.rfind(word, 0) == 0 ||
                        (word.size() > c.size() && word.compare(word.size() - c.size(), c.size(), c) == 0));
    if ((typo || affix) && d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace partrain
