// Which transport moves a group's tensors, and what else a GPU rank does differently, in one
// place:
//
//  - the transport of each layout group: Gloo on CPU ranks; on GPU ranks ([job] device =
//    "cuda") NCCL from the GPU module when every member has a GPU of its own, the host-staged
//    transport (comm/staged/) when members share one (chosen from the GPUs' UUIDs, which
//    every member publishes; named in the log). Either way the group also gets a Gloo host
//    channel for the host's own scalars (process_groups.h);
//  - their stream order: NCCL operations start after the CUDA backend's compute stream, and
//    the staged transport copies through the backend (the backend is made after the data
//    plugin planned on the communicator, so both are bound once the trainer exists);
//  - the plugins' buffers: device memory on GPU ranks, so only a plugin that says it takes
//    them (PARTRAIN_CAP_CUDA) is loaded, and it is told (PARTRAIN_HOST_CUDA_BUFFERS).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/rendezvous/client.h"
#include "common/status.h"
#include "engine/backend.h"

namespace partrain::worker {

// True where the communicator's buffers are device memory.
bool buffers_on_device(const comm::Communicator& c);

// A group's two communicators: `comm` moves its tensors, `host` is its host control
// channel (null when comm is a host transport already and serves as both).
struct GroupComms {
  std::unique_ptr<comm::Communicator> comm;
  std::unique_ptr<comm::Communicator> host;
};

// The GPU ids (gpu/cuda_module.h device_uuid) of the job's ranks, as each published its own
// under "<prefix>gpu/<rank>"; read from the store once per rank, when a group asks.
class GpuIds {
 public:
  // Publishes this rank's id (GPU ranks only: it loads the GPU module).
  static Result<GpuIds> publish(comm::RendezvousClient& store, const std::string& prefix, int rank,
                                std::chrono::milliseconds timeout);
  // Global rank `rank`'s id; unavailable when it never published one within the timeout.
  Result<std::string> of(int rank);

 private:
  comm::RendezvousClient* store_ = nullptr;
  std::string prefix_;
  std::chrono::milliseconds timeout_{0};
  std::map<int, std::string> ids_;
};

enum class Transport { kGloo, kNccl, kStaged };
struct Choice {
  Transport transport;
  std::string why;  // for the log: "each of the 2 ranks has its own GPU", ...
};
// CPU ranks: Gloo. GPU ranks: NCCL when every member's GPU id differs, else staged.
Result<Choice> choose_transport(const std::string& device, const std::vector<int>& members, GpuIds* ids);

// The communicators of one layout group for `device` ("cpu": Gloo with `gloo`; "cuda": the
// chosen device transport, logged by the group's first member, plus a Gloo host channel).
// `ids` may be null on CPU ranks. `with_host` false: no host channel (a pipeline channel
// moves only tensors). invalid, with the fix, where this build has no NCCL.
Result<GroupComms> make_group(const comm::GroupSpec& spec, comm::RendezvousClient& store, const std::string& device,
                              const comm::GlooOptions& gloo, GpuIds* ids, bool with_host = true);

// Where the backend's tensors live for `device`: the GPU's memory on GPU ranks.
comm::Memory tensor_memory(const std::string& device);
// A backend tensor (all of it) as a typed buffer in `memory`.
inline comm::Buffer tensor_buffer(const engine::Tensor& t, comm::Memory memory) {
  return comm::Buffer{t.data, t.dtype, static_cast<size_t>(t.numel()), memory};
}

// Orders a device transport's operations after `backend`'s compute stream; nothing for
// Gloo (a CPU backend computes synchronously).
Status bind_to_backend(comm::Communicator& c, engine::Backend& backend);

// A plugin of `family` ("data", "expert") against the device: invalid, naming the plugin's
// file and the fix, when a GPU rank would hand device memory to a plugin without
// PARTRAIN_CAP_CUDA.
Status check_plugin_memory(const std::string& device, uint64_t capabilities, const std::string& name,
                           const std::string& path, const std::string& family = "data");
// PARTRAIN_HOST_CUDA_BUFFERS on GPU ranks, else 0: OR it into the plugin's host_features.
uint64_t buffer_memory_feature(const std::string& device);

}  // namespace partrain::worker
