// TbWriter's files read back by an independent reader, written here from the TFRecord and
// protobuf wire formats (not from tb_writer.cc): every record's masked CRC-32C (with this
// file's own bitwise CRC-32C, checked against the standard check value), the first event's
// file_version, and each scalar's tag, step, value and wall time.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "metrics/tb_writer.h"

namespace partrain::metrics {
namespace {

namespace fs = std::filesystem;

// CRC-32C, bit by bit: reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF.
uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}
uint32_t masked(const uint8_t* p, size_t n) {
  const uint32_t c = crc32c_bitwise(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;
};

// A protobuf reader for the fields an Event has: varint (0), 64-bit (1), bytes (2), 32-bit (5).
struct Proto {
  const uint8_t* p;
  const uint8_t* end;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; p < end; shift += 7) {
      const uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) break;
    }
    return v;
  }
  template <typename T>
  T fixed() {
    T v;
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  std::string bytes() {
    const size_t n = varint();
    std::string s(reinterpret_cast<const char*>(p), n);
    p += n;
    return s;
  }
};

Event parse_event(const std::string& data) {
  Event e;
  Proto r{reinterpret_cast<const uint8_t*>(data.data()), reinterpret_cast<const uint8_t*>(data.data()) + data.size()};
  while (r.p < r.end) {
    const uint64_t key = r.varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (field == 1 && type == 1) e.wall_time = r.fixed<double>();
    else if (field == 2 && type == 0) e.step = static_cast<int64_t>(r.varint());
    else if (field == 3 && type == 2) e.file_version = r.bytes();
    else if (field == 5 && type == 2) {  // Summary
      const std::string summary = r.bytes();
      Proto s{reinterpret_cast<const uint8_t*>(summary.data()), reinterpret_cast<const uint8_t*>(summary.data()) + summary.size()};
      while (s.p < s.end) {
        EXPECT_EQ(s.varint(), (1u << 3) | 2u);  // repeated Value value = 1
        const std::string value = s.bytes();
        Proto v{reinterpret_cast<const uint8_t*>(value.data()), reinterpret_cast<const uint8_t*>(value.data()) + value.size()};
        std::string tag;
        float x = 0;
        while (v.p < v.end) {
          const uint64_t k = v.varint();
          if (k == ((1u << 3) | 2u)) tag = v.bytes();
          else if (k == ((2u << 3) | 5u)) x = v.fixed<float>();
          else ADD_FAILURE() << "unexpected Value field " << (k >> 3);
        }
        e.values.emplace_back(tag, x);
      }
    } else {
      ADD_FAILURE() << "unexpected Event field " << field << " type " << type;
      break;
    }
  }
  return e;
}

// Reads every record, checking both masked CRCs of each.
std::vector<Event> read_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* p = reinterpret_cast<const uint8_t*>(b.data());
  std::vector<Event> out;
  size_t at = 0;
  while (at < b.size()) {
    EXPECT_LE(at + 12, b.size()) << "truncated record header";
    uint64_t len;
    uint32_t len_crc, data_crc;
    std::memcpy(&len, p + at, 8);
    std::memcpy(&len_crc, p + at + 8, 4);
    EXPECT_EQ(len_crc, masked(p + at, 8)) << "length CRC of the record at byte " << at;
    EXPECT_LE(at + 12 + len + 4, b.size()) << "truncated record";
    std::memcpy(&data_crc, p + at + 12 + len, 4);
    EXPECT_EQ(data_crc, masked(p + at + 12, len)) << "data CRC of the record at byte " << at;
    out.push_back(parse_event(b.substr(at + 12, len)));
    at += 12 + len + 4;
  }
  return out;
}

TEST(Crc32c, TheStandardCheckValue) {
  const char* s = "123456789";
  EXPECT_EQ(crc32c_bitwise(reinterpret_cast<const uint8_t*>(s), 9), 0xE3069283u);
  EXPECT_EQ(tb_masked_crc(s, 9), masked(reinterpret_cast<const uint8_t*>(s), 9));
}

TEST(TbWriter, ScalarsReadBack) {
  const fs::path dir = fs::temp_directory_path() / ("partrain_tb_" + std::to_string(getpid()));
  fs::remove_all(dir);
  std::string path;
  {
    auto tb = TbWriter::open((dir / "tb").string());
    ASSERT_TRUE(tb.is_ok()) << tb.status().message();
    path = (*tb)->path();
    EXPECT_NE(fs::path(path).filename().string().find("events.out.tfevents."), std::string::npos);
    ASSERT_TRUE((*tb)->scalar("train/loss", 1, 5.25f, 1700000000.5).is_ok());
    ASSERT_TRUE((*tb)->scalar("train/lr", 1, 3e-4f, 1700000000.5).is_ok());
    ASSERT_TRUE((*tb)->scalar("train/loss", 300, -0.125f, 1700000123.25).is_ok());
    ASSERT_TRUE((*tb)->scalar("a/very/long/tag/" + std::string(200, 'x'), 1ll << 40, 1e30f, 1.0).is_ok());
    ASSERT_TRUE((*tb)->flush().is_ok());
  }
  const auto events = read_events(path);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.6e9);
  EXPECT_TRUE(events[0].values.empty());
  const struct { const char* tag; int64_t step; float value; double wall; } want[] = {
      {"train/loss", 1, 5.25f, 1700000000.5}, {"train/lr", 1, 3e-4f, 1700000000.5},
      {"train/loss", 300, -0.125f, 1700000123.25}};
  for (int i = 0; i < 3; ++i) {
    const Event& e = events[static_cast<size_t>(i) + 1];
    EXPECT_EQ(e.step, want[i].step);
    EXPECT_EQ(e.wall_time, want[i].wall);
    ASSERT_EQ(e.values.size(), 1u);
    EXPECT_EQ(e.values[0].first, want[i].tag);
    EXPECT_EQ(e.values[0].second, want[i].value);
  }
  EXPECT_EQ(events[4].step, 1ll << 40);  // a multi-byte varint
  EXPECT_EQ(events[4].values[0].first.size(), 216u);  // a length over 127: a two-byte varint
  EXPECT_EQ(events[4].values[0].second, 1e30f);
  fs::remove_all(dir);
}

TEST(TbWriter, AFolderThatCannotBeMadeIsNamed) {
  auto tb = TbWriter::open("/proc/partrain-no/tb");
  ASSERT_FALSE(tb.is_ok());
  EXPECT_EQ(tb.status().message().rfind("/proc/partrain-no/tb: cannot create the TensorBoard folder", 0), 0u)
      << tb.status().message();
}

}  // namespace
}  // namespace partrain::metrics
