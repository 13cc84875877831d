// The emulated GPU's NCCL: comm::Communicator with NCCL's rules, over Gloo on the host
// backing of device memory (device_arena.h).
//
// NCCL's rules, each a refusal (invalid, naming the group, the call and the fix):
//  - device memory only: a buffer must be marked device AND lie in the emulated device range,
//    inside one live allocation of its own dtype (a host pointer, a range past its
//    allocation, or a bf16 allocation read as f32 are refused before anything moves);
//  - typed and collective: every rank of the group calls the same collective with the same
//    dtype, counts and root, in the same order (a side channel compares each call's
//    signature; a mismatch names both ranks' calls instead of hanging or mixing garbage);
//  - point to point matched in issue order per ordered pair, never by tag: each send carries
//    its dtype and count ahead of the payload, and the k-th receive from a peer that expects
//    another dtype or count than the peer's k-th send fails, saying so;
//  - two ranks of one communicator on one GPU are refused at creation, as NCCL refuses them
//    ("Duplicate GPU detected"); each member publishes its device's id (device_uuid()).
// Like NCCL, a receive's payload moves only once the receiver waits for it (rendezvous),
// reductions of bf16 run in fp32 and round once.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/nccl/nccl_communicator.h"
#include "comm/rendezvous/client.h"

namespace partrain::gpu::emu {

// This process's emulated GPU: "EMU-" and the entry of CUDA_VISIBLE_DEVICES at `ordinal`
// (the agent gives each worker one), "EMU-<ordinal>" when it is unset.
std::string device_uuid(int ordinal);

// The group's emulated NCCL communicator; blocks until all members joined.
Result<std::unique_ptr<comm::Communicator>> create_emulated_nccl(const comm::GroupSpec& spec,
                                                                 comm::RendezvousClient& store,
                                                                 const comm::NcclOptions& options);

}  // namespace partrain::gpu::emu
