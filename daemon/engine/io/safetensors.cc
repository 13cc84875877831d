// safetensors reader and writer. The reader trusts nothing in the file: the header length,
// every dtype, shape and offset is checked against the file before a byte is copied, and
// the tensors must tile the data section exactly (as Hugging Face's own reader requires).
#include "engine/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/io/atomic_file.h"
#include "common/read_file.h"
#include "engine/io/json.h"

namespace partrain::engine::io {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; a big-endian host would need byte swaps");

// A header larger than this is not a weights file (HF's reader uses the same bound).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeInfo {
  SafeDType dtype;
  const char* name;
  int bytes;
};
constexpr DTypeInfo kDTypes[] = {
    {SafeDType::kF32, "F32", 4}, {SafeDType::kBF16, "BF16", 2}, {SafeDType::kF16, "F16", 2},
    {SafeDType::kI32, "I32", 4}, {SafeDType::kI64, "I64", 8},   {SafeDType::kU16, "U16", 2},
};

const DTypeInfo& info_of(SafeDType d) {
  for (const auto& i : kDTypes)
    if (i.dtype == d) return i;
  return kDTypes[0];
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Element count, or false when a dimension is negative or the product overflows.
bool element_count(const std::vector<int64_t>& shape, uint64_t* out) {
  uint64_t n = 1;
  for (const int64_t d : shape) {
    if (d < 0) return false;
    const auto ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > UINT64_MAX / ud) return false;
    n *= ud;
  }
  *out = n;
  return true;
}

// An open file read with pread at given offsets; closed on destruction.
class InputFile {
 public:
  ~InputFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  // A FIFO, device or folder is refused at once (common/read_file.h), never waited on.
  Status open(const std::string& path) {
    Result<RegularFile> f = open_regular_file(path, "safetensors file");
    if (!f && f.status().code() == StatusCode::kNotFound)
      return Status::not_found(fmt::format("{}: cannot open safetensors file: {}", path, std::strerror(ENOENT)));
    if (!f) return f.status();
    size_ = static_cast<uint64_t>(f->size());
    fd_ = f->release();
    return Status::ok();
  }
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }
  // Reads exactly n bytes at `offset` (the caller checked they lie inside the file).
  Status read(uint64_t offset, void* out, size_t n, const std::string& path) const {
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        return Status::io_error(fmt::format("{}: read failed: {}", path,
                                            got < 0 ? std::strerror(errno) : "file shrank"));
      p += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
    return Status::ok();
  }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

struct Entry {
  SafeTensor tensor;
  uint64_t begin = 0, end = 0;
};

// One tensor's header entry: {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}.
Status parse_entry(const std::string& name, const JsonValue& v, Entry* out) {
  auto bad = [&](const std::string& why) {
    return Status::corruption(fmt::format("tensor '{}': {}", name, why));
  };
  if (v.kind != JsonValue::Kind::kObject) return bad("the header entry is not a JSON object");
  bool have_dtype = false, have_shape = false, have_offsets = false;
  out->tensor.name = name;
  for (const auto& [key, field] : v.members) {
    if (key == "dtype") {
      if (have_dtype) return bad("'dtype' appears twice");
      have_dtype = true;
      if (field.kind != JsonValue::Kind::kString) return bad("'dtype' is not a string");
      const auto* it = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                                    [&text = field.text](const DTypeInfo& d) { return text == d.name; });
      if (it == std::end(kDTypes))
        return bad(fmt::format("dtype '{}' is not one partrain reads (F32, BF16, F16, I32, I64, "
                               "U16); convert the tensor",
                               field.text));
      out->tensor.dtype = it->dtype;
    } else if (key == "shape") {
      if (have_shape) return bad("'shape' appears twice");
      have_shape = true;
      if (field.kind != JsonValue::Kind::kArray) return bad("'shape' is not an array");
      for (const auto& d : field.items) {
        uint64_t u;
        if (!d.as_u64(&u) || u > static_cast<uint64_t>(INT64_MAX))
          return bad("'shape' holds something other than a non-negative integer");
        out->tensor.shape.push_back(static_cast<int64_t>(u));
      }
    } else if (key == "data_offsets") {
      if (have_offsets) return bad("'data_offsets' appears twice");
      have_offsets = true;
      if (field.kind != JsonValue::Kind::kArray || field.items.size() != 2 ||
          !field.items[0].as_u64(&out->begin) || !field.items[1].as_u64(&out->end))
        return bad("'data_offsets' is not two non-negative integers [begin, end]");
    } else {
      return bad(fmt::format("unknown key '{}' (expected dtype, shape, data_offsets)", key));
    }
  }
  if (!have_dtype || !have_shape || !have_offsets)
    return bad("the entry needs dtype, shape and data_offsets");
  if (out->end < out->begin)
    return bad(fmt::format("data_offsets [{}, {}] end before they begin", out->begin, out->end));
  uint64_t n = 0;
  if (!element_count(out->tensor.shape, &n) || n > UINT64_MAX / 8)
    return bad(fmt::format("shape {} is too large", shape_text(out->tensor.shape)));
  const DTypeInfo& di = info_of(out->tensor.dtype);
  if (out->end - out->begin != n * di.bytes)
    return bad(fmt::format("data_offsets [{}, {}] hold {} bytes but {} x {} needs {}", out->begin,
                           out->end, out->end - out->begin, di.name,
                           shape_text(out->tensor.shape), n * di.bytes));
  return Status::ok();
}

Status parse_metadata(const JsonValue& v, std::map<std::string, std::string>* out) {
  if (v.kind != JsonValue::Kind::kObject)
    return Status::corruption("'__metadata__' is not a JSON object");
  for (const auto& [key, value] : v.members) {
    if (value.kind != JsonValue::Kind::kString)
      return Status::corruption(fmt::format("'__metadata__' value of '{}' is not a string", key));
    if (!out->emplace(key, value.text).second)
      return Status::corruption(fmt::format("'__metadata__' key '{}' appears twice", key));
  }
  return Status::ok();
}

// Checks the first 8 bytes and returns the header length.
Result<uint64_t> header_length(const uint8_t* first8, uint64_t file_size) {
  if (file_size < 8)
    return Status::corruption(fmt::format(
        "{} bytes is shorter than the 8-byte header length; not a safetensors file", file_size));
  uint64_t header_len;
  std::memcpy(&header_len, first8, 8);
  if (header_len > kMaxHeaderBytes)
    return Status::corruption(fmt::format(
        "header length {} is over the {}-byte limit; not a safetensors file", header_len,
        kMaxHeaderBytes));
  if (header_len > file_size - 8)
    return Status::corruption(fmt::format(
        "header length {} runs past the end of the file ({} bytes); the file is truncated",
        header_len, file_size));
  return header_len;
}

// Parses and checks the JSON header against a data section of `data_len` bytes. The
// entries come back in file order with their offsets; the bytes are read afterwards.
Status parse_header(std::string_view text, uint64_t data_len, SafetensorsFile* file,
                    std::vector<Entry>* entries) {
  if (text.empty() || text.front() != '{')
    return Status::corruption("the header does not start with '{'; not a safetensors file");
  auto root = parse_json(text);
  if (!root) return root.status().prefixed("malformed header: ");
  if (root->kind != JsonValue::Kind::kObject)
    return Status::corruption("malformed header: not a JSON object");

  std::set<std::string> names;
  bool have_metadata = false;
  for (const auto& [key, value] : root->members) {
    if (key == "__metadata__") {
      if (have_metadata) return Status::corruption("'__metadata__' appears twice");
      have_metadata = true;
      PARTRAIN_RETURN_IF_ERROR(parse_metadata(value, &file->metadata));
      continue;
    }
    if (!names.insert(key).second)
      return Status::corruption(fmt::format("tensor '{}' appears twice in the header", key));
    Entry e;
    PARTRAIN_RETURN_IF_ERROR(parse_entry(key, value, &e));
    entries->push_back(std::move(e));
  }

  // The data section must be tiled exactly: sorted by offset, each tensor starts where
  // the previous one ended, and the last one ends at the end of the file.
  std::vector<const Entry*> order;
  for (const auto& e : *entries) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t at = 0;
  const Entry* previous = nullptr;
  for (const Entry* e : order) {
    if (e->end > data_len)
      return Status::corruption(fmt::format(
          "tensor '{}': data_offsets [{}, {}] run past the data section ({} bytes); the file is "
          "truncated",
          e->tensor.name, e->begin, e->end, data_len));
    if (e->begin < at)
      return Status::corruption(fmt::format("tensors '{}' and '{}' overlap",
                                            previous->tensor.name, e->tensor.name));
    if (e->begin > at)
      return Status::corruption(fmt::format(
          "data bytes [{}, {}) belong to no tensor (before '{}'); the file is corrupt", at,
          e->begin, e->tensor.name));
    at = e->end;
    previous = e;
  }
  if (at != data_len)
    return Status::corruption(fmt::format(
        "{} bytes after the last tensor belong to no tensor; the file is corrupt", data_len - at));
  return Status::ok();
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal half: normalise the mantissa into a normal float.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400) == 0);
    bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
  }
  return std::bit_cast<float>(bits);
}

}  // namespace

const SafeTensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

Status write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (auto it = metadata.begin(); it != metadata.end(); ++it) {
      if (it != metadata.begin()) header += ',';
      append_json_string(it->first, &header);
      header += ':';
      append_json_string(it->second, &header);
    }
    header += '}';
    first = false;
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      return Status::invalid(fmt::format("{}: '{}' cannot be a tensor name", path, t.name));
    if (!names.insert(t.name).second)
      return Status::invalid(fmt::format("{}: tensor '{}' given twice", path, t.name));
    uint64_t n = 0;
    const DTypeInfo& di = info_of(t.dtype);
    if (!element_count(t.shape, &n) || n > UINT64_MAX / 8)
      return Status::invalid(fmt::format("{}: tensor '{}' has an invalid shape {}", path, t.name,
                                         shape_text(t.shape)));
    if (n * di.bytes != t.bytes.size())
      return Status::invalid(fmt::format("{}: tensor '{}' has {} bytes but {} x {} needs {}", path,
                                         t.name, t.bytes.size(), di.name, shape_text(t.shape),
                                         n * di.bytes));
    if (!first) header += ',';
    first = false;
    append_json_string(t.name, &header);
    header += fmt::format(":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}", di.name,
                          fmt::join(t.shape, ","), offset, offset + t.bytes.size());
    offset += t.bytes.size();
  }
  header += '}';
  // Pad with spaces so the data section starts 8-byte aligned (what HF's writer does).
  while ((8 + header.size()) % 8 != 0) header += ' ';
  const uint64_t header_len = header.size();

  std::vector<ByteSpan> parts;
  parts.push_back({&header_len, sizeof header_len});
  parts.push_back({header.data(), header.size()});
  for (const auto& t : tensors) parts.push_back({t.bytes.data(), t.bytes.size()});
  return write_file_atomic(path, parts.data(), parts.size());
}

Result<SafetensorsFile> read_safetensors(const std::string& path) {
  // Header first, checked in full; then each tensor read straight into its own buffer, so
  // a large checkpoint is held in memory once.
  InputFile in;
  PARTRAIN_RETURN_IF_ERROR(in.open(path));
  uint8_t first8[8] = {};
  if (in.size() >= 8) PARTRAIN_RETURN_IF_ERROR(in.read(0, first8, 8, path));
  auto header_len = header_length(first8, in.size());
  if (!header_len) return header_len.status().prefixed(path + ": ");
  std::string text(*header_len, '\0');
  PARTRAIN_RETURN_IF_ERROR(in.read(8, text.data(), text.size(), path));
  SafetensorsFile file;
  std::vector<Entry> entries;
  const uint64_t data_start = 8 + *header_len;
  PARTRAIN_RETURN_IF_ERROR(
      parse_header(text, in.size() - data_start, &file, &entries).prefixed(path + ": "));
  for (auto& e : entries) {
    e.tensor.bytes.resize(e.end - e.begin);
    PARTRAIN_RETURN_IF_ERROR(
        in.read(data_start + e.begin, e.tensor.bytes.data(), e.tensor.bytes.size(), path));
    file.tensors.push_back(std::move(e.tensor));
  }
  return file;
}

Result<std::unique_ptr<MappedSafetensors>> MappedSafetensors::open(const std::string& path) {
  InputFile in;
  PARTRAIN_RETURN_IF_ERROR(in.open(path));
  uint8_t first8[8] = {};
  if (in.size() >= 8) PARTRAIN_RETURN_IF_ERROR(in.read(0, first8, 8, path));
  auto header_len = header_length(first8, in.size());
  if (!header_len) return header_len.status().prefixed(path + ": ");
  std::unique_ptr<MappedSafetensors> m(new MappedSafetensors());
  m->path_ = path;
  m->map_bytes_ = static_cast<size_t>(in.size());
  m->map_ = ::mmap(nullptr, m->map_bytes_, PROT_READ, MAP_PRIVATE, in.fd(), 0);
  if (m->map_ == MAP_FAILED) {
    m->map_ = nullptr;
    return Status::io_error(fmt::format("{}: mmap failed: {}", path, std::strerror(errno)));
  }
  const auto* base = static_cast<const uint8_t*>(m->map_);
  const std::string_view text(reinterpret_cast<const char*>(base) + 8, *header_len);
  SafetensorsFile header;
  std::vector<Entry> entries;
  const uint64_t data_start = 8 + *header_len;
  PARTRAIN_RETURN_IF_ERROR(
      parse_header(text, in.size() - data_start, &header, &entries).prefixed(path + ": "));
  m->metadata_ = std::move(header.metadata);
  for (auto& e : entries)
    m->views_.push_back(TensorView{std::move(e.tensor.name), e.tensor.dtype, std::move(e.tensor.shape),
                                   base + data_start + e.begin, static_cast<size_t>(e.end - e.begin)});
  return m;
}

MappedSafetensors::~MappedSafetensors() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

const TensorView* MappedSafetensors::find(const std::string& name) const {
  for (const auto& v : views_)
    if (v.name == name) return &v;
  return nullptr;
}

TensorView view_of(const SafeTensor& t) {
  return TensorView{t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()};
}

Status view_to_f32(const TensorView& t, float* out) {
  const DTypeInfo& di = info_of(t.dtype);
  const size_t n = t.bytes / di.bytes;
  switch (t.dtype) {
    case SafeDType::kF32:
      if (n > 0) std::memcpy(out, t.data, n * 4);
      break;
    case SafeDType::kBF16:
    case SafeDType::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = t.dtype == SafeDType::kBF16 ? std::bit_cast<float>(static_cast<uint32_t>(h) << 16)
                                             : half_to_float(h);
      }
      break;
    default:
      return Status::invalid(fmt::format(
          "tensor '{}' is {}, not floating point; weights must be F32, BF16 or F16", t.name,
          di.name));
  }
  return Status::ok();
}

Status view_range_to_f32(const TensorView& t, int64_t begin, int64_t end, float* dst) {
  const size_t size = info_of(t.dtype).bytes;
  if (begin < 0 || end < begin || static_cast<size_t>(end) * size > t.bytes) {
    return Status::invalid(fmt::format("tensor '{}': elements [{}, {}) are outside its {} bytes", t.name, begin,
                                       end, t.bytes));
  }
  TensorView part = t;
  part.data = t.data + static_cast<size_t>(begin) * size;
  part.bytes = static_cast<size_t>(end - begin) * size;
  part.shape = {end - begin};
  return view_to_f32(part, dst);
}

Result<std::vector<float>> to_f32(const SafeTensor& t) {
  std::vector<float> out(t.bytes.size() / info_of(t.dtype).bytes);
  PARTRAIN_RETURN_IF_ERROR(view_to_f32(view_of(t), out.data()));
  return out;
}

SafeTensor from_f32(std::string name, std::vector<int64_t> shape, const float* data) {
  SafeTensor t;
  t.name = std::move(name);
  t.dtype = SafeDType::kF32;
  t.shape = std::move(shape);
  uint64_t n = 0;
  if (!element_count(t.shape, &n)) n = 0;
  t.bytes.resize(n * 4);
  if (n > 0) std::memcpy(t.bytes.data(), data, n * 4);
  return t;
}

}  // namespace partrain::engine::io
