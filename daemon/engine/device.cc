// make_backend: a device name and precision to a backend. Separate from backend.cc because it
// links every backend, while the backends themselves link only backend.cc.
#include <string>

#include "engine/backend.h"

namespace partrain::engine {

Result<std::unique_ptr<Backend>> make_backend(const std::string& device, const std::string& precision) {
  if (precision != "" && precision != "fp32" && precision != "bf16") {
    return Status::invalid("precision '" + precision + "': expected fp32 or bf16");
  }
  if (device == "cpu") return precision == "bf16" ? make_cpu_bf16_backend() : make_cpu_backend();
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
#ifdef PARTRAIN_HAVE_CUDA
    int ordinal = 0;
    if (device.size() > 5) {
      try {
        ordinal = std::stoi(device.substr(5));
      } catch (...) {
        return Status::invalid("device '" + device + "': expected cuda or cuda:N, e.g. cuda:0");
      }
    }
    return make_cuda_backend(ordinal, precision == "fp32" ? DType::kF32 : DType::kBF16);
#else
    return Status::invalid("device '" + device +
                           "': this build has no CUDA backend; rebuild with a CUDA toolkit "
                           "(cmake -DPARTRAIN_CUDA=ON) or use --device cpu");
#endif
  }
  return Status::invalid("device '" + device + "': expected cpu, cuda or cuda:N");
}

}  // namespace partrain::engine
