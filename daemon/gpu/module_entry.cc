// libpartrain_cuda.so's one export: the table of cuda_module.h over the CUDA backend and
// the NCCL communicators. Compiled into the module only.
#include <cuda_runtime.h>

#include <fmt/format.h>

#include "engine/cuda/cuda_backend.h"
#include "gpu/cuda_module.h"
#ifdef PARTRAIN_HAVE_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif

#ifndef PARTRAIN_CUDA_MODULE_BUILD_ID
#define PARTRAIN_CUDA_MODULE_BUILD_ID "unknown"
#endif

namespace partrain::gpu {
namespace {

void init_log(log::Forward forward, log::Level level) {
  log::forward_to(forward);
  log::set_level(level);
}

Status bind_to_backend(comm::Communicator& c, engine::Backend& backend) {
#ifdef PARTRAIN_HAVE_NCCL
  auto* cuda = dynamic_cast<engine::cuda::CudaBackend*>(&backend);
  if (cuda == nullptr) {
    return Status::invalid("an NCCL communicator needs the CUDA backend, not " + backend.name());
  }
  return comm::set_nccl_compute_stream(c, cuda->context().stream);
#else
  (void)c;
  (void)backend;
  return Status::internal("an NCCL communicator in a GPU module built without NCCL");
#endif
}

// cudaDeviceProp::uuid as nvidia-smi prints it: GPU-8-4-4-4-12 hex digits.
Result<std::string> device_uuid(int ordinal) {
  cudaDeviceProp prop{};
  const cudaError_t rc = cudaGetDeviceProperties(&prop, ordinal);
  if (rc != cudaSuccess) {
    return Status::unavailable(fmt::format("cuda:{}: cudaGetDeviceProperties failed: {}", ordinal,
                                           cudaGetErrorString(rc)));
  }
  const auto* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  std::string hex;
  for (int i = 0; i < 16; ++i) hex += fmt::format("{:02x}", b[i]);
  return fmt::format("GPU-{}-{}-{}-{}-{}", hex.substr(0, 8), hex.substr(8, 4), hex.substr(12, 4), hex.substr(16, 4),
                     hex.substr(20));
}

const CudaModule kModule = {
    PARTRAIN_CUDA_MODULE_BUILD_ID,
    &init_log,
    &engine::cuda_device_available,
    &engine::make_cuda_backend,
#ifdef PARTRAIN_HAVE_NCCL
    &comm::create_nccl_communicator,
#else
    nullptr,
#endif
    &bind_to_backend,
    &device_uuid,
};

}  // namespace
}  // namespace partrain::gpu

extern "C" __attribute__((visibility("default"))) const partrain::gpu::CudaModule* partrain_cuda_module_v1() {
  return &partrain::gpu::kModule;
}
