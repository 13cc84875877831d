// safetensors files (Hugging Face's format: 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the bytes).
// partrain exports weights under Hugging Face names so a model moves to and from the
// Python ecosystem, and reads the same files back with `--init`.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace partrain::engine::io {

enum class SafeDType { kF32, kBF16, kF16, kI32, kI64, kU16 };

struct SafeTensor {
  std::string name;
  SafeDType dtype = SafeDType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // little-endian, row-major
};

// Writes atomically: temp file in the same folder, fsync, rename, fsync the folder.
Status write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::vector<SafeTensor> tensors;             // in file order
  std::map<std::string, std::string> metadata;
  const SafeTensor* find(const std::string& name) const;
};

// Reads and checks a file (header bounds, offsets inside the file and non-overlapping,
// byte sizes matching dtype x shape). Errors name the file and the tensor.
Result<SafetensorsFile> read_safetensors(const std::string& path);

// A tensor's bytes in place: in a MappedSafetensors mapping, or in a SafeTensor's buffer.
struct TensorView {
  std::string name;
  SafeDType dtype = SafeDType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t bytes = 0;
};

// A safetensors file mapped read-only (mmap): the header is checked exactly as
// read_safetensors checks it, and the tensors are read in place, so loading a model costs
// its size once in the page cache (shared, evictable) and nothing on the heap.
class MappedSafetensors {
 public:
  static Result<std::unique_ptr<MappedSafetensors>> open(const std::string& path);
  ~MappedSafetensors();
  MappedSafetensors(const MappedSafetensors&) = delete;
  MappedSafetensors& operator=(const MappedSafetensors&) = delete;

  const std::vector<TensorView>& tensors() const { return views_; }
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  MappedSafetensors() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::vector<TensorView> views_;
  std::map<std::string, std::string> metadata_;
};

TensorView view_of(const SafeTensor& t);
// Writes the view's values as float to dst[0, elements) (F32, BF16, F16 accepted).
Status view_to_f32(const TensorView& t, float* dst);
// Elements [begin, end) of the tensor's row-major values, converted the same way; only
// those bytes are touched (a rank's slice of a mapped tensor).
Status view_range_to_f32(const TensorView& t, int64_t begin, int64_t end, float* dst);

// fp32 view helpers: copy a tensor's values out as float (F32, BF16, F16 accepted).
Result<std::vector<float>> to_f32(const SafeTensor& t);
SafeTensor from_f32(std::string name, std::vector<int64_t> shape, const float* data);

}  // namespace partrain::engine::io
