// See device_comm.h.
#include "worker/device_comm.h"

#include <cstring>

#include <fmt/format.h>

#include "partrain/data.h"
#ifdef PARTRAIN_HAVE_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif
#ifdef PARTRAIN_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#endif

namespace partrain::worker {

bool buffers_on_device(const comm::Communicator& c) { return std::strcmp(c.backend(), "nccl") == 0; }

Result<std::unique_ptr<comm::Communicator>> make_group_communicator(const comm::GroupSpec& spec,
                                                                    comm::RendezvousClient& store,
                                                                    const std::string& device,
                                                                    const comm::GlooOptions& gloo) {
  if (device != "cuda") return comm::create_gloo_communicator(spec, store, gloo);
#ifdef PARTRAIN_HAVE_NCCL
  comm::NcclOptions o;
  o.device = 0;  // the one GPU the agent made visible to this worker
  return comm::create_nccl_communicator(spec, store, o);
#else
  return Status::invalid(fmt::format("[job] device = cuda with {} ranks in group {}: this partrain was built "
                                     "without NCCL; rebuild where the CUDA toolkit has NCCL "
                                     "(cmake -DPARTRAIN_CUDA=ON), or use --device cpu",
                                     spec.members.size(), spec.name));
#endif
}

Status bind_to_backend(comm::Communicator& c, engine::Backend& backend) {
  if (!buffers_on_device(c)) return Status::ok();
#if defined(PARTRAIN_HAVE_NCCL) && defined(PARTRAIN_HAVE_CUDA)
  auto* cuda = dynamic_cast<engine::cuda::CudaBackend*>(&backend);
  if (cuda == nullptr) {
    return Status::invalid(fmt::format("group {}: an NCCL communicator needs the CUDA backend, not {}",
                                       c.group().name, backend.name()));
  }
  return comm::set_nccl_compute_stream(c, cuda->context().stream);
#else
  (void)backend;
  return Status::internal(fmt::format("group {}: an NCCL communicator in a build without CUDA",
                                      c.group().name));
#endif
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

HostReducer::~HostReducer() {
  if (backend_ != nullptr) backend_->release(&scratch_);
}

Status HostReducer::all_reduce(float* values, size_t n, comm::ReduceOp op) {
  if (!buffers_on_device(*c_)) return c_->all_reduce(values, n, op)->wait();
  if (scratch_.numel() < static_cast<int64_t>(n)) {  // grown once to the largest array seen
    if (!scratch_.empty()) backend_->release(&scratch_);
    Result<engine::Tensor> t = backend_->alloc(engine::MemCategory::kWorkspace, engine::DType::kF32,
                                               engine::Shape{static_cast<int64_t>(n)});
    if (!t) return t.status();
    scratch_ = *t;
  }
  const engine::Tensor part = scratch_.slice(0, engine::Shape{static_cast<int64_t>(n)});
  backend_->to_device(part, values);  // waits for the copy: the values then sit on the device
  PARTRAIN_RETURN_IF_ERROR(c_->all_reduce(part.ptr<float>(), n, op)->wait());
  backend_->to_host(values, part);
  return Status::ok();
}

}  // namespace partrain::worker
