// Byte-pair encoding of one pre-tokenized piece, over byte strings (tiktoken's and Hugging
// Face's byte-level BPE are the same algorithm with different priorities):
//
//   start from one part per byte; repeatedly merge the adjacent pair (a, b) whose merge has
//   the lowest priority (the leftmost on a tie) into the token a+b; stop when no adjacent
//   pair has a merge.
//
// tiktoken: any two adjacent parts whose concatenation is a token merge, with priority the
// rank of that token; so every split of a token into two tokens is a merge (from_ranks).
// Hugging Face: only the listed merges, priority = line number (from_merges).
//
// Worked example, ranks {a:0 b:1 c:2 ab:3 bc:4 abc:5}, piece "abc": parts a|b|c, pairs ab
// (3) and bc (4); merge ab -> ab|c; pair ab+c = abc (5); merge -> abc: ids [5].
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"

namespace partrain::tokenize {

class BpeModel {
 public:
  BpeModel() = default;
  BpeModel(BpeModel&&) = default;  // ids_ views stay valid: the strings' storage moves along
  BpeModel& operator=(BpeModel&&) = default;
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // `tokens[id]` = the token's bytes (an empty string is a hole: no token has that id).
  // Every single byte must be a token. tiktoken's rule: a piece that is a token is emitted
  // whole without merging.
  static Result<BpeModel> from_ranks(std::vector<std::string> tokens);
  // `tokens[id]` as above; merges[i] = (left bytes, right bytes), priority i. With
  // `whole_piece_first` (tokenizer.json's "ignore_merges": true) a piece that is a token is
  // emitted whole. Errors name the first merge whose parts or result are not tokens.
  static Result<BpeModel> from_merges(std::vector<std::string> tokens,
                                      const std::vector<std::pair<std::string, std::string>>& merges,
                                      bool whole_piece_first);

  // Appends the ids of `piece` (raw bytes, already pre-tokenized) to *out.
  void encode_piece(std::string_view piece, std::vector<uint32_t>* out) const;

  const std::string& bytes_of(uint32_t id) const { return tokens_[id]; }
  uint32_t num_ids() const { return static_cast<uint32_t>(tokens_.size()); }
  // The id of a token's bytes, or -1.
  int64_t find(std::string_view bytes) const;

 private:
  struct Merge {
    uint32_t priority;
    uint32_t result;
  };
  static uint64_t key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }
  Status index_tokens();
  const Merge* merge_of(uint32_t a, uint32_t b) const;

  std::vector<std::string> tokens_;
  std::unordered_map<std::string_view, uint32_t> ids_;  // views into tokens_
  std::unordered_map<uint64_t, Merge> merges_;
  uint32_t byte_ids_[256] = {};
  bool whole_piece_first_ = true;
};

}  // namespace partrain::tokenize
