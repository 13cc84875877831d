// The host-staged transport: collectives on device buffers between ranks that share one GPU,
// where NCCL refuses to run (two ranks of a communicator on one device). Each operation
// copies its device inputs to host memory (float32 for f32 and bf16, so reductions run in
// fp32 and round once; i32 as is), runs the Gloo operation there, and copies the results
// back to the device when it is waited for:
//
//   start:  device --(DeviceStaging::to_host, after the compute stream)--> host --> Gloo
//   wait:   Gloo done --> host --(DeviceStaging::from_host)--> device
//
// So it moves twice the bytes of a bf16 payload and serialises with the compute stream at
// every start; it exists so that any layout runs as N workers on one GPU (a test machine,
// a site packing small jobs), not for speed. worker/transports.h chooses it from the
// members' GPU ids and names it in the log.
//
// The copies need the rank's device: a staged communicator is made before the backend, and
// operations fail (invalid, saying so) until set_staging() gave it one. Copies run on the
// calling thread (the one that starts and waits), never on Gloo's.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/rendezvous/client.h"

namespace partrain::comm {

// How the staged transport reaches device memory.
class DeviceStaging {
 public:
  virtual ~DeviceStaging() = default;
  // host[0 .. b.count) <- device buffer b: floats for f32 and bf16 (widened), int32 for i32.
  // Waits for the work queued on the device before it.
  virtual Status to_host(const Buffer& b, void* host) = 0;
  // Device buffer b <- host[0 .. b.count), floats narrowed to b's dtype (bf16: rounded to
  // nearest even), int32 as is.
  virtual Status from_host(const Buffer& b, const void* host) = 0;
};

// The group's staged communicator over a Gloo mesh (`options`); blocks until all members
// joined. invalid for a bad spec, unavailable when members do not arrive.
Result<std::unique_ptr<Communicator>> create_staged_communicator(const GroupSpec& spec, RendezvousClient& store,
                                                                 const GlooOptions& options = {});

// Gives a staged communicator its device; invalid for another transport's.
Status set_staging(Communicator& comm, std::unique_ptr<DeviceStaging> staging);

}  // namespace partrain::comm
