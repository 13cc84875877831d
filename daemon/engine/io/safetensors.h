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

// fp32 view helpers: copy a tensor's values out as float (F32, BF16, F16 accepted).
Result<std::vector<float>> to_f32(const SafeTensor& t);
SafeTensor from_f32(std::string name, std::vector<int64_t> shape, const float* data);

}  // namespace partrain::engine::io
