// safetensors: round trips, dtype conversion, every malformed-file message, the atomic
// writer, and interoperability with PyTorch both ways (through st_crosscheck.py, an
// independent reader/writer over torch.frombuffer).
#include <dirent.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/io/json.h"
#include "engine/io/safetensors.h"
#include "test_util.h"

namespace partrain::engine::io {
namespace {

// A scratch folder (tests/test_util.h) that can list its files.
class TempDir {
 public:
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }
  // Names in the folder (to see that no temp file was left behind).
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    DIR* d = opendir(path_.c_str());
    while (dirent* e = readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
    closedir(d);
    return out;
  }

 private:
  const partrain::testing::ScratchDir dir_{"partrain-st-test"};
  const std::string path_ = dir_.path().string();
};

template <typename T>
SafeTensor make(std::string name, SafeDType dtype, std::vector<int64_t> shape,
                const std::vector<T>& values) {
  SafeTensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

// The known tensors, as st_crosscheck.py defines them (written independently there).
std::vector<SafeTensor> known_tensors() {
  std::vector<float> f32(24);
  for (int i = 0; i < 24; ++i) f32[i] = static_cast<float>(i - 7) * 0.375f;
  // bf16 of i*0.5 - 1 = top 16 bits of the float.
  std::vector<uint16_t> bf16;
  for (int i = 0; i < 5; ++i) bf16.push_back(static_cast<uint16_t>(std::bit_cast<uint32_t>(i * 0.5f - 1.0f) >> 16));
  // f16 bit patterns of -0.5, -0.25, 0, 0.25, 2^-14 (smallest normal), 2^-24 (smallest subnormal).
  const std::vector<uint16_t> f16 = {0xb800, 0xb400, 0x0000, 0x3400, 0x0400, 0x0001};
  const std::vector<int32_t> i32 = {INT32_MIN, -1, 0, INT32_MAX};
  const std::vector<int64_t> i64 = {-(int64_t{1} << 40), (int64_t{1} << 40) + 3};
  const std::vector<uint16_t> u16 = {0, 40000, 65535};
  return {make("h.0.attn.c_attn.weight", SafeDType::kF32, {2, 3, 4}, f32),
          make("bf16", SafeDType::kBF16, {5}, bf16),
          make("f16", SafeDType::kF16, {3, 2}, f16),
          make("i32", SafeDType::kI32, {4}, i32),
          make("i64", SafeDType::kI64, {2}, i64),
          make("u16", SafeDType::kU16, {3}, u16),
          make("scalar", SafeDType::kF32, {}, std::vector<float>{3.5f}),
          make("empty", SafeDType::kF32, {0, 3}, std::vector<float>{})};
}
const std::map<std::string, std::string> kKnownMetadata = {
    {"format", "pt"}, {"note", "quote \" and backslash \\ and \xc3\xa9"}};

void expect_known(const SafetensorsFile& f) {
  const auto want = known_tensors();
  ASSERT_EQ(f.tensors.size(), want.size());
  for (const auto& w : want) {
    const SafeTensor* g = f.find(w.name);
    ASSERT_NE(g, nullptr) << w.name;
    EXPECT_EQ(g->dtype, w.dtype) << w.name;
    EXPECT_EQ(g->shape, w.shape) << w.name;
    EXPECT_EQ(g->bytes, w.bytes) << w.name;
  }
  EXPECT_EQ(f.metadata, kKnownMetadata);
}

std::string python_cmd(const std::string& mode, const std::string& path) {
  return std::string(PARTRAIN_TORCH_PYTHON) + " " + PARTRAIN_REFERENCE_DIR "/st_crosscheck.py " +
         mode + " '" + path + "'";
}

// Runs the Python half; returns its exit status (77 = torch missing).
int run_python(const std::string& mode, const std::string& path) {
  const int rc = std::system(python_cmd(mode, path).c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file from a header text and a data section, with the given header length field.
std::string file_bytes(const std::string& header, const std::string& data, uint64_t len) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &len, 8);
  return out + header + data;
}
std::string file_bytes(const std::string& header, const std::string& data) {
  return file_bytes(header, data, header.size());
}

std::string read_error(const TempDir& dir, const std::string& bytes) {
  const auto path = dir.file("bad.safetensors");
  write_bytes(path, bytes);
  auto r = read_safetensors(path);
  EXPECT_FALSE(r.is_ok());
  return r.is_ok() ? "" : r.status().message();
}

TEST(Safetensors, RoundTripsEveryDtypeShapeAndMetadata) {
  TempDir dir;
  const auto path = dir.file("w.safetensors");
  ASSERT_TRUE(write_safetensors(path, known_tensors(), kKnownMetadata).is_ok());
  auto f = read_safetensors(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  expect_known(*f);
  // File order is kept.
  EXPECT_EQ(f->tensors[0].name, "h.0.attn.c_attn.weight");
  EXPECT_EQ(f->tensors.back().name, "empty");
  EXPECT_EQ(f->find("absent"), nullptr);
  // The data section starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  EXPECT_EQ((8 + len) % 8, 0u);
}

TEST(Safetensors, ConvertsToF32) {
  const auto t = known_tensors();
  auto f32 = to_f32(t[0]);
  ASSERT_TRUE(f32.is_ok());
  EXPECT_EQ((*f32)[0], -7 * 0.375f);
  auto bf = to_f32(t[1]);
  ASSERT_TRUE(bf.is_ok());
  EXPECT_EQ(*bf, (std::vector<float>{-1.0f, -0.5f, 0.0f, 0.5f, 1.0f}));
  auto h = to_f32(t[2]);
  ASSERT_TRUE(h.is_ok());
  EXPECT_EQ(*h, (std::vector<float>{-0.5f, -0.25f, 0.0f, 0.25f, std::ldexp(1.0f, -14),
                                    std::ldexp(1.0f, -24)}));
  auto special = to_f32(make("s", SafeDType::kF16, {4}, std::vector<uint16_t>{0x7c00, 0xfc00, 0x7e00, 0x3bff}));
  ASSERT_TRUE(special.is_ok());
  EXPECT_TRUE(std::isinf((*special)[0]) && (*special)[0] > 0);
  EXPECT_TRUE(std::isinf((*special)[1]) && (*special)[1] < 0);
  EXPECT_TRUE(std::isnan((*special)[2]));
  EXPECT_EQ((*special)[3], 1.0f - std::ldexp(1.0f, -11));  // largest half below 1
  auto bad = to_f32(t[3]);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "tensor 'i32' is I32, not floating point; weights must be F32, BF16 or F16");

  const float v[6] = {1, 2, 3, 4, 5, 6};
  const SafeTensor w = from_f32("w", {2, 3}, v);
  EXPECT_EQ(w.dtype, SafeDType::kF32);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*to_f32(w), std::vector<float>(v, v + 6));
}

TEST(Safetensors, AtomicWriteReplacesAndLeavesNoTemp) {
  TempDir dir;
  const auto path = dir.file("w.safetensors");
  ASSERT_TRUE(write_safetensors(path, known_tensors()).is_ok());
  const float v[2] = {1, 2};
  ASSERT_TRUE(write_safetensors(path, {from_f32("only", {2}, v)}).is_ok());
  auto f = read_safetensors(path);
  ASSERT_TRUE(f.is_ok());
  ASSERT_EQ(f->tensors.size(), 1u);
  EXPECT_EQ(f->tensors[0].name, "only");
  EXPECT_EQ(dir.names(), std::vector<std::string>{"w.safetensors"});
  // A folder that does not exist: an error naming the temp path, nothing written.
  auto st = write_safetensors(dir.file("no/such/x.safetensors"), {from_f32("a", {2}, v)});
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("no/such/x.safetensors.tmp."), std::string::npos) << st.message();
}

TEST(Safetensors, WriterRejectsInconsistentTensors) {
  TempDir dir;
  const auto path = dir.file("w.safetensors");
  const float v[2] = {1, 2};
  EXPECT_EQ(write_safetensors(path, {from_f32("a", {2}, v), from_f32("a", {2}, v)}).message(),
            path + ": tensor 'a' given twice");
  SafeTensor short_one = from_f32("b", {2}, v);
  short_one.bytes.pop_back();
  EXPECT_EQ(write_safetensors(path, {short_one}).message(),
            path + ": tensor 'b' has 7 bytes but F32 x [2] needs 8");
  EXPECT_EQ(write_safetensors(path, {from_f32("__metadata__", {2}, v)}).message(),
            path + ": '__metadata__' cannot be a tensor name");
  EXPECT_EQ(dir.names(), std::vector<std::string>{});
}

TEST(SafetensorsMalformed, EveryCheckNamesTheFile) {
  TempDir dir;
  const std::string p = dir.file("bad.safetensors") + ": ";
  const std::string f32x2(8, '\0');  // two zero floats
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

  EXPECT_EQ(read_error(dir, "abc"), p + "3 bytes is shorter than the 8-byte header length; not a safetensors file");
  EXPECT_EQ(read_error(dir, file_bytes("{}", "", 50)),
            p + "header length 50 runs past the end of the file (10 bytes); the file is truncated");
  EXPECT_EQ(read_error(dir, file_bytes("{}", "", 200'000'000)),
            p + "header length 200000000 is over the 100000000-byte limit; not a safetensors file");
  EXPECT_EQ(read_error(dir, file_bytes("[1]", "")),
            p + "the header does not start with '{'; not a safetensors file");
  EXPECT_EQ(read_error(dir, file_bytes("{" + ok_entry + ",}", f32x2)),
            p + "malformed header: JSON: syntax error while parsing object key - unexpected '}'; expected string "
                "literal (at byte 54)");
  EXPECT_EQ(read_error(dir, file_bytes("{" + ok_entry, f32x2)),
            p + "malformed header: JSON: syntax error while parsing object - unexpected end of input; expected '}' "
                "(at byte 53)");
  EXPECT_EQ(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[2]}})", f32x2)),
            p + "tensor 'a': the entry needs dtype, shape and data_offsets");
  EXPECT_EQ(read_error(dir, file_bytes(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", f32x2)),
            p + "tensor 'a': dtype 'F64' is not one partrain reads (F32, BF16, F16, I32, I64, U16); convert the tensor");
  EXPECT_EQ(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f32x2)),
            p + "tensor 'a': data_offsets [0, 8] hold 8 bytes but F32 x [3] needs 12");
  EXPECT_EQ(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", f32x2)),
            p + "tensor 'a': 'shape' holds something other than a non-negative integer");
  EXPECT_EQ(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", f32x2)),
            p + "tensor 'a': 'shape' holds something other than a non-negative integer");
  EXPECT_EQ(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", f32x2)),
            p + "tensor 'a': data_offsets [8, 0] end before they begin");
  EXPECT_EQ(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", f32x2)),
            p + "tensor 'a': unknown key 'x' (expected dtype, shape, data_offsets)");
  EXPECT_EQ(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", f32x2)),
            p + "tensor 'a': data_offsets [8, 16] run past the data section (8 bytes); the file is truncated");
  EXPECT_EQ(read_error(dir, file_bytes("{" + ok_entry + "," + ok_entry + "}", f32x2)),
            p + "tensor 'a' appears twice in the header");
  EXPECT_EQ(read_error(dir, file_bytes("{" + ok_entry + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f32x2)),
            p + "tensors 'a' and 'b' overlap");
  EXPECT_EQ(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f32x2)),
            p + "data bytes [0, 4) belong to no tensor (before 'a'); the file is corrupt");
  EXPECT_EQ(read_error(dir, file_bytes("{" + ok_entry + "}", f32x2 + "xyz")),
            p + "3 bytes after the last tensor belong to no tensor; the file is corrupt");
  EXPECT_EQ(read_error(dir, file_bytes(R"({"__metadata__":{"k":1}})", "")),
            p + "'__metadata__' value of 'k' is not a string");
  EXPECT_EQ(read_error(dir, file_bytes(R"({"a":[1]})", "")),
            p + "tensor 'a': the header entry is not a JSON object");
  EXPECT_EQ(read_error(dir, file_bytes("{\"a\x01\":1}", "")),
            p + "malformed header: JSON: syntax error while parsing object key - invalid string: control character "
                "U+0001 (SOH) must be escaped to \\u0001; expected string literal (at byte 3)");

  auto missing = read_safetensors(dir.file("absent.safetensors"));
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().message(),
            dir.file("absent.safetensors") + ": cannot open safetensors file: No such file or directory");
}

TEST(Json, ParsesWhatHeadersUse) {
  auto v = parse_json(R"( {"s":"a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00","n":[0,12,-3,1.5e3],"t":true,"f":false,"z":null,"o":{}} )");
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  ASSERT_EQ(v->members.size(), 6u);
  EXPECT_EQ(v->members[0].second.text, "a\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80");
  uint64_t u = 0;
  EXPECT_TRUE(v->members[1].second.items[1].as_u64(&u));
  EXPECT_EQ(u, 12u);
  EXPECT_FALSE(v->members[1].second.items[2].as_u64(&u));
  EXPECT_FALSE(v->members[1].second.items[3].as_u64(&u));
  JsonValue too_big;
  too_big.kind = JsonValue::Kind::kNumber;
  too_big.text = "18446744073709551616";  // 2^64
  EXPECT_FALSE(too_big.as_u64(&u));
  EXPECT_TRUE(v->members[2].second.boolean);
  EXPECT_EQ(v->members[4].second.kind, JsonValue::Kind::kNull);
  for (const char* bad : {"", "{", "[1,]", "01", "1.", "\"\\x\"", "\"\\ud800\"", "{} x", "tru",
                          "{\"a\" 1}"})
    EXPECT_FALSE(parse_json(bad).is_ok()) << bad;
  std::string deep(100, '[');
  EXPECT_FALSE(parse_json(deep + std::string(100, ']')).is_ok());
  EXPECT_TRUE(parse_json(std::string(64, '[') + std::string(64, ']')).is_ok());  // the limit: 64 levels
  EXPECT_EQ(parse_json(std::string(65, '[') + std::string(65, ']')).status().message(),
            "JSON: more than 64 levels of nesting");
  EXPECT_FALSE(parse_json("\"\xff\xfe\"").is_ok());  // not UTF-8
  // A hostile megabyte string token is not repeated in the one-line message.
  const Status long_token = parse_json("{\"" + std::string(1 << 20, 'k') + "\x01\":1}").status();
  EXPECT_LT(long_token.message().size(), 300u) << long_token.message().substr(0, 400);
  EXPECT_NE(long_token.message().find("(at byte 1048578)"), std::string::npos) << long_token.message().substr(0, 400);
  std::string out;
  append_json_string("a\"\\\n\x01", &out);
  EXPECT_EQ(out, "\"a\\\"\\\\\\n\\u0001\"");
}

// ---- interoperability with PyTorch -----------------------------------------------------

TEST(SafetensorsTorch, PythonReadsWhatPartrainWrites) {
  TempDir dir;
  const auto path = dir.file("from_partrain.safetensors");
  ASSERT_TRUE(write_safetensors(path, known_tensors(), kKnownMetadata).is_ok());
  const int rc = run_python("check", path);
  if (rc == 77) GTEST_SKIP() << "torch is not installed for " PARTRAIN_TORCH_PYTHON;
  EXPECT_EQ(rc, 0) << python_cmd("check", path);
}

TEST(SafetensorsTorch, PartrainReadsWhatPythonWrites) {
  TempDir dir;
  const auto path = dir.file("from_python.safetensors");
  const int rc = run_python("write", path);
  if (rc == 77) GTEST_SKIP() << "torch is not installed for " PARTRAIN_TORCH_PYTHON;
  ASSERT_EQ(rc, 0) << python_cmd("write", path);
  auto f = read_safetensors(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  expect_known(*f);
}

}  // namespace
}  // namespace partrain::engine::io
