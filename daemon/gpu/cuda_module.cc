// See cuda_module.h: the loader, linked by every binary; it needs no CUDA library.
#include "gpu/cuda_module.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "common/install_dir.h"

#ifndef PARTRAIN_CUDA_MODULE_INSTALLED
#define PARTRAIN_CUDA_MODULE_INSTALLED "lib/partrain/libpartrain_cuda.so"
#endif
#ifndef PARTRAIN_CUDA_MODULE_BUILD_ID
#define PARTRAIN_CUDA_MODULE_BUILD_ID "unknown"
#endif

namespace partrain::gpu {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return !path.empty() && ::stat(path.c_str(), &st) == 0;
}

Result<const CudaModule*> load() {
  const std::string path = cuda_module_path();
  if (!exists(path)) {
    return Status::invalid(fmt::format(
        "device cuda: this installation has no GPU module ({} is absent): install the partrain-cuda package on GPU "
        "nodes (or build partrain where a CUDA toolkit is found), or use --device cpu", path));
  }
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return Status::invalid(fmt::format("device cuda: cannot load the GPU module {}: {}; install the CUDA runtime, "
                                       "cuBLAS and NCCL it needs (the partrain-cuda package's dependencies)", path,
                                       ::dlerror()));
  }
  auto entry = reinterpret_cast<EntryFn>(::dlsym(handle, kEntrySymbol));
  const CudaModule* m = entry != nullptr ? entry() : nullptr;
  if (m == nullptr || std::strcmp(m->build_id, PARTRAIN_CUDA_MODULE_BUILD_ID) != 0) {
    return Status::invalid(fmt::format("device cuda: {} is the GPU module of another partrain build ({}, this is {}); "
                                       "install the partrain-cuda package of this version", path,
                                       m != nullptr ? m->build_id : "no entry point", PARTRAIN_CUDA_MODULE_BUILD_ID));
  }
  m->init_log(&log::write, log::level());
  return m;
}

}  // namespace

std::string cuda_module_path() {
  if (const char* e = std::getenv("PARTRAIN_CUDA_MODULE"); e != nullptr && *e != '\0') return e;
  return installed_path(PARTRAIN_CUDA_MODULE_INSTALLED).string();
}

Result<const CudaModule*> cuda_module() {
  static std::once_flag once;
  static Result<const CudaModule*> loaded = Status::internal("not loaded");
  std::call_once(once, [] { loaded = load(); });
  return loaded;
}

}  // namespace partrain::gpu
