#include "tokenize/sentencepiece_model.h"

#include <sentencepiece_processor.h>

#include <fmt/format.h>

namespace partrain::tokenize {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp)
      : sp_(std::move(sp)) {}

  void encode(std::string_view text, std::vector<uint32_t>* out) const override {
    std::vector<int> ids;
    // Encode is const and thread-safe in libsentencepiece; it fails only on an unloaded model.
    if (!sp_->Encode(absl::string_view(text.data(), text.size()), &ids).ok()) return;
    out->insert(out->end(), ids.begin(), ids.end());
  }
  std::string decode(std::span<const uint32_t> ids) const override {
    std::vector<int> v(ids.begin(), ids.end());
    std::string out;
    (void)sp_->Decode(v, &out);
    return out;
  }
  uint32_t vocab_size() const override { return static_cast<uint32_t>(sp_->GetPieceSize()); }
  uint32_t separator() const override {
    // </s>; a model trained without one (eos_id -1) separates with <unk> (id 0 by default).
    return static_cast<uint32_t>(sp_->eos_id() >= 0 ? sp_->eos_id() : sp_->unk_id());
  }
  int64_t special_id(std::string_view text) const override {
    const int id = sp_->PieceToId(absl::string_view(text.data(), text.size()));
    return id == sp_->unk_id() && text != sp_->IdToPiece(id) ? -1 : id;
  }
  bool cuts_at_line_starts() const override { return false; }
  std::string describe() const override {
    return fmt::format("SentencePiece ({} tokens)", vocab_size());
  }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_sentencepiece(const std::string& path,
                                                      const std::string& bytes) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto st = sp->LoadFromSerializedProto(absl::string_view(bytes.data(), bytes.size()));
  if (!st.ok())
    return Status::invalid(fmt::format("{}: not a SentencePiece model, tiktoken rank file or "
                                       "tokenizer.json ({})", path, st.ToString()));
  return std::unique_ptr<Tokenizer>(std::make_unique<SentencePieceTokenizer>(std::move(sp)));
}

}  // namespace partrain::tokenize
