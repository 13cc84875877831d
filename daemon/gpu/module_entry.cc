// libpartrain_cuda.so's one export: the table of cuda_module.h over the CUDA backend and
// the NCCL communicators. Compiled into the module only.
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
};

}  // namespace
}  // namespace partrain::gpu

extern "C" __attribute__((visibility("default"))) const partrain::gpu::CudaModule* partrain_cuda_module_v1() {
  return &partrain::gpu::kModule;
}
