// libpartrain_gpu_emu.so's one export: the table of gpu/cuda_module.h over the emulated GPU
// (emu_backend.h, emu_nccl.h), under the same symbol and build id as libpartrain_cuda.so, so
// PARTRAIN_CUDA_MODULE=<this file> makes `--device cuda` take every GPU branch on a machine
// without one.
#include "gpu/cuda_module.h"
#include "gpu/emu/emu_backend.h"
#include "gpu/emu/emu_nccl.h"

#ifndef PARTRAIN_CUDA_MODULE_BUILD_ID
#define PARTRAIN_CUDA_MODULE_BUILD_ID "unknown"
#endif

namespace partrain::gpu::emu {
namespace {

void init_log(log::Forward forward, log::Level level) {
  log::forward_to(forward);
  log::set_level(level);
}

bool device_available() { return true; }

Result<std::unique_ptr<engine::Backend>> make_backend(int ordinal, DType storage) {
  if (storage != DType::kBF16 && storage != DType::kF32) {
    return Status::invalid(std::string("cuda (emulated): storage ") + dtype_name(storage) + ": expected bf16 or f32");
  }
  return std::unique_ptr<engine::Backend>(std::make_unique<EmuBackend>(ordinal, storage));
}

// The emulated NCCL needs no stream; it refuses another module's backend as NCCL would.
Status bind_to_backend(comm::Communicator& c, engine::Backend& backend) {
  if (dynamic_cast<EmuBackend*>(&backend) == nullptr) {
    return Status::invalid("an emulated NCCL communicator needs the emulated CUDA backend, not " + backend.name());
  }
  if (c.memory() != comm::Memory::kDevice) {
    return Status::invalid(std::string("group ") + c.group().name + " is a " + c.backend() + " communicator, not NCCL");
  }
  return Status::ok();
}

Result<std::string> uuid(int ordinal) { return device_uuid(ordinal); }

const CudaModule kModule = {
    PARTRAIN_CUDA_MODULE_BUILD_ID, &init_log, &device_available, &make_backend, &create_emulated_nccl,
    &bind_to_backend, &uuid,
};

}  // namespace
}  // namespace partrain::gpu::emu

extern "C" __attribute__((visibility("default"))) const partrain::gpu::CudaModule* partrain_cuda_module_v1() {
  return &partrain::gpu::emu::kModule;
}
