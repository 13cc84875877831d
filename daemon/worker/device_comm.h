// What a worker does differently on a GPU rank ([job] device = "cuda"), kept in one place:
//
//  - the dp communicator: NCCL on GPU ranks (device 0: the agent made the worker's one GPU
//    visible), Gloo on CPU ranks;
//  - its stream order: NCCL operations start after the CUDA backend's compute stream (the
//    backend is made after the data plugin planned on the communicator, so this is bound
//    once the trainer exists);
//  - the data plugin's buffers: device memory on GPU ranks, so only a plugin that says it
//    takes them (PARTRAIN_CAP_CUDA) is loaded, and it is told (PARTRAIN_HOST_CUDA_BUFFERS);
//  - the few host values the worker itself all-reduces (the loss, the stop flag): through
//    a small device buffer when the communicator's buffers are device memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/rendezvous/client.h"
#include "common/status.h"
#include "engine/backend.h"

namespace partrain::worker {

// True where the communicator's buffers are device memory (NCCL).
bool buffers_on_device(const comm::Communicator& c);

// The communicator of one layout group for `device` ("cpu": Gloo with `gloo`; "cuda": NCCL
// on this process's device 0). invalid, with the fix, where this build has no NCCL.
Result<std::unique_ptr<comm::Communicator>> make_group_communicator(const comm::GroupSpec& spec,
                                                                    comm::RendezvousClient& store,
                                                                    const std::string& device,
                                                                    const comm::GlooOptions& gloo);

// Orders the NCCL communicator's operations after `backend`'s compute stream; nothing for
// Gloo (a CPU backend computes synchronously).
Status bind_to_backend(comm::Communicator& c, engine::Backend& backend);

// The data plugin against the device: invalid, naming the plugin's file and the fix, when a
// GPU rank would hand device memory to a plugin without PARTRAIN_CAP_CUDA.
Status check_plugin_memory(const std::string& device, uint64_t capabilities, const std::string& name,
                           const std::string& path);
// PARTRAIN_HOST_CUDA_BUFFERS on GPU ranks, else 0: OR it into the plugin's host_features.
uint64_t buffer_memory_feature(const std::string& device);

// Small host arrays (the loss, the stop flag, MoE routing counts) all-reduced over `c`;
// staged through a device buffer of `backend` when c's buffers are device memory.
class HostReducer {
 public:
  HostReducer(comm::Communicator* c, engine::Backend* backend) : c_(c), backend_(backend) {}
  ~HostReducer();
  HostReducer(const HostReducer&) = delete;
  HostReducer& operator=(const HostReducer&) = delete;
  Status all_reduce(float* values, size_t n, comm::ReduceOp op);

 private:
  comm::Communicator* c_;
  engine::Backend* backend_;
  engine::Tensor scratch_;  // on the device, as large as the largest array so far
};

}  // namespace partrain::worker
