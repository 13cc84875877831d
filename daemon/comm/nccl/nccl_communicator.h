// The NCCL backend of communicator.h: collectives between GPU ranks. Built only where a
// CUDA toolkit with NCCL is found (target partrain_comm_nccl).
//
// Rank 0 of the group creates the NCCL unique id and publishes it through the rendezvous
// store under "nccl/<group name>/id"; the others read it there. Operations are enqueued on
// the communicator's own CUDA stream after the work already queued on the caller's compute
// stream; wait() polls the operation's completion event, the communicator's async error
// state and abort(), so a dead peer never blocks it past `timeout`. abort() calls
// ncclCommAbort. Buffers are device pointers on this rank's device.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/rendezvous/client.h"

namespace partrain::comm {

struct NcclOptions {
  // CUDA device of this rank. Default: -1 = the calling thread's current device.
  int device = -1;
  // Limit on one operation before it fails as unavailable. Default: 300 s.
  std::chrono::milliseconds timeout{300000};
  // Limit on waiting for rank 0's unique id. Default: 120 s.
  std::chrono::milliseconds connect_timeout{120000};
  // The caller's compute stream (a cudaStream_t); every operation first waits for what is
  // already queued on it. Default: nullptr, the legacy default stream.
  void* compute_stream = nullptr;
  // This rank's address, for a transport that needs one besides NCCL's own bootstrap (the
  // emulated GPU's, gpu/emu/, runs over Gloo). Default: "" = the host's name.
  std::string host;
};

// Creates the NCCL communicator of the group; blocks until all members joined.
// unavailable when CUDA or NCCL fail, invalid for a bad spec.
Result<std::unique_ptr<Communicator>> create_nccl_communicator(const GroupSpec& spec, RendezvousClient& store,
                                                               const NcclOptions& options = {});

// Orders every operation `comm` (from create_nccl_communicator) starts from now on after the
// work queued on `compute_stream` (a cudaStream_t), as NcclOptions::compute_stream does, for
// callers whose compute stream exists only after the communicator (the worker makes its CUDA
// backend after the data plugin planned on the communicator). invalid for another backend's.
Status set_nccl_compute_stream(Communicator& comm, void* compute_stream);

}  // namespace partrain::comm
