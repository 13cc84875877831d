// See gpu_binding.h.
#include "agent/gpu_binding.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

namespace partrain::agent {

namespace {

// NVML's device count, or -1 when the library or its calls fail. The three entry points
// are declared here (NVML's C ABI, stable since driver 325), so no NVML header is needed.
int nvml_device_count(const std::string& library) {
  if (library.empty()) return -1;
  void* lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return -1;
  using Init = int (*)();
  using Count = int (*)(unsigned int*);
  using Shutdown = int (*)();
  auto init = reinterpret_cast<Init>(::dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<Count>(::dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto shutdown = reinterpret_cast<Shutdown>(::dlsym(lib, "nvmlShutdown"));
  int n = -1;
  unsigned int devices = 0;
  if (init != nullptr && count != nullptr && shutdown != nullptr && init() == 0) {
    if (count(&devices) == 0) n = static_cast<int>(devices);
    shutdown();
  }
  ::dlclose(lib);
  return n;
}

}  // namespace

NodeGpus node_gpus(const char* cuda_visible_devices, const std::string& driver_dir,
                   const std::string& nvml_library) {
  NodeGpus g;
  if (cuda_visible_devices != nullptr) {
    const std::string list = cuda_visible_devices;
    g.source = fmt::format("CUDA_VISIBLE_DEVICES='{}'", list);
    if (list.empty() || list == "NoDevFiles") return g;
    for (size_t a = 0, b; a <= list.size(); a = b + 1) {
      b = std::min(list.find(',', a), list.size());
      if (b > a) g.ids.push_back(list.substr(a, b - a));
    }
    return g;
  }
  if (const int n = nvml_device_count(nvml_library); n >= 0) {
    for (int i = 0; i < n; ++i) g.ids.push_back(std::to_string(i));
    g.source = fmt::format("NVML counts {}", n);
    return g;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(driver_dir, ec)) {
    g.source = fmt::format("no NVIDIA driver: {} does not exist", driver_dir);
    return g;
  }
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(driver_dir, ec)) {
    if (e.is_directory(ec)) ++n;
  }
  for (int i = 0; i < n; ++i) g.ids.push_back(std::to_string(i));
  g.source = fmt::format("the NVIDIA driver lists {} in {}", n, driver_dir);
  return g;
}

bool share_gpus_from_env() {
  const char* e = std::getenv("PARTRAIN_SHARE_GPUS");
  return e != nullptr && std::string(e) == "1";
}

Result<std::vector<std::string>> gpus_per_worker(const NodeGpus& gpus, int nlocal, const std::string& device,
                                                 bool share) {
  const size_t n = static_cast<size_t>(std::max(nlocal, 0));
  std::vector<std::string> out(n);
  if (share && device == "cuda" && !gpus.ids.empty()) {
    for (size_t i = 0; i < n; ++i) out[i] = gpus.ids[i % gpus.ids.size()];
    return out;
  }
  if (gpus.ids.size() < n) {
    if (device != "cuda") return out;  // CPU ranks: too few to bind, leave them as they are
    const std::string fewer =
        gpus.ids.empty() ? ""
                         : fmt::format(", run at most {} {} on this node (--nproc)", gpus.ids.size(),
                                       gpus.ids.size() == 1 ? "worker" : "workers");
    return Status::invalid(fmt::format(
        "[job] device = cuda: {} local workers need one GPU each, but this node has {} ({}); "
        "run where each worker has its own GPU (Slurm: --gpus-per-node={}){}, or train on CPU "
        "ranks (--device cpu)", n, gpus.ids.size(), gpus.source, n, fewer));
  }
  for (size_t i = 0; i < n; ++i) out[i] = gpus.ids[i];
  return out;
}

}  // namespace partrain::agent
