// daemon/tokenize against hand-worked cases (the reference-implementation comparison on
// real vocabularies is token_equality_test.sh).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "tokenize/bpe.h"
#include "tokenize/byte_level.h"
#include "tokenize/encode_corpus.h"
#include "tokenize/split.h"
#include "tokenize/tokenizer.h"

namespace partrain::tokenize {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> byte_tokens() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
  return t;
}

std::vector<std::string> pieces(const Splitter& s, std::string_view text) {
  std::vector<std::string> out;
  s.split(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

TEST(ByteLevel, Gpt2Table) {
  EXPECT_EQ(byte_char('!'), 33u);
  EXPECT_EQ(byte_char(0), 0x100u);   // the first non-printable byte
  EXPECT_EQ(byte_char(10), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_char(32), 0x120u);  // 'Ġ': bytes 0..32 are the first 33 remapped
  EXPECT_EQ(byte_char(127), 0x121u);
  EXPECT_EQ(byte_char(173), 0x143u); // soft hyphen, the last remapped byte (256 + 67)
  EXPECT_EQ(byte_level_decode("\xC4\xA0hello"), std::optional<std::string>(" hello"));
  EXPECT_EQ(byte_level_decode("\xC4\x8A"), std::optional<std::string>("\n"));
  EXPECT_FALSE(byte_level_decode("\xE4\xB8\x80").has_value());  // U+4E00 is no byte
}

TEST(Bpe, RanksMergeTheLowestRankedPairFirst) {
  auto t = byte_tokens();
  t.push_back("ab");   // 256
  t.push_back("bc");   // 257
  t.push_back("abc");  // 258
  auto m = BpeModel::from_ranks(t);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  std::vector<uint32_t> ids;
  m->encode_piece("abcab", &ids);  // a|b|c|a|b -> ab|c|ab -> abc|ab
  EXPECT_EQ(ids, (std::vector<uint32_t>{258, 256}));
  ids.clear();
  m->encode_piece("cba", &ids);  // no pair merges
  EXPECT_EQ(ids, (std::vector<uint32_t>{'c', 'b', 'a'}));
}

TEST(Bpe, MergesFollowTheirListNotTheIds) {
  auto t = byte_tokens();
  t.push_back("ab");  // 256
  t.push_back("bc");  // 257
  // "b c" is listed first, so "abc" becomes a|bc even though ab has the lower id.
  auto m = BpeModel::from_merges(t, {{"b", "c"}, {"a", "b"}}, false);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  std::vector<uint32_t> ids;
  m->encode_piece("abc", &ids);
  EXPECT_EQ(ids, (std::vector<uint32_t>{'a', 257}));
  auto bad = BpeModel::from_merges(byte_tokens(), {{"x", "y"}}, false);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "merge 0 ('x' 'y'): 'xy' is not in the vocabulary");
}

TEST(Split, Gpt2Pattern) {
  auto s = Splitter::compile(kGpt2Pattern);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(pieces(*s, "I'm  here"), (std::vector<std::string>{"I", "'m", " ", " here"}));
  EXPECT_EQ(pieces(*s, "x  \nab"), (std::vector<std::string>{"x", "  ", "\n", "ab"}));
  EXPECT_EQ(pieces(*s, "été 2024!!"), (std::vector<std::string>{"été", " 2024", "!!"}));
}

TEST(Split, Cl100kPattern) {
  auto s = Splitter::compile(kCl100kPattern);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(pieces(*s, "Hello123456 WORLD'S\n\n  x"),
            (std::vector<std::string>{"Hello", "123", "456", " WORLD", "'S", "\n\n", " ", " x"}));
}

TEST(Split, RefusesABadPattern) {
  auto s = Splitter::compile("(unclosed");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("pre-tokenizer pattern: missing closing parenthesis"),
            std::string::npos) << s.status().message();
}

TEST(Utf8, InvalidSequencesBecomeReplacementCharacters) {
  std::string ok = "héllo 😀";
  EXPECT_EQ(to_valid_utf8(&ok), 0u);
  EXPECT_EQ(ok, "héllo 😀");
  std::string bad = "a\xFF" "b\xE2\x82";  // a stray byte, then a truncated 3-byte sequence
  EXPECT_EQ(to_valid_utf8(&bad), 2u);
  EXPECT_EQ(bad, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
  std::string surrogate = "\xED\xA0\x80";  // U+D800 encoded: not UTF-8
  EXPECT_EQ(to_valid_utf8(&surrogate), 1u);
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("partrain_tokenize_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const auto p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  static std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  fs::path dir_;
};

// A byte-level tokenizer.json: 256 bytes, "Ġt" "he" "Ġthe" merges, <|endoftext|>.
std::string tiny_tokenizer_json() {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    append_utf8(byte_char(static_cast<uint8_t>(b)), &spelled);
    std::string esc;
    for (char c : spelled) {
      if (c == '"' || c == '\\') esc += '\\';
      esc += c;
    }
    vocab += "\"" + esc + "\": " + std::to_string(b) + ", ";
  }
  vocab += "\"\xC4\xA0t\": 256, \"he\": 257, \"\xC4\xA0the\": 258";
  return "{\"added_tokens\": [{\"id\": 259, \"content\": \"<|endoftext|>\", \"special\": true}],"
         " \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
         "\"add_prefix_space\": false, \"use_regex\": true}, \"model\": {\"type\": \"BPE\", "
         "\"vocab\": {" + vocab + "}, \"merges\": [\"\xC4\xA0 t\", \"h e\", \"\xC4\xA0t he\"]}}";
}

TEST_F(TempDir, TokenizerJsonByteLevel) {
  auto tok = load_tokenizer(write("tokenizer.json", tiny_tokenizer_json()));
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  std::vector<uint32_t> ids;
  (*tok)->encode("the the", &ids);  // "the" -> t|he (no "the" token), " the" -> Ġthe
  EXPECT_EQ(ids, (std::vector<uint32_t>{'t', 257, 258}));
  EXPECT_EQ((*tok)->decode(ids), "the the");
  EXPECT_EQ((*tok)->separator(), 259u);
  EXPECT_EQ((*tok)->vocab_size(), 260u);
  EXPECT_EQ((*tok)->special_id("<|endoftext|>"), 259);
  EXPECT_EQ((*tok)->special_id("<|nope|>"), -1);
}

TEST_F(TempDir, LoadErrorsNameTheFileAndTheFix) {
  auto missing = load_tokenizer((dir_ / "none.json").string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  const auto wp = write("wp.json", "{\"model\": {\"type\": \"WordPiece\"}}");
  auto w = load_tokenizer(wp);
  ASSERT_FALSE(w.is_ok());
  EXPECT_EQ(w.status().message(), wp + ": model type WordPiece is not supported; partrain reads "
                                       "byte-level BPE tokenizer.json files");
  std::string ranks;
  for (int b = 0; b < 256; ++b) {
    static const char* k64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    ranks += std::string{k64[b >> 2], k64[(b & 3) << 4], '=', '='} + " " + std::to_string(b) + "\n";
  }
  const auto tk = write("small.tiktoken", ranks);
  auto t = load_tokenizer(tk);
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find(tk + ": a tiktoken file of 256 ranks is none of r50k"),
            std::string::npos) << t.status().message();
}

TEST(ShardName, NumberBeforeTheExtension) {
  EXPECT_EQ(shard_name("data/train.bin", 3), "data/train_000003.bin");
  EXPECT_EQ(shard_name("train", 12), "train_000012");
}

// Cutting a long document into chunks, and the thread count, do not change the ids: the
// whole document encoded in one call is the reference.
TEST_F(TempDir, ChunksAndThreadsGiveTheIdsOfTheWholeDocument) {
  auto tok = load_tokenizer(write("tokenizer.json", tiny_tokenizer_json()));
  ASSERT_TRUE(tok.is_ok());
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += "the  line " + std::to_string(i) + (i % 3 ? ".\nThe" : "\n\n  the") + " \t end\n";
  const auto txt = write("doc.txt", text);
  const auto jsonl = write("docs.jsonl", "{\"text\": \"the a\"}\n\n{\"id\": 1, \"text\": \"\"}\n");
  std::vector<uint32_t> expect{259};
  (*tok)->encode(text, &expect);
  expect.push_back(259);
  (*tok)->encode("the a", &expect);
  expect.push_back(259);  // the empty document
  for (size_t chunk : {size_t{64}, size_t{1000}, size_t{1} << 30}) {
    for (int threads : {1, 3}) {
      EncodeOptions o;
      o.inputs = {txt, jsonl};
      o.output = (dir_ / "out.bin").string();
      o.chunk_bytes = chunk;
      o.threads = threads;
      auto s = encode_corpus(**tok, o, {});
      ASSERT_TRUE(s.is_ok()) << s.status().message();
      EXPECT_EQ(s->totals.documents, 3u);
      const std::string bytes = read(o.output);
      ASSERT_EQ(bytes.size(), 1024 + 2 * expect.size());  // uint16: the vocabulary is 260
      std::vector<uint32_t> got;
      for (size_t i = 1024; i < bytes.size(); i += 2)
        got.push_back(static_cast<uint8_t>(bytes[i]) | (static_cast<uint8_t>(bytes[i + 1]) << 8));
      EXPECT_EQ(got, expect) << "chunk " << chunk << " threads " << threads;
    }
  }
}

TEST_F(TempDir, ShardsOfAChosenSize) {
  auto tok = load_tokenizer(write("tokenizer.json", tiny_tokenizer_json()));
  ASSERT_TRUE(tok.is_ok());
  EncodeOptions o;
  o.inputs = {write("a.txt", "abcdefghij")};  // 1 separator + 10 bytes = 11 tokens
  o.output = (dir_ / "train.bin").string();
  o.shard_tokens = 4;
  auto s = encode_corpus(**tok, o, {});
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  ASSERT_EQ(s->shards.size(), 3u);
  EXPECT_EQ(s->shards[2], (dir_ / "train_000002.bin").string());
  EXPECT_EQ(fs::file_size(s->shards[0]), 1024u + 8);
  EXPECT_EQ(fs::file_size(s->shards[2]), 1024u + 6);  // the last 3 tokens
}

TEST_F(TempDir, JsonlWithoutTheTextFieldIsRefused) {
  auto tok = load_tokenizer(write("tokenizer.json", tiny_tokenizer_json()));
  ASSERT_TRUE(tok.is_ok());
  EncodeOptions o;
  const auto bad = write("bad.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n");
  o.inputs = {bad};
  o.output = (dir_ / "out.bin").string();
  auto s = encode_corpus(**tok, o, {});
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().message(), bad + ":2: expected a JSON object with a string field \"text\" "
                                        "(name another with --text-key)");
}

// A document with no cut point ("x\nA") is cut by force near chunk_bytes (just before a
// ' ', as stated in encode_corpus.h), never past max_chunk_bytes: the pieces decode back to
// the document, and every piece's ids are those of that piece encoded alone.
TEST_F(TempDir, ADocumentWithNoCutPointIsCutByForceAtASpace) {
  auto tok = load_tokenizer(write("tokenizer.json", tiny_tokenizer_json()));
  ASSERT_TRUE(tok.is_ok());
  std::string text;
  for (int i = 0; i < 300; ++i) text += "the word" + std::to_string(i) + " ";
  EncodeOptions o;
  o.inputs = {write("one_line.txt", text)};
  o.output = (dir_ / "out.bin").string();
  o.chunk_bytes = 100;
  o.max_chunk_bytes = 160;
  auto s = encode_corpus(**tok, o, {});
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const std::string bytes = read(o.output);
  std::vector<uint32_t> got;
  for (size_t i = 1024; i < bytes.size(); i += 2)
    got.push_back(static_cast<uint8_t>(bytes[i]) | (static_cast<uint8_t>(bytes[i + 1]) << 8));
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0], 259u);
  EXPECT_EQ((*tok)->decode(std::span<const uint32_t>(got).subspan(1)), text);
  // The reference: the text cut just before the first ' ' more than 100 bytes past each cut,
  // until the rest fits one piece (160 bytes).
  std::vector<uint32_t> expect{259};
  for (size_t at = 0; at < text.size();) {
    size_t end = text.size() - at <= 160 ? text.size() : text.find(' ', at + 101);
    if (end == std::string::npos) end = text.size();
    ASSERT_LE(end - at, 160u);
    (*tok)->encode(std::string_view(text).substr(at, end - at), &expect);
    at = end;
  }
  EXPECT_EQ(got, expect);
}

// Invalid UTF-8 in a .jsonl line is named as such, with the file, line and byte.
TEST_F(TempDir, JsonlThatIsNotUtf8IsNamedAsSuch) {
  auto tok = load_tokenizer(write("tokenizer.json", tiny_tokenizer_json()));
  ASSERT_TRUE(tok.is_ok());
  EncodeOptions o;
  const auto bad = write("latin1.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"caf\xE9\"}\n");
  o.inputs = {bad};
  o.output = (dir_ / "out.bin").string();
  auto s = encode_corpus(**tok, o, {});
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), bad + ":2: byte 14 of the line is not UTF-8 (JSON text must be "
                                        "UTF-8); convert the file, e.g. iconv -f latin1 -t utf-8");
}

}  // namespace
}  // namespace partrain::tokenize
