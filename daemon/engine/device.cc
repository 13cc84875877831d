// make_backend: a device name and precision to a backend. "cuda" comes from the GPU module,
// loaded on first use (gpu/cuda_module.h), so nothing here links CUDA.
#include <string>

#include "engine/backend.h"
#include "gpu/cuda_module.h"

namespace partrain::engine {

Result<std::unique_ptr<Backend>> make_backend(const std::string& device, const std::string& precision) {
  if (precision != "" && precision != "fp32" && precision != "bf16") {
    return Status::invalid("precision '" + precision + "': expected fp32 or bf16");
  }
  if (device == "cpu") return precision == "bf16" ? make_cpu_bf16_backend() : make_cpu_backend();
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    int ordinal = 0;
    if (device.size() > 5) {
      try {
        ordinal = std::stoi(device.substr(5));
      } catch (...) {
        return Status::invalid("device '" + device + "': expected cuda or cuda:N, e.g. cuda:0");
      }
    }
    Result<const gpu::CudaModule*> m = gpu::cuda_module();
    if (!m) return m.status();
    return (*m)->make_backend(ordinal, precision == "fp32" ? DType::kF32 : DType::kBF16);
  }
  return Status::invalid("device '" + device + "': expected cpu, cuda or cuda:N");
}

}  // namespace partrain::engine
