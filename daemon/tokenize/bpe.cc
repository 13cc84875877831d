#include "tokenize/bpe.h"

#include <limits>

#include <fmt/format.h>

namespace partrain::tokenize {
namespace {

constexpr uint32_t kNoMerge = std::numeric_limits<uint32_t>::max();

std::string printable(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 32 && c < 127 && c != '\\') out.push_back(static_cast<char>(c));
    else out += fmt::format("\\x{:02x}", c);
  }
  return out;
}

}  // namespace

Status BpeModel::index_tokens() {
  ids_.reserve(tokens_.size());
  for (uint32_t id = 0; id < tokens_.size(); ++id) {
    if (tokens_[id].empty()) continue;
    if (!ids_.emplace(tokens_[id], id).second)
      return Status::invalid(fmt::format("token '{}' has two ids ({} and {})",
                                         printable(tokens_[id]), ids_[tokens_[id]], id));
  }
  for (int b = 0; b < 256; ++b) {
    const int64_t id = find(std::string(1, static_cast<char>(b)));
    if (id < 0)
      return Status::invalid(fmt::format("byte 0x{:02x} is not a token; a byte-level BPE "
                                         "vocabulary has all 256 bytes", b));
    byte_ids_[b] = static_cast<uint32_t>(id);
  }
  return Status::ok();
}

Result<BpeModel> BpeModel::from_ranks(std::vector<std::string> tokens) {
  BpeModel m;
  m.tokens_ = std::move(tokens);
  m.whole_piece_first_ = true;
  PARTRAIN_RETURN_IF_ERROR(m.index_tokens());
  // Every split of token t into two tokens (l, r) merges to t with priority rank(t) = t.
  for (uint32_t id = 0; id < m.tokens_.size(); ++id) {
    const std::string_view t = m.tokens_[id];
    for (size_t cut = 1; cut < t.size(); ++cut) {
      const int64_t l = m.find(t.substr(0, cut)), r = m.find(t.substr(cut));
      if (l >= 0 && r >= 0)
        m.merges_.emplace(key(static_cast<uint32_t>(l), static_cast<uint32_t>(r)), Merge{id, id});
    }
  }
  return m;
}

Result<BpeModel> BpeModel::from_merges(
    std::vector<std::string> tokens, const std::vector<std::pair<std::string, std::string>>& merges,
    bool whole_piece_first) {
  BpeModel m;
  m.tokens_ = std::move(tokens);
  m.whole_piece_first_ = whole_piece_first;
  PARTRAIN_RETURN_IF_ERROR(m.index_tokens());
  m.merges_.reserve(merges.size());
  for (uint32_t i = 0; i < merges.size(); ++i) {
    const auto& [left, right] = merges[i];
    const int64_t l = m.find(left), r = m.find(right), t = m.find(left + right);
    if (l < 0 || r < 0 || t < 0)
      return Status::invalid(fmt::format("merge {} ('{}' '{}'): '{}' is not in the vocabulary", i,
                                         printable(left), printable(right),
                                         printable(l < 0 ? left : r < 0 ? right : left + right)));
    // The first listing of a pair wins, as in Hugging Face's BPE.
    m.merges_.emplace(key(static_cast<uint32_t>(l), static_cast<uint32_t>(r)),
                      Merge{i, static_cast<uint32_t>(t)});
  }
  return m;
}

int64_t BpeModel::find(std::string_view bytes) const {
  auto it = ids_.find(bytes);
  return it == ids_.end() ? int64_t{-1} : static_cast<int64_t>(it->second);
}

const BpeModel::Merge* BpeModel::merge_of(uint32_t a, uint32_t b) const {
  auto it = merges_.find(key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encode_piece(std::string_view piece, std::vector<uint32_t>* out) const {
  if (piece.empty()) return;
  if (whole_piece_first_ || piece.size() == 1) {
    const int64_t whole = find(piece);
    if (whole >= 0) {
      out->push_back(static_cast<uint32_t>(whole));
      return;
    }
  }
  // parts[i] = id of part i; prio[i] = priority of merging parts i and i+1.
  std::vector<uint32_t> parts(piece.size()), prio(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) parts[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
  auto pair_prio = [&](size_t i) {
    if (i + 1 >= parts.size()) return kNoMerge;
    const Merge* m = merge_of(parts[i], parts[i + 1]);
    return m ? m->priority : kNoMerge;
  };
  for (size_t i = 0; i < parts.size(); ++i) prio[i] = pair_prio(i);
  for (;;) {
    size_t best = 0;
    uint32_t best_prio = kNoMerge;
    for (size_t i = 0; i + 1 < parts.size(); ++i)
      if (prio[i] < best_prio) best_prio = prio[i], best = i;
    if (best_prio == kNoMerge) break;
    parts[best] = merge_of(parts[best], parts[best + 1])->result;
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    prio.erase(prio.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    prio[best] = pair_prio(best);
    if (best > 0) prio[best - 1] = pair_prio(best - 1);
  }
  out->insert(out->end(), parts.begin(), parts.end());
}

}  // namespace partrain::tokenize
