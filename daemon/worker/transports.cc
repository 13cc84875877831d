// See transports.h.
#include "worker/transports.h"

#include <cstring>

#include <fmt/format.h>

#include <map>

#include "comm/nccl/nccl_communicator.h"  // NcclOptions (the functions are the module's)
#include "comm/rendezvous/keys.h"
#include "comm/staged/staged_communicator.h"
#include "common/log.h"
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

// The staged transport's copies through the rank's backend (engine/backend.h: to_host widens
// bf16 to float and waits for the device; to_device narrows).
class BackendStaging final : public comm::DeviceStaging {
 public:
  explicit BackendStaging(engine::Backend* be) : be_(be) {}
  Status to_host(const comm::Buffer& b, void* host) override {
    const engine::Tensor t{b.data, b.dtype, engine::Shape{static_cast<int64_t>(b.count)}};
    if (b.dtype == DType::kI32) {
      be_->to_host_i32(static_cast<int32_t*>(host), t);
    } else {
      be_->to_host(static_cast<float*>(host), t);
    }
    return be_->status();
  }
  Status from_host(const comm::Buffer& b, const void* host) override {
    const engine::Tensor t{b.data, b.dtype, engine::Shape{static_cast<int64_t>(b.count)}};
    if (b.dtype == DType::kI32) {
      be_->to_device_i32(t, static_cast<const int32_t*>(host));
    } else {
      be_->to_device(t, static_cast<const float*>(host));
    }
    return be_->status();
  }

 private:
  engine::Backend* be_;
};

const char* transport_name(Transport t) {
  return t == Transport::kGloo ? "gloo" : t == Transport::kNccl ? "nccl" : "staged";
}

}  // namespace

Result<std::string> GpuIds::of(int rank) {
  auto it = ids_.find(rank);
  if (it != ids_.end()) return it->second;
  Result<std::string> id = store_->get(rdzv_keys::gpu(prefix_, rank), timeout_);
  if (!id) return id.status().prefixed("the GPU id of rank " + std::to_string(rank) + ": ");
  ids_[rank] = *id;
  return *id;
}

Result<GpuIds> GpuIds::publish(comm::RendezvousClient& store, const std::string& prefix, int rank,
                               std::chrono::milliseconds timeout) {
  Result<const gpu::CudaModule*> m = gpu::cuda_module();
  if (!m) return m.status();
  Result<std::string> mine = (*m)->device_uuid(0);  // the one GPU the agent made visible
  if (!mine) return mine.status();
  PARTRAIN_RETURN_IF_ERROR(store.set(rdzv_keys::gpu(prefix, rank), *mine));
  GpuIds ids;
  ids.store_ = &store;
  ids.prefix_ = prefix;
  ids.timeout_ = timeout;
  ids.ids_[rank] = *mine;
  return ids;
}

Result<Choice> choose_transport(const std::string& device, const std::vector<int>& members, GpuIds* ids) {
  if (device != "cuda") return Choice{Transport::kGloo, "CPU ranks"};
  std::map<std::string, int> first;
  for (int m : members) {
    Result<std::string> id = ids->of(m);
    if (!id) return id.status();
    auto [it, fresh] = first.emplace(*id, m);
    if (!fresh) {
      return Choice{Transport::kStaged, fmt::format("ranks {} and {} share GPU {}: NCCL runs one rank of a group per "
                                                    "device, so tensors are staged through host memory", it->second,
                                                    m, *id)};
    }
  }
  return Choice{Transport::kNccl, fmt::format("each of the {} ranks has its own GPU", members.size())};
}

Result<GroupComms> make_group(const comm::GroupSpec& spec, comm::RendezvousClient& store, const std::string& device,
                              const comm::GlooOptions& gloo, GpuIds* ids, bool with_host) {
  Result<Choice> choice = choose_transport(device, spec.members, ids);
  if (!choice) return choice.status();
  GroupComms g;
  Result<std::unique_ptr<comm::Communicator>> c =
      choice->transport == Transport::kGloo     ? comm::create_gloo_communicator(spec, store, gloo)
      : choice->transport == Transport::kStaged ? comm::create_staged_communicator(spec, store, gloo)
                                                : make_nccl(spec, store, gloo);
  if (!c) return c.status();
  g.comm = std::move(c).value();
  if (choice->transport != Transport::kGloo && spec.global_rank == spec.members.front()) {
    log::info("worker", "group {}: {} transport ({})", spec.name, transport_name(choice->transport), choice->why);
  }
  if (with_host && choice->transport != Transport::kGloo) {
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
  if (std::strcmp(c.backend(), "staged") == 0) {
    return comm::set_staging(c, std::make_unique<BackendStaging>(&backend));
  }
  Result<const gpu::CudaModule*> m = gpu::cuda_module();
  if (!m) return m.status();
  return (*m)->bind_to_backend(c, backend).prefixed(fmt::format("group {}: ", c.group().name));
}

Status check_plugin_memory(const std::string& device, uint64_t capabilities, const std::string& name,
                           const std::string& path, const std::string& family) {
  if (device != "cuda" || (capabilities & PARTRAIN_CAP_CUDA) != 0) return Status::ok();
  const std::string instead = family == "data" ? "use plain dp (zero0) on GPUs" : "use a plugin that takes GPU memory";
  return Status::invalid(fmt::format(
      "{}: the {} plugin {} works on host buffers only (no PARTRAIN_CAP_CUDA), but [job] device = "
      "cuda hands it GPU memory; {}, or train on CPU ranks (--device cpu)",
      path, family, name, instead));
}

uint64_t buffer_memory_feature(const std::string& device) {
  return device == "cuda" ? PARTRAIN_HOST_CUDA_BUFFERS : 0;
}

}  // namespace partrain::worker
