// The GPU part of partrain as a module loaded with dlopen only where a job runs on GPUs:
// the CUDA backend (engine/cuda) and the NCCL communicators (comm/nccl), with libcudart,
// cuBLAS and NCCL behind them, in libpartrain_cuda.so. No partrain binary links a CUDA
// library, so every one starts on a login node or a CPU-only node; a GPU node's package
// (partrain-cuda) adds the module.
//
// The module carries its own copy of the code it needs (the Backend bookkeeping, the
// logger, the rendezvous client) and exports one symbol, partrain_cuda_module_v1, a table
// of the functions below. It is part of one build, not a plugin ABI: the table's build id
// must equal the loader's, so a module of another build is refused, never called.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/dtype.h"
#include "common/log.h"
#include "common/status.h"

namespace partrain::engine {
class Backend;
}
namespace partrain::comm {
class Communicator;
class RendezvousClient;
struct GroupSpec;
struct NcclOptions;
}  // namespace partrain::comm

namespace partrain::gpu {

struct CudaModule {
  const char* build_id;  // kBuildId of the build that made it
  // The module's logger sends its lines to the host's (common/log.h forward_to).
  void (*init_log)(log::Forward forward, log::Level level);
  bool (*device_available)();
  // The CUDA backend on device `ordinal` with `storage` weights and activations.
  Result<std::unique_ptr<engine::Backend>> (*make_backend)(int ordinal, DType storage);
  // nullptr when the toolkit the module was built with had no NCCL.
  Result<std::unique_ptr<comm::Communicator>> (*create_nccl)(const comm::GroupSpec& spec, comm::RendezvousClient& store,
                                                             const comm::NcclOptions& options);
  // Orders the NCCL communicator's operations after the CUDA backend's stream.
  Status (*bind_to_backend)(comm::Communicator& comm, engine::Backend& backend);
  // The id of device `ordinal` (CUDA's UUID, "GPU-xxxxxxxx-xxxx-..."): two processes on one
  // GPU get the same id, so a group sees which members share one (worker/transports.h).
  Result<std::string> (*device_uuid)(int ordinal);
};

// The exported symbol's name and type.
inline constexpr const char* kEntrySymbol = "partrain_cuda_module_v1";
using EntryFn = const CudaModule* (*)();

// Loads the module once per process and checks its build id: $PARTRAIN_CUDA_MODULE, else
// <libdir>/partrain/libpartrain_cuda.so under this program's own prefix (common/install_dir.h;
// the build tree mirrors that layout, so build/bin/partrain finds the build's). invalid,
// saying what to install, when it is absent or a CUDA library it needs is missing (the
// loader's own words follow).
Result<const CudaModule*> cuda_module();

// Where cuda_module() looks: $PARTRAIN_CUDA_MODULE, else under this program's prefix.
std::string cuda_module_path();

}  // namespace partrain::gpu
