#include "tokenize/bpe_tokenizer.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>

#include <fmt/format.h>

namespace partrain::tokenize {
namespace {

// Pieces repeat (words, indentation), so each thread keeps the ids of the pieces it met,
// up to kCacheEntries, then starts over. Keyed by the tokenizer's serial number so two
// tokenizers in one process never share entries.
constexpr size_t kCacheEntries = 1 << 16;
constexpr size_t kCachedPieceBytes = 64;
std::atomic<uint64_t> next_serial{1};

struct PieceCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<uint32_t>> ids;
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeTokenizerParts p) : p_(std::move(p)), serial_(next_serial++) {
    vocab_size_ = p_.model.num_ids();
    for (const auto& [text, id] : p_.specials) {
      vocab_size_ = std::max(vocab_size_, id + 1);
      special_text_[id] = text;
    }
  }

  void encode(std::string_view text, std::vector<uint32_t>* out) const override {
    thread_local PieceCache cache;
    if (cache.owner != serial_) {
      cache.ids.clear();
      cache.owner = serial_;
    }
    std::string prefixed;
    if (p_.add_prefix_space && !text.empty() && text.front() != ' ') {
      prefixed = " " + std::string(text);
      text = prefixed;
    }
    p_.splitter.split(text, [&](std::string_view piece) {
      if (piece.size() > kCachedPieceBytes) return p_.model.encode_piece(piece, out);
      auto it = cache.ids.find(std::string(piece));
      if (it == cache.ids.end()) {
        if (cache.ids.size() >= kCacheEntries) cache.ids.clear();
        std::vector<uint32_t> ids;
        p_.model.encode_piece(piece, &ids);
        it = cache.ids.emplace(std::string(piece), std::move(ids)).first;
      }
      out->insert(out->end(), it->second.begin(), it->second.end());
    });
  }

  std::string decode(std::span<const uint32_t> ids) const override {
    std::string out;
    for (uint32_t id : ids) {
      auto sp = special_text_.find(id);
      if (sp != special_text_.end()) out += sp->second;
      else if (id < p_.model.num_ids()) out += p_.model.bytes_of(id);
    }
    return out;
  }

  uint32_t vocab_size() const override { return vocab_size_; }
  uint32_t separator() const override { return p_.separator; }
  int64_t special_id(std::string_view text) const override {
    auto it = p_.specials.find(std::string(text));
    return it == p_.specials.end() ? int64_t{-1} : static_cast<int64_t>(it->second);
  }
  bool cuts_at_line_starts() const override {
    return p_.line_start_cuts && !p_.add_prefix_space;
  }
  std::string describe() const override {
    return fmt::format("{} ({} tokens)", p_.name, vocab_size_);
  }

 private:
  BpeTokenizerParts p_;
  uint64_t serial_;
  uint32_t vocab_size_ = 0;
  std::unordered_map<uint32_t, std::string> special_text_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeTokenizerParts parts) {
  return std::make_unique<BpeTokenizer>(std::move(parts));
}

bool known_pattern(const std::string& pattern) {
  return pattern == kGpt2Pattern || pattern == kCl100kPattern || pattern == kO200kPattern ||
         pattern == kLlama3Pattern;
}

int64_t first_special(const std::map<std::string, uint32_t>& specials,
                      std::initializer_list<const char*> names) {
  for (const char* n : names) {
    auto it = specials.find(n);
    if (it != specials.end()) return it->second;
  }
  return -1;
}

}  // namespace partrain::tokenize
