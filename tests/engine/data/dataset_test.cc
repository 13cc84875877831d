// Token shards: both llm.c versions, both raw widths, windows across shard boundaries,
// and the exact one-line message for every kind of bad input. Test files are written
// byte by byte here (not with write_shard) so the reader is checked against the format,
// not against its own writer.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/data/dataset.h"

namespace partrain::engine::data {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/partrain-data-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() {
    for (const auto& f : files_) std::remove(f.c_str());
    rmdir(path_.c_str());
  }
  std::string file(const std::string& name) {
    files_.push_back(path_ + "/" + name);
    return files_.back();
  }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

void put_u32(std::vector<uint8_t>* out, uint32_t v) {
  for (int b = 0; b < 4; ++b) out->push_back(static_cast<uint8_t>(v >> (8 * b)));
}

// An llm.c header (256 little-endian int32) followed by tokens of `width` bytes.
std::vector<uint8_t> llmc_bytes(int32_t magic, int32_t version, int32_t count,
                                const std::vector<uint32_t>& tokens, int width) {
  std::vector<uint8_t> out;
  put_u32(&out, static_cast<uint32_t>(magic));
  put_u32(&out, static_cast<uint32_t>(version));
  put_u32(&out, static_cast<uint32_t>(count));
  out.resize(1024, 0);
  for (uint32_t t : tokens)
    for (int b = 0; b < width; ++b) out.push_back(static_cast<uint8_t>(t >> (8 * b)));
  return out;
}

std::vector<uint8_t> raw_bytes(const std::vector<uint32_t>& tokens, int width) {
  std::vector<uint8_t> out;
  for (uint32_t t : tokens)
    for (int b = 0; b < width; ++b) out.push_back(static_cast<uint8_t>(t >> (8 * b)));
  return out;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint32_t> iota_tokens(uint32_t n, uint32_t first = 0) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

std::shared_ptr<TokenDataset> open_ok(const std::vector<std::string>& files,
                                      const std::string& format, int vocab, int seq_len) {
  DataOptions opt;
  opt.train_files = files;
  opt.format = format;
  auto ds = TokenDataset::open(opt, vocab, seq_len);
  EXPECT_TRUE(ds.is_ok()) << ds.status().message();
  return ds.is_ok() ? *ds : nullptr;
}

std::string open_error(const std::vector<std::string>& files, const std::string& format,
                       int vocab, int seq_len) {
  DataOptions opt;
  opt.train_files = files;
  opt.format = format;
  auto ds = TokenDataset::open(opt, vocab, seq_len);
  EXPECT_FALSE(ds.is_ok());
  return ds.is_ok() ? "" : ds.status().message();
}

// Window w of T: inputs = tokens w(T+1) .. w(T+1)+T-1, targets one further.
void expect_window(const TokenDataset& ds, uint64_t w, int T, uint32_t first_token) {
  std::vector<int32_t> in(T), tg(T);
  ASSERT_TRUE(ds.read_window(w, in.data(), tg.data()).is_ok());
  for (int i = 0; i < T; ++i) {
    EXPECT_EQ(in[i], static_cast<int32_t>(first_token + w * (T + 1) + i)) << "w=" << w << " i=" << i;
    EXPECT_EQ(tg[i], static_cast<int32_t>(first_token + w * (T + 1) + i + 1)) << "w=" << w << " i=" << i;
  }
}

TEST(TokenDataset, ReadsLlmcVersion1Uint16) {
  TempDir dir;
  const auto path = dir.file("a.bin");
  write_file(path, llmc_bytes(20240520, 1, 100, iota_tokens(100), 2));
  for (const char* format : {"auto", "llmc"}) {
    auto ds = open_ok({path}, format, 256, 9);
    ASSERT_NE(ds, nullptr);
    EXPECT_EQ(ds->num_tokens(), 100u);
    EXPECT_EQ(ds->num_windows(), 10u);
    for (uint64_t w = 0; w < 10; ++w) expect_window(*ds, w, 9, 0);
  }
}

TEST(TokenDataset, ReadsLlmcVersion2Uint32) {
  TempDir dir;
  const auto path = dir.file("a.bin");
  write_file(path, llmc_bytes(20240520, 2, 50, iota_tokens(50, 70000), 4));
  auto ds = open_ok({path}, "auto", 100000, 4);
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->num_windows(), 10u);
  for (uint64_t w = 0; w < 10; ++w) expect_window(*ds, w, 4, 70000);
}

TEST(TokenDataset, ReadsLlmcLlama3Header) {
  TempDir dir;
  const auto path = dir.file("a.bin");
  write_file(path, llmc_bytes(20240801, 7, 12, iota_tokens(12, 128000), 4));
  auto ds = open_ok({path}, "auto", 128256, 3);
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->num_windows(), 3u);
  expect_window(*ds, 2, 3, 128000);
}

TEST(TokenDataset, ReadsRawFormats) {
  TempDir dir;
  const auto u16 = dir.file("a.u16");
  const auto u32 = dir.file("a.u32");
  write_file(u16, raw_bytes(iota_tokens(30, 100), 2));
  write_file(u32, raw_bytes(iota_tokens(30, 65530), 4));
  auto a = open_ok({u16}, "raw-u16", 256, 5);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->num_windows(), 5u);
  for (uint64_t w = 0; w < 5; ++w) expect_window(*a, w, 5, 100);
  auto b = open_ok({u32}, "raw-u32", 70000, 5);
  ASSERT_NE(b, nullptr);
  for (uint64_t w = 0; w < 5; ++w) expect_window(*b, w, 5, 65530);
}

TEST(TokenDataset, WindowsSpanShardsAndSkipEmptyOnes) {
  TempDir dir;
  const auto a = dir.file("a.bin"), empty = dir.file("e.bin"), b = dir.file("b.bin");
  write_file(a, llmc_bytes(20240520, 1, 15, iota_tokens(15), 2));
  write_file(empty, llmc_bytes(20240520, 1, 0, {}, 2));
  write_file(b, llmc_bytes(20240520, 1, 20, iota_tokens(20, 15), 2));
  auto ds = open_ok({a, empty, b}, "llmc", 256, 7);
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->num_tokens(), 35u);
  EXPECT_EQ(ds->num_windows(), 4u);  // 35 / 8; the last 3 tokens are never read
  for (uint64_t w = 0; w < 4; ++w) expect_window(*ds, w, 7, 0);
}

TEST(TokenDataset, WriteShardMatchesTheLlmcLayout) {
  TempDir dir;
  const auto path = dir.file("w.bin");
  ASSERT_TRUE(write_shard(path, {7, 300, 65535}, 2).is_ok());
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), 1024u + 6u);
  const std::vector<uint8_t> head = {0x88, 0xd8, 0x34, 0x01, 1, 0, 0, 0, 3, 0, 0, 0};  // 20240520 = 0x0134d888
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 12), head);
  for (size_t i = 12; i < 1024; ++i) ASSERT_EQ(bytes[i], 0) << i;
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin() + 1024, bytes.end()),
            (std::vector<uint8_t>{7, 0, 0x2c, 1, 0xff, 0xff}));

  const auto path32 = dir.file("w32.bin");
  ASSERT_TRUE(write_shard(path32, {1, 100000}, 4).is_ok());
  auto info = inspect_shard(path32);
  ASSERT_TRUE(info.is_ok()) << info.status().message();
  EXPECT_EQ(info->format, ShardFormat::kLlmcU32);
  EXPECT_EQ(info->num_tokens, 2u);
  EXPECT_EQ(info->min_token, 1u);
  EXPECT_EQ(info->max_token, 100000u);

  EXPECT_EQ(write_shard(dir.file("x.bin"), {70000}, 2).message(),
            dir.file("x.bin") + ": token 70000 at offset 0 does not fit uint16; write a uint32 shard");
}

TEST(TokenDataset, InspectReportsFormatAndRange) {
  TempDir dir;
  const auto path = dir.file("r.u16");
  write_file(path, raw_bytes({40, 10, 250, 33}, 2));
  auto info = inspect_shard(path, "raw-u16");
  ASSERT_TRUE(info.is_ok()) << info.status().message();
  EXPECT_EQ(info->format, ShardFormat::kRawU16);
  EXPECT_EQ(info->num_tokens, 4u);
  EXPECT_EQ(info->min_token, 10u);
  EXPECT_EQ(info->max_token, 250u);
  EXPECT_STREQ(shard_format_name(info->format), "raw-u16");
}

// ---- bad input: one line, naming the file and the fix --------------------------------

TEST(TokenDatasetErrors, WrongMagic) {
  TempDir dir;
  const auto p = dir.file("m.bin");
  write_file(p, llmc_bytes(12345, 1, 10, iota_tokens(10), 2));
  EXPECT_EQ(open_error({p}, "llmc", 256, 4),
            p + ": wrong magic 12345 (an llm.c shard starts with 20240520); re-create the shard, "
                "or set [data] format = \"raw-u16\" or \"raw-u32\" if it has no header");
}

TEST(TokenDatasetErrors, AutoWithoutHeaderAsksForAFormat) {
  TempDir dir;
  const auto p = dir.file("raw.bin");
  write_file(p, raw_bytes(iota_tokens(40), 2));
  const std::string want = p + ": no llm.c header (magic 20240520), so the format is unknown; set "
                               "[data] format = \"raw-u16\" or \"raw-u32\" for headerless tokens";
  EXPECT_EQ(open_error({p}, "auto", 256, 4), want);
  const auto tiny = dir.file("tiny.bin");
  write_file(tiny, {1, 2});
  EXPECT_EQ(open_error({tiny}, "auto", 256, 4),
            tiny + ": no llm.c header (magic 20240520), so the format is unknown; set "
                   "[data] format = \"raw-u16\" or \"raw-u32\" for headerless tokens");
}

TEST(TokenDatasetErrors, TruncatedShard) {
  TempDir dir;
  const auto p = dir.file("t.bin");
  write_file(p, llmc_bytes(20240520, 1, 100, iota_tokens(50), 2));
  EXPECT_EQ(open_error({p}, "auto", 256, 4),
            p + ": truncated: the header says 100 tokens (1224 bytes with the header) but the file "
                "has 1124 bytes; re-create the shard");
  const auto h = dir.file("h.bin");
  write_file(h, std::vector<uint8_t>{0x88, 0xd8, 0x34, 0x01, 1, 0, 0, 0});
  EXPECT_EQ(open_error({h}, "auto", 256, 4),
            h + ": truncated: 8 bytes is shorter than the 1024-byte llm.c header; re-create the shard");
}

TEST(TokenDatasetErrors, TrailingBytes) {
  TempDir dir;
  const auto p = dir.file("t.bin");
  write_file(p, llmc_bytes(20240520, 1, 10, iota_tokens(12), 2));
  EXPECT_EQ(open_error({p}, "auto", 256, 4),
            p + ": 4 bytes follow the 10 tokens the header declares (1044 bytes expected, 1048 "
                "found); re-create the shard");
}

TEST(TokenDatasetErrors, RawSizeNotWholeTokens) {
  TempDir dir;
  const auto p = dir.file("r.u32");
  write_file(p, std::vector<uint8_t>(10, 1));
  EXPECT_EQ(open_error({p}, "raw-u32", 256, 1),
            p + ": truncated: 10 bytes is not a whole number of 4-byte tokens (raw-u32); check "
                "[data] format or re-create the shard");
}

TEST(TokenDatasetErrors, UnsupportedVersion) {
  TempDir dir;
  const auto p = dir.file("v.bin");
  write_file(p, llmc_bytes(20240520, 3, 4, iota_tokens(4), 2));
  EXPECT_EQ(open_error({p}, "auto", 256, 1),
            p + ": unsupported llm.c shard version 3 for magic 20240520 (supported: 20240520 with "
                "version 1 = uint16 or 2 = uint32 tokens, 20240801 with version 7 = uint32); "
                "re-create the shard");
}

TEST(TokenDatasetErrors, TokenOutsideVocab) {
  TempDir dir;
  const auto ok = dir.file("ok.bin"), bad = dir.file("bad.bin");
  write_file(ok, llmc_bytes(20240520, 1, 8, iota_tokens(8), 2));
  std::vector<uint32_t> toks = iota_tokens(20);
  toks[12] = 300;
  toks[15] = 400;  // only the first offender is named
  write_file(bad, llmc_bytes(20240520, 1, 20, toks, 2));
  EXPECT_EQ(open_error({ok, bad}, "auto", 256, 4),
            bad + ": token 300 at offset 12 is >= vocab_size 256; check [model] vocab_size or "
                  "the tokenizer");
  // Exactly vocab_size - 1 is fine.
  toks[12] = toks[15] = 255;
  write_file(bad, llmc_bytes(20240520, 1, 20, toks, 2));
  EXPECT_NE(open_ok({ok, bad}, "auto", 256, 4), nullptr);
}

TEST(TokenDatasetErrors, EmptyShardList) {
  EXPECT_EQ(open_error({}, "auto", 256, 4),
            "[data] train_files is empty: list at least one token shard (llm.c .bin or raw "
            "tokens); `partrain data encode` makes one from text");
}

TEST(TokenDatasetErrors, NoWholeWindow) {
  TempDir dir;
  const auto a = dir.file("a.bin"), b = dir.file("b.bin");
  write_file(a, llmc_bytes(20240520, 1, 6, iota_tokens(6), 2));
  write_file(b, llmc_bytes(20240520, 1, 3, iota_tokens(3), 2));
  EXPECT_EQ(open_error({a}, "auto", 256, 8),
            a + ": 6 tokens hold no whole window of seq_len + 1 = 9 tokens; add data or lower "
                "[model] seq_len");
  EXPECT_EQ(open_error({a, b}, "auto", 256, 9),
            a + " (and 1 more shards): 9 tokens hold no whole window of seq_len + 1 = 10 tokens; "
                "add data or lower [model] seq_len");
  EXPECT_NE(open_ok({a, b}, "auto", 256, 8), nullptr);  // 9 tokens = exactly one window
}

TEST(TokenDatasetErrors, MissingFileAndUnknownFormat) {
  TempDir dir;
  const auto p = dir.file("absent.bin");
  EXPECT_EQ(open_error({p}, "auto", 256, 4),
            p + ": cannot open token shard: No such file or directory; check [data] train_files");
  // A missing validation shard names its own list; `data inspect` (no job file) no list.
  DataOptions val;
  val.train_files = {p};
  Result<std::shared_ptr<TokenDataset>> v = TokenDataset::open(val, 256, 4, "[data] val_files");
  ASSERT_FALSE(v.is_ok());
  EXPECT_EQ(v.status().message(), p + ": cannot open token shard: No such file or directory; check [data] val_files");
  EXPECT_EQ(inspect_shard(p).status().message(), p + ": cannot open token shard: No such file or directory");
  const auto q = dir.file("q.bin");
  write_file(q, llmc_bytes(20240520, 1, 10, iota_tokens(10), 2));
  EXPECT_EQ(open_error({q}, "u16", 256, 4),
            q + ": unknown data format 'u16'; set [data] format to auto, llmc, raw-u16 or raw-u32");
}

// ---- the shipped example corpus --------------------------------------------------------

TEST(ExampleCorpus, ShardsAreByteLevelEnglishText) {
  const std::string root = PARTRAIN_SOURCE_DIR "/etc/examples/data/";
  uint64_t total = 0;
  for (const char* name : {"licenses_train.bin", "licenses_val.bin"}) {
    auto info = inspect_shard(root + name, "llmc");
    ASSERT_TRUE(info.is_ok()) << info.status().message();
    EXPECT_EQ(info->format, ShardFormat::kLlmcU16);
    EXPECT_LT(info->max_token, 256u);
    total += info->num_tokens;
    auto ds = open_ok({root + name}, "auto", 256, 64);
    ASSERT_NE(ds, nullptr);
    // Real text: nearly every byte is printable ASCII or a newline.
    std::vector<int32_t> in(64), tg(64);
    uint64_t printable = 0, seen = 0;
    for (uint64_t w = 0; w < ds->num_windows(); w += 7) {
      ASSERT_TRUE(ds->read_window(w, in.data(), tg.data()).is_ok());
      for (int32_t t : in) printable += (t == '\n' || (t >= 32 && t < 127)), ++seen;
    }
    EXPECT_GT(static_cast<double>(printable) / static_cast<double>(seen), 0.99) << name;
  }
  EXPECT_GT(total, 150000u);  // enough for the demo's loss to fall visibly
}

}  // namespace
}  // namespace partrain::engine::data
