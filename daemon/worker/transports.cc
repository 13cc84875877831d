// See transports.h.
#include "worker/transports.h"

#include <cstring>

#include <fmt/format.h>

#include "comm/nccl/nccl_communicator.h"  // NcclOptions (the functions are the module's)
#include "gpu/cuda_module.h"
#include "partrain/data.h"

namespace partrain::worker {

bool buffers_on_device(const comm::Communicator& c) { return c.memory() == comm::Memory::kDevice; }

namespace {

// GPU ranks: NCCL from the GPU module (gpu/cuda_module.h), loaded only here.
Result<std::unique_ptr<comm::Communicator>> make_nccl(const comm::GroupSpec& spec, comm::RendezvousClient& store,
                                                      const comm::GlooOptions& gloo) {
  Result<const gpu::CudaModule*> m = gpu::cuda_module();
  if (!m) return m.status();
  if ((*m)->create_nccl == nullptr) {
    return Status::invalid(fmt::format("[job] device = cuda with {} ranks in group {}: this partrain's GPU module was "
                                       "built without NCCL; rebuild where the CUDA toolkit has NCCL, or use --device "
                                       "cpu", spec.members.size(), spec.name));
  }
  comm::NcclOptions o;
  o.device = 0;  // the one GPU the agent made visible to this worker
  o.host = gloo.host;
  o.timeout = gloo.timeout;
  return (*m)->create_nccl(spec, store, o);
}

}  // namespace

Result<GroupComms> make_group(const comm::GroupSpec& spec, comm::RendezvousClient& store, const std::string& device,
                              const comm::GlooOptions& gloo, bool with_host) {
  GroupComms g;
  if (device != "cuda") {
    Result<std::unique_ptr<comm::Communicator>> c = comm::create_gloo_communicator(spec, store, gloo);
    if (!c) return c.status();
    g.comm = std::move(c).value();
    return g;
  }
  Result<std::unique_ptr<comm::Communicator>> c = make_nccl(spec, store, gloo);
  if (!c) return c.status();
  g.comm = std::move(c).value();
  if (with_host) {
    comm::GroupSpec host = spec;
    host.name += "h";
    Result<std::unique_ptr<comm::Communicator>> h = comm::create_gloo_communicator(host, store, gloo);
    if (!h) return h.status();
    g.host = std::move(h).value();
  }
  return g;
}

comm::Memory tensor_memory(const std::string& device) {
  return device == "cuda" ? comm::Memory::kDevice : comm::Memory::kHost;
}

Status bind_to_backend(comm::Communicator& c, engine::Backend& backend) {
  if (!buffers_on_device(c)) return Status::ok();
  Result<const gpu::CudaModule*> m = gpu::cuda_module();
  if (!m) return m.status();
  return (*m)->bind_to_backend(c, backend).prefixed(fmt::format("group {}: ", c.group().name));
}

Status check_plugin_memory(const std::string& device, uint64_t capabilities, const std::string& name,
                           const std::string& path) {
  if (device != "cuda" || (capabilities & PARTRAIN_CAP_CUDA) != 0) return Status::ok();
  return Status::invalid(fmt::format(
      "{}: the data plugin {} works on host buffers only (no PARTRAIN_CAP_CUDA), but [job] device = "
      "cuda hands it GPU memory; use plain dp (zero0) on GPUs, or train on CPU ranks (--device cpu)",
      path, name));
}

uint64_t buffer_memory_feature(const std::string& device) {
  return device == "cuda" ? PARTRAIN_HOST_CUDA_BUFFERS : 0;
}

}  // namespace partrain::worker
