#include "tokenize/tokenizer_json.h"

#include <map>
#include <vector>

#include <fmt/format.h>

#include "engine/io/json.h"
#include "tokenize/bpe_tokenizer.h"
#include "tokenize/byte_level.h"

namespace partrain::tokenize {
namespace {

using engine::io::JsonValue;

const JsonValue* member(const JsonValue& obj, std::string_view key) {
  if (obj.kind != JsonValue::Kind::kObject) return nullptr;
  for (const auto& [k, v] : obj.members)
    if (k == key) return &v;
  return nullptr;
}

bool is_null(const JsonValue* v) { return v == nullptr || v->kind == JsonValue::Kind::kNull; }

bool truthy(const JsonValue* v) { return v != nullptr && v->kind == JsonValue::Kind::kBool && v->boolean; }

std::string type_of(const JsonValue& v) {
  const JsonValue* t = member(v, "type");
  return t != nullptr && t->kind == JsonValue::Kind::kString ? t->text : "?";
}

struct PreTokenizer {
  std::string pattern;
  bool add_prefix_space = false;
};

// ByteLevel alone, or Split(Regex, Isolated) then ByteLevel without its own regex.
Result<PreTokenizer> read_pre_tokenizer(const JsonValue* pre, const std::string& path) {
  auto refuse = [&](const std::string& what) {
    return Status::invalid(fmt::format(
        "{}: pre_tokenizer {} is not supported; partrain reads byte-level BPE tokenizers "
        "(ByteLevel, or Split with a Regex then ByteLevel)", path, what));
  };
  if (is_null(pre)) return refuse("null");
  if (type_of(*pre) == "ByteLevel") {
    const JsonValue* use_regex = member(*pre, "use_regex");
    if (use_regex != nullptr && !truthy(use_regex)) return refuse("ByteLevel without a regex");
    return PreTokenizer{kGpt2Pattern, truthy(member(*pre, "add_prefix_space"))};
  }
  if (type_of(*pre) != "Sequence") return refuse(type_of(*pre));
  const JsonValue* list = member(*pre, "pretokenizers");
  if (list == nullptr || list->items.size() != 2 || type_of(list->items[0]) != "Split" ||
      type_of(list->items[1]) != "ByteLevel")
    return refuse("Sequence (other than [Split, ByteLevel])");
  const JsonValue& split = list->items[0];
  const JsonValue* pattern = member(split, "pattern");
  const JsonValue* regex = pattern ? member(*pattern, "Regex") : nullptr;
  const JsonValue* behavior = member(split, "behavior");
  if (regex == nullptr || regex->kind != JsonValue::Kind::kString)
    return refuse("Split without a Regex pattern");
  if (behavior == nullptr || behavior->text != "Isolated" || truthy(member(split, "invert")))
    return refuse("Split other than behavior Isolated, invert false");
  if (truthy(member(list->items[1], "use_regex"))) return refuse("ByteLevel with a second regex");
  return PreTokenizer{regex->text, truthy(member(list->items[1], "add_prefix_space"))};
}

Result<std::vector<std::pair<std::string, std::string>>> read_merges(const JsonValue& merges,
                                                                      const std::string& path) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.items.size());
  for (size_t i = 0; i < merges.items.size(); ++i) {
    const JsonValue& m = merges.items[i];
    std::string left, right;
    if (m.kind == JsonValue::Kind::kString) {  // "Ġ t"
      const size_t sp = m.text.find(' ');
      if (sp == std::string::npos || m.text.find(' ', sp + 1) != std::string::npos)
        return Status::invalid(fmt::format("{}: merge {} '{}' is not 'LEFT RIGHT'", path, i, m.text));
      left = m.text.substr(0, sp);
      right = m.text.substr(sp + 1);
    } else if (m.kind == JsonValue::Kind::kArray && m.items.size() == 2) {  // ["Ġ", "t"]
      left = m.items[0].text;
      right = m.items[1].text;
    } else {
      return Status::invalid(fmt::format("{}: merge {} is neither 'LEFT RIGHT' nor [LEFT, RIGHT]", path, i));
    }
    auto l = byte_level_decode(left), r = byte_level_decode(right);
    if (!l || !r)
      return Status::invalid(fmt::format("{}: merge {} is not spelled in byte-level characters", path, i));
    out.emplace_back(std::move(*l), std::move(*r));
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_tokenizer_json(const std::string& path,
                                                       const std::string& text) {
  auto doc = engine::io::parse_json(text);
  if (!doc) return Status::invalid(fmt::format("{}: {}", path, doc.status().message()));
  const JsonValue* model = member(*doc, "model");
  if (model == nullptr || type_of(*model) != "BPE")
    return Status::invalid(fmt::format("{}: model type {} is not supported; partrain reads "
                                       "byte-level BPE tokenizer.json files",
                                       path, model ? type_of(*model) : "(none)"));
  if (!is_null(member(*doc, "normalizer")))
    return Status::invalid(fmt::format("{}: normalizer {} is not supported (byte-level BPE "
                                       "tokenizers have none)", path,
                                       type_of(*member(*doc, "normalizer"))));
  const JsonValue* prefix = member(*model, "continuing_subword_prefix");
  if (truthy(member(*model, "byte_fallback")) ||
      (prefix != nullptr && prefix->kind == JsonValue::Kind::kString && !prefix->text.empty()))
    return Status::invalid(fmt::format("{}: a BPE with byte_fallback or a subword prefix is "
                                       "not byte-level; use the model's SentencePiece file", path));
  auto pre = read_pre_tokenizer(member(*doc, "pre_tokenizer"), path);
  if (!pre) return pre.status();

  const JsonValue* vocab = member(*model, "vocab");
  const JsonValue* merges = member(*model, "merges");
  if (vocab == nullptr || vocab->kind != JsonValue::Kind::kObject || merges == nullptr ||
      merges->kind != JsonValue::Kind::kArray)
    return Status::invalid(fmt::format("{}: model has no vocab object or merges list", path));
  std::vector<std::string> tokens;
  for (const auto& [spelled, idv] : vocab->members) {
    uint64_t id = 0;
    auto bytes = byte_level_decode(spelled);
    if (!idv.as_u64(&id) || id > (1u << 24) || !bytes)
      return Status::invalid(fmt::format("{}: vocab entry '{}' is not a byte-level token with "
                                         "an id", path, spelled));
    if (tokens.size() <= id) tokens.resize(id + 1);
    tokens[id] = std::move(*bytes);
  }
  std::map<std::string, uint32_t> specials;
  if (const JsonValue* added = member(*doc, "added_tokens"); added != nullptr) {
    for (const JsonValue& t : added->items) {
      const JsonValue* content = member(t, "content");
      const JsonValue* idv = member(t, "id");
      uint64_t id = 0;
      if (content == nullptr || idv == nullptr || !idv->as_u64(&id))
        return Status::invalid(fmt::format("{}: an added_tokens entry lacks content or id", path));
      specials[content->text] = static_cast<uint32_t>(id);
      // An added token is matched as a whole by Hugging Face, never built by merges.
      if (id < tokens.size() && tokens[id] == content->text) tokens[id].clear();
    }
  }
  auto merge_list = read_merges(*merges, path);
  if (!merge_list) return merge_list.status();
  auto bpe = BpeModel::from_merges(std::move(tokens), *merge_list,
                                   truthy(member(*model, "ignore_merges")));
  if (!bpe) return Status::invalid(fmt::format("{}: {}", path, bpe.status().message()));
  const int64_t sep = first_special(specials, {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"});
  if (sep < 0)
    return Status::invalid(fmt::format("{}: none of <|endoftext|>, <|end_of_text|>, </s>, <eos> "
                                       "is among added_tokens; partrain separates documents "
                                       "with one", path));
  auto splitter = Splitter::compile(pre->pattern);
  if (!splitter) return Status::invalid(fmt::format("{}: {}", path, splitter.status().message()));
  const bool known = known_pattern(pre->pattern);
  BpeTokenizerParts parts{"tokenizer.json byte-level BPE", std::move(*splitter), std::move(*bpe),
                          std::move(specials), static_cast<uint32_t>(sep), pre->add_prefix_space,
                          known};
  return make_bpe_tokenizer(std::move(parts));
}

}  // namespace partrain::tokenize
