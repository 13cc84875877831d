#include "tokenize/tiktoken_file.h"

#include <charconv>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "tokenize/bpe_tokenizer.h"

namespace partrain::tokenize {
namespace {

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with '=' padding; false on any other character.
bool base64_decode(std::string_view in, std::string* out) {
  out->clear();
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const int v = base64_value(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

struct Flavour {
  const char* name;
  const char* pattern;
  std::map<std::string, uint32_t> specials;
  const char* separator;
};

std::map<std::string, uint32_t> llama3_specials() {
  // Meta's Llama 3.1 tokenizer.py: the named tokens, the rest reserved in order.
  std::map<uint32_t, std::string> named = {
      {128000, "<|begin_of_text|>"}, {128001, "<|end_of_text|>"},
      {128004, "<|finetune_right_pad_id|>"}, {128006, "<|start_header_id|>"},
      {128007, "<|end_header_id|>"}, {128008, "<|eom_id|>"}, {128009, "<|eot_id|>"},
      {128010, "<|python_tag|>"}};
  std::map<std::string, uint32_t> out;
  int reserved = 0;
  for (uint32_t id = 128000; id < 128256; ++id) {
    auto it = named.find(id);
    out[it != named.end() ? it->second
                          : fmt::format("<|reserved_special_token_{}|>", reserved++)] = id;
  }
  return out;
}

Result<Flavour> flavour_for(size_t ranks, const std::string& path) {
  switch (ranks) {
    case 50256: return Flavour{"tiktoken r50k (GPT-2)", kGpt2Pattern, {{"<|endoftext|>", 50256}}, "<|endoftext|>"};
    case 50280: return Flavour{"tiktoken p50k", kGpt2Pattern, {{"<|endoftext|>", 50256}}, "<|endoftext|>"};
    case 100256:
      return Flavour{"tiktoken cl100k", kCl100kPattern,
                     {{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258},
                      {"<|fim_middle|>", 100259}, {"<|fim_suffix|>", 100260},
                      {"<|endofprompt|>", 100276}},
                     "<|endoftext|>"};
    case 128000: return Flavour{"tiktoken Llama 3", kLlama3Pattern, llama3_specials(), "<|end_of_text|>"};
    case 199998:
      return Flavour{"tiktoken o200k", kO200kPattern,
                     {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}, "<|endoftext|>"};
    default:
      return Status::invalid(fmt::format(
          "{}: a tiktoken file of {} ranks is none of r50k (50256), p50k (50280), cl100k "
          "(100256), Llama 3 (128000) or o200k (199998), so its pre-tokenizer is unknown; "
          "use a tokenizer.json, which names its pattern",
          path, ranks));
  }
}

}  // namespace

bool looks_like_tiktoken(const std::string& head) {
  const size_t sp = head.find(' ');
  const size_t nl = head.find('\n');
  if (sp == std::string::npos || sp == 0 || (nl != std::string::npos && nl < sp)) return false;
  for (size_t i = 0; i < sp; ++i)
    if (base64_value(head[i]) < 0 && head[i] != '=') return false;
  const size_t end = nl == std::string::npos ? head.size() : nl;
  if (end <= sp + 1) return false;
  for (size_t i = sp + 1; i < end; ++i)
    if (head[i] < '0' || head[i] > '9') return false;
  return true;
}

Result<std::unique_ptr<Tokenizer>> load_tiktoken(const std::string& path, const std::string& text) {
  std::vector<std::string> tokens;
  size_t line_no = 0, pos = 0, count = 0;
  std::string bytes;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    uint64_t rank = 0;
    const char* num_end = line.data() + line.size();
    if (sp == std::string_view::npos ||
        std::from_chars(line.data() + sp + 1, num_end, rank).ptr != num_end ||
        !base64_decode(line.substr(0, sp), &bytes) || bytes.empty() || rank > (1u << 24))
      return Status::invalid(fmt::format(
          "{}:{}: expected 'BASE64 RANK' (a tiktoken rank file)", path, line_no));
    if (tokens.size() <= rank) tokens.resize(rank + 1);
    if (!tokens[rank].empty())
      return Status::invalid(fmt::format("{}:{}: rank {} appears twice", path, line_no, rank));
    tokens[rank] = bytes;
    ++count;
  }
  if (count != tokens.size())
    return Status::invalid(fmt::format("{}: ranks are not 0..{} without holes", path, count - 1));
  auto flavour = flavour_for(count, path);
  if (!flavour) return flavour.status();
  auto model = BpeModel::from_ranks(std::move(tokens));
  if (!model) return Status::invalid(fmt::format("{}: {}", path, model.status().message()));
  auto splitter = Splitter::compile(flavour->pattern);
  if (!splitter) return splitter.status();
  BpeTokenizerParts parts{flavour->name, std::move(*splitter), std::move(*model),
                          flavour->specials, flavour->specials.at(flavour->separator), false, true};
  return make_bpe_tokenizer(std::move(parts));
}

}  // namespace partrain::tokenize
