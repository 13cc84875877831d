#include "metrics/tb_writer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "common/crc32c.h"

namespace partrain::metrics {
namespace {

// Protocol-buffer wire format, the few pieces an Event needs.
void put_varint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void put_tag(int field, int wire_type, std::string* out) {
  put_varint(static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type), out);
}
template <typename T>
void put_fixed(T v, std::string* out) {  // little-endian, as the host is (see safetensors)
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}
void put_bytes(int field, const std::string& bytes, std::string* out) {
  put_tag(field, 2, out);
  put_varint(bytes.size(), out);
  out->append(bytes);
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_tag(1, 1, &e);  // wall_time: double, 64-bit
  put_fixed(wall_time, &e);
  put_tag(2, 0, &e);  // step: int64, varint
  put_varint(static_cast<uint64_t>(step), &e);
  return e;
}

}  // namespace

uint32_t tb_masked_crc(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

Result<std::unique_ptr<TbWriter>> TbWriter::open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::io_error(fmt::format("{}: cannot create the TensorBoard folder: {}", dir, ec.message()));
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::unique_ptr<TbWriter> w(new TbWriter());
  // The pid keeps two writers started in the same second (two ranks, a restart) apart.
  w->path_ = fmt::format("{}/events.out.tfevents.{}.{}.{}", dir, static_cast<int64_t>(now), host, getpid());
  w->file_ = std::fopen(w->path_.c_str(), "wb");
  if (w->file_ == nullptr)
    return Status::io_error(fmt::format("{}: cannot create: {}", w->path_, std::strerror(errno)));
  std::string first = event_header(now, 0);
  put_bytes(3, "brain.Event:2", &first);
  PARTRAIN_RETURN_IF_ERROR(w->record(first));
  PARTRAIN_RETURN_IF_ERROR(w->flush());
  return w;
}

TbWriter::~TbWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

Status TbWriter::record(const std::string& data) {
  std::string r;
  put_fixed(static_cast<uint64_t>(data.size()), &r);
  put_fixed(tb_masked_crc(r.data(), 8), &r);
  r += data;
  put_fixed(tb_masked_crc(data.data(), data.size()), &r);
  if (std::fwrite(r.data(), 1, r.size(), file_) != r.size())
    return Status::io_error(fmt::format("{}: write failed: {}", path_, std::strerror(errno)));
  return Status::ok();
}

Status TbWriter::scalar(const std::string& tag, int64_t step, float value, double wall_time) {
  std::string v;
  put_bytes(1, tag, &v);
  put_tag(2, 5, &v);  // simple_value: float, 32-bit
  put_fixed(value, &v);
  std::string summary;
  put_bytes(1, v, &summary);
  std::string e = event_header(wall_time, step);
  put_bytes(5, summary, &e);
  return record(e);
}

Status TbWriter::flush() {
  if (std::fflush(file_) != 0)
    return Status::io_error(fmt::format("{}: write failed: {}", path_, std::strerror(errno)));
  return Status::ok();
}

}  // namespace partrain::metrics
